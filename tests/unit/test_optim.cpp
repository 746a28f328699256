// Learning-rate schedule, gradient clipping, and AdamW's first step from its definition.
#include <doctest/doctest.h>

#include <cmath>

#include "../helpers.hpp"
#include "optimizer.hpp"

using namespace lmt;

TEST_CASE("schedule: linear warm-up, then cosine from lr to min_lr at the last step") {
  Config::Optim o;
  o.lr = 1e-3, o.min_lr = 1e-4, o.warmup_steps = 4, o.schedule = "cosine";
  CHECK(learning_rate(o, 0, 20) == doctest::Approx(0.25e-3));
  CHECK(learning_rate(o, 3, 20) == doctest::Approx(1e-3));
  CHECK(learning_rate(o, 4, 20) == doctest::Approx(1e-3));
  CHECK(learning_rate(o, 19, 20) == doctest::Approx(1e-4));
  double mid = learning_rate(o, 11, 20);
  CHECK(mid < 1e-3);
  CHECK(mid > 1e-4);
  for (int s = 4; s < 19; ++s) CHECK(learning_rate(o, s + 1, 20) <= learning_rate(o, s, 20));
  o.schedule = "constant";
  CHECK(learning_rate(o, 19, 20) == doctest::Approx(1e-3));
}

TEST_CASE("clip_grad_norm: the factor to the max norm, 1 for small gradients or no clipping") {
  auto g = lmt::test::randn<double>(101, 3.0);
  double norm = 0;
  for (double x : g) norm += x * x;
  norm = std::sqrt(norm);
  auto cpu = make_cpu_backend<double>();
  for (double max : {norm * 2, 0.0}) {
    const GradClip c = clip_grad_norm(*cpu, g.data(), g.size(), max);
    CHECK(c.norm == doctest::Approx(norm));
    CHECK(c.scale == 1.0);
  }
  const GradClip c = clip_grad_norm(*cpu, g.data(), g.size(), 1.0);
  CHECK(c.norm == doctest::Approx(norm));
  double after = 0;
  for (double x : g) after += (x * c.scale) * (x * c.scale);
  CHECK(std::sqrt(after) == doctest::Approx(1.0).epsilon(1e-5));
}

TEST_CASE("adamw: a step with grad_scale s is the step on the gradients times s, bit for bit") {
  Config::Optim o;
  o.weight_decay = 0.1;
  auto cpu = make_cpu_backend<float>();
  const size_t n = 37;
  auto p = lmt::test::randn<float>(n), g = lmt::test::randn<float>(n, 5.0), p0 = p, q = p, gs = g;
  const double s = 0.3;
  for (float& x : gs) x *= float(s);
  AdamW<float> a(*cpu, n), b(*cpu, n);
  for (int step = 0; step < 3; ++step) {  // the moments carry the scaled gradients too
    a.step(p.data(), g.data(), 1e-2, o, s);
    b.step(q.data(), gs.data(), 1e-2, o);
  }
  CHECK(p == q);
  CHECK(p != p0);
}

TEST_CASE("adamw: the first step moves each weight by lr * sign(g), after decoupled decay") {
  Config::Optim o;
  o.weight_decay = 0.1, o.eps = 1e-12;
  const double lr = 1e-2;
  auto p = lmt::test::randn<double>(9), g = lmt::test::randn<double>(9), p0 = p;
  auto cpu = make_cpu_backend<double>();
  AdamW<double> opt(*cpu, p.size());
  opt.step(p.data(), g.data(), lr, o);
  for (size_t i = 0; i < p.size(); ++i)  // m/sqrt(v) after bias correction is g/|g|
    CHECK(p[i] == doctest::Approx(p0[i] * (1 - lr * 0.1) - lr * (g[i] > 0 ? 1 : -1)).epsilon(1e-9));
  CHECK(opt.t == 1);
}
