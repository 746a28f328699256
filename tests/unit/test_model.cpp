// The whole model: its gradients against finite differences (fp64), and logits, loss, every
// gradient and three AdamW steps against the independent PyTorch implementation.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "check.hpp"
#include "cpu_ops.hpp"
#include "../helpers.hpp"
#include "backend.hpp"
#include "model.hpp"
#include "optimizer.hpp"
#include "safetensors.hpp"
#include "zero1.hpp"

using namespace lmt;
using lmt::test::loss_of;

namespace {

Config::Model small_model(Precision precision) {
  Config::Model m;
  m.d_model = 12, m.num_heads = 3, m.d_ff = 20, m.num_layers = 2, m.vocab_size = 11;
  m.context_length = 5;
  m.precision = precision;
  return m;
}

// Random init, plus random RMSNorm gains (init makes them 1, which would hide their gradient).
template <typename T> void randomize(Model<T>& model) {
  model.init_params(lmt::test::rng()());
  std::vector<T> host = model.params_host();
  for (auto& p : model.layout.params)
    if (p.shape.size() == 1)
      for (size_t i = 0; i < p.numel; ++i)
        host[p.offset + i] = T(1.0 + 0.3 * lmt::test::randn<double>(1)[0]);
  model.set_params(host);
}

}  // namespace

TEST_CASE("model: every parameter's gradient matches finite differences (fp64), embeddings "
          "tied or not") {
  Config::Model m = small_model(Precision::fp64);
  m.d_model = 8, m.num_heads = 2, m.d_ff = 12, m.vocab_size = 7;
  m.tie_embeddings = lmt::test::tied_or_not();
  auto cpu = make_cpu_backend<double>();
  Model<double> model(*cpu, m, 2, 5);
  randomize(model);
  double* P = model.params();  // host memory on the CPU backend
  double* G = model.grads();
  auto in = lmt::test::rand_tokens(10, 7), tg = lmt::test::rand_tokens(10, 7);
  model.forward(in.data(), tg.data());
  model.backward();
  std::uniform_int_distribution<size_t> pick;
  for (auto& p : model.layout.params) {
    for (int s = 0; s < 4; ++s) {
      size_t i = p.offset + pick(lmt::test::rng()) % p.numel;
      double keep = P[i], h = 1e-6;
      P[i] = keep + h;
      double up = loss_of(model, in.data(), tg.data());
      P[i] = keep - h;
      double down = loss_of(model, in.data(), tg.data());
      P[i] = keep;
      double fd = (up - down) / (2 * h);
      INFO(p.name << "[" << i - p.offset << "]: analytic " << G[i] << ", fd " << fd);
      CHECK(std::abs(fd - G[i]) <= 1e-7 * (1.0 + std::abs(fd)));
    }
  }
}

TEST_CASE("model: init draws every weight from its normal truncated at 3 std (the embeddings "
          "N(0, 1), or N(0, 1/d) tied; a linear's N(0, 2/(in+out))), and every gain 1") {
  Config::Model m = small_model(Precision::fp64);
  m.d_model = 48, m.num_heads = 4, m.d_ff = 96, m.vocab_size = 1001;
  m.tie_embeddings = lmt::test::tied_or_not();
  auto cpu = make_cpu_backend<double>();
  Model<double> model(*cpu, m, 1, 5);
  model.init_params(lmt::test::rng()());
  const std::vector<double> w = model.params_host();
  // A normal cut at ±3 std keeps 0.9866 of its std.
  constexpr double kCut = 0.98657;
  for (const ParamView& p : model.layout.params) {
    INFO(p.name);
    double sq = 0, most = 0;
    for (size_t i = p.offset; i < p.offset + p.numel; ++i)
      sq += w[i] * w[i], most = std::max(most, std::abs(w[i]));
    const double rms = std::sqrt(sq / double(p.numel));
    if (p.shape.size() == 1) {
      CHECK(rms == 1.0);
      CHECK(most == 1.0);
      continue;
    }
    const double want = p.name != "token_embeddings.weight"
                            ? std::sqrt(2.0 / double(p.shape[0] + p.shape[1]))
                        : m.tie_embeddings ? 1.0 / std::sqrt(double(m.d_model))
                                           : 1.0;
    CHECK(rms == doctest::Approx(kCut * want).epsilon(0.05));  // >= 2304 draws a weight
    CHECK(most <= 3 * want);
    CHECK(most > 2 * want);
  }
}

