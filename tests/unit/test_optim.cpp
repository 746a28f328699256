// Learning-rate schedule, gradient clipping, and AdamW's first step from its definition.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "../helpers.hpp"
#include "adamw_bf16.hpp"
#include "comm.hpp"  // to_bf16, from_bf16
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

// --- bf16 moments (optim.state_dtype = "bf16", adamw_bf16.hpp) ---

namespace {

// The gap between the two bf16 values around x (8 significant bits: 2^(e-8) for |x| in
// [2^(e-1), 2^e)).
double bf16_gap(double x) {
  int e = 0;
  std::frexp(std::abs(x), &e);
  return std::ldexp(1.0, std::max(e, -125) - 8);
}

// A value stored in bf16, rounded (to nearest or stochastically) from one computed in T: one
// bf16 gap from that, which lies within a few of T's ulps of the terms it sums (`terms`: their
// magnitudes' sum) from the exact value; where the terms nearly cancel, that is more than a gap
// of the small result.
template <typename T> bool bf16_near(double stored, double exact, double terms) {
  const double err = 8 * std::numeric_limits<T>::epsilon() * terms;
  return std::abs(stored - exact) <= bf16_gap(std::abs(exact) + err) + err;
}

std::vector<double> moments_of(const std::vector<char>& bytes) {
  std::vector<double> out(bytes.size() / 2);
  for (size_t i = 0; i < out.size(); ++i) {
    uint16_t b;
    std::memcpy(&b, bytes.data() + 2 * i, 2);
    out[i] = bf16_to_float(b);
  }
  return out;
}

uint64_t fresh_seed() { return lmt::test::rng()(); }

}  // namespace

TEST_CASE_TEMPLATE("adamw bf16 state: each step matches an fp64 reference, the moments within "
                   "one bf16 gap", T, float, double) {
  Config::Optim o;
  o.weight_decay = 0.1, o.beta1 = 0.9, o.beta2 = 0.95;
  const double lr = 1e-2, gs = 0.7;
  auto cpu = make_cpu_backend<T>();
  for (size_t n : {size_t(1), size_t(7), size_t(1001)}) {
    INFO(n);
    auto p = lmt::test::randn<T>(n);
    AdamW<T> opt(*cpu, n, Stored::bf16, fresh_seed(), /*first=*/size_t(lmt::test::rng()() % 1000));
    CHECK(opt.state().m.size() == 2 * n);  // 2 bytes a moment
    size_t up = 0, down = 0;               // roundings above and below the exact moment
    for (int step = 1; step <= 5; ++step) {
      const auto g = lmt::test::randn<T>(n, 0.1 * step);
      const OptimizerState<T> before = opt.state();
      const std::vector<double> m0 = moments_of(before.m), v0 = moments_of(before.v);
      const std::vector<T> p0 = p;
      opt.step(p.data(), g.data(), lr, o, gs);
      const OptimizerState<T> after = opt.state();
      const std::vector<double> m1 = moments_of(after.m), v1 = moments_of(after.v);
      const double bc1 = 1 - std::pow(o.beta1, step), bc2 = 1 - std::pow(o.beta2, step);
      for (size_t i = 0; i < n; ++i) {
        const double gi = double(g[i]) * gs;
        const double m = o.beta1 * m0[i] + (1 - o.beta1) * gi;
        const double v = o.beta2 * v0[i] + (1 - o.beta2) * gi * gi;
        const double pe = double(p0[i]) * (1 - lr * o.weight_decay) -
                          lr / bc1 * m / (std::sqrt(v) / std::sqrt(bc2) + o.eps);
        // The step reads the unrounded moments (fp32 or fp64 arithmetic) ...
        const double tol = (sizeof(T) == 4 ? 2e-6 : 1e-13) * (std::abs(pe) + lr);
        CHECK(std::abs(double(p[i]) - pe) <= tol);
        // ... and stores them rounded to a bf16 neighbour of T's.
        CHECK(bf16_near<T>(m1[i], m, o.beta1 * std::abs(m0[i]) + (1 - o.beta1) * std::abs(gi)));
        CHECK(bf16_near<T>(v1[i], v, v));  // v's terms are positive: their sum is v
        up += m1[i] > m, down += m1[i] < m;
      }
    }
    if (n > 100) {  // both directions occur: not round-toward-anything
      CHECK(up > n);
      CHECK(down > n);
    }
  }
}

