// The Transformer LM graph, written once against Backend (CS336's model):
//   embedding -> L x [RMSNorm -> QKV -> RoPE -> causal attention -> out proj -> residual ->
//   RMSNorm -> W1, W3 -> SwiGLU -> W2 -> residual] -> RMSNorm -> LM head -> cross-entropy.
// Parameters and gradients are flat buffers (params.hpp) in the backend's memory; activations that
// backward needs live in one arena allocated once for a fixed batch shape.
#pragma once
#include <cstdint>
#include <vector>

#include "backend.hpp"
#include "config.hpp"
#include "grad_sync.hpp"
#include "params.hpp"

namespace lmt {

template <typename T> class Model {
 public:
  // masters: the element ranges of the flat parameter buffer that this rank holds in memory
  // (zero1_masters: ZeRO-1's sharded masters under bf16, or with optim.master_weights = false
  // the parameters read in fp32 only); empty: all of it. Outside them the parameters exist only
  // as the weights' bf16 copy (Backend::set_weights), which is all that forward and backward
  // read of those.
  Model(Backend<T>& be, const Config::Model& cfg, int64_t batch, int64_t seq_len,
        const Ranges& masters = {});
  ~Model() { be.forget_weights(params_.data()); }
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  // CS336 init: Linear ~ trunc normal(0, 2/(in+out)) at +-3 sigma, embedding ~ trunc normal(0, 1)
  // at +-3, RMSNorm gains 1.
  void init_params(uint64_t seed);

  // The pass, a step at a time:
  //   forward(inputs, targets)  the batch's tokens [B*T] into backend memory, and the forward with
  //                             the loss's gradient (replayed where recorded); backend work only,
  //                             no synchronisation with a device backend. The gradient is scaled
  //                             by 1/(B*T*grad_divisor): with grad_divisor = world size, summing
  //                             gradients across ranks averages over the global batch
  //   loss()                    the last forward's mean loss, read back from the backend
  //   backward(sync)            below
  //   evaluate(inputs, targets) the forward without the gradient, and its loss; the logits are
  //                             kept (logits_host). A backward() needs a forward() after it
  void forward(const int32_t* inputs, const int32_t* targets, double grad_divisor = 1);
  double loss() { return be.sum(row_loss_, size_t(B * T_)) / double(B * T_); }
  double evaluate(const int32_t* inputs, const int32_t* targets) {
    set_batch(inputs, targets);
    forward_ops(false, 1);
    return loss();
  }
  // Gradients of the last forward into `grads`, overwriting them (gw = set) or added to them
  // (add: gradient accumulation's later micro-batches), calling sync.ready() per group.
  void backward(GradSync* sync = nullptr, GradWrite gw = GradWrite::set);
  // Records forward's backend work (for grad_divisor) and backward() without a sync as backend
  // replays (Backend::capture: CUDA graphs), which they run from then on instead of launching op
  // by op: the backward of each GradWrite that has run. A forward and each such backward must
  // have run before (the ops' first-call work); the backend must record (the GPU's).
  void record(double grad_divisor = 1);
  bool replays() const { return fwd_replay_ != nullptr; }

  T* params() const { return params_.data(); }  // layout.total elements, backend memory
  T* grads() const { return grads_.data(); }
  bool sharded() const { return !is_whole(masters, layout.total); }  // masters are not all
  // Parameters [begin, end) as this rank holds them: the masters, and elsewhere the weights' bf16
  // copy, which is the parameter itself where there is no master (optim.master_weights = false)
  // but under ZeRO-1 the rounding of a master another rank holds (Optimizer::gather_params
  // brings those): into `out`, end - begin elements, or fresh.
  void params_host(size_t begin, size_t end, T* out) const;
  std::vector<T> params_host(size_t begin, size_t end) const {
    std::vector<T> out(end - begin);
    params_host(begin, end, out.data());
    return out;
  }
  std::vector<T> params_host() const { return params_host(0, layout.total); }
  std::vector<T> grads_host() const { return to_host(grads_.data(), layout.total); }
  // The logits of the last evaluate() (forward() leaves their gradient in their place).
  std::vector<T> logits_host() const;
  // All the parameters from host values: the masters held, and the weights' bf16 copy where they
  // are sharded.
  void set_params(const std::vector<T>& host);

  Backend<T>& be;
  const Config::Model cfg;
  const int64_t B, T_;
  const Precision precision;
  const AttentionImpl attention;
  const bool mm16;  // bf16 policy: the bf16 activations of backend.hpp's notes stored so (act)
  const bool res16;  // model.residual_dtype bf16: the stream and its gradient stored so (res)
  const ParamLayout layout;
  const Ranges masters;  // sorted, disjoint: [0, layout.total) where this rank holds them all

 private:
  struct LayerWeights {
    size_t ln1, qkv, wo, ln2, w31, w2;  // w31: W3 and W1, one [2 d_ff, d] matrix
  };
  struct LayerActs {
    T *rstd1, *h1, *qkv, *att_saved, *att, *x_mid, *rstd2, *h2, *u, *g;  // u: [W3 h2 | W1 h2]
  };
  // A bf16 activation (backend.hpp): stored in bf16 under the bf16 policy, else in T.
  View<T> act(T* p) const { return {p, mm16 ? Stored::bf16 : Stored::full}; }
  // The residual stream (x_, x_mid) and its gradient (dx_): in bf16 under model.residual_dtype
  // bf16, else in T.
  View<T> res(T* p) const { return {p, res16 ? Stored::bf16 : Stored::full}; }
  int64_t res_elems(int64_t n) const { return res16 ? be.bf16_elems(n) : n; }  // n such values
  std::vector<T> to_host(const T* p, size_t n) const {
    std::vector<T> out(n);
    be.download(out.data(), p, n);
    return out;
  }

  BackendArray<T> params_, grads_;
  std::vector<LayerWeights> weights_;
  std::vector<LayerActs> acts_;
  std::vector<T*> x_;  // residual stream entering layer l; x_[L] enters the final norm
  T *rstdf_, *hf_, *logits_, *row_loss_;  // logits_: then, after forward, their gradient
  T *dx_, *dh_, *dx16_, *datt_, *dqkv_, *dg_, *du_;  // backward scratch
  // One allocation for all the pointers in `plan`, which it sets.
  std::unique_ptr<BackendArray<T>> carve(std::vector<std::pair<T**, int64_t>>& plan, MemTag tag);

  void set_batch(const int32_t* inputs, const int32_t* targets);
  void forward_ops(bool grad, double grad_divisor);  // grad: the logits' gradient too
  void backward_ops(GradSync* sync, GradWrite gw);
  // bwd_replay_[gw]: the recorded backward of each GradWrite (null: not recorded, not yet run).
  std::unique_ptr<typename Backend<T>::Replay> fwd_replay_, bwd_replay_[2];
  bool ran_[2] = {false, false};  // whether a backward of each GradWrite has run
  double replay_divisor_ = 1;

  std::unique_ptr<BackendArray<T>> activations_, scratch_;
  BackendArray<T, int32_t> inputs_, targets_, order_;
  std::vector<int32_t> order_host_;
};

}  // namespace lmt
