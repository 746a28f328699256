// Every CPU op's backward against central finite differences in fp64, on fresh random inputs of
// odd sizes; the fp32 instantiation against the fp64 one; the precision policy's rounding.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <numeric>

#include "cpu_ops.hpp"
#include "../helpers.hpp"

using namespace lmt;
using lmt::test::randn;
using lmt::test::rel_err;
using Vec = std::vector<double>;

namespace {

double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Compares `analytic` (d loss / d x) with central differences of loss() at every coordinate of
// x (or `samples` random ones when x is large).
void check_grad(Vec& x, const Vec& analytic, const std::function<double()>& loss,
                const char* what, size_t samples = 60) {
  REQUIRE(x.size() == analytic.size());
  const double h = 1e-6;
  std::uniform_int_distribution<size_t> pick(0, x.size() - 1);
  size_t n = std::min(samples, x.size());
  for (size_t s = 0; s < n; ++s) {
    size_t i = x.size() <= samples ? s : pick(lmt::test::rng());
    double keep = x[i];
    x[i] = keep + h;
    double up = loss();
    x[i] = keep - h;
    double down = loss();
    x[i] = keep;
    double fd = (up - down) / (2 * h);
    INFO(what << "[" << i << "]: analytic " << analytic[i] << ", finite difference " << fd);
    CHECK(std::abs(fd - analytic[i]) <= 1e-6 * (1.0 + std::abs(fd)));
  }
}

}  // namespace

TEST_CASE("linear: dx and dw match finite differences (fp64, odd sizes)") {
  const int64_t M = 7, N = 5, K = 3;
  Vec x = randn<double>(M * K), w = randn<double>(N * K), r = randn<double>(M * N), y(M * N);
  auto loss = [&] { cpu::linear_fwd(x.data(), w.data(), y.data(), M, N, K, Precision::fp64); return dot(y, r); };
  Vec dx(M * K), dw(N * K, 0.0);
  cpu::linear_bwd(x.data(), w.data(), r.data(), dx.data(), dw.data(), M, N, K, Precision::fp64);
  check_grad(x, dx, loss, "dx");
  check_grad(w, dw, loss, "dw");
}

TEST_CASE("linear: the weight gradient is written over whatever dw held") {
  const int64_t M = 3, N = 2, K = 5;
  Vec x = randn<double>(M * K), w = randn<double>(N * K), dy = randn<double>(M * N), dx(M * K);
  Vec dw = randn<double>(N * K), fresh(N * K, 0.0);
  cpu::linear_bwd(x.data(), w.data(), dy.data(), dx.data(), dw.data(), M, N, K, Precision::fp64);
  cpu::linear_bwd(x.data(), w.data(), dy.data(), dx.data(), fresh.data(), M, N, K, Precision::fp64);
  for (size_t i = 0; i < dw.size(); ++i) CHECK(dw[i] == fresh[i]);
}

TEST_CASE("rmsnorm: dx and dg match finite differences") {
  const int64_t rows = 5, d = 11;
  Vec x = randn<double>(rows * d), g = randn<double>(d), r = randn<double>(rows * d);
  Vec y(rows * d), rstd(rows);
  auto loss = [&] { cpu::rmsnorm_fwd(x.data(), g.data(), y.data(), rstd.data(), rows, d, 1e-5); return dot(y, r); };
  loss();
  Vec dx(rows * d), dg(d, 0.0);
  cpu::rmsnorm_bwd(x.data(), g.data(), rstd.data(), r.data(), dx.data(), dg.data(), rows, d);
  check_grad(x, dx, loss, "dx");
  check_grad(g, dg, loss, "dg");
  Vec dx2 = dx, dg2 = dg;  // a second call adds dx again and writes dg again
  cpu::rmsnorm_bwd(x.data(), g.data(), rstd.data(), r.data(), dx2.data(), dg2.data(), rows, d);
  for (size_t i = 0; i < dx.size(); ++i) CHECK(dx2[i] == doctest::Approx(2 * dx[i]).epsilon(1e-12));
  for (size_t i = 0; i < dg.size(); ++i) CHECK(dg2[i] == dg[i]);
  // The forward itself against its definition.
  for (int64_t i = 0; i < rows; ++i) {
    double ms = 0;
    for (int64_t j = 0; j < d; ++j) ms += x[i * d + j] * x[i * d + j] / d;
    CHECK(y[i * d + 3] == doctest::Approx(x[i * d + 3] / std::sqrt(ms + 1e-5) * g[3]).epsilon(1e-12));
  }
}