TEST_CASE("model: backward writes every gradient, whatever the buffer held before") {
  // The weight gradients are written by their ops, not added to a zeroed buffer: a backward over
  // NaN in every element must give what a backward over zeros gives, bit for bit (tied, the
  // head's matmul writes the embeddings' gradient that embedding_bwd then adds to).
  Config::Model m = small_model(Precision::fp64);
  m.tie_embeddings = lmt::test::tied_or_not();
  auto cpu = make_cpu_backend<double>();
  Model<double> model(*cpu, m, 2, 5);
  randomize(model);
  auto in = lmt::test::rand_tokens(10, 11), tg = lmt::test::rand_tokens(10, 11);
  double* G = model.grads();  // host memory on the CPU backend
  std::vector<double> from_zero, from_nan;
  for (double fill : {0.0, std::nan("")}) {
    std::fill(G, G + model.layout.total, fill);
    model.forward(in.data(), tg.data());
    model.backward();
    (fill == 0.0 ? from_zero : from_nan) = model.grads_host();
  }
  for (auto& p : model.layout.params)
    for (size_t i = p.offset; i < p.offset + p.numel; ++i) {
      INFO(p.name << "[" << i - p.offset << "]");
      REQUIRE(from_nan[i] == from_zero[i]);
    }
}

TEST_CASE("model: one holding only some fp32 masters (zero1 under bf16, or no master weights) "
          "computes the loss and every gradient of one holding all, bit for bit") {
  // Its matmuls read the weights' bf16 copy, which set_params made from the same values (tied,
  // the head reads the embeddings' copy, and their fp32 masters are always held).
  Config::Model m = small_model(Precision::bf16);
  m.tie_embeddings = lmt::test::tied_or_not();
  auto cpu = make_cpu_backend<float>();
  const uint64_t seed = lmt::test::rng()();
  auto in = lmt::test::rand_tokens(10, 11), tg = lmt::test::rand_tokens(10, 11);
  Model<float> whole(*cpu, m, 2, 5);
  whole.init_params(seed);
  const double loss = loss_of(whole, in.data(), tg.data());
  whole.backward();
  const std::vector<float> grads = whole.grads_host();
  for (bool master_weights : {true, false})
    for (int world : {1, 2, 3})
      for (int rank = 0; rank < world; ++rank) {
        INFO("rank " << rank << " of " << world << (master_weights ? "" : ", no master weights"));
        const Ranges masters = zero1_masters(whole.layout, world, rank, true, master_weights);
        Model<float> part(*cpu, m, 2, 5, masters);
        CHECK(part.sharded() == (world > 1 || !master_weights));
        part.init_params(seed);
        CHECK(loss_of(part, in.data(), tg.data()) == loss);
        part.backward();
        CHECK(part.grads_host() == grads);
        // Its parameters: the masters it holds, and elsewhere the weights' bf16 values.
        const std::vector<float> all = whole.params_host(), held = part.params_host();
        for (const Run& r : runs(0, all.size(), part.masters))
          for (size_t i = r.begin; i < r.end; ++i)
            REQUIRE(held[i] == (r.inside ? all[i] : round_bf16(all[i])));
      }
}

TEST_CASE("model: a bf16 residual stream (model.residual_dtype) moves the loss and gradients by "
          "its rounding only") {
  Config::Model m = small_model(Precision::bf16);
  auto cpu = make_cpu_backend<float>();
  const uint64_t seed = lmt::test::rng()();
  auto in = lmt::test::rand_tokens(10, 11), tg = lmt::test::rand_tokens(10, 11);
  Model<float> full(*cpu, m, 2, 5);
  m.residual_dtype = Dtype::bf16;
  Model<float> rounded(*cpu, m, 2, 5);
  full.init_params(seed), rounded.init_params(seed);
  const double a = loss_of(full, in.data(), tg.data()), b = loss_of(rounded, in.data(), tg.data());
  CHECK(a != b);  // the stream was rounded where stored
  CHECK(std::abs(a - b) < 1e-2 * a);
  full.backward(), rounded.backward();
  const std::vector<float> ga = full.grads_host(), gb = rounded.grads_host();
  CHECK(ga != gb);
  CHECK(lmt::test::rel_err(gb, ga) < 5e-2);
}

