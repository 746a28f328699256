// Validation's held-out loss: the same bits whatever the number of ranks that split its batches,
// and the mean of every held-out window's loss (each window alone through an fp64 model).
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "../helpers.hpp"
#include "backend.hpp"
#include "data.hpp"
#include "model.hpp"
#include "validation.hpp"

using namespace lmt;

namespace {

template <typename T> void check_validation(Precision precision, double tol) {
  Config::Model m;
  m.d_model = 12, m.num_heads = 3, m.d_ff = 20, m.num_layers = 2, m.vocab_size = 11;
  m.context_length = 6;
  m.precision = precision;
  const int64_t B = 3, T_ = 6, batches = 5;
  const uint64_t seed = lmt::test::rng()();
  auto src = make_markov_source(m.vocab_size, 3, seed);
  auto cpu = make_cpu_backend<T>();
  Model<T> model(*cpu, m, B, T_);
  model.init_params(seed);

  const std::vector<double> one = held_out_losses(model, *src, batches, 0, 1, 0, batches);
  const double val = add_slots(0, one) / double(batches);
  for (double x : one) CHECK(x > 0);
  // Any world size, more ranks than batches too: each rank fills its own slots (batch j on rank
  // j % world), zero elsewhere; their sum over ranks is the one rank's vector, bit for bit.
  for (int world : {2, 3, 4, 7}) {
    INFO("world " << world);
    std::vector<double> sum(size_t(batches), 0.0);
    for (int rank = world - 1; rank >= 0; --rank) {  // in another order than the batches
      // In two pieces, as validation_loss takes them (kValidationChunk at a time): slots 0, 1
      // and 2 .. 4, the second starting on a slot of another rank than the first's.
      std::vector<double> mine = held_out_losses(model, *src, batches, rank, world, 0, 2);
      const std::vector<double> rest = held_out_losses(model, *src, batches, rank, world, 2, 3);
      mine.insert(mine.end(), rest.begin(), rest.end());
      for (int64_t j = 0; j < batches; ++j) {
        if (j % world != rank) CHECK(mine[size_t(j)] == 0.0);
        sum[size_t(j)] += mine[size_t(j)];
      }
    }
    CHECK(sum == one);
    CHECK(add_slots(add_slots(0, {sum.begin(), sum.begin() + 2}), {sum.begin() + 2, sum.end()}) /
              double(batches) == val);
  }

  // The reference: every held-out window alone (batch 1) through an fp64 model holding the same
  // parameters, the mean of their losses in long double.
  Config::Model m64 = m;
  m64.precision = Precision::fp64;
  auto cpu64 = make_cpu_backend<double>();
  Model<double> ref(*cpu64, m64, 1, T_);
  const std::vector<T> params = model.params_host();
  ref.set_params(std::vector<double>(params.begin(), params.end()));
  std::vector<int32_t> in(static_cast<size_t>(T_)), tg(static_cast<size_t>(T_));
  long double total = 0;
  for (int64_t k = 0; k < batches * B; ++k) {
    src->held_out(k, batches * B, T_, in.data(), tg.data());
    total += ref.evaluate(in.data(), tg.data());
  }
  const double want = double(total / (batches * B));
  CHECK(std::abs(val - want) < tol * want);
}

}  // namespace

TEST_CASE("validation: the held-out loss has the same bits on 1 to 7 ranks and is every window's "
          "mean loss (fp64)") {
  check_validation<double>(Precision::fp64, 1e-12);
}

TEST_CASE("validation: the same under fp32 and bf16") {
  check_validation<float>(Precision::fp32, 1e-5);
  check_validation<float>(Precision::bf16, 2e-2);
}
