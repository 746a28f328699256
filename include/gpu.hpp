// GPUs as the runtime sees them: how many this rank can use, which one it takes (its node-local
// rank), and the NCCL communicator over all ranks, bootstrapped by broadcasting the unique id over
// MPI. Built when the CUDA toolkit is present (LMTRAIN_CUDA); gpu_count() is 0 otherwise.
#pragma once
#include "backend.hpp"
#include "comm.hpp"
#include "runtime.hpp"

#ifdef LMTRAIN_CUDA
#include <nccl.h>

#include "cuda_check.hpp"

#define NCCL_CHECK(call)                                                             \
  do {                                                                               \
    ncclResult_t nccl_check_rc_ = (call);                                            \
    if (nccl_check_rc_ != ncclSuccess)                                               \
      LMT_FATAL(std::string(#call) + " failed: " + ncclGetErrorString(nccl_check_rc_)); \
  } while (0)
#endif

namespace lmt {

// GPUs visible to this process; 0 without a CUDA build, a driver or a device.
int gpu_count();

// Makes GPU `local_rank` current for this rank and returns it. UsageError (before any GPU work)
// when the node runs more ranks than it has GPUs.
int select_gpu(const Runtime& rt);

// Free and total bytes of the current GPU (cudaMemGetInfo); both 0 without CUDA.
void gpu_memory(size_t* free, size_t* total);

#ifdef LMTRAIN_CUDA
// One NCCL communicator over MPI_COMM_WORLD on each rank's current GPU: rank 0 makes the unique
// id, MPI broadcasts it, every rank joins. max_ctas > 0 caps the thread blocks (so SMs) each
// collective occupies (ddp.comm_ctas); 0 leaves it to NCCL. Collective: every rank must call it.
ncclComm_t nccl_bootstrap(const Runtime& rt, int max_ctas = 0);

// The stream the CUDA backend runs its work on, in order; `be` must be the CUDA backend.
cudaStream_t cuda_stream(Backend<float>& be);

// A Communicator over NCCL on device buffers (nccl_comm.cpp), bootstrapped as above. Collectives
// run on its own stream, after the work enqueued on `compute` so far; a handle's wait() makes
// `compute` wait for the collective (no host blocking). Collective: every rank must call it.
std::unique_ptr<Communicator> make_nccl_communicator(const Runtime& rt, cudaStream_t compute,
                                                     int max_ctas = 0);
#endif

}  // namespace lmt
