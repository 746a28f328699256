#include "version.hpp"

#ifndef LMT_VERSION
#define LMT_VERSION "unknown"
#endif

namespace lmt {

const char* version() { return LMT_VERSION; }

}  // namespace lmt
