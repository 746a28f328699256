// Sparse GPU memory: a range of device address space of which only some parts are memory, through
// the driver's virtual memory management (cuMemAddressReserve, cuMemCreate, cuMemMap,
// cuMemSetAccess; cuMemUnmap, cuMemAddressFree to free), found through the runtime's
// cudaGetDriverEntryPointByVersion (no link against libcuda, as flash_attention.cu finds
// cuTensorMapEncodeTiled). Plain device memory of the current GPU: no managed memory, no multicast.
// The CUDA backend's allocate_sparse (backend.hpp) is built on it.
#pragma once
#include <cstddef>

#include "backend.hpp"

namespace lmt::cuda {

// The granularity of mappings on the current GPU (cuMemGetAllocationGranularity's minimum).
size_t vmm_granule();
// `bytes` of address space on the current GPU, aligned to the granule, with the byte ranges
// `mapped` (whole granules, from offset 0) backed by this GPU's memory, which it may read and
// write; not zeroed. Null, with nothing held, where the GPU has too little memory left.
void* vmm_alloc(size_t bytes, const Ranges& mapped);
// Unmaps the ranges (their memory goes back) and frees the address space. Nothing may still be
// using them: the caller has synchronised.
void vmm_free(void* p, size_t bytes, const Ranges& mapped);

}  // namespace lmt::cuda
