// attention mode: naive vs flash attention over the [attention] grid (implementation x dtype x
// mask x head dim x sequence length, batch and heads fixed). Per point: forward, backward and
// forward + backward times (median of `iters` after `warmup`), TFLOP/s and the peak GPU memory the
// point allocated; a point that does not fit is a row marked OOM and the sweep goes on.
//
//   naive  the CUDA backend's baseline: scores materialised by cuBLAS, a causal softmax kernel,
//          a second matmul, on q, k, v, o and their gradients stored in the dtype (bf16: the
//          scores and P too, the probabilities saved in fp32); causal only.
//   flash  our FlashAttention-2 kernels on q, k, v, o, dO, dq, dk, dv stored in the dtype
//          ([B, T, H, dh] each), plus the fp32 logsumexp (and the backward's scratch: D, and
//          where the fused backward runs, its sums of dQ). flash-split and flash-fused: flash with
//          the backward's two kernels, or its fused one where it exists (FlashShape::Backward);
//          flash-mma: flash on the mma.sync kernels.
// FLOPs (the convention of FlashAttention's benchmarks, useful work only): forward
// 4 B H T^2 dh, halved when causal; backward 2.5 x forward.
// Each call is timed alone between two CUDA events, which holds its launch (about 3.4 us on an
// H200: results/flash_tuning.md) as well as its kernels; the kernels' own time per call, the GPU
// busy with them in CUPTI's records (kernel_profile.hpp) over `iters` more calls, is reported
// beside it (the *_kernel_ms columns).
#include <cstdio>
#include <functional>

#include "comm.hpp"
#include "gpu.hpp"
#include "kernel_profile.hpp"
#include "modes.hpp"
#include "report.hpp"
#include "rng.hpp"
#include "timing.hpp"

#ifdef LMTRAIN_CUDA
#include "flash_attention.hpp"
#endif

