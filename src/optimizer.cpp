#include "optimizer.hpp"

#include <cmath>

#include "check.hpp"

namespace lmt {

Stored parse_state_dtype(const std::string& name) {
  const std::vector<std::string> words = choice_names<Dtype>();
  for (size_t i = 0; i < words.size(); ++i)
    if (name == words[i]) return moments_stored(Dtype(i));
  throw UsageError("unknown optim.state_dtype '" + name + "' (fp32 or bf16)");
}

const char* state_dtype_name(Stored s) {
  return name_of(s == Stored::bf16 ? Dtype::bf16 : Dtype::fp32);
}

GradClip grad_clip(double norm, double max_norm) {
  return {norm, max_norm > 0 && norm > max_norm ? max_norm / (norm + 1e-6) : 1.0};
}

template <typename T>
GradClip clip_grad_norm(Backend<T>& be, const T* grads, size_t n, double max_norm) {
  return grad_clip(std::sqrt(be.sum_squares(grads, n)), max_norm);
}

double learning_rate(const Config::Optim& o, int64_t step, int64_t total) {
  if (step < o.warmup_steps) return o.lr * double(step + 1) / double(o.warmup_steps);
  if (o.schedule == "constant") return o.lr;
  int64_t span = total - 1 - o.warmup_steps;
  if (span <= 0) return o.lr;
  double progress = std::min(1.0, double(step - o.warmup_steps) / double(span));
  return o.min_lr + 0.5 * (1.0 + std::cos(M_PI * progress)) * (o.lr - o.min_lr);
}

template GradClip clip_grad_norm(Backend<float>&, const float*, size_t, double);
template GradClip clip_grad_norm(Backend<double>&, const double*, size_t, double);

}  // namespace lmt
