// AdamW over flat buffers, global-norm gradient clipping, and the learning-rate schedule.
//
// AdamW as torch.optim.AdamW computes it (decoupled decay first, then the bias-corrected step):
//   p *= 1 - lr*wd;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//   p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps)
#pragma once
#include <cstdint>
#include <vector>

#include <mpi.h>

#include "backend.hpp"
#include "config.hpp"
#include "params.hpp"

namespace lmt {

// AdamW's state on the host, as a checkpoint holds it: both moments of the whole flat buffer
// (however the run holds them: whole, or sharded by zero1) and the steps taken.
template <typename T> struct OptimizerState {
  std::vector<T> m, v;
  int64_t t = 0;
};

template <typename T> struct AdamW {
  BackendArray<T> m, v;  // the range step() updates (the flat buffer, or a ZeRO-1 shard of it)
  int64_t t = 0;         // steps taken

  AdamW(Backend<T>& be, size_t n)
      : m(be, n, MemTag::optimizer), v(be, n, MemTag::optimizer), be_(be) {}
  // grad_scale: clip_grad_norm's factor, applied as the gradients are read.
  void step(T* params, const T* grads, double lr, const Config::Optim& o, double grad_scale = 1) {
    update(params, grads, 0, m.size(), next_step(lr, o, grad_scale));
  }
  // A step in pieces (ZeRO-1 gathers each piece while the next is updated): next_step() once,
  // then update() over pieces that cover [0, size) once. params and grads point at element 0.
  AdamWStep next_step(double lr, const Config::Optim& o, double grad_scale = 1) {
    return AdamWStep{lr, o.beta1, o.beta2, o.eps, o.weight_decay, ++t, grad_scale};
  }
  void update(T* params, const T* grads, size_t from, size_t n, const AdamWStep& s) {
    if (n)
      be_.adamw(params + from, grads + from, m.data() + from, v.data() + from, n, s);
  }
  // Host copies of the moments this AdamW holds, and its steps.
  OptimizerState<T> state() const {
    OptimizerState<T> s{std::vector<T>(m.size()), std::vector<T>(v.size()), t};
    be_.download(s.m.data(), m.data(), m.size());
    be_.download(s.v.data(), v.data(), v.size());
    return s;
  }
  // Takes its range, [begin, begin + size), of a whole-buffer state.
  void set_state(const OptimizerState<T>& whole, size_t begin = 0) {
    be_.upload(m.data(), whole.m.data() + begin, m.size());
    be_.upload(v.data(), whole.v.data() + begin, v.size());
    t = whole.t;
  }

 private:
  Backend<T>& be_;
};

// Gradient clipping: the global L2 norm of the gradients, and the factor that brings it down to
// max_norm: max_norm / (norm + 1e-6) as torch.nn.utils.clip_grad_norm_, when norm > max_norm > 0;
// else 1. The gradients are not rescaled here: AdamW reads them times the factor (its step's
// grad_scale), which saves a pass that reads and writes every gradient.
struct GradClip {
  double norm, scale;
};
GradClip grad_clip(double norm, double max_norm);
template <typename T>
GradClip clip_grad_norm(Backend<T>& be, const T* grads, size_t n, double max_norm);

class GradSync;  // grad_sync.hpp

// AdamW as a training step uses it, with the gradient synchronisation it needs: clip, step, and
// the state for checkpoints. Its kinds, replicated and ZeRO-1, are training.hpp's.
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

// Learning rate for step `step` (0-based) of `total`: linear warm-up over warmup_steps to lr,
// then constant, or cosine from lr down to min_lr at the last step.
double learning_rate(const Config::Optim& o, int64_t step, int64_t total);

}  // namespace lmt
