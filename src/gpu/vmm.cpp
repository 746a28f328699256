// Sparse GPU memory through the driver's virtual memory management (vmm.hpp).
#ifdef LMTRAIN_CUDA
#include "vmm.hpp"

#include <cuda.h>
#include <cudaTypedefs.h>

#include <algorithm>
#include <string>

#include "cuda_check.hpp"

namespace lmt::cuda {
namespace {

// A driver function, by name, of the ABI of CUDA 12.0 (the toolkits we build with are newer).
template <typename F> F entry(const char* name) {
  void* f = nullptr;
  cudaDriverEntryPointQueryResult found{};
  CUDA_CHECK(cudaGetDriverEntryPointByVersion(name, &f, 12000, cudaEnableDefault, &found));
  LMT_ASSERT(found == cudaDriverEntryPointSuccess && f, std::string("no driver function ") + name);
  return reinterpret_cast<F>(f);
}

struct Driver {
  PFN_cuGetErrorString_v6000 error_string = entry<PFN_cuGetErrorString_v6000>("cuGetErrorString");
  PFN_cuMemGetAllocationGranularity_v10020 granularity =
      entry<PFN_cuMemGetAllocationGranularity_v10020>("cuMemGetAllocationGranularity");
  PFN_cuMemAddressReserve_v10020 reserve =
      entry<PFN_cuMemAddressReserve_v10020>("cuMemAddressReserve");
  PFN_cuMemAddressFree_v10020 address_free = entry<PFN_cuMemAddressFree_v10020>("cuMemAddressFree");
  PFN_cuMemCreate_v10020 create = entry<PFN_cuMemCreate_v10020>("cuMemCreate");
  PFN_cuMemRelease_v10020 release = entry<PFN_cuMemRelease_v10020>("cuMemRelease");
  PFN_cuMemMap_v10020 map = entry<PFN_cuMemMap_v10020>("cuMemMap");
  PFN_cuMemUnmap_v10020 unmap = entry<PFN_cuMemUnmap_v10020>("cuMemUnmap");
  PFN_cuMemSetAccess_v10020 set_access = entry<PFN_cuMemSetAccess_v10020>("cuMemSetAccess");
};

const Driver& driver() {
  static const Driver d;
  return d;
}

// A failed driver call names itself and the driver's reason, then stops the job (as CUDA_CHECK).
void check(CUresult rc, const char* call) {
  if (rc == CUDA_SUCCESS) return;
  const char* why = nullptr;
  driver().error_string(rc, &why);
  LMT_FATAL(std::string(call) + " failed: " + (why ? why : "unknown CUresult " + std::to_string(rc)));
}
#define CU_CHECK(call) check((call), #call)

// Memory of the current GPU, pinned there (what cudaMalloc hands out).
CUmemAllocationProp device_memory() {
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  return prop;
}

// The address space reserved for `bytes`: whole granules, at least one.
size_t reserved(size_t bytes) {
  const size_t g = vmm_granule();
  return std::max<size_t>(1, (bytes + g - 1) / g) * g;
}

}  // namespace

size_t vmm_granule() {
  const CUmemAllocationProp prop = device_memory();
  size_t g = 0;
  CU_CHECK(driver().granularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  return g;
}

void* vmm_alloc(size_t bytes, const Ranges& mapped) {
  const Driver& d = driver();
  const CUmemAllocationProp prop = device_memory();
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CUdeviceptr base = 0;
  CU_CHECK(d.reserve(&base, reserved(bytes), vmm_granule(), 0, 0));
  for (size_t i = 0; i < mapped.size(); ++i) {
    const auto [b, e] = mapped[i];
    CUmemGenericAllocationHandle h;
    const CUresult rc = d.create(&h, e - b, &prop, 0);
    if (rc == CUDA_ERROR_OUT_OF_MEMORY) {
      vmm_free(reinterpret_cast<void*>(base), bytes, Ranges(mapped.begin(), mapped.begin() + long(i)));
      return nullptr;
    }
    CU_CHECK(rc);
    CU_CHECK(d.map(base + b, e - b, 0, h, 0));
    CU_CHECK(d.release(h));  // the mapping keeps the memory until it is unmapped
    CU_CHECK(d.set_access(base + b, e - b, &access, 1));
  }
  return reinterpret_cast<void*>(base);
}

void vmm_free(void* p, size_t bytes, const Ranges& mapped) {
  const Driver& d = driver();
  const auto base = reinterpret_cast<CUdeviceptr>(p);
  for (auto [b, e] : mapped) CU_CHECK(d.unmap(base + b, e - b));
  CU_CHECK(d.address_free(base, reserved(bytes)));
}

}  // namespace lmt::cuda
#endif
