// The CUDA backend against the CPU reference: every op forward and backward on fresh random
// inputs of odd sizes, per precision, with outputs poisoned (NaN) first so an unwritten element
// fails; then the whole model's loss and gradients, and training steps that track the CPU.
// Skipped where no GPU is visible.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "backend.hpp"
#include "comm.hpp"
#include "gpu.hpp"
#include "../helpers.hpp"
#include "small_model.hpp"
#include "model.hpp"
#include "optimizer.hpp"
#include "plan.hpp"
#include "zero1.hpp"

using namespace lmt;
using lmt::test::loss_of;
using lmt::test::randn;
using lmt::test::rel_err;

#ifdef LMTRAIN_CUDA
namespace {

using Vec = std::vector<double>;

// The same values on the fp64 CPU backend (host vectors) and the CUDA backend (device arrays).
struct Pair {
  Backend<float>& gpu;
  std::vector<std::unique_ptr<BackendArray<float>>> arrays;

  // A device copy of host values (rounded to float: the reference sees the same inputs).
  float* up(const Vec& host) {
    std::vector<float> f(host.begin(), host.end());
    arrays.push_back(std::make_unique<BackendArray<float>>(gpu, f.size(), MemTag::workspace));
    gpu.upload(arrays.back()->data(), f.data(), f.size());
    return arrays.back()->data();
  }
  // A device output filled with NaN: elements the op fails to write stay NaN.
  float* poisoned(size_t n) { return up(Vec(n, std::numeric_limits<double>::quiet_NaN())); }
  Vec down(const float* p, size_t n) {
    std::vector<float> f(n);
    gpu.download(f.data(), p, n);
    return Vec(f.begin(), f.end());
  }
  // n values stored packed in bf16 (Backend::bf16_elems): to the device from host values
  // (rounded to nearest even), and back.
  float* up16(const Vec& host) {
    std::vector<uint16_t> h(host.size() + 1);
    for (size_t i = 0; i < host.size(); ++i) h[i] = to_bf16(float(host[i]));
    arrays.push_back(std::make_unique<BackendArray<float>>(gpu, size_t(gpu.bf16_elems(int64_t(host.size()))), MemTag::workspace));
    gpu.upload_bytes(arrays.back()->data(), h.data(), host.size() * 2);
    return arrays.back()->data();
  }
  float* poisoned16(size_t n) { return up16(Vec(n, std::numeric_limits<double>::quiet_NaN())); }
  Vec down16(const float* p, size_t n) {
    std::vector<uint16_t> h(n);
    gpu.download_bytes(h.data(), p, n * 2);
    Vec out(n);
    for (size_t i = 0; i < n; ++i) out[i] = from_bf16(h[i]);
    return out;
  }
};

// Each element of `packed` is the bf16 rounding (nearest even) of the same element of `full`.
bool rounds_of(const Vec& packed, const Vec& full) {
  for (size_t i = 0; i < full.size(); ++i)
    if (packed[i] != double(from_bf16(to_bf16(float(full[i]))))) return false;
  return true;
}

// Each element of `got` is a bf16 value next to the same element of the fp64 `exact` (its
// rounding down or up: within one bf16 spacing at exact's magnitude, plus `floor` and 1e-5 of
// the element's `scale`, where given, for the fp32 arithmetic before the rounding where a sum
// cancels to near zero; scale: the size of the terms whose sum that is).
bool bf16_next_to(const Vec& got, const Vec& exact, double floor, const Vec& scale = {}) {
  for (size_t i = 0; i < exact.size(); ++i) {
    int e = 0;
    std::frexp(exact[i], &e);
    const double slack = floor + (scale.empty() ? 0.0 : 1e-5 * scale[i]);
    if (got[i] != double(from_bf16(to_bf16(float(got[i])))) ||
        std::abs(got[i] - exact[i]) > std::ldexp(1.0, e - 8) + slack)
      return false;
  }
  return true;
}

View<float> packed(float* p) { return {p, Stored::bf16}; }  // a tensor stored in bf16

Vec as_float(Vec v) {  // the reference's inputs: exactly the floats the GPU gets
  for (auto& x : v) x = double(float(x));
  return v;
}

// Tolerance of ||gpu - ref|| / ||ref|| when the reference rounds operands to the same format.
// bf16 operands are rounded by our kernel exactly as the reference rounds them, so only the
// order of fp32 sums differs; cuBLAS's own fp32 -> TF32 rounding is not always to nearest, so
// tf32 gets up to a TF32 ulp.
double tol(Precision p) { return p == Precision::tf32 ? 2e-3 : 2e-5; }

const Precision kPolicies[] = {Precision::fp32, Precision::tf32, Precision::bf16};

// One linear problem at precision p: random x, w, dy and the reference y, dx, dw, computed in
// fp32 storage with the same operand rounding, accumulated in double.
struct LinearProblem {
  static constexpr int64_t M = 37, N = 29, K = 53;
  Vec x = as_float(randn<double>(M * K)), w = as_float(randn<double>(N * K));
  Vec dy = as_float(randn<double>(M * N));
  Vec y = Vec(M * N), dx = Vec(M * K), dw = as_float(randn<double>(N * K));  // dw is written over

  explicit LinearProblem(Precision p) {
    std::vector<float> xf(x.begin(), x.end()), wf(w.begin(), w.end()), dyf(dy.begin(), dy.end());
    for (auto* v : {&xf, &wf, &dyf})
      for (auto& e : *v) e = round_to(p, e);
    Vec xr(xf.begin(), xf.end()), wr(wf.begin(), wf.end()), dyr(dyf.begin(), dyf.end());
    cpu::linear_fwd(xr.data(), wr.data(), y.data(), M, N, K, Precision::fp64);
    cpu::linear_bwd(xr.data(), wr.data(), dyr.data(), dx.data(), dw.data(), M, N, K, Precision::fp64);
  }
};

}  // namespace

