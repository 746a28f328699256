// Validation's held-out batches, split over the ranks and summed in a fixed order
// (validation.hpp).
#include "validation.hpp"

namespace lmt {

template <typename T>
std::vector<double> held_out_losses(Model<T>& model, const TokenSource& source, int64_t batches,
                                    int rank, int world) {
  const int64_t B = model.B, T_ = model.T_, n = batches * B;
  std::vector<double> losses(size_t(batches), 0.0);
  std::vector<int32_t> inputs(size_t(B * T_)), targets(size_t(B * T_));
  for (int64_t j = rank; j < batches; j += world) {
    for (int64_t b = 0; b < B; ++b)
      source.held_out(j * B + b, n, T_, &inputs[size_t(b * T_)], &targets[size_t(b * T_)]);
    losses[size_t(j)] = model.evaluate(inputs.data(), targets.data());
  }
  return losses;
}

double held_out_mean(const std::vector<double>& losses) {
  double sum = 0;
  for (double x : losses) sum += x;
  return sum / double(losses.size());
}

template <typename T>
double validation_loss(Model<T>& model, const TokenSource& source, int64_t batches,
                       Communicator& host) {
  std::vector<double> losses = held_out_losses(model, source, batches, host.rank(), host.size());
  host.all_reduce(losses.data(), losses.size(), DType::f64);
  return held_out_mean(losses);
}

template std::vector<double> held_out_losses(Model<float>&, const TokenSource&, int64_t, int, int);
template std::vector<double> held_out_losses(Model<double>&, const TokenSource&, int64_t, int,
                                             int);
template double validation_loss(Model<float>&, const TokenSource&, int64_t, Communicator&);
template double validation_loss(Model<double>&, const TokenSource&, int64_t, Communicator&);

}  // namespace lmt
