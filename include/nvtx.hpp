// NVTX ranges: names on the timeline for Nsight Systems users (forward, backward, optimizer, each
// layer, the parts of attention). Header-only NVTX 3; without CUDA they compile to nothing.
#pragma once
#ifdef LMTRAIN_CUDA
#include <nvtx3/nvToolsExt.h>
#endif

namespace lmt {

class NvtxRange {
 public:
#ifdef LMTRAIN_CUDA
  explicit NvtxRange(const char* name) { nvtxRangePushA(name); }
  ~NvtxRange() { nvtxRangePop(); }
#else
  explicit NvtxRange(const char*) {}
#endif
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;
};

}  // namespace lmt
