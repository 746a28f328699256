// Causal softmax attention, the reference: scores materialised row by row.
//
//   S = scale * q k^T (j <= i only),  P = softmax(S),  out = P v,  scale = 1/sqrt(dh)
// Backward, with dP = dout v^T:
//   dv = P^T dout,  dS = P * (dP - rowsum(P * dP)),  dq = scale dS k,  dk = scale dS^T q
// Matmul operands (q, k, v, P, dout, dS) follow the precision policy; softmax is in double.
// Under bf16 the scores S and dP are also rounded to bf16, as the GPU's matmuls store them.
#include <cmath>
#include <vector>

#include "cpu_ops.hpp"

namespace lmt::cpu {
namespace {
template <typename T> T stored(Precision p, T x) {
  return p == Precision::bf16 ? round_to(p, x) : x;
}
}  // namespace

template <typename T>
void attention_fwd(const T* qkv, T* out, T* probs, int64_t B, int64_t T_, int64_t H, int64_t dh,
                   Precision p) {
  const int64_t d = H * dh, stride = 3 * d;
  const double scale = 1.0 / std::sqrt(double(dh));
  std::vector<double> s(static_cast<size_t>(T_));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const T* q = qkv + b * T_ * stride + h * dh;
      const T* k = q + d;
      const T* v = q + 2 * d;
      T* P = probs + (b * H + h) * T_ * T_;
      for (int64_t i = 0; i < T_; ++i) {
        double mx = -INFINITY, sum = 0;
        for (int64_t j = 0; j <= i; ++j) {
          T acc = 0;
          for (int64_t c = 0; c < dh; ++c)
            acc += round_to(p, q[i * stride + c]) * round_to(p, k[j * stride + c]);
          s[size_t(j)] = double(stored(p, T(scale * double(acc))));
          mx = std::max(mx, s[size_t(j)]);
        }
        for (int64_t j = 0; j <= i; ++j) sum += (s[size_t(j)] = std::exp(s[size_t(j)] - mx));
        for (int64_t j = 0; j < T_; ++j) P[i * T_ + j] = j <= i ? T(s[size_t(j)] / sum) : T(0);
        T* o = out + (b * T_ + i) * d + h * dh;
        for (int64_t c = 0; c < dh; ++c) {
          T acc = 0;
          for (int64_t j = 0; j <= i; ++j)
            acc += round_to(p, P[i * T_ + j]) * round_to(p, v[j * stride + c]);
          o[c] = acc;
        }
      }
    }
}

template <typename T>
void attention_bwd(const T* qkv, const T* probs, const T* dout, T* dqkv, int64_t B, int64_t T_,
                   int64_t H, int64_t dh, Precision p) {
  const int64_t d = H * dh, stride = 3 * d;
  const double scale = 1.0 / std::sqrt(double(dh));
  for (int64_t i = 0; i < B * T_ * stride; ++i) dqkv[i] = 0;
  std::vector<T> dS(static_cast<size_t>(T_));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const T* q = qkv + b * T_ * stride + h * dh;
      const T* k = q + d;
      const T* v = q + 2 * d;
      T* dq = dqkv + b * T_ * stride + h * dh;
      T* dk = dq + d;
      T* dv = dq + 2 * d;
      const T* P = probs + (b * H + h) * T_ * T_;
      for (int64_t i = 0; i < T_; ++i) {
        const T* g = dout + (b * T_ + i) * d + h * dh;
        double rowsum = 0;
        for (int64_t j = 0; j <= i; ++j) {
          T dp = 0;
          for (int64_t c = 0; c < dh; ++c) {
            dp += round_to(p, g[c]) * round_to(p, v[j * stride + c]);
            dv[j * stride + c] += round_to(p, P[i * T_ + j]) * round_to(p, g[c]);
          }
          dS[size_t(j)] = stored(p, dp);
          rowsum += double(P[i * T_ + j]) * double(dS[size_t(j)]);
        }
        for (int64_t j = 0; j <= i; ++j) {
          T ds = round_to(p, T(double(P[i * T_ + j]) * (double(dS[size_t(j)]) - rowsum) * scale));
          for (int64_t c = 0; c < dh; ++c) {
            dq[i * stride + c] += ds * round_to(p, k[j * stride + c]);
            dk[j * stride + c] += ds * round_to(p, q[i * stride + c]);
          }
        }
      }
    }
}

#define INSTANTIATE(T)                                                                  \
  template void attention_fwd(const T*, T*, T*, int64_t, int64_t, int64_t, int64_t, Precision); \
  template void attention_bwd(const T*, const T*, const T*, T*, int64_t, int64_t, int64_t,     \
                              int64_t, Precision);
INSTANTIATE(float)
INSTANTIATE(double)

}  // namespace lmt::cpu
