// GPU runtime: one GPU per node-local rank, and an NCCL communicator bootstrapped over MPI that
// spans every rank and sums correctly. Skipped where no GPU is visible (CI).
#include <doctest/doctest.h>

#include <vector>

#include "gpu.hpp"

using namespace lmt;

TEST_CASE("gpu: each rank takes its node-local GPU; NCCL bootstrapped over MPI spans all ranks" *
          doctest::skip(gpu_count() == 0)) {
#ifdef LMTRAIN_CUDA
  Runtime rt = runtime_init(nullptr, nullptr);
  if (rt.local_world > gpu_count()) return;  // more ranks than GPUs: select_gpu's refusal, below
  CHECK(select_gpu(rt) == rt.local_rank);
  int dev = -1;
  CUDA_CHECK(cudaGetDevice(&dev));
  CHECK(dev == rt.local_rank);
  ncclComm_t comm = nccl_bootstrap(rt);
  int count = 0, me = -1, cu_dev = -1;
  NCCL_CHECK(ncclCommCount(comm, &count));
  NCCL_CHECK(ncclCommUserRank(comm, &me));
  NCCL_CHECK(ncclCommCuDevice(comm, &cu_dev));
  CHECK(count == rt.world);
  CHECK(me == rt.rank);
  CHECK(cu_dev == dev);
  // The communicator carries data: an all-reduce of rank+1 sums to world*(world+1)/2.
  const size_t n = 1001;
  std::vector<float> host(n, float(rt.rank + 1));
  float* buf = nullptr;
  CUDA_CHECK(cudaMalloc(&buf, n * sizeof(float)));
  CUDA_CHECK(cudaMemcpy(buf, host.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  NCCL_CHECK(ncclAllReduce(buf, buf, n, ncclFloat, ncclSum, comm, nullptr));
  CUDA_CHECK(cudaMemcpy(host.data(), buf, n * sizeof(float), cudaMemcpyDeviceToHost));
  for (float x : host) REQUIRE(x == float(rt.world * (rt.world + 1) / 2));
  CUDA_CHECK(cudaFree(buf));
  NCCL_CHECK(ncclCommDestroy(comm));
#endif
}

TEST_CASE("gpu: more ranks on a node than GPUs is refused before any GPU work" *
          doctest::skip(gpu_count() == 0)) {
  Runtime rt = runtime_init(nullptr, nullptr);
  if (rt.local_world <= gpu_count()) return;
  CHECK_THROWS_AS(select_gpu(rt), UsageError);
}
