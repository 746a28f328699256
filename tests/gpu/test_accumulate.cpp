// Gradient accumulation on the GPU (Model::backward with GradWrite::add: the weight gradients'
// matmuls add into them in their epilogue, RMSNorm adds its gain sum, the embedding is not
// zeroed): k micro-batches give the sum of their own gradients and those of their union, and
// replayed as CUDA graphs the same bits. Skipped where no GPU is visible.
#include <doctest/doctest.h>

#include <limits>

#include "backend.hpp"
#include "gpu.hpp"
#include "../helpers.hpp"
#include "small_model.hpp"
#include "model.hpp"

using namespace lmt;
using lmt::test::rel_err;

#ifdef LMTRAIN_CUDA
TEST_CASE("gpu model: k micro-batches added (GradWrite::add) give the sum of their gradients and "
          "the union's; recorded as CUDA graphs, the same bits" *
          doctest::skip(gpu_count() == 0)) {
  Config::Model m = lmt::test::small_gpu_model();
  const int64_t b = 2, k = 3, T = 29, n = b * T;
  auto in = lmt::test::rand_tokens(size_t(k * n), 97), tg = lmt::test::rand_tokens(size_t(k * n), 97);
  const uint64_t seed = lmt::test::rng()();
  // The union on the fp64 CPU: what the accumulated gradients approximate, per precision as the
  // whole-model test's tolerances say.
  auto cpu = make_cpu_backend<double>();
  Config::Model m64 = m;
  m64.precision = Precision::fp64;
  Model<double> ref(*cpu, m64, k * b, T);
  ref.init_params(seed);
  ref.forward(in.data(), tg.data());
  ref.backward();
  const std::vector<double> union_grads = ref.grads_host();
  auto gpu = make_cuda_backend(), gpu2 = make_cuda_backend();  // a backend keeps one model's copy
  for (auto [prec, tol] : {std::pair{Precision::fp32, 1e-4}, {Precision::bf16, 8e-2}})
    for (const char* attention : {"naive", "flash"}) {
      INFO(std::string(name_of(prec)) << " " << std::string(attention));
      m.precision = prec, m.attention = attention;
      Model<float> model(*gpu, m, b, T), replayed(*gpu2, m, b, T);
      model.init_params(seed), replayed.init_params(seed);
      const size_t total = model.layout.total;
      // Each micro-batch's own gradient (set), summed on the host in double.
      std::vector<double> sum(total, 0.0);
      for (int64_t i = 0; i < k; ++i) {
        model.forward(in.data() + i * n, tg.data() + i * n, double(k));
        model.backward();
        const std::vector<float> g = model.grads_host();
        for (size_t j = 0; j < total; ++j) sum[j] += double(g[j]);
      }
      // The same micro-batches added on the GPU, then replayed (recorded after the first pass,
      // whose backwards of both kinds made the first-call choices), into gradients poisoned
      // first: the first backward must overwrite every one.
      const std::vector<float> nan(total, std::numeric_limits<float>::quiet_NaN());
      std::vector<float> launched;
      for (int pass = 0; pass < 3; ++pass) {
        INFO("pass " << pass);  // 0: launched, 1: launched again then recorded, 2: replayed
        Model<float>& mm = pass == 0 ? model : replayed;
        Backend<float>& be = pass == 0 ? *gpu : *gpu2;
        be.upload(mm.grads(), nan.data(), total);
        for (int64_t i = 0; i < k; ++i) {
          mm.forward(in.data() + i * n, tg.data() + i * n, double(k));
          mm.backward(nullptr, i == 0 ? GradWrite::set : GradWrite::add);
        }
        const std::vector<float> g = mm.grads_host();
        if (pass == 0) launched = g;
        else CHECK(g == launched);
        if (pass == 1) replayed.record(double(k));
        CHECK(replayed.replays() == (pass > 0));
      }
      for (const ParamView& p : model.layout.params) {  // a failure names the parameter
        INFO(p.name);
        std::vector<double> acc(launched.begin() + long(p.offset),
                                launched.begin() + long(p.offset + p.numel));
        std::vector<double> own(sum.begin() + long(p.offset), sum.begin() + long(p.offset + p.numel));
        std::vector<double> whole(union_grads.begin() + long(p.offset),
                                  union_grads.begin() + long(p.offset + p.numel));
        // The fp32 running sum against the host's sum of the same fp32 gradients (a set and an
        // add matmul may sum K in other orders), and the union in fp64.
        CHECK(rel_err(acc, own) < 1e-5);
        CHECK(rel_err(acc, whole) < tol);
      }
    }
}
#endif