TEST_CASE("stochastic rounding to bf16 is unbiased over elements and over steps, and only ever "
          "picks a neighbour, with each of the hash's three fields (m's, v's, the weight's)") {
  const uint64_t seed = fresh_seed();
  const int N = 1 << 16;
  std::vector<float> xs = {1.0f + 0.5f / 128, -(1.0f + 0.1f / 128), 3.0f - 0.9f / 64, 1e-20f,
                           1.0f};  // the last exact: never moves
  for (float x : lmt::test::randn<float>(8, 1e-3)) xs.push_back(x);
  for (float x : xs) {
    INFO(x);
    const double gap = bf16_gap(x);
    // The neighbours: x truncated to bf16 (toward zero) and one gap further out.
    uint32_t u;
    std::memcpy(&u, &x, 4);
    const double down = bf16_to_float(uint16_t(u >> 16)), out = down + std::copysign(gap, x);
    const double p = std::abs(double(x) - down) / gap;  // the chance of rounding out
    // bits 0-15 (m's), 16-31 (v's), 32-47 (a weight's without a master): across elements at one
    // step, and across steps at one element
    for (int field = 0; field < 3; ++field)
      for (int across_steps = 0; across_steps < 2; ++across_steps) {
        INFO("bits from " << 16 * field << (across_steps ? ", across steps" : ", across elements"));
        double sum = 0;
        bool neighbours = true;
        for (int i = 0; i < N; ++i) {
          const uint64_t r = across_steps ? rounding_bits(rounding_key(seed, i + 1), 12345)
                                          : rounding_bits(rounding_key(seed, 7), uint64_t(i));
          const double y = bf16_to_float(round_bf16_stochastic(x, uint32_t(r >> (16 * field))));
          neighbours &= y == down || y == out;
          sum += y;
        }
        CHECK(neighbours);
        // The mean's error against x: 6 standard deviations of a mean of N draws of a
        // two-valued variable (round-to-nearest would miss by up to gap/2).
        const double sd = gap * std::sqrt(p * (1 - p) / N);
        CHECK(std::abs(sum / N - double(x)) <= 6 * sd + 1e-12 * gap);
      }
  }
}

TEST_CASE("adamw bf16 state: v tracks its moving average where round-to-nearest would stall") {
  // g = 1 everywhere, beta2 = 0.999: v_t = 1 - 0.999^t. Each step adds 0.001 (1 - v), below half
  // a bf16 gap once v passes about 0.25, so rounding to nearest would freeze v there.
  Config::Optim o;
  o.beta2 = 0.999;
  const size_t n = 4096;
  const int steps = 2000;
  auto cpu = make_cpu_backend<float>();
  std::vector<float> p(n, 1.0f), g(n, 1.0f);
  AdamW<float> opt(*cpu, n, Stored::bf16, fresh_seed());
  for (int t = 0; t < steps; ++t) opt.step(p.data(), g.data(), 0.0, o);
  const std::vector<double> v = moments_of(opt.state().v);
  double mean = 0;
  for (double x : v) mean += x / double(n);
  const double exact = 1 - std::pow(0.999, steps);
  CHECK(mean == doctest::Approx(exact).epsilon(0.005));
  float nearest = 0;  // the same average kept with round-to-nearest
  for (int t = 0; t < steps; ++t) nearest = round_bf16(std::fma(0.999f, nearest, 0.001f));
  CHECK(nearest < 0.5 * exact);  // the case separates the two schemes
}

TEST_CASE("adamw bf16 state: a range with its flat-buffer place, whole or in pieces, rounds as "
          "the whole buffer does, bit for bit (ZeRO-1's shards)") {
  Config::Optim o;
  o.weight_decay = 0.1;
  const size_t n = 1001, cut = 400;
  const uint64_t seed = fresh_seed();
  auto cpu = make_cpu_backend<float>();
  auto p = lmt::test::randn<float>(n);
  std::vector<float> q = p, r = p;
  AdamW<float> whole(*cpu, n, Stored::bf16, seed), head(*cpu, cut, Stored::bf16, seed),
      tail(*cpu, n - cut, Stored::bf16, seed, cut), pieces(*cpu, n, Stored::bf16, seed);
  for (int step = 0; step < 3; ++step) {
    const auto g = lmt::test::randn<float>(n);
    whole.step(p.data(), g.data(), 1e-2, o);
    head.step(q.data(), g.data(), 1e-2, o);
    tail.step(q.data() + cut, g.data() + cut, 1e-2, o);
    const AdamWStep s = pieces.next_step(1e-2, o);
    for (auto [at, len] : {std::pair<size_t, size_t>{0, 333}, {333, 1}, {334, 466}, {800, 201}})
      pieces.update(r.data(), g.data(), at, len, s);
  }
  CHECK(p == q);
  CHECK(p == r);
  OptimizerState<float> w = whole.state(), h = head.state(), t = tail.state(), pc = pieces.state();
  h.m.insert(h.m.end(), t.m.begin(), t.m.end());
  h.v.insert(h.v.end(), t.v.begin(), t.v.end());
  CHECK(w.m == h.m);
  CHECK(w.v == h.v);
  CHECK(w.m == pc.m);
  CHECK(w.v == pc.v);
  // Another seed draws other roundings.
  AdamW<float> other(*cpu, n, Stored::bf16, seed + 1);
  std::vector<float> p2 = lmt::test::randn<float>(n), g2 = lmt::test::randn<float>(n), p3 = p2;
  AdamW<float> same(*cpu, n, Stored::bf16, seed);
  other.step(p2.data(), g2.data(), 1e-2, o);
  same.step(p3.data(), g2.data(), 1e-2, o);
  CHECK(other.state().m != same.state().m);
}

