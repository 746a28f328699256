// The MPI runtime: who we are (rank, world, node-local rank) and how the job stops together.
//
// Works the same under `mpirun` and under Slurm (`srun`, or `sbatch` + mpirun): the node-local
// rank comes from an MPI shared-memory split, not from launcher-specific variables.
#pragma once
#include <mpi.h>

#include <functional>
#include <string>

#include "check.hpp"
#include "config.hpp"

namespace lmt {

struct Runtime {
  int rank = 0, world = 1;
  int local_rank = 0, local_world = 1;  // within this node
  bool is_root() const { return rank == 0; }
};

// MPI_Init (once) and the rank numbers. MPI errors return codes, which MPI_CHECK turns into
// a fatal() that aborts the whole job.
Runtime runtime_init(int* argc, char*** argv);
void runtime_finalize();

// Thrown once the job has agreed to stop with `code` (the message is already printed).
struct JobExit {
  int code;
};

// Every rank runs `step`; if it throws UsageError on any rank, the lowest such rank prints its
// line and every rank throws JobExit{2}. No rank is left waiting for another.
void agree(const Runtime& rt, const std::function<void()>& step);

// Ranks compare a hash of their resolved config; on a difference every rank throws JobExit{2}
// after rank 0 names the ranks that differ from it and the first key where the lowest of them
// differs, with both values.
void agree_on_config(const Runtime& rt, const Config& c);

// The backend run.device resolves to, "cpu" or "cuda". auto picks cuda when this build has
// CUDA, every rank on this node has a GPU of its own and the precision is not fp64 (several
// ranks then synchronise over NCCL); UsageError when "cuda" cannot be honoured.
std::string resolve_device(const Config& c, const Runtime& rt);

}  // namespace lmt

#define MPI_CHECK(call)                                                                 \
  do {                                                                                  \
    int mpi_check_rc_ = (call);                                                         \
    if (mpi_check_rc_ != MPI_SUCCESS) {                                                 \
      char mpi_check_msg_[MPI_MAX_ERROR_STRING];                                        \
      int mpi_check_len_ = 0;                                                           \
      MPI_Error_string(mpi_check_rc_, mpi_check_msg_, &mpi_check_len_);                 \
      LMT_FATAL(std::string(#call) + " failed: " + mpi_check_msg_);                     \
    }                                                                                   \
  } while (0)
