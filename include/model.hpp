// The Transformer LM graph on the CPU backend (CS336's model):
//   embedding -> L x [RMSNorm -> QKV -> RoPE -> causal attention -> out proj -> residual ->
//   RMSNorm -> W1, W3 -> SwiGLU -> W2 -> residual] -> RMSNorm -> LM head -> cross-entropy.
// Parameters and gradients are flat buffers (params.hpp); activations that backward needs live in
// one arena allocated once for a fixed batch shape.
#pragma once
#include <cstdint>
#include <vector>

#include "config.hpp"
#include "cpu_ops.hpp"
#include "grad_sync.hpp"
#include "params.hpp"

namespace lmt {

template <typename T> class Model {
 public:
  Model(const Config::Model& cfg, int64_t batch, int64_t seq_len);

  // CS336 init: Linear ~ trunc normal(0, 2/(in+out)) at +-3 sigma, embedding ~ trunc normal(0, 1)
  // at +-3, RMSNorm gains 1.
  void init_params(uint64_t seed);

  // Forward over inputs/targets [B*T]; returns the mean loss and keeps what backward needs. The
  // loss gradient is scaled by 1/(B*T*grad_divisor): with grad_divisor = world size, summing
  // gradients across ranks averages them over the global batch.
  double forward(const int32_t* inputs, const int32_t* targets, double grad_divisor = 1);
  // Gradients of the last forward into `grads` (overwritten), calling sync.ready() per group.
  void backward(GradSync* sync = nullptr);

  T* param(const std::string& name) { return params.data() + layout.get(name).offset; }
  T* grad(const std::string& name) { return grads.data() + layout.get(name).offset; }
  const T* logits() const { return logits_; }

  const Config::Model cfg;
  const int64_t B, T_;
  const Precision precision;
  const ParamLayout layout;
  std::vector<T> params, grads;

 private:
  struct LayerWeights {
    size_t ln1, qkv, wo, ln2, w1, w3, w2;
  };
  struct LayerActs {
    T *rstd1, *h1, *qkv, *probs, *att, *x_mid, *rstd2, *h2, *a1, *a3, *g;
  };
  std::vector<LayerWeights> weights_;
  std::vector<LayerActs> acts_;
  std::vector<T*> x_;  // residual stream entering layer l; x_[L] enters the final norm
  T *rstdf_, *hf_, *logits_, *dlogits_;
  T *dx_, *dh_, *dtmp_, *datt_, *dqkv_, *dg_, *da1_, *da3_;  // backward scratch
  std::vector<int32_t> inputs_;
  std::vector<T> arena_;
};

}  // namespace lmt
