// The CPU reference backend: every op of the model, forward and backward, as plain loops.
//
// Written for clarity, not speed: this is the oracle the CUDA kernels are tested against and
// what lets CI train on machines without a GPU. Instantiated for float and double. All tensors
// are row-major; "+=" in a comment means the op accumulates into that output (the residual
// stream's gradient, the embedding's rows), every other output is overwritten, but for the weight
// gradients, which each op writes as its GradWrite says.
#pragma once
#include <cmath>
#include <cstdint>
#include <string>

#include "choices.hpp"  // Precision

namespace lmt {

// How a GPU backend computes attention (model.attention); the CPU has one reference for both.
enum class AttentionImpl { naive, flash };
AttentionImpl parse_attention(const std::string& name);
float round_tf32(float x);  // round to nearest even, 10 mantissa bits
float round_bf16(float x);  // round to nearest even, 7 mantissa bits
template <typename T> T round_to(Precision p, T x);

// How an op writes a weight's gradient: overwritten (the first micro-batch of an optimizer step),
// or added to (the later ones: gradient accumulation, train.grad_accum).
enum class GradWrite { set, add };

// One AdamW step's scalars (the update rule is in optimizer.hpp).
struct AdamWStep {
  double lr, beta1, beta2, eps, weight_decay;
  int64_t t;                // 1-based step count, for bias correction
  double grad_scale = 1.0;  // g is read as g * grad_scale (gradient clipping's factor)
  uint64_t seed = 0;        // the stochastic rounding's seed (bf16 moments or weights: adamw_bf16.hpp)
};

namespace cpu {

// y[M,N] = x[M,K] @ w[N,K]^T  (a Linear layer; w as PyTorch stores it)
template <typename T>
void linear_fwd(const T* x, const T* w, T* y, int64_t M, int64_t N, int64_t K, Precision p);
// dx[M,K] = dy @ w;  dw[N,K] = dy^T @ x (= or += as gw says)
template <typename T>
void linear_bwd(const T* x, const T* w, const T* dy, T* dx, T* dw, int64_t M, int64_t N,
                int64_t K, Precision p, GradWrite gw = GradWrite::set);

// y = x / sqrt(mean(x^2) + eps) * g over rows of length d; rstd[row] saved for backward
template <typename T>
void rmsnorm_fwd(const T* x, const T* g, T* y, T* rstd, int64_t rows, int64_t d, double eps);
// dx += d/dx (accumulates: dx is where the residual stream's gradient sums);  dg = or += d/dg
template <typename T>
void rmsnorm_bwd(const T* x, const T* g, const T* rstd, const T* dy, T* dx, T* dg, int64_t rows,
                 int64_t d, GradWrite gw = GradWrite::set);

// Rotates adjacent pairs (x[2i], x[2i+1]) of each head by angle t * theta^(-2i/dh) (rope_angle),
// in place. Element (b, t, h, i) lives at x[(b*T + t)*row_stride + h*dh + i]. inverse = rotate
// back, which is also the backward (the rotation is orthogonal).
inline double rope_angle(int64_t t, int64_t i, int64_t dh, double theta) {
  return double(t) * std::pow(theta, -2.0 * double(i) / double(dh));
}
template <typename T>
void rope(T* x, int64_t B, int64_t T_, int64_t H, int64_t dh, int64_t row_stride, double theta,
          bool inverse);

// Causal softmax attention over a fused qkv[B*T, 3*H*dh] (q, k, v blocks of H*dh columns each,
// head h at columns h*dh within a block). out[B*T, H*dh]; probs[B, H, T, T] saved for backward.
template <typename T>
void attention_fwd(const T* qkv, T* out, T* probs, int64_t B, int64_t T_, int64_t H, int64_t dh,
                   Precision p);
// dqkv[B*T, 3*H*dh] = gradient w.r.t. qkv (overwritten)
template <typename T>
void attention_bwd(const T* qkv, const T* probs, const T* dout, T* dqkv, int64_t B, int64_t T_,
                   int64_t H, int64_t dh, Precision p);

// SwiGLU's gate over u[rows, 2f], each row [b | a]: W3's output b then W1's a, as one matmul by
// the two weights (adjacent in the flat buffer, W3 first) makes them. g[rows, f] = silu(a) * b;
// backward: du[rows, 2f] = [db | da], laid out as u.
template <typename T> void swiglu_fwd(const T* u, T* g, int64_t rows, int64_t f);
template <typename T> void swiglu_bwd(const T* u, const T* dg, T* du, int64_t rows, int64_t f);

// out[i, :] = table[tokens[i], :];  backward: dtable[tokens[i], :] += dout[i, :]
template <typename T>
void embedding_fwd(const int32_t* tokens, const T* table, T* out, int64_t n, int64_t d);
template <typename T>
void embedding_bwd(const int32_t* tokens, const T* dout, T* dtable, int64_t n, int64_t d);
// order[0..n) = positions 0..n-1 sorted by token, ties in position order: the CUDA backward sums
// each token's rows along it, deterministically. Every token in [0, V).
void token_order(const int32_t* tokens, int64_t n, int64_t V, int32_t* order);

// Cross-entropy of each row of logits[n, V] against targets[n] into row_loss[n]. If dlogits is
// not null it receives (softmax - onehot) * grad_scale (1/n: the gradient of the mean); it may
// be logits itself (in place: a row's loss is taken before its gradient is written).
template <typename T>
void cross_entropy(const T* logits, const int32_t* targets, T* dlogits, T* row_loss, int64_t n,
                   int64_t V, double grad_scale);

// y += x
template <typename T> void add_inplace(T* y, const T* x, int64_t n);

// One AdamW step over n elements of flat buffers (p, m, v updated in place).
template <typename T> void adamw(T* p, const T* g, T* m, T* v, size_t n, const AdamWStep& s);
// The same with m and v stored as bf16 (n values each, their bits), as adamw_bf16.hpp computes
// and rounds them; element i is element index + i of the flat buffer (the rounding's counter).
template <typename T>
void adamw_bf16(T* p, const T* g, uint16_t* m, uint16_t* v, size_t n, uint64_t index,
                const AdamWStep& s);
// A step of weights that have no fp32 master (optim.master_weights = false): w, n bf16 values
// (their bits), updated in T and stored rounded stochastically; m and v stored as M (T, or
// uint16_t: bf16), as adamw_bf16.hpp computes and rounds them.
template <typename T, typename M>
void adamw_bf16_weights(uint16_t* w, const T* g, M* m, M* v, size_t n, uint64_t index,
                        const AdamWStep& s);

}  // namespace cpu
}  // namespace lmt
