#include "model.hpp"

#include <algorithm>

#include "check.hpp"
#include "host_threads.hpp"
#include "nvtx.hpp"
#include "rng.hpp"

namespace lmt {

template <typename T>
Model<T>::Model(Backend<T>& backend, const Config::Model& c, int64_t batch, int64_t seq_len,
                const Ranges& held)
    : be(backend), cfg(c), B(batch), T_(seq_len), precision(c.precision),
      attention(parse_attention(c.attention)), mm16(precision == Precision::bf16),
      res16(c.residual_dtype == Dtype::bf16),
      layout(ParamLayout::build(c)),
      masters(held.empty() ? Ranges{{0, layout.total}} : merged(held)),
      params_(be, layout.total, MemTag::params, masters),
      grads_(be, layout.total, MemTag::grads), inputs_(be, size_t(B * seq_len), MemTag::activations),
      targets_(be, size_t(B * seq_len), MemTag::activations),
      order_(be, size_t(B * seq_len), MemTag::activations), order_host_(size_t(B * seq_len)) {
  // Only the matmuls read the weights outside the masters, as their bf16 copy.
  LMT_ASSERT(!sharded() || mm16, "sharded fp32 masters need the bf16 policy");
  LMT_ASSERT(!res16 || mm16, "a bf16 residual stream needs the bf16 policy");
  const int64_t n = B * T_, d = c.d_model, f = c.d_ff, V = c.vocab_size, L = c.num_layers;
  const int64_t H = c.num_heads;
  // The RMSNorms' outputs, SwiGLU's gate and backward's du are read only by matmuls, and
  // SwiGLU's input u and attention's qkv, att (and backward's dg, dqkv, datt) are bf16
  // activations: under bf16, stored in bf16 (Backend::bf16_elems).
  auto stored = [&](int64_t elems) { return mm16 ? be.bf16_elems(elems) : elems; };
  const int64_t nd16 = stored(n * d), nf16 = stored(n * f), qkv16 = stored(3 * n * d);
  const int64_t u16 = stored(2 * n * f), nres = res_elems(n * d);
  for (int64_t l = 0; l < L; ++l) {
    std::string p = "layers." + std::to_string(l) + ".";
    auto off = [&](const char* s) { return layout.get(p + s).offset; };
    // W3 then W1, adjacent: one [2f, d] weight, whose matmul makes SwiGLU's u = [W3 h | W1 h].
    LMT_ASSERT(off("ffn.w1.weight") == off("ffn.w3.weight") + size_t(f * d),
               "the flat buffer keeps W1 right after W3");
    weights_.push_back({off("ln1.weight"), off("attn.qkv_proj.weight"),
                        off("attn.output_proj.weight"), off("ln2.weight"), off("ffn.w3.weight"),
                        off("ffn.w2.weight")});
  }
  // Two arenas: what forward saves for backward (activations), and backward's scratch
  // (workspace). Each is sized first, then its pointers are handed out in the same order.
  std::vector<std::pair<T**, int64_t>> saved, scratch;
  x_.resize(size_t(L + 1));
  acts_.resize(size_t(L));
  for (int64_t l = 0; l <= L; ++l) saved.push_back({&x_[size_t(l)], nres});
  for (auto& a : acts_) {
    for (auto [ptr, size] : {std::pair{&a.rstd1, n}, {&a.h1, nd16}, {&a.qkv, qkv16},
                             {&a.att_saved, be.attention_saved(B, T_, H, c.head_dim(), attention)},
                             {&a.att, nd16}, {&a.x_mid, nres}, {&a.rstd2, n}, {&a.h2, nd16},
                             {&a.u, u16}, {&a.g, nf16}})
      saved.push_back({ptr, size});
  }
  // The logits, overwritten in place by their gradient (Backend::cross_entropy): a bf16
  // activation under bf16.
  for (auto [ptr, size] : {std::pair{&rstdf_, n}, {&hf_, nd16}, {&logits_, stored(n * V)},
                           {&row_loss_, n}})
    saved.push_back({ptr, size});
  // dx_: the residual stream's gradient, stored as the stream is; dx16_: its copy as matmuls read
  // it (under bf16 with an fp32 stream only); dh_: an RMSNorm output's gradient, as the matmuls
  // write it.
  const int64_t dx16 = cfg.residual_grad_copy16() ? nd16 : 0;
  for (auto [ptr, size] : {std::pair{&dx_, nres}, {&dh_, nd16}, {&dx16_, dx16}, {&datt_, nd16},
                           {&dqkv_, qkv16}, {&dg_, nf16}, {&du_, u16}})
    scratch.push_back({ptr, size});
  be.set_weights(params_.data(), layout.total, masters);
  activations_ = carve(saved, MemTag::activations);
  scratch_ = carve(scratch, MemTag::workspace);
}

template <typename T>
std::unique_ptr<BackendArray<T>> Model<T>::carve(std::vector<std::pair<T**, int64_t>>& plan,
                                                 MemTag tag) {
  // Each piece starts 256-byte aligned: kernels read rows 16 bytes at a time.
  auto aligned = [](int64_t n) { return size_t((n + 63) / 64 * 64); };
  size_t total = 0;
  for (auto& [ptr, size] : plan) total += aligned(size);
  auto arena = std::make_unique<BackendArray<T>>(be, total, tag);
  total = 0;
  for (auto& [ptr, size] : plan) {
    *ptr = arena->data() + total;
    total += aligned(size);
  }
  return arena;
}

// Truncated normal weights (±3 std), norm gains 1. Each parameter is cut into chunks of 2^20
// values with a random stream of their own (from the seed, the parameter's index and the chunk's),
// drawn on all host cores: the values do not depend on the number of threads, and xl's 2 billion
// draws take seconds instead of a minute (on as many cores as mpirun lets this rank use: with
// one core, the minute is back; see the README on --bind-to none).
template <typename T> void Model<T>::init_params(uint64_t seed) {
  constexpr size_t kChunk = size_t(1) << 20;
  struct Chunk { size_t param, begin, end; };
  std::vector<Chunk> chunks;
  for (size_t i = 0; i < layout.params.size(); ++i)
    for (size_t b = 0; b < layout.params[i].numel; b += kChunk)
      chunks.push_back({i, b, std::min(b + kChunk, layout.params[i].numel)});
  std::vector<T> host(layout.total);
  on_host_threads(chunks.size(), chunks.size(), [&](size_t c) {
    const auto& [i, begin, end] = chunks[c];
    const ParamView& p = layout.params[i];
    T* w = host.data() + p.offset;
    if (p.shape.size() == 1) {
      std::fill(w + begin, w + end, T(1));
      return;
    }
    // Tied, the embeddings (the head too) have std 1/sqrt(d_model): the logits start at unit
    // std, where N(0, 1) would start them at sqrt(d_model) and the head's rule shrinks with
    // the vocabulary (docs/design.md).
    const bool embedding = p.name == "token_embeddings.weight";
    double std = embedding ? 1.0 : std::sqrt(2.0 / double(p.shape[0] + p.shape[1]));
    if (embedding && cfg.tie_embeddings) std = 1.0 / std::sqrt(double(cfg.d_model));
    Rng rng(seed, /*stream=*/0x1a17 + ((uint64_t(i) + 1) << 24) + begin / kChunk);
    for (size_t k = begin; k < end; ++k) {
      double z;
      do z = rng.normal();
      while (std::abs(z) > 3.0);
      w[k] = T(z * std);
    }
  });
  set_params(host);
}

template <typename T> void Model<T>::set_params(const std::vector<T>& host) {
  for (auto [b, e] : masters) be.upload(params_.data() + b, host.data() + b, e - b);
  if (!sharded()) return;
  // The bf16 copy of every weight, rounded on the host as the backends round (to nearest even),
  // a chunk at a time: no second host copy of a large model.
  constexpr size_t kChunk = size_t(1) << 20;
  char* copy = static_cast<char*>(be.weights_bf16());
  std::vector<uint16_t> part(std::min(kChunk, layout.total));
  for (size_t at = 0; at < layout.total; at += kChunk) {
    const size_t n = std::min(kChunk, layout.total - at);
    for (size_t i = 0; i < n; ++i) part[i] = to_bf16(float(host[at + i]));
    be.upload_bytes(copy + 2 * at, part.data(), 2 * n);
  }
}

template <typename T> void Model<T>::params_host(size_t begin, size_t end, T* out) const {
  std::vector<uint16_t> part;
  for (const Run& r : runs(begin, end, masters)) {
    T* to = out + (r.begin - begin);
    const size_t n = r.end - r.begin;
    if (r.inside) {
      be.download(to, params_.data() + r.begin, n);
      continue;
    }
    part.resize(n);
    be.download_bytes(part.data(), static_cast<const uint16_t*>(be.weights_bf16()) + r.begin, 2 * n);
    for (size_t i = 0; i < n; ++i) to[i] = T(from_bf16(part[i]));
  }
}

template <typename T> void Model<T>::set_batch(const int32_t* inputs, const int32_t* targets) {
  const int64_t n = B * T_;
  be.upload_bytes(inputs_.data(), inputs, size_t(n) * sizeof(int32_t));
  be.upload_bytes(targets_.data(), targets, size_t(n) * sizeof(int32_t));
  cpu::token_order(inputs, n, cfg.vocab_size, order_host_.data());  // for the embedding's backward
  be.upload_bytes(order_.data(), order_host_.data(), size_t(n) * sizeof(int32_t));
}

template <typename T> std::vector<T> Model<T>::logits_host() const {
  const int64_t n = B * T_ * cfg.vocab_size;
  if (!mm16 || be.bf16_elems(n) == n) return to_host(logits_, size_t(n));
  std::vector<uint16_t> packed(static_cast<size_t>(n));  // the backend packs bf16 activations
  be.download_bytes(packed.data(), logits_, packed.size() * 2);
  std::vector<T> out(packed.size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = T(from_bf16(packed[i]));
  return out;
}

template <typename T> void Model<T>::record(double grad_divisor) {
  fwd_replay_ = be.capture([&] { forward_ops(true, grad_divisor); });
  for (GradWrite gw : {GradWrite::set, GradWrite::add})
    if (ran_[int(gw)]) bwd_replay_[int(gw)] = be.capture([&] { backward_ops(nullptr, gw); });
  LMT_ASSERT(fwd_replay_ && bwd_replay_[0], std::string("the ") + be.name() +
                                                " backend records no replays (CUDA graphs)");
  replay_divisor_ = grad_divisor;
}

template <typename T>
void Model<T>::forward(const int32_t* inputs, const int32_t* targets, double grad_divisor) {
  set_batch(inputs, targets);
  if (!fwd_replay_) return forward_ops(true, grad_divisor);
  LMT_ASSERT(grad_divisor == replay_divisor_, "the forward was recorded for another divisor");
  fwd_replay_->run();
}

template <typename T> void Model<T>::backward(GradSync* sync, GradWrite gw) {
  if (!replays()) return backward_ops(sync, gw);
  LMT_ASSERT(!sync, "a recorded backward synchronises no gradients");
  LMT_ASSERT(bwd_replay_[int(gw)], "this backward was not recorded (it had not run)");
  bwd_replay_[int(gw)]->run();
}

template <typename T> void Model<T>::forward_ops(bool grad, double grad_divisor) {
  const int64_t n = B * T_, d = cfg.d_model, f = cfg.d_ff, V = cfg.vocab_size;
  const int64_t H = cfg.num_heads, dh = cfg.head_dim();
  const T* P = params_.data();
  NvtxRange range("forward");
  be.embedding_fwd(inputs_.data(), P + layout.get("token_embeddings.weight").offset, res(x_[0]), n,
                   d);
  for (size_t l = 0; l < acts_.size(); ++l) {
    NvtxRange layer(strf("layer %zu", l).c_str());
    const LayerWeights& w = weights_[l];
    const LayerActs& a = acts_[l];
    be.rmsnorm_fwd(res(x_[l]), P + w.ln1, act(a.h1), a.rstd1, n, d, cfg.norm_eps);
    be.linear_fwd(act(a.h1), P + w.qkv, act(a.qkv), n, 3 * d, d, precision, nullptr);
    be.attention_fwd(a.qkv, a.att, a.att_saved, B, T_, H, dh, precision, attention,
                     cfg.rope_theta);
    be.linear_fwd(act(a.att), P + w.wo, res(a.x_mid), n, d, d, precision, x_[l]);  // + residual
    be.rmsnorm_fwd(res(a.x_mid), P + w.ln2, act(a.h2), a.rstd2, n, d, cfg.norm_eps);
    be.linear_fwd(act(a.h2), P + w.w31, act(a.u), n, 2 * f, d, precision, nullptr);
    be.swiglu_fwd(act(a.u), act(a.g), n, f);
    be.linear_fwd(act(a.g), P + w.w2, res(x_[l + 1]), n, d, f, precision, a.x_mid);
  }
  be.rmsnorm_fwd(res(x_.back()), P + layout.get("ln_final.weight").offset, act(hf_), rstdf_, n, d,
                 cfg.norm_eps);
  be.linear_fwd(act(hf_), P + layout.lm_head().offset, act(logits_), n, V, d,
                precision, nullptr);
  be.cross_entropy(act(logits_), targets_.data(), row_loss_, n, V,
                   grad ? 1.0 / (double(n) * grad_divisor) : 0.0);
}

template <typename T> void Model<T>::backward_ops(GradSync* sync, GradWrite gw) {
  const int64_t n = B * T_, d = cfg.d_model, f = cfg.d_ff, V = cfg.vocab_size;
  const int64_t H = cfg.num_heads, dh = cfg.head_dim(), L = cfg.num_layers;
  const T* P = params_.data();
  T* G = grads_.data();
  NvtxRange range("backward");
  ran_[int(gw)] = true;
  // Every weight's gradient is written once by its op (linear_bwd, rmsnorm_bwd: set, or added
  // to), so only the embedding's, which embedding_bwd adds into row by token, starts from zero
  // (unless added to, or tied: then the head's linear_bwd below writes it first).
  const ParamView& emb = layout.get("token_embeddings.weight");
  if (gw == GradWrite::set && !cfg.tie_embeddings)
    be.zero_bytes(G + emb.offset, emb.numel * sizeof(T));
  if (sync) sync->begin_step();
  size_t head = layout.lm_head().offset, lnf = layout.get("ln_final.weight").offset;
  // The residual stream's gradient dx_ as the W2 and output projections read it: under bf16,
  // the copy rounded by the RMSNorm backward that last updated dx_, or dx_ itself where it is
  // kept in bf16.
  const bool copy16 = cfg.residual_grad_copy16();
  const View<const T> dres = copy16 ? act(dx16_) : res(dx_);
  // logits_ holds their gradient now (cross_entropy wrote it in place).
  be.linear_bwd(act(hf_), P + head, act(logits_), act(dh_), G + head, n, V, d, precision, gw);
  be.zero_bytes(dx_, size_t(res_elems(n * d)) * sizeof(T));  // rmsnorm_bwd adds into it
  be.rmsnorm_bwd(res(x_.back()), P + lnf, rstdf_, act(dh_), res(dx_), G + lnf, n, d,
                 copy16 ? dx16_ : nullptr, gw);
  if (sync) sync->ready(0);
  for (int64_t l = L - 1; l >= 0; --l) {  // dx_ holds the gradient of x_[l + 1]
    NvtxRange layer(strf("layer %lld", (long long)l).c_str());
    const LayerWeights& w = weights_[size_t(l)];
    const LayerActs& a = acts_[size_t(l)];
    be.swiglu_linear_bwd(act(a.g), P + w.w2, dres, act(a.u), act(dg_), act(du_), G + w.w2, n, d,
                         f, precision, gw);
    be.linear_bwd(act(a.h2), P + w.w31, act(du_), act(dh_), G + w.w31, n, 2 * f, d, precision,
                  gw);
    be.rmsnorm_bwd(res(a.x_mid), P + w.ln2, a.rstd2, act(dh_), res(dx_), G + w.ln2, n, d,
                   copy16 ? dx16_ : nullptr, gw);  // x_mid's
    be.linear_bwd(act(a.att), P + w.wo, dres, act(datt_), G + w.wo, n, d, d, precision, gw);
    be.attention_bwd(a.qkv, a.att, a.att_saved, datt_, dqkv_, B, T_, H, dh, precision, attention,
                     cfg.rope_theta);  // dq and dk: the unrotated q's and k's
    be.linear_bwd(act(a.h1), P + w.qkv, act(dqkv_), act(dh_), G + w.qkv, n, 3 * d, d, precision,
                  gw);
    be.rmsnorm_bwd(res(x_[size_t(l)]), P + w.ln1, a.rstd1, act(dh_), res(dx_), G + w.ln1, n, d,
                   copy16 && l > 0 ? dx16_ : nullptr, gw);  // x_[l]'s; layer 0's: the embedding's
    if (sync) sync->ready(ParamLayout::layer_group(L, l));
  }
  be.embedding_bwd(inputs_.data(), order_.data(), res(dx_), G + emb.offset, n, d);
  if (sync) {
    sync->ready(int(L + 1));
    int from = be.mark();  // backward's compute is done here: what follows is waiting for comm
    sync->finish();
    sync->exposed.push_back({from, be.mark()});
  }
}

template class Model<float>;
template class Model<double>;

}  // namespace lmt