TEST_CASE("gpu linear: y, dx and dw match the CPU reference per precision, with a residual" *
          doctest::skip(gpu_count() == 0)) {
  auto gpu = make_cuda_backend();
  Pair g{*gpu, {}};
  constexpr int64_t M = LinearProblem::M, N = LinearProblem::N, K = LinearProblem::K;
  SUBCASE("forward and backward, per precision") {
    for (Precision p : kPolicies) {
      INFO("precision " << name_of(p));
      const LinearProblem r(p);
      float *gx = g.up(r.x), *gw = g.up(r.w), *gy = g.poisoned(M * N), *gdx = g.poisoned(M * K);
      float* gdw = g.poisoned(N * K);  // written, not added to: unwritten elements stay NaN
      gpu->linear_fwd(gx, gw, gy, M, N, K, p, nullptr);
      gpu->linear_bwd(gx, gw, g.up(r.dy), gdx, gdw, M, N, K, p);
      CHECK(rel_err(g.down(gy, M * N), r.y) < tol(p));
      CHECK(rel_err(g.down(gdx, M * K), r.dx) < tol(p));
      CHECK(rel_err(g.down(gdw, N * K), r.dw) < tol(p));
    }
  }
  SUBCASE("the residual in the epilogue, per precision") {
    for (Precision p : kPolicies) {
      INFO("precision " << name_of(p));
      const LinearProblem r(p);
      // Into another buffer (the residual is left as it was): y + res against the reference's sum.
      Vec res = as_float(randn<double>(M * N));
      float *gres = g.up(res), *gyr = g.poisoned(M * N);
      gpu->linear_fwd(g.up(r.x), g.up(r.w), gyr, M, N, K, p, gres);
      Vec yr = r.y;
      for (size_t i = 0; i < yr.size(); ++i) yr[i] += res[i];
      CHECK(rel_err(g.down(gyr, M * N), yr) < tol(p));
      CHECK(g.down(gres, M * N) == res);
    }
  }
  const Precision p = Precision::bf16;
  const LinearProblem r(p);
  float *gw = g.up(r.w), *gx16 = g.up16(r.x), *gdy16 = g.up16(r.dy);
  SUBCASE("bf16: x and dy stored in bf16 by their producers give the same results") {
    float *gy16 = g.poisoned(M * N), *gdx16 = g.poisoned(M * K), *gdw16 = g.poisoned(N * K);
    gpu->linear_fwd(packed(gx16), gw, gy16, M, N, K, p, nullptr);
    gpu->linear_bwd(packed(gx16), gw, packed(gdy16), gdx16, gdw16, M, N, K, p);
    CHECK(rel_err(g.down(gy16, M * N), r.y) < tol(p));
    CHECK(rel_err(g.down(gdx16, M * K), r.dx) < tol(p));
    CHECK(rel_err(g.down(gdw16, N * K), r.dw) < tol(p));
  }
  SUBCASE("bf16: y and dx stored in bf16, rounded") {
    float *gyb = g.poisoned16(M * N), *gdxb = g.poisoned16(M * K), *gdwb = g.poisoned(N * K);
    gpu->linear_fwd(packed(gx16), gw, packed(gyb), M, N, K, p, nullptr);
    gpu->linear_bwd(packed(gx16), gw, packed(gdy16), packed(gdxb), gdwb, M, N, K, p);
    CHECK(bf16_next_to(g.down16(gyb, M * N), r.y, 1e-6));
    CHECK(bf16_next_to(g.down16(gdxb, M * K), r.dx, 1e-6));
    CHECK(rel_err(g.down(gdwb, N * K), r.dw) < tol(p));
  }
  SUBCASE("bf16: a residual stream in bf16 (model.residual_dtype): the residual and y stored so") {
    // The epilogue sums the product and the residual's bf16 values in fp32 and rounds once; the
    // residual is left as it was.
    Vec res = as_float(randn<double>(M * N, 4.0));
    float *gres16 = g.up16(res), *gyb = g.poisoned16(M * N);
    const Vec res16 = g.down16(gres16, M * N);
    gpu->linear_fwd(packed(gx16), gw, packed(gyb), M, N, K, p, gres16);
    Vec sum = r.y, terms = r.y;
    for (size_t i = 0; i < sum.size(); ++i)
      sum[i] += res16[i], terms[i] = std::abs(r.y[i]) + std::abs(res16[i]);
    CHECK(bf16_next_to(g.down16(gyb, M * N), sum, 1e-6, terms));
    CHECK(g.down16(gres16, M * N) == res16);
  }
}

