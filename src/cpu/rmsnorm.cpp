// RMSNorm: y = x * r * g with r = (mean(x^2) + eps)^(-1/2), statistics in double.
//
// Backward: with s = sum_j g_j dy_j x_j over the row,
//   dx_i = r g_i dy_i - x_i r^3 s / d,   dg_i = sum over rows of dy_i x_i r.
#include <algorithm>
#include <cmath>

#include "cpu_ops.hpp"

namespace lmt::cpu {

template <typename T>
void rmsnorm_fwd(const T* x, const T* g, T* y, T* rstd, int64_t rows, int64_t d, double eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * d;
    double ss = 0;
    for (int64_t i = 0; i < d; ++i) ss += double(xr[i]) * double(xr[i]);
    T rs = T(1.0 / std::sqrt(ss / double(d) + eps));
    rstd[r] = rs;
    for (int64_t i = 0; i < d; ++i) y[r * d + i] = xr[i] * rs * g[i];
  }
}

template <typename T>
void rmsnorm_bwd(const T* x, const T* g, const T* rstd, const T* dy, T* dx, T* dg, int64_t rows,
                 int64_t d, GradWrite gw) {
  if (gw == GradWrite::set) std::fill(dg, dg + d, T(0));
  for (int64_t r = 0; r < rows; ++r) {
    const T *xr = x + r * d, *dyr = dy + r * d;
    double rs = double(rstd[r]), s = 0;
    for (int64_t i = 0; i < d; ++i) s += double(g[i]) * double(dyr[i]) * double(xr[i]);
    double c = rs * rs * rs * s / double(d);
    for (int64_t i = 0; i < d; ++i) {
      dx[r * d + i] += T(rs * double(g[i]) * double(dyr[i]) - double(xr[i]) * c);
      dg[i] += T(double(dyr[i]) * double(xr[i]) * rs);
    }
  }
}

template void rmsnorm_fwd(const float*, const float*, float*, float*, int64_t, int64_t, double);
template void rmsnorm_fwd(const double*, const double*, double*, double*, int64_t, int64_t, double);
template void rmsnorm_bwd(const float*, const float*, const float*, const float*, float*, float*,
                          int64_t, int64_t, GradWrite);
template void rmsnorm_bwd(const double*, const double*, const double*, const double*, double*,
                          double*, int64_t, int64_t, GradWrite);

}  // namespace lmt::cpu
