// AdamW over flat buffers, global-norm gradient clipping, and the learning-rate schedule.
//
// AdamW as torch.optim.AdamW computes it (decoupled decay first, then the bias-corrected step):
//   p *= 1 - lr*wd;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//   p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps)
#pragma once
#include <cstdint>

#include "backend.hpp"
#include "config.hpp"

namespace lmt {

template <typename T> struct AdamW {
  BackendArray<T> m, v;  // the range step() updates (the flat buffer, or a ZeRO-1 shard of it)
  int64_t t = 0;         // steps taken

  AdamW(Backend<T>& be, size_t n)
      : m(be, n, MemTag::optimizer), v(be, n, MemTag::optimizer), be_(be) {}
  void step(T* params, const T* grads, double lr, const Config::Optim& o) {
    be_.adamw(params, grads, m.data(), v.data(), m.size(),
              AdamWStep{lr, o.beta1, o.beta2, o.eps, o.weight_decay, ++t});
  }

 private:
  Backend<T>& be_;
};

// Scales grads so that their global L2 norm is at most max_norm (0: never); returns the norm
// before clipping.
template <typename T> double clip_grad_norm(Backend<T>& be, T* grads, size_t n, double max_norm);

// Learning rate for step `step` (0-based) of `total`: linear warm-up over warmup_steps to lr,
// then constant, or cosine from lr down to min_lr at the last step.
double learning_rate(const Config::Optim& o, int64_t step, int64_t total);

}  // namespace lmt
