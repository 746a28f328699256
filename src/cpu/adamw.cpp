// AdamW over flat buffers, as torch.optim.AdamW computes it (see optimizer.hpp).
#include <cmath>

#include "adamw_bf16.hpp"
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

template <typename T>
void adamw_bf16(T* p, const T* g, uint16_t* m, uint16_t* v, size_t n, uint64_t index,
                const AdamWStep& s) {
  const AdamWBf16Scalars<T> k = adamw_bf16_scalars<T>(s);
  for (size_t i = 0; i < n; ++i) p[i] = adamw_bf16_element(p[i], g[i], m[i], v[i], index + i, k);
}

template <typename T, typename M>
void adamw_bf16_weights(uint16_t* w, const T* g, M* m, M* v, size_t n, uint64_t index,
                        const AdamWStep& s) {
  const AdamWBf16Scalars<T> k = adamw_bf16_scalars<T>(s);
  for (size_t i = 0; i < n; ++i) adamw_bf16_weight_element(w[i], g[i], m[i], v[i], index + i, k);
}

template void adamw(float*, const float*, float*, float*, size_t, const AdamWStep&);
template void adamw(double*, const double*, double*, double*, size_t, const AdamWStep&);
template void adamw_bf16(float*, const float*, uint16_t*, uint16_t*, size_t, uint64_t,
                         const AdamWStep&);
template void adamw_bf16(double*, const double*, uint16_t*, uint16_t*, size_t, uint64_t,
                         const AdamWStep&);

#define INSTANTIATE_WEIGHTS(T, M)                                                  \
  template void adamw_bf16_weights(uint16_t*, const T*, M*, M*, size_t, uint64_t, \
                                   const AdamWStep&);
INSTANTIATE_WEIGHTS(float, float)
INSTANTIATE_WEIGHTS(float, uint16_t)
INSTANTIATE_WEIGHTS(double, double)
INSTANTIATE_WEIGHTS(double, uint16_t)

}  // namespace lmt::cpu
