#include "optimizer.hpp"

#include <cmath>

namespace lmt {

template <typename T>
void AdamW<T>::step(T* params, const T* grads, double lr, const Config::Optim& o) {
  ++t;
  const double bc1 = 1.0 - std::pow(o.beta1, double(t)), bc2 = 1.0 - std::pow(o.beta2, double(t));
  const T b1 = T(o.beta1), b2 = T(o.beta2), decay = T(1.0 - lr * o.weight_decay);
  const T step_size = T(lr / bc1), bc2_sqrt = T(std::sqrt(bc2)), eps = T(o.eps);
  for (size_t i = 0; i < m.size(); ++i) {
    T g = grads[i];
    params[i] *= decay;
    m[i] = b1 * m[i] + (T(1) - b1) * g;
    v[i] = b2 * v[i] + (T(1) - b2) * g * g;
    params[i] -= step_size * m[i] / (std::sqrt(v[i]) / bc2_sqrt + eps);
  }
}

template <typename T> double clip_grad_norm(T* grads, size_t n, double max_norm) {
  double ss = 0;
  for (size_t i = 0; i < n; ++i) ss += double(grads[i]) * double(grads[i]);
  double norm = std::sqrt(ss);
  if (max_norm > 0 && norm > max_norm) {
    T scale = T(max_norm / (norm + 1e-6));
    for (size_t i = 0; i < n; ++i) grads[i] *= scale;
  }
  return norm;
}

double learning_rate(const Config::Optim& o, int64_t step, int64_t total) {
  if (step < o.warmup_steps) return o.lr * double(step + 1) / double(o.warmup_steps);
  if (o.schedule == "constant") return o.lr;
  int64_t span = total - 1 - o.warmup_steps;
  if (span <= 0) return o.lr;
  double progress = std::min(1.0, double(step - o.warmup_steps) / double(span));
  return o.min_lr + 0.5 * (1.0 + std::cos(M_PI * progress)) * (o.lr - o.min_lr);
}

template struct AdamW<float>;
template struct AdamW<double>;
template double clip_grad_norm(float*, size_t, double);
template double clip_grad_norm(double*, size_t, double);

}  // namespace lmt
