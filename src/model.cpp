#include "model.hpp"

#include "rng.hpp"

namespace lmt {

template <typename T>
Model<T>::Model(const Config::Model& c, int64_t batch, int64_t seq_len)
    : cfg(c), B(batch), T_(seq_len), precision(parse_precision(c.precision)),
      layout(ParamLayout::build(c)), params(layout.total), grads(layout.total) {
  const int64_t n = B * T_, d = c.d_model, f = c.d_ff, V = c.vocab_size, L = c.num_layers;
  const int64_t H = c.num_heads;
  for (int64_t l = 0; l < L; ++l) {
    std::string p = "layers." + std::to_string(l) + ".";
    auto off = [&](const char* s) { return layout.get(p + s).offset; };
    weights_.push_back({off("ln1.weight"), off("attn.qkv_proj.weight"),
                        off("attn.output_proj.weight"), off("ln2.weight"), off("ffn.w1.weight"),
                        off("ffn.w3.weight"), off("ffn.w2.weight")});
  }
  // Size the arena first, then hand out pointers in the same order.
  std::vector<std::pair<T**, int64_t>> plan;
  x_.resize(size_t(L + 1));
  acts_.resize(size_t(L));
  for (int64_t l = 0; l <= L; ++l) plan.push_back({&x_[size_t(l)], n * d});
  for (auto& a : acts_) {
    for (auto [ptr, size] : {std::pair{&a.rstd1, n}, {&a.h1, n * d}, {&a.qkv, 3 * n * d},
                             {&a.probs, B * H * T_ * T_}, {&a.att, n * d}, {&a.x_mid, n * d},
                             {&a.rstd2, n}, {&a.h2, n * d}, {&a.a1, n * f}, {&a.a3, n * f},
                             {&a.g, n * f}})
      plan.push_back({ptr, size});
  }
  for (auto [ptr, size] : {std::pair{&rstdf_, n}, {&hf_, n * d}, {&logits_, n * V},
                           {&dlogits_, n * V}, {&dx_, n * d}, {&dh_, n * d}, {&dtmp_, n * d},
                           {&datt_, n * d}, {&dqkv_, 3 * n * d}, {&dg_, n * f}, {&da1_, n * f},
                           {&da3_, n * f}})
    plan.push_back({ptr, size});
  size_t total = 0;
  for (auto& [ptr, size] : plan) total += size_t(size);
  arena_.assign(total, T(0));
  total = 0;
  for (auto& [ptr, size] : plan) {
    *ptr = arena_.data() + total;
    total += size_t(size);
  }
  inputs_.resize(size_t(n));
}

template <typename T> void Model<T>::init_params(uint64_t seed) {
  Rng rng(seed, /*stream=*/0x1a17);
  for (auto& p : layout.params) {
    T* w = params.data() + p.offset;
    if (p.shape.size() == 1) {
      for (size_t i = 0; i < p.numel; ++i) w[i] = T(1);
      continue;
    }
    bool embedding = p.name == "token_embeddings.weight";
    double std = embedding ? 1.0 : std::sqrt(2.0 / double(p.shape[0] + p.shape[1]));
    for (size_t i = 0; i < p.numel; ++i) {
      double z;
      do z = rng.normal();
      while (std::abs(z) > 3.0);
      w[i] = T(z * std);
    }
  }
}

template <typename T>
double Model<T>::forward(const int32_t* inputs, const int32_t* targets, double grad_divisor) {
  const int64_t n = B * T_, d = cfg.d_model, f = cfg.d_ff, V = cfg.vocab_size;
  const int64_t H = cfg.num_heads, dh = cfg.head_dim();
  const T* P = params.data();
  inputs_.assign(inputs, inputs + n);
  cpu::embedding_fwd(inputs, P + layout.get("token_embeddings.weight").offset, x_[0], n, d);
  for (size_t l = 0; l < acts_.size(); ++l) {
    const LayerWeights& w = weights_[l];
    const LayerActs& a = acts_[l];
    cpu::rmsnorm_fwd(x_[l], P + w.ln1, a.h1, a.rstd1, n, d, cfg.norm_eps);
    cpu::linear_fwd(a.h1, P + w.qkv, a.qkv, n, 3 * d, d, precision);
    cpu::rope(a.qkv, B, T_, H, dh, 3 * d, cfg.rope_theta, false);      // q
    cpu::rope(a.qkv + d, B, T_, H, dh, 3 * d, cfg.rope_theta, false);  // k
    cpu::attention_fwd(a.qkv, a.att, a.probs, B, T_, H, dh, precision);
    cpu::linear_fwd(a.att, P + w.wo, a.x_mid, n, d, d, precision);
    cpu::add_inplace(a.x_mid, x_[l], n * d);
    cpu::rmsnorm_fwd(a.x_mid, P + w.ln2, a.h2, a.rstd2, n, d, cfg.norm_eps);
    cpu::linear_fwd(a.h2, P + w.w1, a.a1, n, f, d, precision);
    cpu::linear_fwd(a.h2, P + w.w3, a.a3, n, f, d, precision);
    cpu::swiglu_fwd(a.a1, a.a3, a.g, n * f);
    cpu::linear_fwd(a.g, P + w.w2, x_[l + 1], n, d, f, precision);
    cpu::add_inplace(x_[l + 1], a.x_mid, n * d);
  }
  cpu::rmsnorm_fwd(x_.back(), P + layout.get("ln_final.weight").offset, hf_, rstdf_, n, d,
                   cfg.norm_eps);
  cpu::linear_fwd(hf_, P + layout.get("lm_head.weight").offset, logits_, n, V, d, precision);
  return cpu::cross_entropy(logits_, targets, dlogits_, n, V, 1.0 / (double(n) * grad_divisor));
}

template <typename T> void Model<T>::backward(GradSync* sync) {
  const int64_t n = B * T_, d = cfg.d_model, f = cfg.d_ff, V = cfg.vocab_size;
  const int64_t H = cfg.num_heads, dh = cfg.head_dim(), L = cfg.num_layers;
  const T* P = params.data();
  T* G = grads.data();
  std::fill(grads.begin(), grads.end(), T(0));
  if (sync) sync->begin_step();
  size_t head = layout.get("lm_head.weight").offset, lnf = layout.get("ln_final.weight").offset;
  cpu::linear_bwd(hf_, P + head, dlogits_, dh_, G + head, n, V, d, precision);
  cpu::rmsnorm_bwd(x_.back(), P + lnf, rstdf_, dh_, dx_, G + lnf, n, d);
  if (sync) sync->ready(0);
  for (int64_t l = L - 1; l >= 0; --l) {  // dx_ holds the gradient of x_[l + 1]
    const LayerWeights& w = weights_[size_t(l)];
    const LayerActs& a = acts_[size_t(l)];
    cpu::linear_bwd(a.g, P + w.w2, dx_, dg_, G + w.w2, n, d, f, precision);
    cpu::swiglu_bwd(a.a1, a.a3, dg_, da1_, da3_, n * f);
    cpu::linear_bwd(a.h2, P + w.w1, da1_, dh_, G + w.w1, n, f, d, precision);
    cpu::linear_bwd(a.h2, P + w.w3, da3_, dtmp_, G + w.w3, n, f, d, precision);
    cpu::add_inplace(dh_, dtmp_, n * d);
    cpu::rmsnorm_bwd(a.x_mid, P + w.ln2, a.rstd2, dh_, dtmp_, G + w.ln2, n, d);
    cpu::add_inplace(dx_, dtmp_, n * d);  // now the gradient of x_mid
    cpu::linear_bwd(a.att, P + w.wo, dx_, datt_, G + w.wo, n, d, d, precision);
    cpu::attention_bwd(a.qkv, a.probs, datt_, dqkv_, B, T_, H, dh, precision);
    cpu::rope(dqkv_, B, T_, H, dh, 3 * d, cfg.rope_theta, true);
    cpu::rope(dqkv_ + d, B, T_, H, dh, 3 * d, cfg.rope_theta, true);
    cpu::linear_bwd(a.h1, P + w.qkv, dqkv_, dh_, G + w.qkv, n, 3 * d, d, precision);
    cpu::rmsnorm_bwd(x_[size_t(l)], P + w.ln1, a.rstd1, dh_, dtmp_, G + w.ln1, n, d);
    cpu::add_inplace(dx_, dtmp_, n * d);  // now the gradient of x_[l]
    if (sync) sync->ready(ParamLayout::layer_group(L, l));
  }
  cpu::embedding_bwd(inputs_.data(), dx_, G + layout.get("token_embeddings.weight").offset, n, d);
  if (sync) {
    sync->ready(int(L + 1));
    sync->finish();
  }
}

template class Model<float>;
template class Model<double>;

}  // namespace lmt