TEST_CASE("cpu backend: the residual stream's gradient in bf16 (rmsnorm_bwd's dx stored so) is "
          "the fp32 update of the same values, rounded") {
  auto cpu = make_cpu_backend<float>();
  const int64_t rows = 7, d = 13;
  auto fresh = [](int64_t n) {
    const std::vector<double> r = lmt::test::randn<double>(n);
    return std::vector<float>(r.begin(), r.end());
  };
  std::vector<float> x = fresh(rows * d), g = fresh(d), dy = fresh(rows * d), dx0 = fresh(rows * d);
  for (float& e : dx0) e = round_bf16(e);  // a bf16 dx holds bf16 values
  std::vector<float> y = fresh(rows * d), rstd = fresh(rows), dg = fresh(d), dg2 = fresh(d);
  cpu->rmsnorm_fwd(x.data(), g.data(), y.data(), rstd.data(), rows, d, 1e-5);
  std::vector<float> full = dx0, rounded = dx0;
  cpu->rmsnorm_bwd(x.data(), g.data(), rstd.data(), dy.data(), full.data(), dg.data(), rows, d,
                   nullptr);
  cpu->rmsnorm_bwd(x.data(), g.data(), rstd.data(), dy.data(), {rounded.data(), Stored::bf16},
                   dg2.data(), rows, d, nullptr);
  CHECK(rounded != full);
  for (size_t i = 0; i < full.size(); ++i) REQUIRE(rounded[i] == round_bf16(full[i]));
  CHECK(dg2 == dg);
}

TEST_CASE("model: gradient groups are reported in backward order and cover the flat buffer") {
  Config::Model m = small_model(Precision::fp64);
  m.tie_embeddings = lmt::test::tied_or_not();
  ParamLayout layout = ParamLayout::build(m);
  CHECK(layout.params.front().name == (m.tie_embeddings ? "ln_final.weight" : "lm_head.weight"));
  CHECK(layout.params.back().name == "token_embeddings.weight");
  CHECK(&layout.lm_head() == &layout.get(m.tie_embeddings ? "token_embeddings.weight"
                                                          : "lm_head.weight"));
  CHECK(layout.index.count("lm_head.weight") == (m.tie_embeddings ? 0 : 1));
  REQUIRE(layout.groups.size() == size_t(m.num_layers + 2));
  size_t at = 0;
  for (auto& g : layout.groups) {
    CHECK(g.begin == at);
    at = g.end;
  }
  CHECK(at == layout.total);
  struct Recorder : GradSync {
    std::vector<int> seen;
    void ready(int g) override { seen.push_back(g); }
    void finish() override { seen.push_back(-1); }
  } rec;
  auto cpu = make_cpu_backend<double>();
  Model<double> model(*cpu, m, 1, 5);
  model.init_params(1);
  auto in = lmt::test::rand_tokens(5, 11);
  model.forward(in.data(), in.data());
  model.backward(&rec);
  CHECK(rec.seen == std::vector<int>{0, 1, 2, 3, -1});
}