TEST_CASE("rope: rotates pairs by position-dependent angles; inverse undoes it and is its backward") {
  const int64_t B = 2, T = 9, H = 3, dh = 6, stride = 25;  // stride > H*dh: strided rows
  Vec x = randn<double>(B * T * stride), orig = x;
  cpu::rope(x.data(), B, T, H, dh, stride, 10000.0, false);
  // Position t, pair i of head h: angle t * theta^(-2i/dh).
  int64_t b = 1, t = 7, h = 2, i = 1;
  size_t at = size_t((b * T + t) * stride + h * dh + 2 * i);
  double a = t * std::pow(10000.0, -2.0 * i / dh);
  CHECK(x[at] == doctest::Approx(orig[at] * std::cos(a) - orig[at + 1] * std::sin(a)));
  CHECK(x[at + 1] == doctest::Approx(orig[at] * std::sin(a) + orig[at + 1] * std::cos(a)));
  CHECK(x[size_t(H * dh)] == orig[size_t(H * dh)]);  // columns past the heads are untouched
  // <rope(u), v> == <u, rope^-1(v)>: the inverse is the transpose, hence the backward.
  Vec u = randn<double>(B * T * stride), v = randn<double>(B * T * stride), ru = u, rv = v;
  cpu::rope(ru.data(), B, T, H, dh, stride, 10000.0, false);
  cpu::rope(rv.data(), B, T, H, dh, stride, 10000.0, true);
  CHECK(dot(ru, v) == doctest::Approx(dot(u, rv)).epsilon(1e-12));
  cpu::rope(x.data(), B, T, H, dh, stride, 10000.0, true);
  CHECK(rel_err(x, orig) < 1e-14);
}

TEST_CASE("attention: dqkv matches finite differences; causal; rows of P sum to 1") {
  const int64_t B = 2, T = 7, H = 3, dh = 4, d = H * dh;
  Vec qkv = randn<double>(B * T * 3 * d), r = randn<double>(B * T * d);
  Vec out(B * T * d), probs(B * H * T * T);
  auto loss = [&] {
    cpu::attention_fwd(qkv.data(), out.data(), probs.data(), B, T, H, dh, Precision::fp64);
    return dot(out, r);
  };
  loss();
  for (int64_t i = 0; i < T; ++i) {
    double s = 0;
    for (int64_t j = 0; j < T; ++j) s += probs[size_t(i * T + j)];
    CHECK(s == doctest::Approx(1.0).epsilon(1e-12));
    if (i + 1 < T) CHECK(probs[size_t(i * T + i + 1)] == 0.0);
  }
  // Causality: changing the last token's k and v leaves every earlier output unchanged.
  Vec before = out;
  for (int64_t c = d; c < 3 * d; ++c) qkv[size_t((T - 1) * 3 * d + c)] += 1.0;
  loss();
  for (int64_t i = 0; i < (T - 1) * d; ++i) CHECK(out[size_t(i)] == before[size_t(i)]);
  Vec dqkv(qkv.size());
  cpu::attention_bwd(qkv.data(), probs.data(), r.data(), dqkv.data(), B, T, H, dh, Precision::fp64);
  check_grad(qkv, dqkv, loss, "dqkv", 120);
}

TEST_CASE("swiglu: g = silu(a) * b over rows [b | a]; du matches finite differences") {
  const int64_t rows = 3, f = 7;
  Vec u = randn<double>(rows * 2 * f, 2.0), r = randn<double>(rows * f), g(rows * f);
  cpu::swiglu_fwd(u.data(), g.data(), rows, f);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < f; ++j) {
      const double a = u[size_t(i * 2 * f + f + j)], b = u[size_t(i * 2 * f + j)];
      CHECK(g[size_t(i * f + j)] == doctest::Approx(a / (1 + std::exp(-a)) * b).epsilon(1e-14));
    }
  auto loss = [&] { cpu::swiglu_fwd(u.data(), g.data(), rows, f); return dot(g, r); };
  Vec du(u.size());
  cpu::swiglu_bwd(u.data(), r.data(), du.data(), rows, f);
  check_grad(u, du, loss, "du");
}

TEST_CASE("embedding: gather forward, scatter-add backward with repeated tokens") {
  const int64_t V = 7, d = 5, n = 11;
  auto tokens = lmt::test::rand_tokens(n, int32_t(V));
  tokens[3] = tokens[8];  // a repeat must accumulate
  Vec table = randn<double>(V * d), r = randn<double>(n * d), out(n * d);
  auto loss = [&] { cpu::embedding_fwd(tokens.data(), table.data(), out.data(), n, d); return dot(out, r); };
  Vec dtable(V * d, 0.0);
  cpu::embedding_bwd(tokens.data(), r.data(), dtable.data(), n, d);
  check_grad(table, dtable, loss, "dtable");
}