TEST_CASE("gpu rmsnorm, rope, swiglu, embedding match the CPU reference" *
          doctest::skip(gpu_count() == 0)) {
  auto gpu = make_cuda_backend();
  Pair g{*gpu, {}};
  SUBCASE("rmsnorm forward and backward") {
    // The backward's blocks take consecutive rows, at most kRmsnormDgChunks blocks: a row a
    // block, and many rows a block; d a multiple of 4 (four values a load) and not; rows of
    // four-value loads a warp a row (2, 4, 6, 8 loads a lane; backward with a bf16 dx, below;
    // blocks with rows for some of their warps only), rows of up to 1024 loads (a load a thread,
    // kept in registers) and wider ones (several a thread, the sums in shared memory, past 48 KiB
    // of it); dy in fp32 and in bf16.
    for (auto [rows, d] : {std::pair<int64_t, int64_t>{33, 77}, {1001, 45}, {57, 1036},
                           {5003, 36}, {77, 500}, {131, 764}, {1029, 1020}, {3, 12292},
                           {5, 12301}}) {
      INFO(rows << " rows");
      Vec x = as_float(randn<double>(rows * d)), w = as_float(randn<double>(d));
      Vec dy = as_float(randn<double>(rows * d)), dg0 = as_float(randn<double>(d));
      Vec dx0 = as_float(randn<double>(rows * d));  // dx accumulates; dg is written over dg0
      Vec y(rows * d), rstd(rows), dx = dx0, dg = dg0;
      cpu::rmsnorm_fwd(x.data(), w.data(), y.data(), rstd.data(), rows, d, 1e-5);
      cpu::rmsnorm_bwd(x.data(), w.data(), rstd.data(), dy.data(), dx.data(), dg.data(), rows, d);
      float *gx = g.up(x), *gw = g.up(w), *gyv = g.poisoned(rows * d), *gr = g.poisoned(rows);
      float *gdx = g.up(dx0), *gdg = g.poisoned(d);
      gpu->rmsnorm_fwd(gx, gw, gyv, gr, rows, d, 1e-5);
      gpu->rmsnorm_bwd(gx, gw, gr, g.up(dy), gdx, gdg, rows, d, nullptr);
      CHECK(rel_err(g.down(gyv, rows * d), y) < 2e-6);
      float* gy16 = g.poisoned16(rows * d);  // y for bf16 matmuls: the fp32 y, rounded
      gpu->rmsnorm_fwd(gx, gw, packed(gy16), gr, rows, d, 1e-5);
      CHECK(rounds_of(g.down16(gy16, rows * d), g.down(gyv, rows * d)));
      CHECK(rel_err(g.down(gr, rows), rstd) < 2e-6);
      CHECK(rel_err(g.down(gdx, rows * d), dx) < 2e-6);
      CHECK(rel_err(g.down(gdg, d), dg) < 2e-6);
      // dx also rounded to bf16 for the next matmul: the fp32 dx of the same pass, rounded.
      float *gdx2 = g.up(dx0), *gdx16 = g.poisoned16(rows * d);
      gpu->rmsnorm_bwd(gx, gw, gr, g.up(dy), gdx2, gdg, rows, d, gdx16);
      CHECK(g.down(gdx2, rows * d) == g.down(gdx, rows * d));
      CHECK(rounds_of(g.down16(gdx16, rows * d), g.down(gdx2, rows * d)));
      // dy stored in bf16, as the matmuls write it under bf16: the bits of the fp32 dy path on
      // the same rounded values.
      float* gdy16 = g.up16(dy);
      const Vec dyr = g.down16(gdy16, rows * d);
      float *gdx3 = g.up(dx0), *gdx4 = g.up(dx0), *gdg3 = g.poisoned(d), *gdg4 = g.poisoned(d);
      gpu->rmsnorm_bwd(gx, gw, gr, g.up(dyr), gdx3, gdg3, rows, d, nullptr);
      gpu->rmsnorm_bwd(gx, gw, gr, packed(gdy16), gdx4, gdg4, rows, d, nullptr);
      CHECK(g.down(gdx4, rows * d) == g.down(gdx3, rows * d));
      CHECK(g.down(gdg4, d) == g.down(gdg3, d));
      // x stored in bf16 (a bf16 residual stream, model.residual_dtype): the bits of the fp32 x
      // path on the same rounded values, forward and backward.
      float* gx16 = g.up16(x);
      float* gxr = g.up(g.down16(gx16, rows * d));
      float *gya = g.poisoned(rows * d), *gyb = g.poisoned(rows * d);
      float *gra = g.poisoned(rows), *grb = g.poisoned(rows);
      gpu->rmsnorm_fwd(gxr, gw, gya, gra, rows, d, 1e-5);
      gpu->rmsnorm_fwd(packed(gx16), gw, gyb, grb, rows, d, 1e-5);
      CHECK(g.down(gyb, rows * d) == g.down(gya, rows * d));
      CHECK(g.down(grb, rows) == g.down(gra, rows));
      float *gdx5 = g.up(dx0), *gdx6 = g.up(dx0), *gdg5 = g.poisoned(d), *gdg6 = g.poisoned(d);
      gpu->rmsnorm_bwd(gxr, gw, gra, packed(gdy16), gdx5, gdg5, rows, d, nullptr);
      gpu->rmsnorm_bwd(packed(gx16), gw, gra, packed(gdy16), gdx6, gdg6, rows, d, nullptr);
      CHECK(g.down(gdx6, rows * d) == g.down(gdx5, rows * d));
      CHECK(g.down(gdg6, d) == g.down(gdg5, d));
      // And its gradient dx in bf16 (read, updated in fp32, stored rounded; a warp a row where
      // the loads allow): against fp64 on the same bf16 x, dy and dx, each dx a bf16 neighbour of
      // the exact sum.
      float* gdx16b = g.up16(dx0);
      const Vec xr = g.down16(gx16, rows * d);
      Vec ref_dx = g.down16(gdx16b, rows * d), ref_dg(d), ref_y(rows * d), ref_r(rows);
      cpu::rmsnorm_fwd(xr.data(), w.data(), ref_y.data(), ref_r.data(), rows, d, 1e-5);
      cpu::rmsnorm_bwd(xr.data(), w.data(), ref_r.data(), dyr.data(), ref_dx.data(),
                       ref_dg.data(), rows, d);
      float* gdg8 = g.poisoned(d);
      gpu->rmsnorm_bwd(packed(gx16), gw, gra, packed(gdy16), packed(gdx16b), gdg8, rows, d,
                       nullptr);
      CHECK(bf16_next_to(g.down16(gdx16b, rows * d), ref_dx, 1e-5));
      CHECK(rel_err(g.down(gdg8, d), ref_dg) < 2e-6);
    }
  }
  SUBCASE("rope on strided rows (its inverse: the attention tests, on dq and dk)") {
    // Rows wider than the heads; dh 10, stride 97 one pair a thread, dh 12, stride 40 two.
    for (auto [dh, stride] : {std::pair<int64_t, int64_t>{10, 97}, {12, 40}}) {
      INFO("dh " << dh << ", stride " << stride);
      const int64_t B = 2, T = 37, H = 3;
      Vec x = as_float(randn<double>(B * T * stride)), ref = x;
      float* gx = g.up(x);
      float* gx16 = g.up16(x);
      cpu::rope(ref.data(), B, T, H, dh, stride, 10000.0, false);
      gpu->rope(gx, B, T, H, dh, stride, 10000.0);
      CHECK(rel_err(g.down(gx, x.size()), ref) < 2e-6);
      // In bf16: each rotated value the rounding of the fp32 kernel's on the same bf16 inputs, the
      // columns past the heads untouched.
      float* gr = g.up(g.down16(gx16, x.size()));
      gpu->rope(gr, B, T, H, dh, stride, 10000.0);
      gpu->rope(packed(gx16), B, T, H, dh, stride, 10000.0);
      CHECK(rounds_of(g.down16(gx16, x.size()), g.down(gr, x.size())));
    }
  }
  SUBCASE("swiglu forward and backward over rows [b | a]") {
    // f a multiple of 4 (four elements a thread) and not (one at a time).
    for (auto [rows, f] : {std::pair<int64_t, int64_t>{37, 28}, {29, 27}}) {
      INFO("rows " << rows << ", f " << f);
      const int64_t n = rows * f, nu = 2 * n;
      Vec u = as_float(randn<double>(nu, 2.0)), dgr = as_float(randn<double>(n));
      Vec out(n), du(nu);
      cpu::swiglu_fwd(u.data(), out.data(), rows, f);
      cpu::swiglu_bwd(u.data(), dgr.data(), du.data(), rows, f);
      float *gu = g.up(u), *go = g.poisoned(n), *gdu = g.poisoned(nu);
      gpu->swiglu_fwd(gu, go, rows, f);
      gpu->swiglu_bwd(gu, g.up(dgr), gdu, rows, f);
      CHECK(rel_err(g.down(go, n), out) < 2e-6);
      CHECK(rel_err(g.down(gdu, nu), du) < 2e-6);
      // All in bf16: u and dg stored rounded, the results the fp32 kernels' on those values,
      // rounded to nearest even.
      Vec u16 = u, dg16 = dgr;
      for (Vec* v : {&u16, &dg16})
        for (double& x : *v) x = double(from_bf16(to_bf16(float(x))));
      float *gu16 = g.up(u16), *go_r = g.poisoned(n), *gdu_r = g.poisoned(nu);
      gpu->swiglu_fwd(gu16, go_r, rows, f);
      gpu->swiglu_bwd(gu16, g.up(dg16), gdu_r, rows, f);
      float *pu = g.up16(u), *go16 = g.poisoned16(n), *gdu16 = g.poisoned16(nu);
      gpu->swiglu_fwd(packed(pu), packed(go16), rows, f);
      gpu->swiglu_bwd(packed(pu), packed(g.up16(dgr)), packed(gdu16), rows, f);
      CHECK(rounds_of(g.down16(go16, n), g.down(go_r, n)));
      CHECK(rounds_of(g.down16(gdu16, nu), g.down(gdu_r, nu)));
    }
  }
  SUBCASE("embedding gather and deterministic scatter-add") {
    const int64_t V = 50, d = 19, n = 301;
    auto tok = lmt::test::rand_tokens(n, int32_t(V));
    Vec table = as_float(randn<double>(V * d)), dout = as_float(randn<double>(n * d));
    Vec out(n * d), dtable(V * d, 0.0);
    cpu::embedding_fwd(tok.data(), table.data(), out.data(), n, d);
    cpu::embedding_bwd(tok.data(), dout.data(), dtable.data(), n, d);
    BackendArray<float, int32_t> gt(*gpu, size_t(n), MemTag::activations), go_(*gpu, size_t(n), MemTag::activations);
    std::vector<int32_t> order(static_cast<size_t>(n));
    cpu::token_order(tok.data(), n, V, order.data());
    gpu->upload_bytes(gt.data(), tok.data(), size_t(n) * 4);
    gpu->upload_bytes(go_.data(), order.data(), size_t(n) * 4);
    float *go = g.poisoned(n * d), *gdt = g.up(Vec(V * d, 0.0));
    gpu->embedding_fwd(gt.data(), g.up(table), go, n, d);
    float* gdo = g.up(dout);
    gpu->embedding_bwd(gt.data(), go_.data(), gdo, gdt, n, d);
    CHECK(rel_err(g.down(go, n * d), out) == 0.0);
    float* go16 = g.poisoned16(n * d);  // into a bf16 residual stream: the rows, rounded
    gpu->embedding_fwd(gt.data(), g.up(table), packed(go16), n, d);
    CHECK(rounds_of(g.down16(go16, n * d), out));
    Vec first = g.down(gdt, V * d);
    CHECK(rel_err(first, dtable) < 2e-6);
    gpu->zero_bytes(gdt, size_t(V * d) * 4);
    gpu->embedding_bwd(gt.data(), go_.data(), gdo, gdt, n, d);
    CHECK(g.down(gdt, V * d) == first);  // bit-identical when repeated
    // dout in bf16 (a bf16 residual stream's gradient): the bits of the fp32 path on the same
    // rounded values.
    float* gdo16 = g.up16(dout);
    float *gdt_r = g.up(Vec(V * d, 0.0)), *gdt16 = g.up(Vec(V * d, 0.0));
    gpu->embedding_bwd(gt.data(), go_.data(), g.up(g.down16(gdo16, n * d)), gdt_r, n, d);
    gpu->embedding_bwd(gt.data(), go_.data(), packed(gdo16), gdt16, n, d);
    CHECK(g.down(gdt16, V * d) == g.down(gdt_r, V * d));
  }
}