// --- weights without fp32 masters (optim.master_weights = false, adamw_bf16.hpp) ---

namespace {

// A flat buffer of `total` parameters on the CPU backend of which only `masters` have fp32
// values (the rest NaN, never to be read or written): the others are the weights' bf16 copy.
struct BareWeights {
  std::unique_ptr<Backend<float>> be = make_cpu_backend<float>();
  std::vector<float> p;
  BareWeights(size_t total, const Ranges& masters) : p(total, NAN) {
    const std::vector<float> init = lmt::test::randn<float>(total);
    be->set_weights(p.data(), total, masters);
    for (auto [b, e] : masters) std::copy(init.begin() + long(b), init.begin() + long(e), p.begin() + long(b));
    for (size_t i = 0; i < total; ++i) copy()[i] = to_bf16(init[i]);
  }
  ~BareWeights() { be->forget_weights(p.data()); }
  uint16_t* copy() { return static_cast<uint16_t*>(be->weights_bf16()); }
};

// Moments' bytes as values: bf16 or fp32 ones.
std::vector<double> values_of(const std::vector<char>& bytes, Stored stored) {
  if (stored == Stored::bf16) return moments_of(bytes);
  std::vector<float> x(bytes.size() / 4);
  std::memcpy(x.data(), bytes.data(), bytes.size());
  return {x.begin(), x.end()};
}

}  // namespace

TEST_CASE("adamw without master weights: a weight's step matches an fp64 reference within one "
          "bf16 gap, its moments as their dtype keeps them; those with masters step as before") {
  Config::Optim o;
  o.weight_decay = 0.1, o.beta1 = 0.9, o.beta2 = 0.95;
  const double lr = 1e-2, gs = 0.7;
  for (Stored state : {Stored::full, Stored::bf16})
    for (size_t n : {size_t(1), size_t(7), size_t(1001)}) {
      INFO(std::string(state_dtype_name(state)) << " moments, " << n << " elements");
      // The range is [first, first + n) of a flat buffer with masters in two runs that cut it.
      const size_t first = size_t(lmt::test::rng()() % 100), total = first + n + 5;
      const Ranges masters{{0, first + n / 3}, {first + n / 2, first + n / 2 + n / 5}};
      BareWeights w(total, masters);
      const uint64_t seed = fresh_seed();
      AdamW<float> opt(*w.be, n, state, seed, first, masters);
      // The same elements through the path with masters: the reference for theirs.
      std::vector<float> q = w.p;
      auto be2 = make_cpu_backend<float>();
      AdamW<float> with(*be2, n, state, seed, first);
      std::vector<Run> parts = runs(first, first + n, masters);
      size_t up = 0, down = 0, bare = 0;  // roundings of weights above and below the exact value
      for (int step = 1; step <= 5; ++step) {
        const auto g = lmt::test::randn<float>(n, 0.1 * step);
        const OptimizerState<float> before = opt.state();
        const std::vector<uint16_t> w0(w.copy(), w.copy() + total);
        opt.step(w.p.data() + first, g.data(), lr, o, gs);
        with.step(q.data() + first, g.data(), lr, o, gs);
        const OptimizerState<float> after = opt.state(), ref = with.state();
        const std::vector<double> m0 = values_of(before.m, state), v0 = values_of(before.v, state);
        const std::vector<double> m1s = values_of(after.m, state), v1s = values_of(after.v, state);
        const double bc1 = 1 - std::pow(o.beta1, step), bc2 = 1 - std::pow(o.beta2, step);
        for (const Run& r : parts)
          for (size_t j = r.begin; j < r.end; ++j) {
            const size_t i = j - first;  // in the range
            if (r.inside) {  // a master: its bits as the path with masters writes them ...
              REQUIRE(std::memcmp(&w.p[j], &q[j], 4) == 0);
              REQUIRE(w.copy()[j] == to_bf16(w.p[j]));  // ... and its copy rounded to nearest
              continue;
            }
            REQUIRE(std::isnan(w.p[j]));  // no fp32 value is read or written
            const double gi = double(g[i]) * gs, p0 = from_bf16(w0[j]);
            const double m = o.beta1 * m0[i] + (1 - o.beta1) * gi;
            const double v = o.beta2 * v0[i] + (1 - o.beta2) * gi * gi;
            const double denom = std::sqrt(v) / std::sqrt(bc2) + o.eps;
            const double pe = p0 * (1 - lr * o.weight_decay) - lr / bc1 * m / denom;
            const double m_terms = o.beta1 * std::abs(m0[i]) + (1 - o.beta1) * std::abs(gi);
            // The weight lands on a bf16 neighbour of fp32's update ...
            const double p1 = from_bf16(w.copy()[j]);
            CHECK(bf16_near<float>(p1, pe, std::abs(p0) + lr / bc1 * m_terms / denom));
            up += p1 > pe, down += p1 < pe, ++bare;
            // ... and the moments are fp32's (to its rounding) or a bf16 neighbour of theirs.
            const double m1 = m1s[i], v1 = v1s[i];
            if (state == Stored::bf16) {
              CHECK(bf16_near<float>(m1, m, m_terms));
              CHECK(bf16_near<float>(v1, v, v));
            } else {
              // (relative to the sum's terms: m may be a difference of close values)
              CHECK(std::abs(m1 - m) <= 1e-6 * m_terms);
              CHECK(std::abs(v1 - v) <= 1e-6 * v);
            }
          }
        // The moments of elements with masters are the path with masters' too.
        for (const Run& r : parts) {
          const size_t eb = state_elem_bytes<float>(state), a = (r.begin - first) * eb;
          if (!r.inside) continue;
          CHECK(std::memcmp(after.m.data() + a, ref.m.data() + a, (r.end - r.begin) * eb) == 0);
          CHECK(std::memcmp(after.v.data() + a, ref.v.data() + a, (r.end - r.begin) * eb) == 0);
        }
      }
      CHECK(bare > 0);
      if (n > 100) {  // both directions occur: not round-toward-anything
        CHECK(up > bare / 4);
        CHECK(down > bare / 4);
      }
    }
}

