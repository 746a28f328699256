#include "gpu.hpp"

namespace lmt {

#ifdef LMTRAIN_CUDA

int gpu_count() {
  int n = 0;
  // No driver or no device is an answer (zero GPUs), not a failure.
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

int select_gpu(const Runtime& rt) {
  int n = gpu_count();
  if (rt.local_world > n)
    throw UsageError(strf("%d ranks on this node but %d GPU(s) visible: run at most one rank per "
                          "GPU (mpirun -np %d) or use run.device = \"cpu\"", rt.local_world, n, n));
  CUDA_CHECK(cudaSetDevice(rt.local_rank));
  return rt.local_rank;
}

void gpu_memory(size_t* free, size_t* total) { CUDA_CHECK(cudaMemGetInfo(free, total)); }

ncclComm_t nccl_bootstrap(const Runtime& rt, int max_ctas) {
  ncclUniqueId id;
  if (rt.is_root()) NCCL_CHECK(ncclGetUniqueId(&id));
  MPI_CHECK(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  if (max_ctas > 0) config.minCTAs = 1, config.maxCTAs = max_ctas;
  ncclComm_t comm;
  NCCL_CHECK(ncclCommInitRankConfig(&comm, rt.world, id, rt.rank, &config));
  return comm;
}

#else

int gpu_count() { return 0; }

void gpu_memory(size_t* free, size_t* total) { *free = *total = 0; }

int select_gpu(const Runtime& rt) {
  (void)rt;
  throw UsageError("this build has no CUDA (no nvcc at build time): use run.device = \"cpu\"");
}

#endif

}  // namespace lmt
