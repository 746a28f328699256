// FlashAttention kernels against an fp64 reference that materialises the T x T matrices: O and
// the logsumexp L forward, dQ, dK, dV backward; causal and not, odd lengths, every head dim, fp32
// (storage and arithmetic) and bf16 (storage, tensor cores); the model's fused QKV layout and
// separate tensors; dQ and dK rotated back by RoPE's table or not; outputs poisoned with NaN
// first; repeated runs bit-identical. Then flash against the naive GPU path through the backend
// (RoPE's inverse: flash's stores against the naive path's rope pass), and the backend's backward
// at T 16384 (on Hopper the fused kernel) against the two kernels. Skipped where no GPU is
// visible.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "backend.hpp"
#include "comm.hpp"
#include "gpu.hpp"
#include "../helpers.hpp"

#ifdef LMTRAIN_CUDA
#include "cuda_kernels.hpp"
#include "flash_attention.hpp"

using namespace lmt;
using lmt::test::randn;
using lmt::test::rel_err;

namespace {

using Vec = std::vector<double>;

// Exact attention in double over [B, T, H, dh] tensors (row stride H * dh).
struct Reference {
  Vec o, lse, dq, dk, dv;
  Reference(const Vec& q, const Vec& k, const Vec& v, const Vec& g, int64_t B, int64_t T,
            int64_t H, int64_t dh, bool causal)
      : o(q.size()), lse(size_t(B * H * T)), dq(q.size()), dk(q.size()), dv(q.size()) {
    const double scale = 1.0 / std::sqrt(double(dh));
    const int64_t rs = H * dh;
    Vec P(size_t(T * T)), dS(size_t(T * T));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h) {
        auto at = [&](int64_t t) { return size_t((b * T + t) * rs + h * dh); };
        auto dot = [&](const Vec& x, int64_t i, const Vec& y, int64_t j) {
          double s = 0;
          for (int64_t c = 0; c < dh; ++c) s += x[at(i) + size_t(c)] * y[at(j) + size_t(c)];
          return s;
        };
        for (int64_t i = 0; i < T; ++i) {
          const int64_t n = causal ? i + 1 : T;
          double mx = -INFINITY, sum = 0;
          for (int64_t j = 0; j < n; ++j) mx = std::max(mx, P[size_t(i * T + j)] = scale * dot(q, i, k, j));
          for (int64_t j = 0; j < n; ++j) sum += std::exp(P[size_t(i * T + j)] - mx);
          lse[size_t((b * H + h) * T + i)] = mx + std::log(sum);
          double D = 0;
          for (int64_t j = 0; j < n; ++j) {
            double p = P[size_t(i * T + j)] = std::exp(P[size_t(i * T + j)] - mx) / sum;
            double dp = dot(g, i, v, j);
            dS[size_t(i * T + j)] = dp;
            D += p * dp;
            for (int64_t c = 0; c < dh; ++c) {
              o[at(i) + size_t(c)] += p * v[at(j) + size_t(c)];
              dv[at(j) + size_t(c)] += p * g[at(i) + size_t(c)];
            }
          }
          for (int64_t j = 0; j < n; ++j) {
            double ds = P[size_t(i * T + j)] * (dS[size_t(i * T + j)] - D) * scale;
            for (int64_t c = 0; c < dh; ++c) {
              dq[at(i) + size_t(c)] += ds * k[at(j) + size_t(c)];
              dk[at(j) + size_t(c)] += ds * q[at(i) + size_t(c)];
            }
          }
        }
      }
  }
};

double bf16_exact(double x) { return double(lmt::round_bf16(float(x))); }

double norm(const Vec& x) {
  double s = 0;
  for (double e : x) s += e * e;
  return std::sqrt(s);
}

