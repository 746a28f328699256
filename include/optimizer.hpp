// AdamW over flat buffers, global-norm gradient clipping, and the learning-rate schedule.
//
// AdamW as torch.optim.AdamW computes it (decoupled decay first, then the bias-corrected step):
//   p *= 1 - lr*wd;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//   p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps)
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include <mpi.h>

#include "backend.hpp"
#include "config.hpp"
#include "params.hpp"

namespace lmt {

// How AdamW stores m and v (optim.state_dtype): as T ("fp32"; fp64 under precision fp64), or
// as bf16 ("bf16": 2-byte values on every backend, updated as adamw_bf16.hpp says).
inline Stored moments_stored(Dtype s) { return s == Dtype::bf16 ? Stored::bf16 : Stored::full; }
// The same from the word a checkpoint's metadata holds; UsageError for another.
Stored parse_state_dtype(const std::string& name);
const char* state_dtype_name(Stored s);  // "fp32" or "bf16", as the config writes it
template <typename T> size_t state_elem_bytes(Stored s) { return s == Stored::bf16 ? 2 : sizeof(T); }

// AdamW's state on the host, as a checkpoint holds it: both moments of the whole flat buffer
// (however the run holds them: whole, or sharded by zero1), each element's bytes as stored, and
// the steps taken.
template <typename T> struct OptimizerState {
  Stored stored = Stored::full;
  std::vector<char> m, v;
  int64_t t = 0;
};
// The same where it lies elsewhere (a mapped checkpoint's tensors): what a resume hands over.
struct OptimizerStateView {
  Stored stored = Stored::full;
  const char *m = nullptr, *v = nullptr;
  int64_t t = 0;
};

template <typename T> struct AdamW {
  const Stored stored;  // m and v as T, or bf16
  int64_t t = 0;        // steps taken

  // n: the elements of the range step() updates (the flat buffer, or a ZeRO-1 shard of it),
  // `first` its first element's place in the flat buffer, and seed (run.seed) with it what
  // stochastic rounding draws for each element at each step. masters: the Model's (element
  // ranges of the flat buffer that have fp32 weights; empty: all); the range's other elements
  // are weights held only as their bf16 copy (optim.master_weights = false), which AdamW updates
  // there (Backend::adamw_bf16_weights).
  AdamW(Backend<T>& be, size_t n, Stored state = Stored::full, uint64_t seed = 0,
        size_t first = 0, const Ranges& masters = {})
      : stored(state), m_(be, n * state_elem_bytes<T>(state), MemTag::optimizer),
        v_(be, n * state_elem_bytes<T>(state), MemTag::optimizer), n_(n), seed_(seed),
        first_(first),
        parts_(runs(first, first + n, masters.empty() ? Ranges{{first, first + n}} : masters)),
        be_(be) {}
  size_t size() const { return n_; }
  // grad_scale: clip_grad_norm's factor, applied as the gradients are read.
  void step(T* params, const T* grads, double lr, const Config::Optim& o, double grad_scale = 1) {
    update(params, grads, 0, n_, next_step(lr, o, grad_scale));
  }
  // A step in pieces (ZeRO-1 gathers each piece while the next is updated): next_step() once,
  // then update() over pieces that cover [0, size) once. params and grads point at element 0.
  AdamWStep next_step(double lr, const Config::Optim& o, double grad_scale = 1) {
    return AdamWStep{lr, o.beta1, o.beta2, o.eps, o.weight_decay, ++t, grad_scale, seed_};
  }
  void update(T* params, const T* grads, size_t from, size_t n, const AdamWStep& s) {
    for (const Run& p : parts_) {  // [from, from + n) cut where masters begin or end
      const size_t a = std::max(from, p.begin - first_), b = std::min(from + n, p.end - first_);
      if (a >= b) continue;
      if (p.inside) update_masters(params, grads, a, b - a, s);
      else update_bf16_weights(grads, a, b - a, s);
    }
  }
  // Host copies of the moments this AdamW holds, and its steps: into `s`, whose moments are
  // sized for them, or fresh.
  void state(OptimizerState<T>& s) const {
    LMT_ASSERT(s.m.size() == m_.size() && s.v.size() == v_.size(),
               "host copies of the moments sized for another range");
    s.stored = stored, s.t = t;
    download_moment(0, s.m.data()), download_moment(1, s.v.data());
  }
  OptimizerState<T> state() const {
    OptimizerState<T> s{stored, std::vector<char>(m_.size()), std::vector<char>(v_.size()), t};
    state(s);
    return s;
  }
  // One moment's host copy (0: m, 1: v), its n elements' bytes, into `to`.
  void download_moment(int which, void* to) const {
    const BackendArray<T, char>& a = which ? v_ : m_;
    be_.download_bytes(to, a.data(), a.size());
  }
  // Takes its range, [begin, begin + size), of a whole-buffer state stored as this AdamW's.
  void set_state(const OptimizerStateView& whole, size_t begin = 0) {
    LMT_ASSERT(whole.stored == stored, "an optimizer state of another dtype");
    const size_t at = begin * state_elem_bytes<T>(stored);
    be_.upload_bytes(m_.data(), whole.m + at, m_.size());
    be_.upload_bytes(v_.data(), whole.v + at, v_.size());
    t = whole.t;
  }

 private:
  void update_masters(T* params, const T* grads, size_t from, size_t n, const AdamWStep& s) {
    if (stored == Stored::bf16)
      be_.adamw_bf16(params + from, grads + from, moment16(m_) + from, moment16(v_) + from, n,
                     first_ + from, s);
    else
      be_.adamw(params + from, grads + from, moment(m_) + from, moment(v_) + from, n, s);
  }
  // The weights' bf16 copy, element first_ + from on: the parameters themselves there.
  void update_bf16_weights(const T* grads, size_t from, size_t n, const AdamWStep& s) {
    uint16_t* w = static_cast<uint16_t*>(be_.weights_bf16()) + first_ + from;
    if (stored == Stored::bf16)
      be_.adamw_bf16_weights(w, grads + from, moment16(m_) + from, moment16(v_) + from, n,
                             first_ + from, s);
    else
      be_.adamw_bf16_weights(w, grads + from, moment(m_) + from, moment(v_) + from, n,
                             first_ + from, s);
  }
  static T* moment(const BackendArray<T, char>& a) { return reinterpret_cast<T*>(a.data()); }
  static uint16_t* moment16(const BackendArray<T, char>& a) {
    return reinterpret_cast<uint16_t*>(a.data());
  }
  BackendArray<T, char> m_, v_;  // n_ elements' bytes each
  size_t n_;
  uint64_t seed_;
  size_t first_;
  std::vector<Run> parts_;  // its flat-buffer range, cut where masters begin or end
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

class GradSync;                     // grad_sync.hpp
template <typename T> class Model;  // model.hpp

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
  // order): rank 0 gets the whole state, and every parameter of `model` exact (its master, or
  // where it has none its bf16 value), into buffers sized for the whole flat buffer (the moments:
  // as many elements' bytes as stored) that it keeps from one checkpoint to the next (HostPin);
  // the others' are left alone.
  virtual void gather_state(MPI_Comm host, OptimizerState<T>& whole) = 0;
  virtual void gather_params(const Model<T>& model, MPI_Comm host, std::vector<T>& whole) = 0;
  // Sizes (pages faulted in, HostPin::size) the host buffers those gathers keep on this rank
  // beyond rank 0's `whole` ones, which its caller sizes; no MPI or backend calls, so that it
  // may run on another thread beside the steps.
  virtual void size_host_copies(int /*rank*/) {}
  // Resume: this rank's part of a whole-buffer state.
  virtual void set_state(const OptimizerStateView& whole) = 0;
};

// Learning rate for step `step` (0-based) of `total`: linear warm-up over warmup_steps to lr,
// then constant, or cosine from lr down to min_lr at the last step.
double learning_rate(const Config::Optim& o, int64_t step, int64_t total);

}  // namespace lmt
