// The CUDA backend: device memory, one stream, our kernels (cuda/*.cu) and cuBLASLt.
//
// Parameters, gradients and optimizer state are fp32; the precision policy decides what matmuls
// read: fp32, fp32 through TF32 tensor cores, or bf16 (bf16 tensor cores, fp32 accumulation):
// the weights' bf16 copy (written by AdamW in the same pass, whether it updates all the weights
// or a ZeRO-1 piece, or updated by it in place where a weight has no fp32 master; cast after a
// collective wrote them), activations that only matmuls read stored in bf16 by the kernel that
// makes them, and bf16 copies of other operands made just before the matmul. The residual adds
// are the matmuls' epilogues (cuda::Gemm's C).
// Attention is FlashAttention-2 (cuda/attention/, saving the rows' logsumexp) or the naive
// baseline: scores materialised by a batched matmul (in bf16 under bf16), a causal softmax
// kernel, a second matmul (saving the probabilities at key <= query in fp32). Under bf16 its
// q, k, v, output and their gradients are bf16 activations, stored in bf16.
#ifdef LMTRAIN_CUDA
#include <cmath>
#include <memory>
#include <tuple>
#include <vector>

#include "backend.hpp"
#include "cuda_kernels.hpp"
#include "flash_attention.hpp"
#include "gpu.hpp"
#include "nvtx.hpp"
#include "vmm.hpp"

namespace lmt {
namespace {

// swiglu_linear_bwd fuses W2's backward into SwiGLU's up to this d_model (N), from this many rows.
constexpr int64_t kSwigluFuseMaxN = 1024, kSwigluFuseMinM = 8192;

class CudaBackend : public Backend<float> {
 public:
  CudaBackend() {
    CUDA_CHECK(cudaStreamCreate(&stream_));
    gemm_workspace_ = allocate(cuda::Gemm::kWorkspaceBytes, MemTag::workspace);
    gemm_ = std::make_unique<cuda::Gemm>(stream_, gemm_workspace_, cuda::Gemm::kWorkspaceBytes);
    partials_ = static_cast<double*>(allocate((cuda::kSumPartials + 1) * sizeof(double), MemTag::workspace));
    CUDA_CHECK(cudaMallocHost(&sum_host_, sizeof(double)));
  }
  ~CudaBackend() override {
    release(partials_);
    cudaFreeHost(sum_host_);
    release(workspace_);
    for (auto& [ptr, size] : bf16_) release(ptr);
    release(rope_);
    release(weights16_);
    for (auto e : events_) cudaEventDestroy(e);
    gemm_.reset();
    release(gemm_workspace_);
    cudaStreamDestroy(stream_);
  }
  const char* name() const override { return "cuda"; }
  std::string device_name() const override {
    int dev = 0;
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
    return prop.name;
  }

  std::unique_ptr<Replay> capture(const std::function<void()>& body) override {
    // Thread-local mode: a call that would not be recorded (a synchronisation, an allocation)
    // fails at once, naming itself, instead of being left out of the graph.
    CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    body();
    cudaGraph_t graph = nullptr;
    CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
    cudaGraphExec_t exec = nullptr;
    CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    CUDA_CHECK(cudaGraphDestroy(graph));
    return std::make_unique<Graph>(exec, stream_);
  }

  int mark() override {
    if (next_mark_ == events_.size()) {
      cudaEvent_t e;
      CUDA_CHECK(cudaEventCreate(&e));
      events_.push_back(e);
    }
    CUDA_CHECK(cudaEventRecord(events_[next_mark_], stream_));
    return int(next_mark_++);
  }
  double elapsed_ms(int from, int to) override {
    CUDA_CHECK(cudaEventSynchronize(events_[size_t(to)]));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, events_[size_t(from)], events_[size_t(to)]));
    return ms;
  }
  void clear_marks() override { next_mark_ = 0; }
  size_t sparse_granule() const override { return cuda::vmm_granule(); }