template <typename T> void compare_with_torch(Precision precision, double tol, bool tie = false) {
  Config::Model m = small_model(precision);
  m.tie_embeddings = tie;
  const int64_t B = 2, T_ = 5, steps = 3;
  auto cpu = make_cpu_backend<T>();
  Model<T> model(*cpu, m, B, T_);
  randomize(model);
  auto in = lmt::test::rand_tokens(B * T_, 11), tg = lmt::test::rand_tokens(B * T_, 11);
  Config::Optim o;
  o.lr = 1e-2, o.weight_decay = 0.1, o.beta1 = 0.9, o.beta2 = 0.95, o.eps = 1e-8;
  // AdamW's first steps move a weight by about lr * g / (|g| + eps): where a gradient is near
  // zero, fp32's rounding of it (both sides sum in their own order) can flip that sign, and with
  // eps 1e-8 one such weight put the final weights 7e-5 apart (one seed in 40). A larger eps
  // bounds the update's sensitivity to 1 / eps; fp64's rounding is far below either.
  if (precision == Precision::fp32) o.eps = 1e-4;

  lmt::test::TempDir dir;
  SafetensorsWriter w;
  const char* dt = sizeof(T) == 8 ? "F64" : "F32";
  std::vector<T> init = model.params_host();
  for (auto& p : model.layout.params)
    w.add(p.name, dt, p.shape, init.data() + p.offset, p.numel * sizeof(T));
  w.add("batch.inputs", "I32", {B, T_}, in.data(), in.size() * 4);
  w.add("batch.targets", "I32", {B, T_}, tg.data(), tg.size() * 4);
  for (auto [k, v] : std::initializer_list<std::pair<const char*, double>>{
           {"d_model", m.d_model}, {"d_ff", m.d_ff}, {"num_layers", m.num_layers},
           {"num_heads", m.num_heads}, {"vocab_size", m.vocab_size},
           {"context_length", m.context_length}, {"rope_theta", m.rope_theta},
           {"norm_eps", m.norm_eps}, {"lr", o.lr}, {"beta1", o.beta1}, {"beta2", o.beta2},
           {"eps", o.eps}, {"weight_decay", o.weight_decay}, {"steps", steps},
           {"tie_embeddings", tie}})
    w.set(k, strf("%.17g", v));
  w.write(dir.file("in.safetensors"));
  const char* python = getenv("PYTHON") ? getenv("PYTHON") : "/usr/bin/python3";
  auto r = lmt::test::run(strf("%s tests/reference/torch_reference.py check --in %s --out %s", python,
                               dir.file("in.safetensors").c_str(), dir.file("out.safetensors").c_str()));
  INFO(r.output);
  REQUIRE(r.code == 0);
  Safetensors ref = Safetensors::read(dir.file("out.safetensors"));

  const double eval_loss = model.evaluate(in.data(), tg.data());
  CHECK(lmt::test::rel_err(model.logits_host(), ref.get<T>("logits", dt)) < tol);
  double loss = loss_of(model, in.data(), tg.data());
  CHECK(loss == eval_loss);  // the same forward, with the gradient made or not
  model.backward();
  CHECK(std::abs(loss - double(ref.get<T>("loss", dt)[0])) < tol * loss);
  std::vector<T> grads = model.grads_host();
  for (auto& p : model.layout.params) {
    INFO(p.name);
    std::vector<T> g(grads.begin() + long(p.offset), grads.begin() + long(p.offset + p.numel));
    CHECK(lmt::test::rel_err(g, ref.get<T>("grad." + p.name, dt)) < tol);
  }
  AdamW<T> opt(*cpu, model.layout.total);
  auto losses = ref.get<T>("losses", dt);
  for (int s = 0; s < steps; ++s) {
    double l = loss_of(model, in.data(), tg.data());
    CHECK(std::abs(l - double(losses[size_t(s)])) < tol * l);
    model.backward();
    opt.step(model.params(), model.grads(), o.lr, o);
  }
  std::vector<T> final = model.params_host();
  for (auto& p : model.layout.params) {
    INFO(p.name);
    std::vector<T> v(final.begin() + long(p.offset), final.begin() + long(p.offset + p.numel));
    CHECK(lmt::test::rel_err(v, ref.get<T>("final." + p.name, dt)) < tol);
  }
}

TEST_CASE("model: matches the PyTorch reference in fp64 (logits, loss, gradients, 3 AdamW steps)") {
  compare_with_torch<double>(Precision::fp64, 1e-10);
}

TEST_CASE("model: tied embeddings match the PyTorch reference in fp64 (one weight read by the "
          "embedding and the head)") {
  compare_with_torch<double>(Precision::fp64, 1e-10, true);
}

TEST_CASE("model: matches the PyTorch reference in fp32") {
  compare_with_torch<float>(Precision::fp32, 2e-5);
}

TEST_CASE("model: backward with GradWrite::add sums micro-batches' gradients into those of their "
          "union (fp64), every parameter, embeddings tied or not") {
  Config::Model m = small_model(Precision::fp64);
  m.tie_embeddings = lmt::test::tied_or_not();
  auto cpu = make_cpu_backend<double>();
  const int64_t b = 2, k = 3, T = m.context_length, n = b * T;
  Model<double> micro(*cpu, m, b, T), whole(*cpu, m, k * b, T);
  randomize(micro);
  whole.set_params(micro.params_host());
  auto in = lmt::test::rand_tokens(size_t(k * n), 11), tg = lmt::test::rand_tokens(size_t(k * n), 11);
  // The union's mean loss: each micro-batch's gradient divided by k as well.
  for (int64_t i = 0; i < k; ++i) {
    micro.forward(in.data() + i * n, tg.data() + i * n, double(k));
    micro.backward(nullptr, i == 0 ? GradWrite::set : GradWrite::add);
  }
  whole.forward(in.data(), tg.data());
  whole.backward();
  const std::vector<double> a = micro.grads_host(), w = whole.grads_host();
  for (const ParamView& p : micro.layout.params) {
    INFO(p.name);
    std::vector<double> pa(a.begin() + long(p.offset), a.begin() + long(p.offset + p.numel));
    std::vector<double> pw(w.begin() + long(p.offset), w.begin() + long(p.offset + p.numel));
    CHECK(lmt::test::rel_err(pa, pw) < 1e-13);
  }
}