TEST_CASE("gpu W2's backward into SwiGLU's (swiglu_linear_bwd): du next to the fp64 reference, "
          "dW2 and (bar near-ties) du as the separate ops give them, repeatable" *
          doctest::skip(gpu_count() == 0)) {
  auto gpu = make_cuda_backend();
  Pair g{*gpu, {}};
  const Precision p = Precision::bf16;
  // Sizes that are not multiples of the fused kernel's 128 x 128 tiles or its steps of 64 along
  // d; more tiles than SMs (each block takes several, its two consumers in turn), fewer and more
  // steps than its four stages.
  struct Shape {
    int64_t M, d, f;
  };
  for (const Shape s : {Shape{333, 200, 264}, Shape{8200, 72, 1032}, Shape{4100, 136, 1032},
                        Shape{1000, 776, 136}}) {
    const int64_t M = s.M, d = s.d, f = s.f;
    INFO("M " << M << ", d " << d << ", f " << f);
    // dy, u and the activations g stored in bf16 by their producers; W2 in fp32 (rounded by
    // the matmuls as a weight is).
    float *gdy = g.up16(randn<double>(M * d)), *gu = g.up16(randn<double>(M * 2 * f, 2.0));
    float *gg = g.up16(randn<double>(M * f)), *gw = g.up(as_float(randn<double>(d * f)));
    const Vec dy = g.down16(gdy, M * d), u = g.down16(gu, M * 2 * f);
    Vec w = g.down(gw, d * f);
    for (double& x : w) x = double(from_bf16(to_bf16(float(x))));
    // The reference: dg = dy W2 in fp64, then SwiGLU's backward da = dg ca, db = dg cb. The
    // GPU rounds dg to bf16 (2^-8 of it) and each result (2^-8 more); besides, its fp32 sum of
    // dg errs by up to about 1e-4 of the sum of the terms' sizes (d <= 776 of 2^-24 each), and
    // its fp32 ca and cb by 1e-6 of the sizes of their terms, where they cancel.
    Vec exact(M * 2 * f), slack(M * 2 * f);
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < f; ++n) {
        double dg = 0, terms = 0;
        for (int64_t k = 0; k < d; ++k)
          dg += dy[m * d + k] * w[k * f + n], terms += std::abs(dy[m * d + k] * w[k * f + n]);
        const double a = u[m * 2 * f + f + n], b = u[m * 2 * f + n], sig = 1 / (1 + std::exp(-a));
        const double ca = b * sig * (1 + a * (1 - sig)), cb = a * sig;
        const double ca_terms = std::abs(b) * sig * (1 + std::abs(a) * (1 - sig));
        const double err = 1e-4 * terms + 1e-6 * std::abs(dg);
        exact[m * 2 * f + f + n] = dg * ca, slack[m * 2 * f + f + n] = err * ca_terms;
        exact[m * 2 * f + n] = dg * cb, slack[m * 2 * f + n] = err * std::abs(cb);
      }
    float *gdu = g.poisoned16(M * 2 * f), *gdw = g.poisoned(d * f);
    gpu->swiglu_linear_bwd(packed(gg), gw, packed(gdy), packed(gu), packed(g.poisoned16(M * f)),
                           packed(gdu), gdw, M, d, f, p, GradWrite::set);
    const Vec du = g.down16(gdu, M * 2 * f);
    size_t worst = 0;  // the element furthest past its bound
    double excess = -INFINITY;
    for (size_t i = 0; i < du.size(); ++i) {
      const double x = std::abs(du[i] - exact[i]) -
                       (std::ldexp(std::abs(exact[i]), -7) * 1.01 + slack[i] + 1e-30);
      if (std::isnan(excess)) break;  // an unwritten element (NaN): the worst there is
      if (!(x <= excess)) worst = i, excess = x;
    }
    INFO("element " << worst << ": " << du[worst] << " against " << exact[worst] << ", slack "
                    << slack[worst]);
    CHECK(excess <= 0);
    // The separate ops: linear_bwd writes dg (rounded to bf16), swiglu_bwd reads it.
    float *gdg2 = g.poisoned16(M * f), *gdu2 = g.poisoned16(M * 2 * f), *gdw2 = g.poisoned(d * f);
    gpu->linear_bwd(packed(gg), gw, packed(gdy), packed(gdg2), gdw2, M, d, f, p);
    gpu->swiglu_bwd(packed(gu), packed(gdg2), packed(gdu2), M, f);
    CHECK(g.down(gdw, d * f) == g.down(gdw2, d * f));
    // The two matmuls sum in different orders: dg rounds differently only where its fp32 value
    // lies within their difference of a bf16 rounding boundary.
    const Vec du2 = g.down16(gdu2, M * 2 * f);
    size_t same = 0;
    for (size_t i = 0; i < du.size(); ++i) same += du[i] == du2[i];
    CHECK(double(same) >= 0.999 * double(du.size()));
    // Bit for bit again.
    float* gdu3 = g.poisoned16(M * 2 * f);
    gpu->swiglu_linear_bwd(packed(gg), gw, packed(gdy), packed(gu), packed(g.poisoned16(M * f)),
                           packed(gdu3), gdw, M, d, f, p, GradWrite::set);
    CHECK(g.down16(gdu3, M * 2 * f) == du);
  }
}

TEST_CASE("gpu classifier: the loss and the in-place gradient match the fp64 reference (fp32 and "
          "bf16 logits, odd vocabularies, extreme rows), loss-only keeps the logits, repeats "
          "bit for bit" * doctest::skip(gpu_count() == 0)) {
  auto gpu = make_cuda_backend();
  for (int64_t V : {50257, 10007, 1024, 3}) {
    for (bool bf16 : {false, true}) {
      INFO("V " << V << (bf16 ? " bf16" : " fp32"));
      Pair g{*gpu, {}};
      const int64_t n = V > 2000 ? 13 : 37;
      Vec z = randn<double>(n * V, 3.0);
      auto tg = lmt::test::rand_tokens(n, int32_t(V));
      tg[0] = 0, tg[1] = int32_t(V - 1);  // the first and the last id
      for (int64_t v = 0; v < V; ++v) {
        z[size_t(2 * V + v)] = -1e4;  // row 2: certain of its target (loss ~ 0)
        z[size_t(3 * V + v)] = v % 2 ? 1e4 : -1e4;  // row 3: +-1e4, its target at -1e4
      }
      z[size_t(2 * V + tg[2])] = 1e4;
      tg[3] = 0;
      for (auto& x : z) x = bf16 ? double(from_bf16(to_bf16(float(x)))) : double(float(x));
      const double scale = 1.0 / double(n);
      Vec dz(z.size()), rows(static_cast<size_t>(n));
      cpu::cross_entropy(z.data(), tg.data(), dz.data(), rows.data(), n, V, scale);

      BackendArray<float, int32_t> gt(*gpu, size_t(n), MemTag::activations);
      gpu->upload_bytes(gt.data(), tg.data(), size_t(n) * 4);
      auto up = [&](const Vec& v) { return bf16 ? g.up16(v) : g.up(v); };
      auto down = [&](const float* p, size_t k) { return bf16 ? g.down16(p, k) : g.down(p, k); };
      auto run = [&](double s) {  // a fresh copy of z in place: row losses, then what z became
        float *gz = up(z), *grows = g.poisoned(size_t(n));
        gpu->cross_entropy(View<float>(gz, bf16 ? Stored::bf16 : Stored::full), gt.data(), grows,
                           n, V, s);
        return std::pair{g.down(grows, size_t(n)), down(gz, z.size())};
      };
      auto [grows, gdz] = run(scale);
      // Each row to fp32's rounding, row 2's ~0 too (no cancellation in (max - z_t) + log s).
      for (int64_t i = 0; i < n; ++i)
        CHECK(std::abs(grows[size_t(i)] - rows[size_t(i)]) <=
              2e-6 * (1 + std::abs(rows[size_t(i)])));
      CHECK(rel_err(gdz, dz) < (bf16 ? 4e-3 : 2e-6));  // bf16: the gradient rounded to 8 bits
      CHECK(run(scale) == std::pair{grows, gdz});  // bit for bit when repeated
      auto [rows_only, kept] = run(0);  // the loss only: the same rows, the logits untouched
      CHECK(rows_only == grows);
      CHECK(kept == z);
    }
  }
}