// Device memory holding fp32 or bf16 elements; host images go through comm.hpp's store/load.
struct DeviceArray {
  void* p = nullptr;
  size_t n;
  DType t;
  DeviceArray(size_t n_, bool bf16) : n(n_), t(bf16 ? DType::bf16 : DType::f32) {
    CUDA_CHECK(cudaMalloc(&p, bytes()));
  }
  ~DeviceArray() { cudaFree(p); }
  size_t bytes() const { return n * dtype_size(t); }
  void poison() { CUDA_CHECK(cudaMemset(p, 0xff, bytes())); }  // NaN in both formats
  // Host values into elements [offset + r * stride + c] for rows r of `width` elements.
  void put(const Vec& x, size_t width, size_t stride, size_t offset) {
    std::vector<char> all = raw();
    for (size_t i = 0; i < x.size(); ++i) store(t, all.data(), offset + i / width * stride + i % width, x[i]);
    CUDA_CHECK(cudaMemcpy(p, all.data(), bytes(), cudaMemcpyHostToDevice));
  }
  Vec get(size_t count, size_t width, size_t stride, size_t offset) const {
    std::vector<char> all = raw();
    Vec out(count);
    for (size_t i = 0; i < count; ++i) out[i] = load(t, all.data(), offset + i / width * stride + i % width);
    return out;
  }
  std::vector<char> raw() const {
    std::vector<char> all(bytes());
    CUDA_CHECK(cudaMemcpy(all.data(), p, bytes(), cudaMemcpyDeviceToHost));
    return all;
  }
};

using Bwd = cuda::FlashShape::Backward;
struct Mode {
  const char* name;
  bool bf16, wgmma;
  Bwd backward;
  double tol;  // ||out - ref|| / ||ref|| for O, dQ, dK, dV (L is checked to 1e-5 in every mode)
};
// fp32: fp32 rounding only. bf16: P and dS are rounded to bf16 as matmul operands (relative
// error 2^-9 each), and every output to bf16. The mma.sync kernels and, on a Hopper GPU at head
// dims 64 and 128, the wgmma ones (elsewhere that mode runs the mma.sync kernels again), their
// backward's two kernels and, causal at head dims 64 and 128 (the only problems that mode runs),
// its fused kernel (elsewhere the two again).
const Mode kModes[] = {{"fp32", false, false, Bwd::split, 2e-5},
                       {"bf16 mma.sync", true, false, Bwd::split, 1.5e-2},
                       {"bf16 wgmma", true, true, Bwd::split, 1.5e-2},
                       {"bf16 wgmma fused", true, true, Bwd::fused, 1.5e-2}};

