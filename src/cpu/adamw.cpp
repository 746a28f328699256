// AdamW over flat buffers, as torch.optim.AdamW computes it (see optimizer.hpp).
#include <cmath>

#include "cpu_ops.hpp"

namespace lmt::cpu {

template <typename T> void adamw(T* p, const T* g, T* m, T* v, size_t n, const AdamWStep& s) {
  const double bc1 = 1.0 - std::pow(s.beta1, double(s.t)), bc2 = 1.0 - std::pow(s.beta2, double(s.t));
  const T b1 = T(s.beta1), b2 = T(s.beta2), decay = T(1.0 - s.lr * s.weight_decay);
  const T step_size = T(s.lr / bc1), bc2_sqrt = T(std::sqrt(bc2)), eps = T(s.eps);
  const T gs = T(s.grad_scale);
  for (size_t i = 0; i < n; ++i) {
    const T gi = g[i] * gs;
    p[i] *= decay;
    m[i] = b1 * m[i] + (T(1) - b1) * gi;
    v[i] = b2 * v[i] + (T(1) - b2) * gi * gi;
    p[i] -= step_size * m[i] / (std::sqrt(v[i]) / bc2_sqrt + eps);
  }
}

template void adamw(float*, const float*, float*, float*, size_t, const AdamWStep&);
template void adamw(double*, const double*, double*, double*, size_t, const AdamWStep&);

}  // namespace lmt::cpu