TEST_CASE("gpu attention (naive): out, dq, dk, dv match the CPU reference per precision, q and k "
          "also rotated by RoPE first, dq and dk rotated back" * doctest::skip(gpu_count() == 0)) {
  auto gpu = make_cuda_backend();
  const int64_t B = 2, T = 37, H = 3, dh = 8, d = H * dh;
  for (Precision p : kPolicies)
    for (double theta : {0.0, 500.0}) {
      INFO("precision " << name_of(p) << ", rope_theta " << theta);
      Pair g{*gpu, {}};
      Vec qkv = as_float(randn<double>(B * T * 3 * d)), dout = as_float(randn<double>(B * T * d));
      std::vector<float> qf(qkv.begin(), qkv.end()), df(dout.begin(), dout.end());
      Vec out(B * T * d), probs(B * H * T * T), dqkv(qkv.size());
      // Reference in float with the same policy (operands rounded), against double inputs.
      std::vector<float> outf(out.size()), pf(probs.size()), dqf(qkv.size());
      if (theta != 0) cpu::rope(qf.data(), B, T, 2 * H, dh, 3 * d, theta, false);  // q and k
      cpu::attention_fwd(qf.data(), outf.data(), pf.data(), B, T, H, dh, p);
      cpu::attention_bwd(qf.data(), pf.data(), df.data(), dqf.data(), B, T, H, dh, p);
      if (theta != 0) cpu::rope(dqf.data(), B, T, 2 * H, dh, 3 * d, theta, true);  // dq and dk
      // The GPU saves P at key <= query only, row after row: T(T+1)/2 values a head.
      const size_t tri = size_t(T * (T + 1) / 2);
      REQUIRE(gpu->attention_saved(B, T, H, dh, AttentionImpl::naive) == int64_t(B * H * tri));
      // Under bf16, qkv, out, dout and dqkv are stored in bf16.
      const bool b16 = p == Precision::bf16;
      auto up = [&](const Vec& v) { return b16 ? g.up16(v) : g.up(v); };
      auto poisoned = [&](size_t n) { return b16 ? g.poisoned16(n) : g.poisoned(n); };
      auto down = [&](const float* x, size_t n) { return b16 ? g.down16(x, n) : g.down(x, n); };
      float *gq = up(qkv), *go = poisoned(out.size()), *gp = g.poisoned(B * H * tri);
      float* gdq = poisoned(qkv.size());
      gpu->attention_fwd(gq, go, gp, B, T, H, dh, p, AttentionImpl::naive, theta);
      gpu->attention_bwd(gq, go, gp, up(dout), gdq, B, T, H, dh, p, AttentionImpl::naive, theta);
      double t = p == Precision::fp32 ? 1e-5 : 2e-2;
      CHECK(rel_err(down(go, out.size()), outf) < t);
      const Vec packed = g.down(gp, B * H * tri);
      Vec gprobs(probs.size());  // zero above the diagonal, as the reference
      for (size_t r = 0, at = 0; r < size_t(B * H * T); ++r)
        for (size_t j = 0; j <= r % size_t(T); ++j) gprobs[r * size_t(T) + j] = packed[at++];
      CHECK(rel_err(gprobs, pf) < t);
      CHECK(rel_err(down(gdq, qkv.size()), dqf) < t);
    }
}

TEST_CASE("gpu adamw and reductions match the CPU" * doctest::skip(gpu_count() == 0)) {
  auto gpu = make_cuda_backend();
  Pair g{*gpu, {}};
  const size_t n = 100003;
  const Vec gv = as_float(randn<double>(n));
  float* gg = g.up(gv);
  SUBCASE("adamw, the gradients read times a clipping factor") {
    Vec pv = as_float(randn<double>(n)), m = as_float(randn<double>(n, 0.1)), v(n);
    for (auto& e : v) e = double(float(std::abs(randn<double>(1)[0]) * 0.01));
    std::vector<float> pf(pv.begin(), pv.end()), gf(gv.begin(), gv.end()), mf(m.begin(), m.end()), vf(v.begin(), v.end());
    float *gp = g.up(pv), *gm = g.up(m), *gvv = g.up(v);
    AdamWStep s{1e-3, 0.9, 0.95, 1e-8, 0.1, 7, 0.37};
    cpu::adamw(pf.data(), gf.data(), mf.data(), vf.data(), n, s);
    gpu->adamw(gp, gg, gm, gvv, n, s);
    CHECK(rel_err(g.down(gp, n), pf) < 1e-6);
    CHECK(rel_err(g.down(gm, n), mf) < 1e-6);
    CHECK(rel_err(g.down(gvv, n), vf) < 1e-6);
  }
  SUBCASE("sum and sum_squares, deterministic") {
    double sum = 0, sq = 0;
    for (double x : gv) sum += x, sq += x * x;
    CHECK(gpu->sum(gg, n) == doctest::Approx(sum).epsilon(1e-12));
    CHECK(gpu->sum_squares(gg, n) == doctest::Approx(sq).epsilon(1e-12));
    CHECK(gpu->sum(gg, n) == gpu->sum(gg, n));
    for (size_t from : {1, 2, 4}) {  // misaligned for 16-byte loads, then aligned, other tails
      INFO(from);
      double part = 0, part_sq = 0;
      for (size_t i = from; i < n; ++i) part += gv[i], part_sq += gv[i] * gv[i];
      CHECK(gpu->sum(gg + from, n - from) == doctest::Approx(part).epsilon(1e-12));
      CHECK(gpu->sum_squares(gg + from, n - from) == doctest::Approx(part_sq).epsilon(1e-12));
    }
  }
}

TEST_CASE("gpu adamw with bf16 moments writes the CPU reference's bits: parameters, moments and "
          "the weights' bf16 copy, at a place in the flat buffer" * doctest::skip(gpu_count() == 0)) {
  // Both run adamw_bf16.hpp's element code (IEEE ops, explicit fmas, the same hash): equal, not
  // close. Several steps, so that moments the GPU rounded are read back by it.
  auto gpu = make_cuda_backend();
  Pair g{*gpu, {}};
  const size_t n = 100003, index = 12345;
  const Vec pv = as_float(randn<double>(n)), gv = as_float(randn<double>(n));
  std::vector<float> pf(pv.begin(), pv.end()), gf(gv.begin(), gv.end());
  std::vector<uint16_t> m16(n), v16(n);
  const Vec mr = randn<double>(n, 0.1), vr = randn<double>(n, 0.01);
  for (size_t i = 0; i < n; ++i)
    m16[i] = to_bf16(float(mr[i])), v16[i] = to_bf16(float(std::abs(vr[i])));
  BackendArray<float, uint16_t> gm(*gpu, n, MemTag::optimizer), gv16(*gpu, n, MemTag::optimizer);
  gpu->upload_bytes(gm.data(), m16.data(), n * 2);
  gpu->upload_bytes(gv16.data(), v16.data(), n * 2);
  float *gp = g.up(pv), *gg = g.up(gv);
  gpu->set_weights(gp, n, {{0, n}});
  gpu->weights_bf16();  // the copy exists: AdamW over all the weights writes it in its pass
  AdamWStep s{1e-3, 0.9, 0.95, 1e-8, 0.1, 7, 0.37, lmt::test::rng()()};
  for (int step = 0; step < 3; ++step, ++s.t) {
    cpu::adamw_bf16(pf.data(), gf.data(), m16.data(), v16.data(), n, index, s);
    gpu->adamw_bf16(gp, gg, gm.data(), gv16.data(), n, index, s);
  }
  // The whole buffer went four elements a thread (and its last 3 one a thread); a range off the
  // 16-byte grid, as a ZeRO-1 piece may start, goes one element a thread.
  for (int step = 0; step < 2; ++step, ++s.t) {
    cpu::adamw_bf16(pf.data() + 1, gf.data() + 1, m16.data() + 1, v16.data() + 1, n - 2,
                    index + 1, s);
    gpu->adamw_bf16(gp + 1, gg + 1, gm.data() + 1, gv16.data() + 1, n - 2, index + 1, s);
  }
  std::vector<float> p_gpu(n);
  std::vector<uint16_t> m_gpu(n), v_gpu(n), copy(n);
  gpu->download(p_gpu.data(), gp, n);
  gpu->download_bytes(m_gpu.data(), gm.data(), n * 2);
  gpu->download_bytes(v_gpu.data(), gv16.data(), n * 2);
  gpu->download_bytes(copy.data(), gpu->weights_bf16(), n * 2);
  CHECK(std::memcmp(p_gpu.data(), pf.data(), n * 4) == 0);
  CHECK(m_gpu == m16);
  CHECK(v_gpu == v16);
  size_t copy_ok = 0;
  for (size_t i = 0; i < n; ++i) copy_ok += copy[i] == to_bf16(pf[i]);
  CHECK(copy_ok == n);
  CHECK(rel_err(g.down(gp, n), pv) > 1e-4);  // the steps moved the parameters
  gpu->forget_weights(gp);
}