 protected:
  void* device_alloc(size_t bytes) override {
    void* p = nullptr;
    if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) {
      cudaGetLastError();
      throw out_of_memory(bytes);
    }
    CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, stream_));
    return p;
  }
  void device_free(void* p) override { cudaFree(p); }
  void* device_alloc_sparse(size_t bytes, const Ranges& mapped) override {
    void* p = cuda::vmm_alloc(bytes, mapped);
    if (!p) throw out_of_memory(covered(mapped));
    for (auto [b, e] : mapped)
      CUDA_CHECK(cudaMemsetAsync(static_cast<char*>(p) + b, 0, e - b, stream_));
    return p;
  }
  void device_free_sparse(void* p, size_t bytes, const Ranges& mapped) override {
    CUDA_CHECK(cudaDeviceSynchronize());  // as cudaFree waits: no work may still be using it
    cuda::vmm_free(p, bytes, mapped);
  }
  static UsageError out_of_memory(size_t bytes) {
    size_t free = 0, total = 0;
    cudaMemGetInfo(&free, &total);
    return UsageError(strf("out of GPU memory: %.1f MiB more needed, %.1f MiB free of %.1f MiB "
                           "(a smaller batch, context or model fits)", double(bytes) / (1 << 20),
                           double(free) / (1 << 20), double(total) / (1 << 20)));
  }

 public:
  // Partly backed weights: the copy is kept whole from here on (backend.hpp), so it is made now
  // (from the model's host values, set_params), and nothing marks it stale (touched()).
  void set_weights(const float* params, size_t n, const Ranges& backed) override {
    release(weights16_);
    weights_ = params, weights_n_ = n, weights16_ = nullptr, weights_fresh_ = false;
    partial_ = params && !is_whole(backed, n);
    if (partial_) weights16_ = allocate(n * 2, MemTag::params), weights_fresh_ = true;
  }
  void forget_weights(const float* params) override {
    if (params == weights_) set_weights(nullptr, 0, {});
  }
  void* weights_bf16() override { return fresh_weights16(); }  // AdamW then keeps it fresh
  void weights_written(const float* p, size_t n) override {
    if (void* p16 = weights16_for(p, n)) {
      cuda::to_bf16(p, p16, int64_t(n), stream_);
      weights_fresh_ = true;
    } else {
      touched(p, n * sizeof(float));
    }
  }
  void upload_bytes(void* dst, const void* src, size_t b) override {
    touched(dst, b);
    CUDA_CHECK(cudaMemcpyAsync(dst, src, b, cudaMemcpyHostToDevice, stream_));
  }
  void download_bytes(void* dst, const void* src, size_t b) override {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, b, cudaMemcpyDeviceToHost, stream_));
    synchronize();
  }
  bool pin_host(void* p, size_t b) override {
    if (b == 0) return false;
    if (cudaHostRegister(p, b, cudaHostRegisterDefault) == cudaSuccess) return true;
    (void)cudaGetLastError();  // not an error of the run's: its copies go through pageable memory
    return false;
  }
  void unpin_host(void* p) override { CUDA_CHECK(cudaHostUnregister(p)); }
  void zero_bytes(void* p, size_t b) override {
    touched(p, b);
    CUDA_CHECK(cudaMemsetAsync(p, 0, b, stream_));
  }
  void copy_bytes(void* d, const void* s, size_t b) override {
    CUDA_CHECK(cudaMemcpyAsync(d, s, b, cudaMemcpyDeviceToDevice, stream_));
  }
  void synchronize() override { CUDA_CHECK(cudaStreamSynchronize(stream_)); }
  cudaStream_t stream() const { return stream_; }

  int64_t bf16_elems(int64_t n) const override { return (n + 1) / 2; }
  void linear_fwd(View<const float> x, const float* w, View<float> y, int64_t M, int64_t N,
                  int64_t K, Precision p, const float* residual) override {
    const void *X = operand(x, M * K, p, 0), *W = operand(w, N * K, p, 1);
    (*gemm_)(false, true, M, N, K, 1, X, K, 0, W, K, 0, y.data, N, 0, 1, ops(p), y.bf16(),
             residual);
  }
  void linear_bwd(View<const float> x, const float* w, View<const float> dy, View<float> dx,
                  float* dw, int64_t M, int64_t N, int64_t K, Precision p, GradWrite gw) override {
    const void *dY = operand(dy, M * N, p, 0), *W = operand(w, N * K, p, 1);
    (*gemm_)(false, false, M, K, N, 1, dY, N, 0, W, K, 0, dx.data, K, 0, 1, ops(p), dx.bf16());
    weight_grad(x, dY, dw, M, N, K, p, gw);
  }
  void swiglu_linear_bwd(View<const float> g, const float* w2, View<const float> dy,
                         View<const float> u, View<float> dg, View<float> du, float* dw2,
                         int64_t M, int64_t N, int64_t f, Precision p, GradWrite gw) override {
    // Fused where the elementwise pass costs about as much as the matmul or more (its 10 bytes
    // an element at DRAM speed against the matmul's 2 N FLOPs) and the rows make many tiles for
    // every SM: on an H100 gpt2-small's 16 x 1024 and 8 x 1024 step gains, xl's 4 x 512 (N 1600)
    // and 4 x 512 rows of N 768 lose (docs/design.md).
    if (p != Precision::bf16 || !u.bf16() || !du.bf16() || N > kSwigluFuseMaxN ||
        M < kSwigluFuseMinM)
      return Backend::swiglu_linear_bwd(g, w2, dy, u, dg, du, dw2, M, N, f, p, gw);
    const void *dY = operand(dy, M * N, p, 0), *W = operand(w2, N * f, p, 1);
    if (!cuda::swiglu_dgrad_supported(dY, W, u.data, du.data, M, N, f))
      return Backend::swiglu_linear_bwd(g, w2, dy, u, dg, du, dw2, M, N, f, p, gw);
    cuda::swiglu_dgrad(dY, W, u.data, du.data, M, N, f, stream_);
    weight_grad(g, dY, dw2, M, N, f, p, gw);
  }
  void rmsnorm_fwd(View<const float> x, const float* g, View<float> y, float* rstd, int64_t rows,
                   int64_t d, double eps) override {
    cuda::rmsnorm_fwd(x.data, x.bf16(), g, y.data, y.bf16(), rstd, rows, d, eps, stream_);
  }
  void rmsnorm_bwd(View<const float> x, const float* g, const float* rstd, View<const float> dy,
                   View<float> dx, float* dg, int64_t rows, int64_t d, float* dx_bf16,
                   GradWrite gw) override {
    cuda::rmsnorm_bwd(x.data, x.bf16(), g, rstd, dy.data, dy.bf16(), dx.data, dx.bf16(), dx_bf16,
                      dg, workspace(size_t(kRmsnormDgChunks * d)), rows, d,
                      gw == GradWrite::add, stream_);
  }
  void rope(View<float> x, int64_t B, int64_t T, int64_t H, int64_t dh, int64_t stride,
            double theta) override {
    cuda::rope(x.data, x.bf16(), rope_table(T, dh, theta), B, T, H, dh, stride, false, stream_);
  }
  int64_t attention_saved(int64_t B, int64_t T, int64_t H, int64_t dh,
                          AttentionImpl a) const override {
    if (a == AttentionImpl::naive) return B * H * T * (T + 1) / 2;  // P at key <= query
    if (!cuda::flash_supports(dh))
      throw UsageError(strf("model.attention = \"flash\" needs a head dim of %s (d_model / "
                            "num_heads = %lld); model.attention = \"naive\" takes any",
                            flash_head_dims_text().c_str(), (long long)dh));
    return B * H * T;
  }
  // Under bf16, qkv, out, dout and dqkv are packed bf16 (Backend::attention_fwd).
  void attention_fwd(float* qkv, float* out, float* saved, int64_t B, int64_t T, int64_t H,
                     int64_t dh, Precision p, AttentionImpl a, double rope_theta) override {
    const int64_t d = H * dh, ld = 3 * d;
    const bool b16 = p == Precision::bf16;
    const void* rope = rope_theta != 0 ? rope_table(T, dh, rope_theta) : nullptr;
    if (a == AttentionImpl::flash) {
      NvtxRange r("flash attention forward");
      // k by rope's pass; q by flash_fwd (on Hopper at short T, as its kernel loads it)
      if (rope) cuda::rope(at(qkv, d, p), b16, rope, B, T, H, dh, ld, false, stream_);
      cuda::flash_fwd(flash_shape(B, T, H, dh, p), qkv, at(qkv, d, p), at(qkv, 2 * d, p), out,
                      saved, rope, stream_);
      return;
    }
    if (rope) cuda::rope(qkv, b16, rope, B, T, 2 * H, dh, ld, false, stream_);  // q and k
    // The scores (in bf16 under bf16) are scratch: the softmax turns them into P in place, the
    // next matmul's operand, and saves P in fp32 at key <= query for the backward.
    void* S = b16 ? bf16_scratch(1, B * H * T * T) : workspace(size_t(B * H * T * T));
    const float scale = float(1.0 / std::sqrt(double(dh)));
    {
      NvtxRange r("attention scores matmul");
      for (int64_t b = 0; b < B; ++b)  // S = scale * Q K^T, each head a batch entry
        (*gemm_)(false, true, T, T, dh, scale, at(qkv, b * T * ld, p), ld, dh,
                 at(qkv, b * T * ld + d, p), ld, dh, at(S, b * H * T * T, p), T, T * T, H,
                 ops(p), b16);
    }
    {
      NvtxRange r("attention softmax");
      cuda::softmax_causal_fwd(S, b16, saved, B * H * T, T, stream_);
    }
    NvtxRange r("attention output matmul");
    for (int64_t b = 0; b < B; ++b)  // out = P V
      (*gemm_)(false, false, T, dh, T, 1, at(S, b * H * T * T, p), T, T * T,
               at(qkv, b * T * ld + 2 * d, p), ld, dh, at(out, b * T * d, p), d, dh, H,
               ops(p), b16);
  }
  void attention_bwd(const float* qkv, const float* out, const float* saved, const float* dout,
                     float* dqkv, int64_t B, int64_t T, int64_t H, int64_t dh, Precision p,
                     AttentionImpl a, double rope_theta) override {
    const int64_t d = H * dh, ld = 3 * d;
    const void* rope = rope_theta != 0 ? rope_table(T, dh, rope_theta) : nullptr;
    if (a == AttentionImpl::flash) {
      NvtxRange r("flash attention backward");
      const cuda::FlashShape s = flash_shape(B, T, H, dh, p);
      cuda::flash_bwd(s, qkv, at(qkv, d, p), at(qkv, 2 * d, p), out, dout, saved,
                      workspace(size_t(cuda::flash_bwd_scratch(s).floats())), dqkv,
                      at(dqkv, d, p), at(dqkv, 2 * d, p), rope, stream_);
      return;
    }
    // dP = dO V^T (in bf16 under bf16) is scratch: the softmax's backward turns it into dS in
    // place, and writes P whole in the same type for the matmul of dV.
    const bool b16 = p == Precision::bf16;
    const int64_t hTT = H * T * T, hTT_aligned = (hTT + 63) / 64 * 64;
    void* dS = b16 ? bf16_scratch(3, hTT) : workspace(size_t(2 * hTT_aligned));
    void* P = b16 ? bf16_scratch(2, hTT) : static_cast<float*>(dS) + hTT_aligned;
    const float scale = float(1.0 / std::sqrt(double(dh)));
    NvtxRange r("attention backward");
    for (int64_t b = 0; b < B; ++b) {
      const void *q = at(qkv, b * T * ld, p), *k = at(qkv, b * T * ld + d, p);
      const void *v = at(qkv, b * T * ld + 2 * d, p), *dO = at(dout, b * T * d, p);
      const float* Pf = saved + b * H * T * (T + 1) / 2;
      void *dq = at(dqkv, b * T * ld, p), *dk = at(dq, d, p), *dv = at(dq, 2 * d, p);
      (*gemm_)(false, true, T, T, dh, 1, dO, d, dh, v, ld, dh, dS, T, T * T, H,
               ops(p), b16);
      cuda::softmax_causal_bwd(Pf, dS, P, b16, H * T, T, scale, stream_);
      (*gemm_)(true, false, T, dh, T, 1, P, T, T * T, dO, d, dh, dv, ld, dh, H,
               ops(p), b16);
      (*gemm_)(false, false, T, dh, T, 1, dS, T, T * T, k, ld, dh, dq, ld, dh, H,
               ops(p), b16);
      (*gemm_)(true, false, T, dh, T, 1, dS, T, T * T, q, ld, dh, dk, ld, dh, H,
               ops(p), b16);
    }
    if (rope) cuda::rope(dqkv, b16, rope, B, T, 2 * H, dh, ld, true, stream_);  // dq and dk
  }
  void swiglu_fwd(View<const float> u, View<float> g, int64_t rows, int64_t f) override {
    LMT_ASSERT(u.stored == g.stored, "SwiGLU's tensors share one storage");
    cuda::swiglu_fwd(u.data, g.data, g.bf16(), rows, f, stream_);
  }
  void swiglu_bwd(View<const float> u, View<const float> dg, View<float> du, int64_t rows,
                  int64_t f) override {
    LMT_ASSERT(u.stored == du.stored && dg.stored == du.stored,
               "SwiGLU's tensors share one storage");
    cuda::swiglu_bwd(u.data, dg.data, du.data, du.bf16(), rows, f, stream_);
  }
  void embedding_fwd(const int32_t* tok, const float* table, View<float> out, int64_t n,
                     int64_t d) override {
    cuda::embedding_fwd(tok, table, out.data, out.bf16(), n, d, stream_);
  }
  void embedding_bwd(const int32_t* tok, const int32_t* order, View<const float> dout,
                     float* dtable, int64_t n, int64_t d) override {
    cuda::embedding_bwd(tok, order, dout.data, dout.bf16(), dtable, n, d, stream_);
  }
  void cross_entropy(View<float> logits, const int32_t* targets, float* row_loss, int64_t n,
                     int64_t V, double grad_scale) override {
    cuda::cross_entropy(logits.data, logits.bf16(), targets, row_loss, n, V, grad_scale, stream_);
  }
  double sum(const float* x, size_t n) override { return reduce(x, n, false); }
  double sum_squares(const float* x, size_t n) override { return reduce(x, n, true); }
  void adamw(float* p, const float* g, float* m, float* v, size_t n, const AdamWStep& s) override {
    cuda::adamw(p, g, m, v, updated_weights16(p, n), n, s, stream_);
  }
  void adamw_bf16(float* p, const float* g, uint16_t* m, uint16_t* v, size_t n, uint64_t index,
                  const AdamWStep& s) override {
    cuda::adamw_bf16(p, g, m, v, updated_weights16(p, n), n, index, s, stream_);
  }
  void adamw_bf16_weights(uint16_t* w, const float* g, float* m, float* v, size_t n,
                          uint64_t index, const AdamWStep& s) override {
    cuda::adamw_bf16_weights(w, g, m, v, n, index, s, stream_);
  }
  void adamw_bf16_weights(uint16_t* w, const float* g, uint16_t* m, uint16_t* v, size_t n,
                          uint64_t index, const AdamWStep& s) override {
    cuda::adamw_bf16_weights(w, g, m, v, n, index, s, stream_);
  }

 private:
  // The model's attention as FlashAttention sees it: q, k, v inside the fused [B*T, 3d] QKV
  // buffer, out [B*T, d]; under the bf16 policy all stored in bf16 and bf16 tensor cores, fp32
  // arithmetic otherwise (tf32 included: the flash kernels have no TF32 path, fp32 is the more
  // precise).
  static cuda::FlashShape flash_shape(int64_t B, int64_t T, int64_t H, int64_t dh, Precision p) {
    return cuda::FlashShape{B, H, T, dh, /*causal=*/true, /*bf16=*/p == Precision::bf16,
                            /*wgmma=*/true,
                            {T * 3 * H * dh, 3 * H * dh}, {T * H * dh, H * dh}};
  }
  static cuda::Operands ops(Precision p) {
    return p == Precision::bf16   ? cuda::Operands::bf16
           : p == Precision::tf32 ? cuda::Operands::tf32
                                  : cuda::Operands::fp32;
  }
  // linear_bwd's dw = dy^T x (dY: dy as the matmuls read it), added to dw where gw says.
  void weight_grad(View<const float> x, const void* dY, float* dw, int64_t M, int64_t N, int64_t K,
                   Precision p, GradWrite gw) {
    const void* X = operand(x, M * K, p, 1);  // stream order: the matmul before read slot 1
    (*gemm_)(true, false, N, K, M, 1, dY, N, 0, X, K, 0, dw, K, 0, 1, ops(p), false,
             gw == GradWrite::add ? dw : nullptr);  // dw += in the epilogue
  }
  // A matmul operand as policy p reads it: x itself (also when x is stored in bf16), or (bf16)
  // its bf16 copy in scratch `slot`.
  const void* operand(View<const float> v, int64_t n, Precision p, size_t slot) {
    const float* x = v.data;
    LMT_ASSERT(!v.bf16() || p == Precision::bf16, "bf16 matmul inputs outside the bf16 policy");
    if (p != Precision::bf16 || v.bf16()) return x;
    if (in_weights(x, size_t(n)))  // a weight: cached copy
      return at(fresh_weights16(), x - weights_, p);
    void* y = bf16_scratch(slot, n);
    cuda::to_bf16(x, y, n, stream_);
    return y;
  }
  // Scratch slot for n bf16 values; grows to the largest request and is kept.
  void* bf16_scratch(size_t slot, int64_t n) {
    if (slot >= bf16_.size()) bf16_.resize(slot + 1);
    auto& [ptr, size] = bf16_[slot];
    if (size_t(n) > size) {
      synchronize();
      release(ptr);
      ptr = allocate(size_t(n) * 2, MemTag::workspace);
      size = size_t(n);
    }
    return ptr;
  }
  bool in_weights(const float* p, size_t n) const {  // [p, p + n) lies within the weights
    return weights_ && p >= weights_ && p + n <= weights_ + weights_n_;
  }
  // The weights' bf16 copy, made on first use and brought up to date if it is stale (never where
  // the weights are partly backed: set_weights made it, and it stays current).
  void* fresh_weights16() {
    if (!weights16_) weights16_ = allocate(weights_n_ * 2, MemTag::params);
    if (!weights_fresh_) cuda::to_bf16(weights_, weights16_, int64_t(weights_n_), stream_);
    weights_fresh_ = true;
    return weights16_;
  }
  // Where [p, p + n) of the weights sits in their (existing) bf16 copy.
  void* weights16_at(const float* p, size_t n) const {
    LMT_ASSERT(weights16_ && in_weights(p, n), "a range outside the weights' bf16 copy");
    return static_cast<char*>(weights16_) + (p - weights_) * 2;
  }
  // AdamW about to update [p, p + n): it writes their part of the bf16 copy in the same pass
  // where that keeps it whole (the part returned); anything else stales it (null returned).
  void* updated_weights16(const float* p, size_t n) {
    void* p16 = weights16_for(p, n);
    if (p16) weights_fresh_ = true;
    else touched(p, n * sizeof(float));
    return p16;
  }
  // Where [p, p + n) of the weights sits in their bf16 copy, if writing it there leaves the whole
  // copy matching the weights (the range is all of them, or the rest is fresh); else null.
  void* weights16_for(const float* p, size_t n) const {
    if (!weights16_ || !in_weights(p, n)) return nullptr;
    if (!weights_fresh_ && !(p == weights_ && n == weights_n_)) return nullptr;
    return weights16_at(p, n);
  }
  // A write to [p, p + bytes) makes the weights' bf16 copy stale if it overlaps them, unless they
  // are partly backed: then whoever writes them writes the copy too (set_weights).
  void touched(const void* p, size_t bytes) {
    if (partial_) return;
    auto* c = static_cast<const char*>(p);
    auto* w = reinterpret_cast<const char*>(weights_);
    if (weights_ && c < w + weights_n_ * sizeof(float) && w < c + bytes) weights_fresh_ = false;
  }
  // cuda::rope_table on the device, made once per (T, dh, theta).
  const void* rope_table(int64_t T, int64_t dh, double theta) {
    if (rope_key_ != std::tuple{T, dh, theta}) {
      const std::vector<float> host = cuda::rope_table(T, dh, theta);
      synchronize();
      release(rope_);
      rope_ = allocate(host.size() * sizeof(float), MemTag::workspace);
      upload_bytes(rope_, host.data(), host.size() * sizeof(float));
      rope_key_ = {T, dh, theta};
    }
    return rope_;
  }
  // Element `offset` of an operand (4-byte fp32 or 2-byte bf16 elements).
  static const void* at(const void* base, int64_t offset, Precision p) {
    return static_cast<const char*>(base) + offset * (p == Precision::bf16 ? 2 : 4);
  }
  static void* at(void* base, int64_t offset, Precision p) {
    return const_cast<void*>(at(static_cast<const void*>(base), offset, p));
  }

  double reduce(const float* x, size_t n, bool squares) {
    cuda::sum(x, n, squares, partials_, partials_ + cuda::kSumPartials, stream_);
    CUDA_CHECK(cudaMemcpyAsync(sum_host_, partials_ + cuda::kSumPartials, sizeof(double),
                               cudaMemcpyDeviceToHost, stream_));
    synchronize();
    return *sum_host_;
  }
  // Scratch that grows to the largest request and is kept (no allocation after the first step).
  float* workspace(size_t n) {
    if (n > workspace_size_) {
      synchronize();
      release(workspace_);
      workspace_ = static_cast<float*>(allocate(n * sizeof(float), MemTag::workspace));
      workspace_size_ = n;
    }
    return workspace_;
  }

  struct Graph : Replay {
    Graph(cudaGraphExec_t e, cudaStream_t s) : exec(e), stream(s) {}
    ~Graph() override { cudaGraphExecDestroy(exec); }
    void run() override { CUDA_CHECK(cudaGraphLaunch(exec, stream)); }
    cudaGraphExec_t exec;
    cudaStream_t stream;
  };

  cudaStream_t stream_ = nullptr;
  void* gemm_workspace_ = nullptr;
  std::unique_ptr<cuda::Gemm> gemm_;  // cuBLASLt on stream_, with gemm_workspace_
  double* partials_ = nullptr;
  double* sum_host_ = nullptr;  // pinned: a sum's copy back is one DMA, not staged
  float* workspace_ = nullptr;
  size_t workspace_size_ = 0;
  std::vector<std::pair<void*, size_t>> bf16_;  // bf16 operand copies: pointer, elements
  void* rope_ = nullptr;
  const float* weights_ = nullptr;  // the model's parameters (set_weights) ...
  size_t weights_n_ = 0;
  bool partial_ = false;            // ... only partly backed (sharded masters) ...
  void* weights16_ = nullptr;       // ... their bf16 copy, made on first use under bf16 ...
  bool weights_fresh_ = false;      // ... and whether it matches them
  std::tuple<int64_t, int64_t, double> rope_key_{0, 0, 0.0};
  std::vector<cudaEvent_t> events_;  // reused: mark() takes the next one
  size_t next_mark_ = 0;
};

}  // namespace

std::unique_ptr<Backend<float>> make_cuda_backend() { return std::make_unique<CudaBackend>(); }

cudaStream_t cuda_stream(Backend<float>& be) {
  auto* cuda = dynamic_cast<CudaBackend*>(&be);
  LMT_ASSERT(cuda, std::string("the ") + be.name() + " backend has no CUDA stream");
  return cuda->stream();
}

}  // namespace lmt
#endif