// Runs forward and backward for one problem and mode; `fused` puts q, k, v (and dq, dk, dv)
// side by side in one [B*T, 3*H*dh] buffer as the model does, else each is its own tensor.
// rope_theta: 0, or the backward given RoPE's table for it, dq and dk then rotated back (the
// reference's by cpu::rope's inverse, in fp64).
void check_problem(int64_t B, int64_t T, int64_t H, int64_t dh, bool causal, bool fused,
                   double rope_theta) {
  const size_t n = size_t(B * T * H * dh), rs = size_t(H * dh);
  auto input = [&] {  // bf16-exact values: every mode then computes on the same inputs
    Vec x = randn<double>(n);
    for (auto& e : x) e = bf16_exact(e);
    return x;
  };
  Vec q = input(), k = input(), v = input(), g = input();
  Reference ref(q, k, v, g, B, T, H, dh, causal);
  DeviceArray rope(size_t(T * dh), false);
  if (rope_theta != 0) {
    for (Vec* x : {&ref.dq, &ref.dk})
      cpu::rope(x->data(), B, T, H, dh, int64_t(rs), rope_theta, true);
    const std::vector<float> table = cuda::rope_table(T, dh, rope_theta);
    rope.put(Vec(table.begin(), table.end()), table.size(), table.size(), 0);
  }
  const void* rope_table = rope_theta != 0 ? rope.p : nullptr;
  for (const Mode& m : kModes) {
    if (m.backward == Bwd::fused && !(causal && (dh == 64 || dh == 128))) continue;
    INFO(std::string(m.name) << ", B " << B << " T " << T << " H " << H << " dh " << dh
                << std::string(causal ? " causal" : " full")
                << std::string(fused ? " fused qkv" : " separate") << " rope_theta " << rope_theta);
    const size_t qs = fused ? 3 * rs : rs;  // row stride of q, k, v, dq, dk, dv
    DeviceArray qkv(size_t(B * T) * qs * (fused ? 1 : 3), m.bf16);
    DeviceArray dqkv(qkv.n, m.bf16), o(n, m.bf16), dout(n, m.bf16);
    cuda::FlashShape s{B, H, T, int64_t(dh), causal, m.bf16, m.wgmma,
                       {int64_t(T * qs), int64_t(qs)}, {int64_t(T * rs), int64_t(rs)}, m.backward};
    DeviceArray lse(size_t(B * H * T), false);
    DeviceArray scratch(size_t(cuda::flash_bwd_scratch(s).floats()), false);
    scratch.poison();
    qkv.poison();
    // Element offsets of q, k, v inside their buffer.
    const size_t off[3] = {0, fused ? rs : n, fused ? 2 * rs : 2 * n};
    for (int w = 0; w < 3; ++w) qkv.put(w == 0 ? q : w == 1 ? k : v, rs, qs, off[w]);
    dout.put(g, rs, rs, 0);
    o.poison(), dqkv.poison(), lse.poison();
    const size_t es = m.bf16 ? 2 : 4;
    auto ptr = [&](DeviceArray& a, size_t offset) { return static_cast<char*>(a.p) + offset * es; };
    cuda::flash_fwd(s, ptr(qkv, off[0]), ptr(qkv, off[1]), ptr(qkv, off[2]), o.p,
                    static_cast<float*>(lse.p), nullptr, nullptr);
    cuda::flash_bwd(s, ptr(qkv, off[0]), ptr(qkv, off[1]), ptr(qkv, off[2]), o.p, dout.p,
                    static_cast<float*>(lse.p), static_cast<float*>(scratch.p), ptr(dqkv, off[0]),
                    ptr(dqkv, off[1]), ptr(dqkv, off[2]), rope_table, nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    const double e_o = rel_err(o.get(n, rs, rs, 0), ref.o);
    const double e_l = rel_err(lse.get(lse.n, lse.n, lse.n, 0), ref.lse);
    // dQ and dK relative to the gradients' scale (||dV||): at T = 1 they are exactly zero.
    const double e_v = rel_err(dqkv.get(n, rs, qs, off[2]), ref.dv);
    const double e_q = rel_err(dqkv.get(n, rs, qs, off[0]), ref.dq, norm(ref.dv));
    const double e_k = rel_err(dqkv.get(n, rs, qs, off[1]), ref.dk, norm(ref.dv));
    // (A const char* would print as a pointer: doctest streams only char arrays as text.)
    MESSAGE(std::string(m.name) << ", T " << T << ", dh " << dh
                                << std::string(causal ? ", causal" : "")
                                << ": O " << e_o << " L " << e_l << " dQ " << e_q << " dK "
                                << e_k << " dV " << e_v);
    CHECK(e_o < m.tol);
    CHECK(e_l < 1e-5);
    CHECK(e_q < m.tol);
    CHECK(e_k < m.tol);
    CHECK(e_v < m.tol);
    // Every element of the fused buffer is some q, k or v gradient: none may stay NaN.
    if (fused) {
      Vec all = dqkv.get(dqkv.n, dqkv.n, dqkv.n, 0);
      CHECK(std::none_of(all.begin(), all.end(), [](double x) { return std::isnan(x); }));
    }
    // Deterministic: the same backward again gives the same bits.
    std::vector<char> first = dqkv.raw();
    cuda::flash_bwd(s, ptr(qkv, off[0]), ptr(qkv, off[1]), ptr(qkv, off[2]), o.p, dout.p,
                    static_cast<float*>(lse.p), static_cast<float*>(scratch.p), ptr(dqkv, off[0]),
                    ptr(dqkv, off[1]), ptr(dqkv, off[2]), rope_table, nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    CHECK(dqkv.raw() == first);
  }
}

}  // namespace

TEST_CASE("flash attention: O, L, dQ, dK, dV match fp64 for odd lengths, every head dim, causal "
          "and not, with and without RoPE's rotation of dQ and dK" *
          doctest::skip(gpu_count() == 0)) {
  for (int64_t dh : {16, 32, 64, 80, 128})
    for (bool causal : {true, false}) {
      check_problem(2, 1, 3, dh, causal, true, 500.0);
      check_problem(2, 17, 3, dh, causal, false, 500.0);
      check_problem(1, 127, 2, dh, causal, true, 0.0);
      check_problem(1, 65, 2, dh, causal, false, 0.0);  // a Hopper tile (64 or 128 rows), one more
      check_problem(1, 129, 2, dh, causal, true, 10000.0);
      check_problem(1, 1000, 2, dh, causal, false, 10000.0);
    }
}

TEST_CASE("flash attention matches the naive GPU path through the backend" *
          doctest::skip(gpu_count() == 0)) {
  auto gpu = make_cuda_backend();
  const int64_t B = 2, T = 77, H = 3;
  for (int64_t dh : {32, 64})  // at 64 on Hopper, flash's kernel rotates q (rope's pass elsewhere)
  for (Precision p : {Precision::fp32, Precision::bf16}) {
    INFO("precision " << int(p) << " head dim " << dh);
    const int64_t d = H * dh;
    // Under bf16 the backend's qkv, out, dout and dqkv are stored in bf16.
    const bool b16 = p == Precision::bf16;
    auto upload = [&](BackendArray<float>& dst, const std::vector<float>& v) {
      if (!b16) return gpu->upload(dst.data(), v.data(), v.size());
      std::vector<uint16_t> bits(v.size());
      for (size_t i = 0; i < v.size(); ++i) bits[i] = to_bf16(v[i]);
      gpu->upload_bytes(dst.data(), bits.data(), bits.size() * 2);
    };
    auto download = [&](std::vector<float>& v, const BackendArray<float>& src) {
      if (!b16) return gpu->download(v.data(), src.data(), v.size());
      std::vector<uint16_t> bits(v.size());
      gpu->download_bytes(bits.data(), src.data(), bits.size() * 2);
      for (size_t i = 0; i < v.size(); ++i) v[i] = from_bf16(bits[i]);
    };
    std::vector<float> qkv(size_t(B * T * 3 * d)), dout(size_t(B * T * d));
    for (auto& x : qkv) x = float(randn<double>(1)[0]);
    for (auto& x : dout) x = float(randn<double>(1)[0]);
    std::vector<float> out[2], dqkv[2];
    for (AttentionImpl a : {AttentionImpl::naive, AttentionImpl::flash}) {
      BackendArray<float> q(*gpu, qkv.size(), MemTag::activations), g(*gpu, dout.size(), MemTag::activations);
      BackendArray<float> o(*gpu, dout.size(), MemTag::activations), dq(*gpu, qkv.size(), MemTag::activations);
      BackendArray<float> saved(*gpu, size_t(gpu->attention_saved(B, T, H, dh, a)), MemTag::activations);
      upload(q, qkv);
      upload(g, dout);
      gpu->attention_fwd(q.data(), o.data(), saved.data(), B, T, H, dh, p, a, 500.0);
      gpu->attention_bwd(q.data(), o.data(), saved.data(), g.data(), dq.data(), B, T, H, dh, p, a,
                         500.0);
      const int i = a == AttentionImpl::flash;
      out[i].resize(dout.size()), dqkv[i].resize(qkv.size());
      download(out[i], o);
      download(dqkv[i], dq);
    }
    const double t = p == Precision::fp32 ? 1e-5 : 1e-2;
    CHECK(rel_err(out[1], out[0]) < t);
    CHECK(rel_err(dqkv[1], dqkv[0]) < t);
  }
}

// At T 16384 the backend's flash backward (FlashShape::backward left automatic) takes the fused
// kernel on a Hopper GPU, its sums of dQ in the backend's workspace; it must match the backward's
// two kernels (forced, on the same bf16 inputs, with RoPE's table), and give the same bits again
// recorded as a CUDA graph (there dQ's last pass is the fused kernel's programmatic dependent)
// and replayed into poisoned gradients. Elsewhere both run the same kernels.
TEST_CASE("flash attention: the backend's backward at T 16384 matches the two kernels, and "
          "replays as a CUDA graph bit for bit" * doctest::skip(gpu_count() == 0)) {
  auto gpu = make_cuda_backend();
  const int64_t B = 1, T = 16384, H = 2, d = H * 64;
  for (int64_t dh : {64, 128}) {
    INFO("head dim " << dh);
    const int64_t heads = d / dh;
    const size_t nqkv = size_t(B * T * 3 * d), n = size_t(B * T * d);
    auto bits = [](const Vec& x) {
      std::vector<uint16_t> b(x.size());
      for (size_t i = 0; i < x.size(); ++i) b[i] = to_bf16(float(x[i]));
      return b;
    };
    const std::vector<uint16_t> qkv16 = bits(randn<double>(nqkv)), g16 = bits(randn<double>(n));
    // The backend's: under bf16 its buffers hold bf16.
    BackendArray<float> q(*gpu, nqkv, MemTag::activations), g(*gpu, n, MemTag::activations);
    BackendArray<float> o(*gpu, n, MemTag::activations), dq(*gpu, nqkv, MemTag::activations);
    BackendArray<float> saved(*gpu, size_t(gpu->attention_saved(B, T, heads, dh, AttentionImpl::flash)),
                              MemTag::activations);
    gpu->upload_bytes(q.data(), qkv16.data(), nqkv * 2);
    gpu->upload_bytes(g.data(), g16.data(), n * 2);
    gpu->attention_fwd(q.data(), o.data(), saved.data(), B, T, heads, dh, Precision::bf16,
                       AttentionImpl::flash, 0.0);
    gpu->attention_bwd(q.data(), o.data(), saved.data(), g.data(), dq.data(), B, T, heads, dh,
                       Precision::bf16, AttentionImpl::flash, 10000.0);
    std::vector<uint16_t> fused(nqkv), replayed(nqkv);
    gpu->download_bytes(fused.data(), dq.data(), nqkv * 2);
    const auto replay = gpu->capture([&] {
      gpu->attention_bwd(q.data(), o.data(), saved.data(), g.data(), dq.data(), B, T, heads, dh,
                         Precision::bf16, AttentionImpl::flash, 10000.0);
    });
    REQUIRE(replay);
    const std::vector<uint16_t> poison(nqkv, 0xffff);  // bf16 NaN
    gpu->upload_bytes(dq.data(), poison.data(), nqkv * 2);
    replay->run();
    gpu->download_bytes(replayed.data(), dq.data(), nqkv * 2);
    CHECK(replayed == fused);
    // The two kernels, called directly on copies of the same inputs.
    DeviceArray qkv(nqkv, true), dqkv(nqkv, true), out(n, true), dout(n, true);
    DeviceArray lse(size_t(B * heads * T), false), rope(size_t(T * dh), false);
    CUDA_CHECK(cudaMemcpy(qkv.p, qkv16.data(), nqkv * 2, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(dout.p, g16.data(), n * 2, cudaMemcpyHostToDevice));
    const std::vector<float> table = cuda::rope_table(T, dh, 10000.0);
    CUDA_CHECK(cudaMemcpy(rope.p, table.data(), table.size() * 4, cudaMemcpyHostToDevice));
    cuda::FlashShape s{B, heads, T, dh, true, true, true, {T * 3 * d, 3 * d}, {T * d, d}, Bwd::split};
    DeviceArray scratch(size_t(cuda::flash_bwd_scratch(s).floats()), false);
    auto* base = static_cast<char*>(qkv.p);
    auto* grad = static_cast<char*>(dqkv.p);
    cuda::flash_fwd(s, base, base + 2 * d, base + 4 * d, out.p, static_cast<float*>(lse.p), nullptr,
                    nullptr);
    cuda::flash_bwd(s, base, base + 2 * d, base + 4 * d, out.p, dout.p, static_cast<float*>(lse.p),
                    static_cast<float*>(scratch.p), grad, grad + 2 * d, grad + 4 * d, rope.p,
                    nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    const Vec split = dqkv.get(nqkv, nqkv, nqkv, 0);
    Vec mine(nqkv);
    for (size_t i = 0; i < nqkv; ++i) mine[i] = double(from_bf16(fused[i]));
    CHECK(rel_err(mine, split) < 1e-2);
    CHECK(std::none_of(mine.begin(), mine.end(), [](double x) { return std::isnan(x); }));
  }
}

// Given RoPE's table, the forward rotates q in place before attending (on Hopper at short T its
// kernel does, as it loads each query tile; elsewhere rope's pass): O, L and the rotated q must
// have the bits of rope's pass over q and k followed by the forward without the table, at odd T
// and where a persistent block takes several items (the table's buffer reused). k is rotated by
// the pass in both.
TEST_CASE("flash attention: the forward's rotation of q by RoPE gives the bits of rope's pass" *
          doctest::skip(gpu_count() == 0)) {
  struct Problem {
    int64_t B, T, H, dh;
  };
  for (const Problem& pr : {Problem{2, 1, 3, 64}, Problem{2, 65, 3, 64}, Problem{3, 511, 5, 64},
                            Problem{4, 512, 25, 64}, Problem{4, 1000, 12, 64},
                            Problem{1, 4097, 2, 64}, Problem{2, 300, 3, 128}}) {
    const auto [B, T, H, dh] = pr;
    INFO("B " << B << " T " << T << " H " << H << " dh " << dh);
    const int64_t d = H * dh, nqkv = B * T * 3 * d, n = B * T * d;
    const Vec x = randn<double>(size_t(nqkv));
    std::vector<uint16_t> qkv16(x.size());
    for (size_t i = 0; i < x.size(); ++i) qkv16[i] = to_bf16(float(x[i]));
    const std::vector<float> table = cuda::rope_table(T, dh, 10000.0);
    DeviceArray rope(table.size(), false);
    CUDA_CHECK(cudaMemcpy(rope.p, table.data(), table.size() * 4, cudaMemcpyHostToDevice));
    cuda::FlashShape s{B, H, T, dh, true, true, true, {T * 3 * d, 3 * d}, {T * d, d}};
    // [0]: the pass over q and k, the forward without the table; [1]: the pass over k, the
    // forward given the table.
    std::vector<char> qkv_bits[2], o_bits[2], lse_bits[2];
    for (int given = 0; given < 2; ++given) {
      DeviceArray qkv(size_t(nqkv), true), o(size_t(n), true), lse(size_t(B * H * T), false);
      o.poison(), lse.poison();
      CUDA_CHECK(cudaMemcpy(qkv.p, qkv16.data(), size_t(nqkv) * 2, cudaMemcpyHostToDevice));
      auto* base = static_cast<char*>(qkv.p);
      if (given) cuda::rope(base + 2 * d, true, rope.p, B, T, H, dh, 3 * d, false, nullptr);
      else cuda::rope(base, true, rope.p, B, T, 2 * H, dh, 3 * d, false, nullptr);
      cuda::flash_fwd(s, base, base + 2 * d, base + 4 * d, o.p, static_cast<float*>(lse.p),
                      given ? rope.p : nullptr, nullptr);
      CUDA_CHECK(cudaDeviceSynchronize());
      qkv_bits[given] = qkv.raw(), o_bits[given] = o.raw(), lse_bits[given] = lse.raw();
    }
    CHECK(qkv_bits[1] == qkv_bits[0]);
    CHECK(o_bits[1] == o_bits[0]);
    CHECK(lse_bits[1] == lse_bits[0]);
  }
}

// More row tiles than a GPU has SMs: on Hopper each persistent block takes several (tma.cuh's
// Work), its buffers' barriers and its consumers' turns running on from one to the next.
TEST_CASE("flash attention: 150 heads, more tiles than SMs, match fp64" *
          doctest::skip(gpu_count() == 0)) {
  for (int64_t dh : {64, 128})
    for (bool causal : {true, false}) check_problem(1, 301, 150, dh, causal, true, 10000.0);
}

// The persistent forward's deals (tma.cuh's Work), at head dim 64 on a GPU of 132 SMs (an H100
// or H200). Up to T 1024 (flash.cuh's sm90_fwd_shortest_t) its items are 64 queries, three
// blocks an SM: at 2 x 50 heads and T 511, 800 items and 400 pairs over 396 blocks, fewer than two
// pairs a block, so longest first in rounds, every other round reversed; causal, the 8 blocks that
// take a third item take the 24 shortest (Work::tail). At 2 x 99 heads, 792 pairs: in pairs.
TEST_CASE("flash attention: 2 x 50 heads at T 511, items dealt longest first, match fp64" *
          doctest::skip(gpu_count() == 0)) {
  for (bool causal : {true, false}) check_problem(2, 511, 50, 64, causal, true, 10000.0);
}
TEST_CASE("flash attention: 2 x 99 heads at T 511, items dealt in pairs, match fp64" *
          doctest::skip(gpu_count() == 0)) {
  check_problem(2, 511, 99, 64, true, true, 10000.0);
}
// Past T 1024 (up to sm90_short_t) items of 128 queries, a block an SM: at T 1100, causal,
// 2 x 15 heads have 270 items and 150 pairs (longest first, the tail deal: 6 blocks take the 18
// shortest), 2 x 30 heads 300 pairs.
TEST_CASE("flash attention: T 1100, items of 128 queries longest first and in pairs, match fp64" *
          doctest::skip(gpu_count() == 0)) {
  check_problem(2, 1100, 15, 64, true, true, 10000.0);
  check_problem(2, 1100, 30, 64, true, true, 10000.0);
}

// Past the Hopper kernels' short-T entries at head dim 64 (flash.cuh's sm90_short_t, 4096, and
// sm90_bwd_short_t, 2048): the long-T kernels, which the lengths above never reach there.
TEST_CASE("flash attention: T 4097 at head dim 64, the long-T Hopper kernels, match fp64" *
          doctest::skip(gpu_count() == 0)) {
  for (bool causal : {true, false}) check_problem(1, 4097, 1, 64, causal, true, 10000.0);
}
#endif