TEST_CASE("gpu adamw without master weights writes the CPU reference's bits: the weights' bf16 "
          "copy and their moments (fp32 and bf16), at a place in the flat buffer, beside masters" *
          doctest::skip(gpu_count() == 0)) {
  // Both run adamw_bf16.hpp's element code for a weight without a master, stochastic rounding
  // included: equal, not close. The range [first, first + n) of a flat buffer of `total`, odd
  // sizes, cut by masters in odd places; the elements outside them have no fp32 value (NaN,
  // never touched). The elements with masters take the usual paths: with bf16 moments the same
  // element code (equal), with fp32 ones the fp32 kernel, close to the CPU's (its own case above).
  const size_t total = 100003, first = 1001, n = total - first - 7;
  const Ranges masters{{0, 1500}, {4097, 4098}, {50001, 60003}};
  const Vec init = as_float(randn<double>(total));
  std::vector<float> pf(total, std::numeric_limits<float>::quiet_NaN());
  for (auto [b, e] : masters) std::copy(init.begin() + long(b), init.begin() + long(e), pf.begin() + long(b));
  std::vector<uint16_t> copy0(total);
  for (size_t i = 0; i < total; ++i) copy0[i] = to_bf16(float(init[i]));
  const uint64_t seed = lmt::test::rng()();
  for (Stored state : {Stored::full, Stored::bf16}) {
    INFO(std::string(state_dtype_name(state)) << " moments");
    auto gpu = make_cuda_backend();
    auto cpu = make_cpu_backend<float>();
    Pair g{*gpu, {}};
    std::vector<float> pc = pf;
    float* gp = g.up(Vec(pf.begin(), pf.end()));
    gpu->set_weights(gp, total, masters), cpu->set_weights(pc.data(), total, masters);
    gpu->upload_bytes(gpu->weights_bf16(), copy0.data(), total * 2);
    std::memcpy(cpu->weights_bf16(), copy0.data(), total * 2);
    AdamW<float> og(*gpu, n, state, seed, first, masters), oc(*cpu, n, state, seed, first, masters);
    Config::Optim o;
    o.weight_decay = 0.1;
    for (int step = 0; step < 3; ++step) {
      const Vec gv = as_float(randn<double>(n));
      const std::vector<float> gf(gv.begin(), gv.end());
      float* gg = g.up(gv);
      og.step(gp + first, gg, 1e-2, o, 0.37);
      oc.step(pc.data() + first, gf.data(), 1e-2, o, 0.37);
    }
    // In pieces off the 16-byte grid (as ZeRO-1's may start): one element a thread.
    const Vec gv = as_float(randn<double>(n));
    const std::vector<float> gf(gv.begin(), gv.end());
    float* gg = g.up(gv);
    const AdamWStep sg = og.next_step(1e-2, o), sc = oc.next_step(1e-2, o);
    for (auto [at, len] : {std::pair<size_t, size_t>{0, 3}, {3, 4094}, {4097, n - 4097}}) {
      og.update(gp + first, gg, at, len, sg);
      oc.update(pc.data() + first, gf.data(), at, len, sc);
    }
    std::vector<uint16_t> copy_gpu(total), copy_cpu(total);
    gpu->download_bytes(copy_gpu.data(), gpu->weights_bf16(), total * 2);
    std::memcpy(copy_cpu.data(), cpu->weights_bf16(), total * 2);
    std::vector<float> p_gpu(total);
    gpu->download(p_gpu.data(), gp, total);
    const OptimizerState<float> mg = og.state(), mc = oc.state();
    const size_t eb = state_elem_bytes<float>(state);
    auto same_moments = [&](size_t i) {  // element i of the flat buffer, in the range
      const size_t at = (i - first) * eb;
      return std::memcmp(mg.m.data() + at, mc.m.data() + at, eb) == 0 &&
             std::memcmp(mg.v.data() + at, mc.v.data() + at, eb) == 0;
    };
    size_t bare = 0, bare_same = 0, moved = 0, masters_ok = 0, held = 0;
    for (const Run& r : runs(0, total, masters))
      for (size_t i = r.begin; i < r.end; ++i) {
        const bool in_range = i >= first && i < first + n;
        if (!r.inside) {  // a weight without a master: its copy and moments, bit for bit
          ++bare;
          bare_same += copy_gpu[i] == copy_cpu[i] && std::isnan(p_gpu[i]) &&
                       (!in_range || same_moments(i));
          moved += in_range && copy_gpu[i] != copy0[i];
          continue;
        }
        ++held;  // a master, and its copy rounded to nearest from it
        const bool copy_ok = copy_gpu[i] == to_bf16(p_gpu[i]);
        if (state == Stored::bf16)
          masters_ok += copy_ok && std::memcmp(&p_gpu[i], &pc[i], 4) == 0 &&
                        (!in_range || same_moments(i));
        else
          masters_ok += copy_ok && std::abs(p_gpu[i] - pc[i]) <= 1e-6f * (std::abs(pc[i]) + 1e-2f);
      }
    CHECK(bare_same == bare);
    CHECK(masters_ok == held);
    CHECK(moved > bare / 2);  // the steps moved the weights
    gpu->forget_weights(gp), cpu->forget_weights(pc.data());
  }
}