TEST_CASE("adamw without master weights: a weight's stochastic rounding is unbiased, the mean of "
          "many draws within a statistical bound of the exact update") {
  // One step from w = 1, zero moments, g = 1: the exact update is lr / (1 + eps) below 1 (m and v
  // bias-corrected are g and g^2), between the bf16 neighbours 1 - 2^-8 and 1.
  Config::Optim o;
  const double lr = 1e-3;
  const AdamWStep s{lr, o.beta1, o.beta2, o.eps, 0.0, 1, 1.0, fresh_seed()};
  const AdamWBf16Scalars<float> k = adamw_bf16_scalars<float>(s);
  const double exact = 1 - lr / (1 + o.eps), gap = std::ldexp(1.0, -8);
  const double p = (exact - (1 - gap)) / gap;  // the chance of rounding up to 1
  const int N = 1 << 16;
  for (Stored state : {Stored::full, Stored::bf16})
    for (int across_steps = 0; across_steps < 2; ++across_steps) {
      INFO(std::string(state_dtype_name(state)) << " moments, "
                                               << (across_steps ? "across steps" : "across elements"));
      double sum = 0;
      bool neighbours = true;
      for (int i = 0; i < N; ++i) {
        AdamWBf16Scalars<float> ki = k;  // across steps: step i + 1's draws at one element
        if (across_steps) ki.key = rounding_key(s.seed, i + 1);
        const uint64_t index = across_steps ? 4321 : uint64_t(i);
        uint16_t w = to_bf16(1.0f);
        if (state == Stored::bf16) {
          uint16_t m = 0, v = 0;
          adamw_bf16_weight_element(w, 1.0f, m, v, index, ki);
        } else {
          float m = 0, v = 0;
          adamw_bf16_weight_element(w, 1.0f, m, v, index, ki);
        }
        const double y = from_bf16(w);
        neighbours &= y == 1.0 || y == 1 - gap;
        sum += y;
      }
      CHECK(neighbours);
      // 6 standard deviations of a mean of N two-valued draws; round-to-nearest would stay at 1,
      // lr away from the exact value, far outside the bound.
      const double sd = gap * std::sqrt(p * (1 - p) / N);
      CHECK(std::abs(sum / N - exact) <= 6 * sd);
      CHECK(6 * sd < 0.05 * lr);  // the bound separates the schemes
    }
}
