// Elementwise ops: SwiGLU's gate and the residual add.
//
// g = silu(a) * b with silu(a) = a * sigmoid(a);
// da = dg * b * sigmoid(a) * (1 + a * (1 - sigmoid(a))),  db = dg * silu(a)
#include <cmath>

#include "cpu_ops.hpp"

namespace lmt::cpu {

// Row r of u is [b | a] (cpu_ops.hpp): b at u[r * 2f + j], a at u[r * 2f + f + j].
template <typename T> void swiglu_fwd(const T* u, T* g, int64_t rows, int64_t f) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < f; ++j) {
      const T *b = u + r * 2 * f, *a = b + f;
      double sig = 1.0 / (1.0 + std::exp(-double(a[j])));
      g[r * f + j] = T(double(a[j]) * sig * double(b[j]));
    }
}

template <typename T> void swiglu_bwd(const T* u, const T* dg, T* du, int64_t rows, int64_t f) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < f; ++j) {
      const T *b = u + r * 2 * f, *a = b + f;
      T *db = du + r * 2 * f, *da = db + f;
      double x = double(a[j]), sig = 1.0 / (1.0 + std::exp(-x)), d = double(dg[r * f + j]);
      da[j] = T(d * double(b[j]) * sig * (1.0 + x * (1.0 - sig)));
      db[j] = T(d * x * sig);
    }
}

template <typename T> void add_inplace(T* y, const T* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

#define INSTANTIATE(T)                                                     \
  template void swiglu_fwd(const T*, T*, int64_t, int64_t);           \
  template void swiglu_bwd(const T*, const T*, T*, int64_t, int64_t); \
  template void add_inplace(T*, const T*, int64_t);
INSTANTIATE(float)
INSTANTIATE(double)

}  // namespace lmt::cpu
