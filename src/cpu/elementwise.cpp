// Elementwise ops: SwiGLU's gate and the residual add.
//
// g = silu(a) * b with silu(a) = a * sigmoid(a);
// da = dg * b * sigmoid(a) * (1 + a * (1 - sigmoid(a))),  db = dg * silu(a)
#include <cmath>

#include "cpu_ops.hpp"

namespace lmt::cpu {

template <typename T> void swiglu_fwd(const T* a, const T* b, T* g, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    double sig = 1.0 / (1.0 + std::exp(-double(a[i])));
    g[i] = T(double(a[i]) * sig * double(b[i]));
  }
}

template <typename T>
void swiglu_bwd(const T* a, const T* b, const T* dg, T* da, T* db, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    double x = double(a[i]), sig = 1.0 / (1.0 + std::exp(-x));
    da[i] = T(double(dg[i]) * double(b[i]) * sig * (1.0 + x * (1.0 - sig)));
    db[i] = T(double(dg[i]) * x * sig);
  }
}

template <typename T> void add_inplace(T* y, const T* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

#define INSTANTIATE(T)                                                     \
  template void swiglu_fwd(const T*, const T*, T*, int64_t);               \
  template void swiglu_bwd(const T*, const T*, const T*, T*, T*, int64_t); \
  template void add_inplace(T*, const T*, int64_t);
INSTANTIATE(float)
INSTANTIATE(double)

}  // namespace lmt::cpu
