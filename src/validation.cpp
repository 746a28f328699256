// Validation's held-out batches, split over the ranks and summed in a fixed order
// (validation.hpp).
#include "validation.hpp"

#include <algorithm>

namespace lmt {

template <typename T>
std::vector<double> held_out_losses(Model<T>& model, const TokenSource& source, int64_t batches,
                                    int rank, int world, int64_t first, int64_t count) {
  const int64_t B = model.B, T_ = model.T_, n = batches * B;
  std::vector<double> losses(size_t(count), 0.0);
  std::vector<int32_t> inputs(size_t(B * T_)), targets(size_t(B * T_));
  const int64_t mine = first + ((rank - first) % world + world) % world;  // its first slot here
  for (int64_t j = mine; j < first + count; j += world) {
    for (int64_t b = 0; b < B; ++b)
      source.held_out(j * B + b, n, T_, &inputs[size_t(b * T_)], &targets[size_t(b * T_)]);
    losses[size_t(j - first)] = model.evaluate(inputs.data(), targets.data());
  }
  return losses;
}

double add_slots(double sum, const std::vector<double>& losses) {
  for (double x : losses) sum += x;
  return sum;
}

template <typename T>
double validation_loss(Model<T>& model, const TokenSource& source, int64_t batches,
                       Communicator& host) {
  double sum = 0;
  for (int64_t first = 0; first < batches; first += kValidationChunk) {
    std::vector<double> losses = held_out_losses(model, source, batches, host.rank(), host.size(),
                                                 first, std::min(kValidationChunk, batches - first));
    host.all_reduce(losses.data(), losses.size(), DType::f64);
    sum = add_slots(sum, losses);
  }
  return sum / double(batches);
}

template std::vector<double> held_out_losses(Model<float>&, const TokenSource&, int64_t, int, int,
                                             int64_t, int64_t);
template std::vector<double> held_out_losses(Model<double>&, const TokenSource&, int64_t, int, int,
                                             int64_t, int64_t);
template double validation_loss(Model<float>&, const TokenSource&, int64_t, Communicator&);
template double validation_loss(Model<double>&, const TokenSource&, int64_t, Communicator&);

}  // namespace lmt