TEST_CASE("gpu weights' bf16 copy: AdamW over a part of the weights and weights_written keep it "
          "matching them" * doctest::skip(gpu_count() == 0)) {
  auto gpu = make_cuda_backend();
  Pair g{*gpu, {}};
  const int64_t M = 7, N = 29, K = 53, off = 50, n = off + N * K + 101;  // the matmul's: [off, +N*K)
  Vec w = as_float(randn<double>(size_t(n))), x = as_float(randn<double>(size_t(M * K)));
  float *gw = g.up(w), *gx = g.up(x), *gy = g.poisoned(size_t(M * N));
  gpu->set_weights(gw, size_t(n), {{0, size_t(n)}});
  // y = x W^T under bf16 on the GPU (through its copy of the weights) against the reference on
  // the weights as they are.
  auto matches = [&](const Vec& now) {
    Vec wr(now.begin() + off, now.begin() + off + N * K), xr = x, y(size_t(M * N));
    for (auto* v : {&wr, &xr})
      for (auto& e : *v) e = round_to(Precision::bf16, e);
    cpu::linear_fwd(xr.data(), wr.data(), y.data(), M, N, K, Precision::fp64);
    gpu->linear_fwd(gx, gw + off, gy, M, N, K, Precision::bf16, nullptr);
    return rel_err(g.down(gy, size_t(M * N)), y) < tol(Precision::bf16);
  };
  CHECK(matches(w));  // the copy is made on first use
  // AdamW over a part of the weights (as a ZeRO-1 piece) that overlaps the matmul's.
  const int64_t a = 30, b = 900;
  float *gg = g.up(as_float(randn<double>(size_t(b - a)))), *gm = g.up(Vec(size_t(b - a)));
  float* gv = g.up(Vec(size_t(b - a)));
  gpu->adamw(gw + a, gg, gm, gv, size_t(b - a), AdamWStep{1e-2, 0.9, 0.95, 1e-8, 0.0, 1});
  const Vec w1 = g.down(gw, size_t(n));
  CHECK(w1 != w);
  CHECK(matches(w1));
  // Written outside the backend (as a collective writes), then announced.
  const int64_t c = 700, e = 1500;
  Vec w2 = w1;
  const Vec part = as_float(randn<double>(size_t(e - c)));
  std::copy(part.begin(), part.end(), w2.begin() + c);
  const std::vector<float> pf(part.begin(), part.end());
  CUDA_CHECK(cudaMemcpyAsync(gw + c, pf.data(), pf.size() * sizeof(float), cudaMemcpyHostToDevice,
                             cuda_stream(*gpu)));
  CHECK(!matches(w2));  // not announced: the copy still holds the old values
  gpu->weights_written(gw + c, size_t(e - c));
  CHECK(matches(w2));
  gpu->forget_weights(gw);
}

TEST_CASE("gpu memory: a sparse allocation maps and counts only its ranges' granules, zeroed; "
          "release frees them" * doctest::skip(gpu_count() == 0)) {
  auto gpu = make_cuda_backend();
  const size_t g = gpu->sparse_granule();
  CHECK(g == kCudaGranule);  // what plan mode predicts the GPU's sharded masters in
  const size_t bytes = 5 * g + 1000;  // the last granule only partly in the allocation
  // Granules 0; 2 and 3; 5.
  const Ranges backed{{100, 200}, {2 * g + 5, 3 * g + 7}, {5 * g + 10, 5 * g + 1000}};
  const size_t held = 4 * g;
  const size_t before = gpu->memory().current[size_t(MemTag::params)];
  size_t free0 = 0, free1 = 0, free2 = 0, total = 0;
  CUDA_CHECK(cudaMemGetInfo(&free0, &total));
  char* p = static_cast<char*>(gpu->allocate_sparse(bytes, MemTag::params, backed));
  CHECK(gpu->memory().current[size_t(MemTag::params)] == before + held);
  CUDA_CHECK(cudaMemGetInfo(&free1, &total));
  CHECK(free0 - free1 >= held);  // the granules are memory, the rest of the range is not
  CHECK(free0 - free1 < 6 * g);
  for (auto [b, e] : backed) {
    std::vector<char> host(e - b, 1), back(e - b);
    gpu->download_bytes(host.data(), p + b, e - b);
    CHECK(std::count(host.begin(), host.end(), 0) == long(e - b));  // zeroed
    for (size_t i = 0; i < host.size(); ++i) host[i] = char((b + i) * 7 + 1);
    gpu->upload_bytes(p + b, host.data(), e - b);
    gpu->download_bytes(back.data(), p + b, e - b);
    CHECK(back == host);
  }
  gpu->release(p);
  CHECK(gpu->memory().current[size_t(MemTag::params)] == before);
  CUDA_CHECK(cudaMemGetInfo(&free2, &total));
  CHECK(free2 >= free0 - g / 2);  // given back (other allocations move by less than a granule)
}

// What kind of memory a host address is to CUDA: registered (pinned) or plain pageable.
static cudaMemoryType host_kind(const void* p) {
  cudaPointerAttributes a{};
  CUDA_CHECK(cudaPointerGetAttributes(&a, p));
  return a.type;
}

TEST_CASE("gpu HostPin: a held vector is pinned once while its size holds, takes copies both "
          "ways exactly, and is pageable again once let go" * doctest::skip(gpu_count() == 0)) {
  auto gpu = make_cuda_backend();
  const size_t n = 1000003;  // odd, and more than a staging buffer's pieces
  const Vec x = randn<double>(n);
  const std::vector<float> want(x.begin(), x.end());
  BackendArray<float> d(*gpu, n, MemTag::workspace);
  gpu->upload(d.data(), want.data(), n);
  std::vector<float> v;
  {
    HostPin<float> pin;
    float* p = pin.hold(*gpu, v, n);
    CHECK(p == v.data());
    CHECK(host_kind(p) == cudaMemoryTypeHost);
    gpu->download(p, d.data(), n);
    CHECK(v == want);
    CHECK(pin.hold(*gpu, v, n) == p);  // the same size: the same memory, still pinned
    // Another size pins the vector where it now is; an upload from it arrives exactly.
    float* q = pin.hold(*gpu, v, n / 3);
    CHECK(host_kind(q) == cudaMemoryTypeHost);
    for (size_t i = 0; i < n / 3; ++i) q[i] = -want[i];
    gpu->upload(d.data(), q, n / 3);
    std::vector<float> back(n / 3);
    gpu->download(back.data(), d.data(), n / 3);
    CHECK(back == std::vector<float>(v.begin(), v.end()));
  }
  CHECK(host_kind(v.data()) == cudaMemoryTypeUnregistered);
}

TEST_CASE("gpu model: holding only some fp32 masters (zero1 under bf16), the loss and every "
          "gradient are the whole model's, bit for bit, also after AdamW over its shard" *
          doctest::skip(gpu_count() == 0)) {
  // Its matmuls read the weights' bf16 copy, which set_params made on the host from the same
  // values that the whole model's copy is cast from on the GPU (both to nearest even), and which
  // AdamW then writes in the same pass as the masters of the shard.
  Config::Model m = lmt::test::small_gpu_model();
  m.precision = Precision::bf16;
  const int64_t B = 3, T = 29;
  auto in = lmt::test::rand_tokens(B * T, 97), tg = lmt::test::rand_tokens(B * T, 97);
  const uint64_t seed = lmt::test::rng()();
  auto gpu = make_cuda_backend(), gpu2 = make_cuda_backend();  // a backend keeps one model's copy
  Config::Optim o;
  for (const char* attention : {"naive", "flash"}) {
    m.attention = attention;
    Model<float> whole(*gpu, m, B, T);
    const size_t n = whole.layout.total;
    for (int world : {2, 3})
      for (int rank = 0; rank < world; ++rank) {
        INFO(std::string(attention) << ", rank " << rank << " of " << world);
        Model<float> part(*gpu2, m, B, T, zero1_masters(whole.layout, world, rank, true));
        REQUIRE(part.sharded());
        // A granule of fp32 masters (a model this small fits in one), and the bf16 copy.
        CHECK(gpu2->memory().current[size_t(MemTag::params)] == gpu2->sparse_granule() + 2 * n);
        whole.init_params(seed), part.init_params(seed);
        CHECK(loss_of(part, in.data(), tg.data()) == loss_of(whole, in.data(), tg.data()));
        whole.backward(), part.backward();
        const std::vector<float> gp = part.grads_host(), gw = whole.grads_host();
        for (const ParamView& v : whole.layout.params) {  // a failure names the parameter
          INFO(v.name);
          CHECK(std::equal(gp.begin() + long(v.offset), gp.begin() + long(v.offset + v.numel),
                           gw.begin() + long(v.offset)));
        }
        const ParamGroup shard = zero1_shard(n, world, rank);
        const size_t len = shard.end - shard.begin;
        AdamW<float> oa(*gpu, len), ob(*gpu2, len);
        oa.step(whole.params() + shard.begin, whole.grads() + shard.begin, 1e-2, o);
        ob.step(part.params() + shard.begin, part.grads() + shard.begin, 1e-2, o);
        std::vector<float> a(len), b(len);
        gpu->download(a.data(), whole.params() + shard.begin, len);
        gpu2->download(b.data(), part.params() + shard.begin, len);
        CHECK(a == b);
        CHECK(loss_of(part, in.data(), tg.data()) == loss_of(whole, in.data(), tg.data()));
      }
  }
}

