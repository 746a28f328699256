// The optimizers a training run can have (optimizer.hpp's Optimizer), and the set-up that train
// and bench share. Two kinds, by ddp.strategy (make_optimizer):
//   replicated  every rank holds all of AdamW's state and updates every parameter, after
//               ddp.strategy's GradSync (naive, flat, overlap, bucketed: grad_sync.hpp) has
//               all-reduced the gradients; on one rank nothing is synchronised
//   zero1       each rank holds its shard of the state (and under bf16 of the fp32 masters, if
//               any: optim.master_weights) and updates its shard, then the parameters are
//               all-gathered (zero1.hpp)
// The replicated optimizer is the case whose shard is the whole flat buffer: a mode never asks
// which kind it has.
#pragma once
#include <memory>

#include "backend.hpp"
#include "comm.hpp"
#include "config.hpp"
#include "model.hpp"
#include "optimizer.hpp"
#include "runtime.hpp"

namespace lmt {

// ddp.strategy's optimizer for `model`, synchronising over comm (null: one rank, and not zero1).
template <typename T>
std::unique_ptr<Optimizer<T>> make_optimizer(const Config& c, Backend<T>& be, Communicator* comm,
                                             Model<T>& model);

// What train and bench set up alike: the communicator of the backend's memory (on several
// ranks, or for zero1), the model (holding the masters zero1_masters gives this rank) and
// its optimizer. Collective; every rank stops with the first error before any work (agree).
template <typename T> struct Training {
  std::unique_ptr<Communicator> comm;
  std::unique_ptr<Model<T>> model;
  std::unique_ptr<Optimizer<T>> optimizer;
};
template <typename T>
Training<T> set_up_training(const Config& c, const Runtime& rt, Backend<T>& be);

}  // namespace lmt