namespace lmt {

#ifdef LMTRAIN_CUDA
namespace {

struct Point {
  std::string impl, dtype, mask;
  int64_t T, dh;
};

struct Measured {
  std::string status = "ok";  // ok | OOM | n/a
  Stats fwd, bwd, both;
  double fwd_kernels = 0, bwd_kernels = 0;  // ms a call: the GPU busy with the kernels (where
                                            // KernelProfile::available(), else unmeasured)
  double peak_bytes = 0;
};

CsvRow attention_columns(const Config& c) {
  CsvRow row = run_columns(c);
  for (auto name : {"date_utc", "device_name", "impl", "dtype", "mask", "batch", "heads",
                    "seq_len", "head_dim", "status", "fwd_ms", "bwd_ms", "fwd_bwd_ms",
                    "fwd_tflops", "bwd_tflops", "fwd_bwd_tflops", "peak_bytes", "fwd_kernel_ms",
                    "bwd_kernel_ms"})
    row.add(name, "");
  return row;
}

// Forward, backward and both, on a fresh backend (its allocator's peak is this point's alone).
Measured measure(const Config::Attention& a, const Point& pt) {
  Measured r;
  if (pt.impl == "naive" && pt.mask != "causal") {
    r.status = "n/a";  // the baseline's softmax kernel is causal only
    return r;
  }
  const int64_t B = a.batch, H = a.heads, T = pt.T, dh = pt.dh, d = H * dh, n = B * T * d;
  const bool bf16 = pt.dtype == "bf16";
  auto be = make_cuda_backend();
  cudaStream_t stream = cuda_stream(*be);
  try {
    std::function<void()> fwd, bwd;
    std::vector<std::unique_ptr<BackendArray<float, char>>> bufs;
    auto alloc = [&](int64_t elems, size_t elem_bytes) {
      bufs.push_back(std::make_unique<BackendArray<float, char>>(*be, size_t(elems) * elem_bytes,
                                                                 MemTag::activations));
      return bufs.back()->data();
    };
    auto randomize = [&](char* p, int64_t elems) {  // fp32 normals, then the storage dtype
      const DType t = bf16 ? DType::bf16 : DType::f32;
      std::vector<char> host(size_t(elems) * dtype_size(t));
      Rng rng{static_cast<uint64_t>(elems)};  // never zeros: they hide unwritten outputs and time faster
      for (size_t i = 0; i < size_t(elems); ++i) store(t, host.data(), i, float(rng.normal()));
      be->upload_bytes(p, host.data(), host.size());
    };
    const size_t es = bf16 ? 2 : 4;  // storage: bf16 or fp32
    if (pt.impl != "naive") {
      char *q = alloc(n, es), *k = alloc(n, es), *v = alloc(n, es), *o = alloc(n, es);
      char *g = alloc(n, es), *dq = alloc(n, es), *dk = alloc(n, es), *dv = alloc(n, es);
      auto* lse = reinterpret_cast<float*>(alloc(B * H * T, 4));
      for (char* p : {q, k, v, g}) randomize(p, n);
      using Bwd = cuda::FlashShape::Backward;
      cuda::FlashShape s{B, H, T, dh, pt.mask == "causal", bf16,
                         /*wgmma=*/pt.impl != "flash-mma", {T * d, d}, {T * d, d},
                         pt.impl == "flash-split"   ? Bwd::split
                         : pt.impl == "flash-fused" ? Bwd::fused
                                                    : Bwd::automatic};
      auto* scratch = reinterpret_cast<float*>(alloc(cuda::flash_bwd_scratch(s).floats(), 4));
      fwd = [=] { cuda::flash_fwd(s, q, k, v, o, lse, nullptr, stream); };
      bwd = [=] { cuda::flash_bwd(s, q, k, v, o, g, lse, scratch, dq, dk, dv, nullptr, stream); };
    } else {
      // The backend's: under bf16, qkv, out and their gradients in bf16 (Backend::attention_fwd).
      auto* qkv = reinterpret_cast<float*>(alloc(3 * n, es));
      auto* o = reinterpret_cast<float*>(alloc(n, es));
      auto* g = reinterpret_cast<float*>(alloc(n, es));
      auto* dqkv = reinterpret_cast<float*>(alloc(3 * n, es));
      const int64_t saved = be->attention_saved(B, T, H, dh, AttentionImpl::naive);
      auto* probs = reinterpret_cast<float*>(alloc(saved, 4));
      randomize(reinterpret_cast<char*>(qkv), 3 * n);
      randomize(reinterpret_cast<char*>(g), n);
      const Precision p = bf16 ? Precision::bf16 : Precision::fp32;
      Backend<float>* b = be.get();
      fwd = [=] { b->attention_fwd(qkv, o, probs, B, T, H, dh, p, AttentionImpl::naive, 0.0); };
      bwd = [=] {
        b->attention_bwd(qkv, o, probs, g, dqkv, B, T, H, dh, p, AttentionImpl::naive, 0.0);
      };
    }
    auto run = [](const std::function<void()>& f) {
      return [&f](std::vector<int>&) { f(); };
    };
    r.fwd = summarize(time_reps<float>(*be, a.warmup, a.iters, run(fwd)));
    fwd();  // backward alone reads this forward's outputs
    r.bwd = summarize(time_reps<float>(*be, a.warmup, a.iters, run(bwd)));
    std::function<void()> both = [&] { fwd(), bwd(); };
    r.both = summarize(time_reps<float>(*be, a.warmup, a.iters, run(both)));
    auto kernels = [&](const std::function<void()>& f) {  // after the timing: CUPTI slows launches
      KernelProfile profile;
      profile.start();
      for (int64_t i = 0; i < a.iters; ++i) f();
      return profile.stop().busy_ms / double(a.iters);
    };
    if (KernelProfile::available()) {
      r.fwd_kernels = kernels(fwd);  // the backward then reads the last of these forwards
      r.bwd_kernels = kernels(bwd);
    }
    r.peak_bytes = double(be->memory().peak);
  } catch (const UsageError& e) {  // out of GPU memory: this point does not fit
    r.status = "OOM";
    r.peak_bytes = double(be->memory().peak);
  }
  return r;
}

}  // namespace

int run_attention(const CommandLine& cl, const Runtime& rt, const std::string& device) {
  const Config& c = cl.config;
  const Config::Attention& a = c.attention;
  agree(rt, [&] {
    if (device != "cuda")
      throw UsageError("run.mode = \"attention\" times GPU kernels: it needs run.device = cuda "
                       "(a visible GPU, one rank)");
    if (!cl.csv_path.empty() && rt.is_root()) check_csv(cl.csv_path, attention_columns(c).header);
    select_gpu(rt);
  });
  std::string gpu = make_cuda_backend()->device_name();
  printf("== lmtrain attention: batch %lld, heads %lld on %s; median of %lld after %lld warm-up ==\n",
         (long long)a.batch, (long long)a.heads, gpu.c_str(), (long long)a.iters,
         (long long)a.warmup);
  const bool kernels = KernelProfile::available();
  if (!kernels) printf("no kernel times: another tool (compute-sanitizer, Nsight) holds CUPTI\n");
  auto kernel_ms = [&](double ms) { return kernels ? strf("%.4f", ms) : std::string(); };
  printf("%-11s %-5s %-7s %6s %4s | %9s %9s %9s | %8s %8s %8s | %10s | %9s %9s\n", "impl", "dtype",
         "mask", "T", "dh", "fwd ms", "bwd ms", "both ms", "fwd TF/s", "bwd TF/s", "both", "peak",
         "fwd kern", "bwd kern");
  for (const auto& dtype : a.dtypes)
    for (const auto& mask : a.masks)
      for (int64_t dh : a.head_dims)
        for (int64_t T : a.seq_lens)
          for (const auto& impl : a.impls) {
            Point pt{impl, dtype, mask, T, dh};
            Measured m = measure(a, pt);
            double f = 4.0 * double(a.batch * a.heads) * double(T) * double(T) * double(dh);
            if (mask == "causal") f /= 2;
            auto tf = [](double flops, const Stats& s) { return flops / (s.median * 1e-3) / 1e12; };
            if (m.status == "ok")
              printf("%-11s %-5s %-7s %6lld %4lld | %9.3f %9.3f %9.3f | %8.1f %8.1f %8.1f | %10s | "
                     "%9s %9s\n",
                     impl.c_str(), dtype.c_str(), mask.c_str(), (long long)T, (long long)dh,
                     m.fwd.median, m.bwd.median, m.both.median, tf(f, m.fwd), tf(2.5 * f, m.bwd),
                     tf(3.5 * f, m.both), human_bytes(m.peak_bytes).c_str(),
                     kernels ? strf("%.3f", m.fwd_kernels).c_str() : "–",
                     kernels ? strf("%.3f", m.bwd_kernels).c_str() : "–");
            else
              printf("%-11s %-5s %-7s %6lld %4lld | %s\n", impl.c_str(), dtype.c_str(),
                     mask.c_str(), (long long)T, (long long)dh, m.status.c_str());
            fflush(stdout);
            if (cl.csv_path.empty() || !rt.is_root()) continue;
            CsvRow row = attention_columns(c);
            row.set("date_utc", utc_now());
            row.set("device_name", gpu);
            row.set("impl", impl), row.set("dtype", dtype), row.set("mask", mask);
            row.set("batch", std::to_string(a.batch)), row.set("heads", std::to_string(a.heads));
            row.set("seq_len", std::to_string(T)), row.set("head_dim", std::to_string(dh));
            row.set("status", m.status);
            if (m.status == "ok") {
              row.set("fwd_ms", strf("%.4f", m.fwd.median));
              row.set("bwd_ms", strf("%.4f", m.bwd.median));
              row.set("fwd_bwd_ms", strf("%.4f", m.both.median));
              row.set("fwd_tflops", strf("%.2f", tf(f, m.fwd)));
              row.set("bwd_tflops", strf("%.2f", tf(2.5 * f, m.bwd)));
              row.set("fwd_bwd_tflops", strf("%.2f", tf(3.5 * f, m.both)));
              row.set("fwd_kernel_ms", kernel_ms(m.fwd_kernels));
              row.set("bwd_kernel_ms", kernel_ms(m.bwd_kernels));
            }
            row.set("peak_bytes", strf("%.0f", m.peak_bytes));
            append_csv(cl.csv_path, row);
          }
  return 0;
}

#else

int run_attention(const CommandLine&, const Runtime& rt, const std::string&) {
  agree(rt, [] {
    throw UsageError("run.mode = \"attention\" times GPU kernels: this build has no CUDA");
  });
  return 2;
}

#endif

}  // namespace lmt