TEST_CASE("gpu model: forward and backward recorded as CUDA graphs (Model::record) give the "
          "launched model's loss and gradients, bit for bit, through AdamW steps and new batches "
          "(embeddings tied or not)" * doctest::skip(gpu_count() == 0)) {
  Config::Model m = lmt::test::small_gpu_model();
  m.tie_embeddings = lmt::test::tied_or_not();
  const int64_t B = 3, T = 29;
  auto gpu = make_cuda_backend(), gpu2 = make_cuda_backend();  // a backend keeps one model's copy
  Config::Optim o;
  for (Precision prec : {Precision::fp32, Precision::bf16})
    for (const char* attention : {"naive", "flash"}) {
      INFO(std::string(name_of(prec)) << " " << std::string(attention));
      m.precision = prec, m.attention = attention;
      Model<float> launched(*gpu, m, B, T), replayed(*gpu2, m, B, T);
      const uint64_t seed = lmt::test::rng()();
      launched.init_params(seed), replayed.init_params(seed);
      AdamW<float> opt(*gpu, launched.layout.total), opt2(*gpu2, replayed.layout.total);
      const std::vector<float> nan(replayed.layout.total, std::numeric_limits<float>::quiet_NaN());
      for (int step = 0; step < 4; ++step) {
        INFO("step " << step);  // a new batch every step; step 0 launches and records
        auto in = lmt::test::rand_tokens(B * T, 97), tg = lmt::test::rand_tokens(B * T, 97);
        const double loss = loss_of(launched, in.data(), tg.data());
        launched.backward();
        gpu2->upload(replayed.grads(), nan.data(), nan.size());  // every gradient written again
        CHECK(loss_of(replayed, in.data(), tg.data()) == loss);
        replayed.backward();
        CHECK(replayed.grads_host() == launched.grads_host());
        if (step == 0) replayed.record();
        CHECK(replayed.replays());
        opt.step(launched.params(), launched.grads(), 1e-2, o);
        opt2.step(replayed.params(), replayed.grads(), 1e-2, o);
      }
    }
}

TEST_CASE("gpu model: loss and every gradient match the fp64 CPU model; training tracks the CPU "
          "(embeddings tied or not)" *
          doctest::skip(gpu_count() == 0)) {
  Config::Model m = lmt::test::small_gpu_model();
  m.tie_embeddings = lmt::test::tied_or_not();
  const int64_t B = 3, T = 29;
  auto in = lmt::test::rand_tokens(B * T, 97), tg = lmt::test::rand_tokens(B * T, 97);
  auto gpu = make_cuda_backend();
  const uint64_t seed = lmt::test::rng()();
  SUBCASE("loss and every gradient against the fp64 CPU model, per precision and attention") {
    auto cpu = make_cpu_backend<double>();
    Config::Model m64 = m;
    m64.precision = Precision::fp64;
    Model<double> ref(*cpu, m64, B, T);
    ref.init_params(seed);
    double ref_loss = loss_of(ref, in.data(), tg.data());
    ref.backward();
    std::vector<double> ref_grads = ref.grads_host();
    struct Tol {
      Precision precision;
      Dtype residual;
      double loss, grads;  // relative, against fp64 without operand rounding
    };
    for (auto [prec, residual, t, tg_] :
         {Tol{Precision::fp32, Dtype::fp32, 1e-5, 1e-4}, Tol{Precision::tf32, Dtype::fp32, 5e-3, 2e-2},
          Tol{Precision::bf16, Dtype::fp32, 3e-2, 8e-2}, Tol{Precision::bf16, Dtype::bf16, 3e-2, 8e-2}})
    for (const char* attention : {"naive", "flash"}) {
      INFO(std::string(name_of(prec)) << " " << std::string(attention) << ", residual stream "
                                      << std::string(name_of(residual)));
      m.precision = prec;
      m.residual_dtype = residual;
      m.attention = attention;
      Model<float> model(*gpu, m, B, T);
      model.init_params(seed);
      double loss = loss_of(model, in.data(), tg.data());
      model.backward();
      CHECK(std::abs(loss - ref_loss) < t * ref_loss);
      std::vector<float> grads = model.grads_host();
      for (auto& p : model.layout.params) {
        INFO(p.name);
        Vec a(grads.begin() + long(p.offset), grads.begin() + long(p.offset + p.numel));
        Vec b(ref_grads.begin() + long(p.offset), ref_grads.begin() + long(p.offset + p.numel));
        CHECK(rel_err(a, b) < tg_);
      }
    }
  }
  SUBCASE("ten clipped AdamW steps track the CPU's, per precision, moments' dtype and master "
          "weights") {
    // The same precision policy on both; under bf16 this also checks that the GPU's bf16 copy of
    // the weights follows every update. With bf16 moments too, and without master weights (the
    // matmul weights bf16 alone): the same stochastic roundings on both.
    // And the residual stream in bf16 (the same roundings on both).
    auto cpu32 = make_cpu_backend<float>();
    for (Dtype residual : {Dtype::fp32, Dtype::bf16})
    for (bool master_weights : {true, false})
    for (Stored state : {Stored::full, Stored::bf16})
    for (auto [prec, t] : {std::pair{Precision::fp32, 1e-4}, {Precision::bf16, 2e-3}}) {
      if (!master_weights && prec != Precision::bf16) continue;  // bf16 only
      if (residual == Dtype::bf16 && (prec != Precision::bf16 || !master_weights ||
                                      state != Stored::full))
        continue;  // bf16 only; once
      INFO(std::string(name_of(prec)) << " training, moments "
                                      << std::string(state_dtype_name(state))
                                      << (master_weights ? "" : ", no master weights")
                                      << ", residual stream " << std::string(name_of(residual)));
      m.precision = prec;
      m.residual_dtype = residual;
      const Ranges masters = zero1_masters(ParamLayout::build(m), 1, 0, prec == Precision::bf16,
                                           master_weights);
      Model<float> a(*gpu, m, B, T, masters), b(*cpu32, m, B, T, masters);
      a.init_params(seed), b.init_params(seed);
      AdamW<float> oa(*gpu, a.layout.total, state, seed, 0, masters),
          ob(*cpu32, b.layout.total, state, seed, 0, masters);
      Config::Optim o;
      for (int s = 0; s < 10; ++s) {
        double la = loss_of(a, in.data(), tg.data()), lb = loss_of(b, in.data(), tg.data());
        CHECK(std::abs(la - lb) < t * lb);
        a.backward(), b.backward();
        // Clipped at every step (0.05 is below these norms), the factor applied inside AdamW.
        const GradClip ca = clip_grad_norm(*gpu, a.grads(), a.layout.total, 0.05);
        const GradClip cb = clip_grad_norm(*cpu32, b.grads(), b.layout.total, 0.05);
        CHECK(ca.scale < 1);
        oa.step(a.params(), a.grads(), 1e-3, o, ca.scale);
        ob.step(b.params(), b.grads(), 1e-3, o, cb.scale);
      }
      CHECK(rel_err(a.params_host(), b.params_host()) < t);
    }
  }
}
#endif
