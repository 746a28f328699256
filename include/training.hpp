// What a training step needs besides the model, in one interface, and the set-up that train and
// bench share.
//
// Optimizer: AdamW with the gradient synchronisation it needs (clip, step, and its state for
// checkpoints). Two kinds, by ddp.strategy (make_optimizer):
//   replicated  every rank holds all of AdamW's state and updates every parameter, after
//               ddp.strategy's GradSync (naive, flat, overlap, bucketed: grad_sync.hpp) has
//               all-reduced the gradients; on one rank nothing is synchronised
//   zero1       each rank holds its shard of the state (and under bf16 of the fp32 masters) and
//               updates its shard, then the parameters are all-gathered (zero1.hpp)
// The replicated optimizer is the case whose shard is the whole flat buffer: a mode never asks
// which kind it has.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include <mpi.h>

#include "backend.hpp"
#include "comm.hpp"
#include "config.hpp"
#include "grad_sync.hpp"
#include "model.hpp"
#include "optimizer.hpp"
#include "runtime.hpp"

namespace lmt {

template <typename T> class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // What backward reports its completed gradient groups to; null where nothing is synchronised.
  virtual GradSync* sync() = 0;
  // The global norm of the synchronised gradients and the factor that clips it to max_norm.
  virtual GradClip clip(double max_norm) = 0;
  // One AdamW step with the gradients times grad_scale; after it every rank's params agree.
  virtual void step(T* params, double lr, const Config::Optim& o, double grad_scale = 1) = 0;
  // The elements of the flat buffer whose moments this rank holds.
  virtual ParamGroup shard() const = 0;
  // Checkpoints, collective over `host` (an MPI communicator of the same ranks in the same
  // order): rank 0 gets the whole state, and every parameter exact; the others nothing.
  virtual OptimizerState<T> gather_state(MPI_Comm host) = 0;
  virtual std::vector<T> gather_params(const T* params, MPI_Comm host) = 0;
  // Resume: this rank's part of a whole-buffer state.
  virtual void set_state(const OptimizerState<T>& whole) = 0;
};

// ddp.strategy's optimizer for `model`, synchronising over comm (null: one rank, and not zero1).
template <typename T>
std::unique_ptr<Optimizer<T>> make_optimizer(const Config& c, Backend<T>& be, Communicator* comm,
                                             Model<T>& model);

// What train and bench set up alike: the communicator of the backend's memory (on several
// ranks, or for zero1), the model (under zero1 and bf16 holding this rank's masters only) and
// its optimizer. Collective; every rank stops with the first error before any work (agree).
template <typename T> struct Training {
  std::unique_ptr<Communicator> comm;
  std::unique_ptr<Model<T>> model;
  std::unique_ptr<Optimizer<T>> optimizer;
};
template <typename T>
Training<T> set_up_training(const Config& c, const Runtime& rt, Backend<T>& be);

}  // namespace lmt