TEST_CASE("token_order: positions sorted by token, ties in position order") {
  for (auto [n, V] : {std::pair<int64_t, int64_t>{1, 1}, {17, 3}, {301, 50257}, {4099, 97}}) {
    auto tokens = lmt::test::rand_tokens(size_t(n), int32_t(V));
    tokens.front() = int32_t(V - 1), tokens.back() = 0;  // the last and first ids
    std::vector<int32_t> order(static_cast<size_t>(n)), expect(order.size());
    cpu::token_order(tokens.data(), n, V, order.data());
    std::iota(expect.begin(), expect.end(), 0);
    std::stable_sort(expect.begin(), expect.end(),
                     [&](int32_t a, int32_t b) { return tokens[size_t(a)] < tokens[size_t(b)]; });
    CHECK(order == expect);
  }
}

TEST_CASE("cross_entropy: loss against its definition, dlogits against finite differences") {
  const int64_t n = 6, V = 9;
  Vec logits = randn<double>(n * V, 3.0);
  auto targets = lmt::test::rand_tokens(n, int32_t(V));
  double expect = 0;
  for (int64_t i = 0; i < n; ++i) {
    double z = 0;
    for (int64_t v = 0; v < V; ++v) z += std::exp(logits[size_t(i * V + v)]);
    expect += (std::log(z) - logits[size_t(i * V + targets[size_t(i)])]) / n;
  }
  Vec dl(n * V), rows(n);
  auto loss = [&] {
    cpu::cross_entropy<double>(logits.data(), targets.data(), nullptr, rows.data(), n, V, 0);
    double s = 0;
    for (double r : rows) s += r / n;
    return s;
  };
  CHECK(loss() == doctest::Approx(expect).epsilon(1e-13));
  cpu::cross_entropy(logits.data(), targets.data(), dl.data(), rows.data(), n, V, 1.0 / n);
  check_grad(logits, dl, loss, "dlogits");
}

TEST_CASE("fp32 ops track the fp64 reference") {
  const int64_t B = 2, T = 5, H = 2, dh = 6, d = H * dh;
  Vec qkv = randn<double>(B * T * 3 * d), out(B * T * d), P(B * H * T * T);
  std::vector<float> qkv32(qkv.begin(), qkv.end()), out32(out.size()), P32(P.size());
  cpu::attention_fwd(qkv.data(), out.data(), P.data(), B, T, H, dh, Precision::fp64);
  cpu::attention_fwd(qkv32.data(), out32.data(), P32.data(), B, T, H, dh, Precision::fp32);
  CHECK(rel_err(out32, out) < 1e-6);
  Vec x = randn<double>(7 * 33), w = randn<double>(5 * 33), y(7 * 5);
  std::vector<float> x32(x.begin(), x.end()), w32(w.begin(), w.end()), y32(y.size());
  cpu::linear_fwd(x.data(), w.data(), y.data(), 7, 5, 33, Precision::fp64);
  cpu::linear_fwd(x32.data(), w32.data(), y32.data(), 7, 5, 33, Precision::fp32);
  CHECK(rel_err(y32, y) < 1e-6);
}

TEST_CASE("precision: bf16 and tf32 round to nearest even; a bf16 linear is an exact product of rounded operands") {
  auto bits = [](float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; };
  CHECK(round_bf16(1.0f + 0x1.0p-8f) == 1.0f);                       // tie, to even
  CHECK(round_bf16(1.0f + 3 * 0x1.0p-8f) == 1.0f + 0x1.0p-6f);       // tie, to even (up)
  CHECK(round_bf16(1.0f + 0x1.0p-8f + 0x1.0p-20f) == 1.0f + 0x1.0p-7f);  // above the tie
  CHECK((bits(round_bf16(3.14159f)) & 0xffffu) == 0);
  CHECK((bits(round_tf32(3.14159f)) & 0x1fffu) == 0);
  CHECK(round_tf32(1.0f + 0x1.0p-11f) == 1.0f);
  CHECK(std::isinf(round_bf16(INFINITY)));
  const int64_t M = 3, N = 4, K = 9;
  auto x = randn<float>(M * K), w = randn<float>(N * K);
  std::vector<float> y(M * N);
  cpu::linear_fwd(x.data(), w.data(), y.data(), M, N, K, Precision::bf16);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double ref = 0;  // bf16 products are exact in double
      for (int64_t k = 0; k < K; ++k)
        ref += double(round_bf16(x[size_t(m * K + k)])) * double(round_bf16(w[size_t(n * K + k)]));
      CHECK(y[size_t(m * N + n)] == doctest::Approx(ref).epsilon(1e-6));
    }
}
