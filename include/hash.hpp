// FNV-1a, 64 bit: the config hash ranks compare, and the checkpoint data checksum.
#pragma once
#include <cstddef>
#include <cstdint>

namespace lmt {

inline uint64_t hash64(const void* data, size_t n, uint64_t h = 0xcbf29ce484222325ull) {
  auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

}  // namespace lmt
