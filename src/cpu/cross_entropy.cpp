// Softmax cross-entropy fused with its gradient: one pass over each row of logits.
//
// row_loss_i = logsumexp(logits_i) - logits_i[target_i];
// dlogits_i = (softmax(logits_i) - onehot(target_i)) * grad_scale
#include <cmath>

#include "cpu_ops.hpp"

namespace lmt::cpu {

template <typename T>
void cross_entropy(const T* logits, const int32_t* targets, T* dlogits, T* row_loss, int64_t n,
                   int64_t V, double grad_scale) {
  for (int64_t i = 0; i < n; ++i) {
    const T* z = logits + i * V;
    double mx = -INFINITY, sum = 0;
    for (int64_t v = 0; v < V; ++v) mx = std::max(mx, double(z[v]));
    for (int64_t v = 0; v < V; ++v) sum += std::exp(double(z[v]) - mx);
    double lse = mx + std::log(sum);
    row_loss[i] = T(lse - double(z[targets[i]]));
    if (!dlogits) continue;
    for (int64_t v = 0; v < V; ++v)
      dlogits[i * V + v] =
          T((std::exp(double(z[v]) - lse) - (v == targets[i] ? 1.0 : 0.0)) * grad_scale);
  }
}

template void cross_entropy(const float*, const int32_t*, float*, float*, int64_t, int64_t, double);
template void cross_entropy(const double*, const int32_t*, double*, double*, int64_t, int64_t,
                            double);

}  // namespace lmt::cpu
