// Linear layer: y = x @ w^T, and its backward, with the precision policy applied to operands.
//
// Under tf32/bf16 both operands are rounded before the product (what tensor cores see); the sum
// and the result stay in T.
#include <algorithm>
#include <vector>

#include "cpu_ops.hpp"

namespace lmt::cpu {
namespace {

template <typename T>
const T* rounded(const T* x, int64_t n, Precision p, std::vector<T>& tmp) {
  if (p == Precision::fp32 || p == Precision::fp64) return x;
  tmp.resize(size_t(n));
  for (int64_t i = 0; i < n; ++i) tmp[size_t(i)] = round_to(p, x[i]);
  return tmp.data();
}

}  // namespace

template <typename T>
void linear_fwd(const T* x, const T* w, T* y, int64_t M, int64_t N, int64_t K, Precision p) {
  std::vector<T> tx, tw;
  x = rounded(x, M * K, p, tx);
  w = rounded(w, N * K, p, tw);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      T acc = 0;
      for (int64_t k = 0; k < K; ++k) acc += x[m * K + k] * w[n * K + k];
      y[m * N + n] = acc;
    }
}

template <typename T>
void linear_bwd(const T* x, const T* w, const T* dy, T* dx, T* dw, int64_t M, int64_t N,
                int64_t K, Precision p, GradWrite gw) {
  std::vector<T> tx, tw, tdy;
  x = rounded(x, M * K, p, tx);
  w = rounded(w, N * K, p, tw);
  dy = rounded(dy, M * N, p, tdy);
  if (gw == GradWrite::set) std::fill(dw, dw + N * K, T(0));
  for (int64_t m = 0; m < M; ++m) {
    T* dxm = dx + m * K;
    for (int64_t k = 0; k < K; ++k) dxm[k] = 0;
    for (int64_t n = 0; n < N; ++n) {
      T g = dy[m * N + n];
      for (int64_t k = 0; k < K; ++k) {
        dxm[k] += g * w[n * K + k];
        dw[n * K + k] += g * x[m * K + k];
      }
    }
  }
}

#define INSTANTIATE(T)                                                                 \
  template void linear_fwd(const T*, const T*, T*, int64_t, int64_t, int64_t, Precision); \
  template void linear_bwd(const T*, const T*, const T*, T*, T*, int64_t, int64_t, int64_t, \
                           Precision, GradWrite);
INSTANTIATE(float)
INSTANTIATE(double)

}  // namespace lmt::cpu
