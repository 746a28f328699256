// Rotary position embedding on adjacent pairs, in place.
#include <cmath>

#include "cpu_ops.hpp"

namespace lmt::cpu {

template <typename T>
void rope(T* x, int64_t B, int64_t T_, int64_t H, int64_t dh, int64_t row_stride, double theta,
          bool inverse) {
  for (int64_t t = 0; t < T_; ++t)
    for (int64_t i = 0; i < dh / 2; ++i) {
      const double angle = rope_angle(t, i, dh, theta);
      double c = std::cos(angle), s = inverse ? -std::sin(angle) : std::sin(angle);
      for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h) {
          T* p = x + (b * T_ + t) * row_stride + h * dh + 2 * i;
          double x0 = double(p[0]), x1 = double(p[1]);
          p[0] = T(x0 * c - x1 * s);
          p[1] = T(x0 * s + x1 * c);
        }
    }
}

template void rope(float*, int64_t, int64_t, int64_t, int64_t, int64_t, double, bool);
template void rope(double*, int64_t, int64_t, int64_t, int64_t, int64_t, double, bool);

}  // namespace lmt::cpu
