// The CPU backend: host memory and the reference loops.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "backend.hpp"
#include "check.hpp"
#include "comm.hpp"

#include <vector>

namespace lmt {
namespace {

template <typename T> class CpuBackend : public Backend<T> {
 public:
  ~CpuBackend() override {
    this->release(weights16_);
    this->release(widened_);
  }
  const char* name() const override { return "cpu"; }
  void upload_bytes(void* d, const void* s, size_t b) override { std::memcpy(d, s, b); }
  void download_bytes(void* d, const void* s, size_t b) override { std::memcpy(d, s, b); }
  void zero_bytes(void* p, size_t b) override { std::memset(p, 0, b); }
  void copy_bytes(void* d, const void* s, size_t b) override { std::memmove(d, s, b); }

  // The weights' bf16 copy. Where the weights are whole it exists only for ZeRO-1's bf16
  // all-gather, made when first asked for (weights_bf16) and then kept current by AdamW and
  // weights_written, as the matmuls round the fp32 weights themselves. Where they are partly
  // backed it is made here, whole, for the matmuls to read (weight()).
  void set_weights(const T* params, size_t n, const Ranges& backed) override {
    this->release(weights16_);
    weights_ = params, weights_n_ = n, weights16_ = nullptr;
    partial_ = params && !is_whole(backed, n);
    if (partial_) weights16_ = static_cast<uint16_t*>(this->allocate(n * 2, MemTag::params));
  }
  void forget_weights(const T* params) override {
    if (params == weights_) set_weights(nullptr, 0, {});
  }
  void weights_written(const T* p, size_t n) override { copy_part(p, n); }
  void* weights_bf16() override {
    if (!weights16_) {
      weights16_ = static_cast<uint16_t*>(this->allocate(weights_n_ * 2, MemTag::params));
      copy_part(weights_, weights_n_);
    }
    return weights16_;
  }

  // Inputs stored as bf16 hold bf16 values already, which the bf16 policy's rounding of matmul
  // operands leaves as they are; outputs stored as bf16 are rounded.
  // A residual sums in T after the product, as the GPU's epilogue does, then y is stored.
  void linear_fwd(View<const T> x, const T* w, View<T> y, int64_t M, int64_t N, int64_t K,
                  Precision p, const T* residual) override {
    w = weight(w, size_t(N * K), p);
    cpu::linear_fwd(x.data, w, y.data, M, N, K, p);
    if (residual) cpu::add_inplace(y.data, residual, M * N);
    if (y.bf16()) round_bf16(y.data, M * N);
  }
  void linear_bwd(View<const T> x, const T* w, View<const T> dy, View<T> dx, T* dw, int64_t M,
                  int64_t N, int64_t K, Precision p, GradWrite gw) override {
    w = weight(w, size_t(N * K), p);
    cpu::linear_bwd(x.data, w, dy.data, dx.data, dw, M, N, K, p, gw);
    if (dx.bf16()) round_bf16(dx.data, M * K);
  }
  void rmsnorm_fwd(View<const T> x, const T* g, View<T> y, T* rstd, int64_t rows, int64_t d,
                   double eps) override {
    cpu::rmsnorm_fwd(x.data, g, y.data, rstd, rows, d, eps);
    if (y.bf16()) round_bf16(y.data, rows * d);
  }
  void rmsnorm_bwd(View<const T> x, const T* g, const T* rstd, View<const T> dy, View<T> dx,
                   T* dg, int64_t rows, int64_t d, T* dx_bf16, GradWrite gw) override {
    cpu::rmsnorm_bwd(x.data, g, rstd, dy.data, dx.data, dg, rows, d, gw);
    if (dx.bf16()) round_bf16(dx.data, rows * d);
    if (!dx_bf16) return;
    std::copy(dx.data, dx.data + rows * d, dx_bf16);
    round_bf16(dx_bf16, rows * d);
  }
  void rope(View<T> x, int64_t B, int64_t T_, int64_t H, int64_t dh, int64_t stride,
            double theta) override {
    cpu::rope(x.data, B, T_, H, dh, stride, theta, false);
    if (x.bf16())  // the rotated heads of each row
      for (int64_t r = 0; r < B * T_; ++r) round_bf16(x.data + r * stride, H * dh);
  }
  // Under bf16, qkv and dout hold bf16 values already; out and dqkv are stored so.
  void attention_fwd(T* qkv, T* out, T* probs, int64_t B, int64_t T_, int64_t H, int64_t dh,
                     Precision p, AttentionImpl, double rope_theta) override {
    if (rope_theta != 0)  // q and k: 2H heads
      rope({qkv, p == Precision::bf16 ? Stored::bf16 : Stored::full}, B, T_, 2 * H, dh, 3 * H * dh,
           rope_theta);
    cpu::attention_fwd(qkv, out, probs, B, T_, H, dh, p);
    if (p == Precision::bf16) round_bf16(out, B * T_ * H * dh);
  }
  // dq and dk rotated back (rope_theta) before dqkv is rounded, as the GPU's flash kernels do.
  void attention_bwd(const T* qkv, const T*, const T* probs, const T* dout, T* dqkv, int64_t B,
                     int64_t T_, int64_t H, int64_t dh, Precision p, AttentionImpl,
                     double rope_theta) override {
    cpu::attention_bwd(qkv, probs, dout, dqkv, B, T_, H, dh, p);
    if (rope_theta != 0) cpu::rope(dqkv, B, T_, 2 * H, dh, 3 * H * dh, rope_theta, true);
    if (p == Precision::bf16) round_bf16(dqkv, B * T_ * 3 * H * dh);
  }
  void swiglu_fwd(View<const T> u, View<T> g, int64_t rows, int64_t f) override {
    cpu::swiglu_fwd(u.data, g.data, rows, f);
    if (g.bf16()) round_bf16(g.data, rows * f);
  }
  void swiglu_bwd(View<const T> u, View<const T> dg, View<T> du, int64_t rows,
                  int64_t f) override {
    cpu::swiglu_bwd(u.data, dg.data, du.data, rows, f);
    if (du.bf16()) round_bf16(du.data, rows * 2 * f);
  }
  void embedding_fwd(const int32_t* tok, const T* table, View<T> out, int64_t n,
                     int64_t d) override {
    cpu::embedding_fwd(tok, table, out.data, n, d);
    if (out.bf16()) round_bf16(out.data, n * d);
  }
  void embedding_bwd(const int32_t* tok, const int32_t*, View<const T> dout, T* dtable, int64_t n,
                     int64_t d) override {
    cpu::embedding_bwd(tok, dout.data, dtable, n, d);
  }
  void cross_entropy(View<T> logits, const int32_t* targets, T* row_loss, int64_t n, int64_t V,
                     double grad_scale) override {
    T* z = logits.data;
    cpu::cross_entropy(z, targets, grad_scale != 0 ? z : nullptr, row_loss, n, V, grad_scale);
    if (logits.bf16() && grad_scale != 0) round_bf16(z, n * V);
  }

  double sum(const T* x, size_t n) override {
    double s = 0;
    for (size_t i = 0; i < n; ++i) s += double(x[i]);
    return s;
  }
  double sum_squares(const T* x, size_t n) override {
    double s = 0;
    for (size_t i = 0; i < n; ++i) s += double(x[i]) * double(x[i]);
    return s;
  }
  // AdamW writes the weights' bf16 copy, where there is one, in its pass (as the GPU's does).
  void adamw(T* p, const T* g, T* m, T* v, size_t n, const AdamWStep& s) override {
    cpu::adamw(p, g, m, v, n, s);
    copy_part(p, n);
  }
  void adamw_bf16(T* p, const T* g, uint16_t* m, uint16_t* v, size_t n, uint64_t index,
                  const AdamWStep& s) override {
    cpu::adamw_bf16(p, g, m, v, n, index, s);
    copy_part(p, n);
  }
  void adamw_bf16_weights(uint16_t* w, const T* g, T* m, T* v, size_t n, uint64_t index,
                          const AdamWStep& s) override {
    cpu::adamw_bf16_weights(w, g, m, v, n, index, s);
  }
  void adamw_bf16_weights(uint16_t* w, const T* g, uint16_t* m, uint16_t* v, size_t n,
                          uint64_t index, const AdamWStep& s) override {
    cpu::adamw_bf16_weights(w, g, m, v, n, index, s);
  }

  int mark() override {
    marks_.push_back(std::chrono::steady_clock::now());
    return int(marks_.size() - 1);
  }
  double elapsed_ms(int from, int to) override {
    return std::chrono::duration<double, std::milli>(marks_[size_t(to)] - marks_[size_t(from)]).count();
  }
  void clear_marks() override { marks_.clear(); }
  size_t sparse_granule() const override { return size_t(sysconf(_SC_PAGESIZE)); }

 protected:
  void* device_alloc(size_t bytes) override {
    void* p = std::calloc(bytes ? bytes : 1, 1);
    if (!p) throw UsageError(strf("out of host memory: %zu bytes requested", bytes));
    return p;
  }
  void device_free(void* p) override { std::free(p); }
  // The address space mapped inaccessible, then the backed pages opened: anonymous pages, zero
  // and taken from the system when first touched (as calloc's); a stray access elsewhere faults.
  void* device_alloc_sparse(size_t bytes, const Ranges& mapped) override {
    void* p = mmap(nullptr, bytes ? bytes : 1, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (p == MAP_FAILED)
      throw UsageError(strf("out of host address space: %zu bytes requested", bytes));
    for (auto [b, e] : mapped)
      if (mprotect(static_cast<char*>(p) + b, e - b, PROT_READ | PROT_WRITE) != 0) {
        device_free_sparse(p, bytes, mapped);
        throw UsageError(strf("out of host memory: %zu bytes requested", covered(mapped)));
      }
    return p;
  }
  void device_free_sparse(void* p, size_t bytes, const Ranges&) override {
    munmap(p, bytes ? bytes : 1);
  }

 private:
  bool holds(const T* p, size_t n) const {  // [p, p + n) lies within the weights
    return weights_ && p >= weights_ && p + n <= weights_ + weights_n_;
  }
  size_t in_weights(const T* p, size_t n) const {  // offset of [p, p + n) in the weights
    LMT_ASSERT(holds(p, n), "a range outside the weights given to set_weights");
    return size_t(p - weights_);
  }
  // [p, p + n) rounded (to nearest even) into the weights' bf16 copy, if it exists and holds them.
  void copy_part(const T* p, size_t n) {
    if (!weights16_ || !holds(p, n)) return;
    uint16_t* c = weights16_ + in_weights(p, n);
    for (size_t i = 0; i < n; ++i) c[i] = to_bf16(float(p[i]));
  }
  // A matmul's operand w[0, n) as this rank holds it: w itself, or for a weight that is partly
  // backed its bf16 copy widened (the values the bf16 policy rounds w to: results do not change)
  // into scratch that grows to the largest weight and is kept.
  const T* weight(const T* w, size_t n, Precision p) {
    if (!partial_ || !holds(w, n)) return w;
    LMT_ASSERT(p == Precision::bf16, "partly backed weights exist only under the bf16 policy");
    if (n > widened_n_) {
      this->release(widened_);
      widened_ = static_cast<T*>(this->allocate(n * sizeof(T), MemTag::workspace));
      widened_n_ = n;
    }
    const uint16_t* c = weights16_ + in_weights(w, n);
    for (size_t i = 0; i < n; ++i) widened_[i] = T(from_bf16(c[i]));
    return widened_;
  }
  static void round_bf16(T* x, int64_t n) {
    for (int64_t i = 0; i < n; ++i) x[i] = round_to(Precision::bf16, x[i]);
  }
  std::vector<std::chrono::steady_clock::time_point> marks_;
  const T* weights_ = nullptr;
  size_t weights_n_ = 0;
  bool partial_ = false;  // the weights are partly backed: the matmuls read the bf16 copy
  uint16_t* weights16_ = nullptr;
  T* widened_ = nullptr;  // weight()'s scratch
  size_t widened_n_ = 0;
};

}  // namespace

Ranges merged(Ranges r) {
  std::sort(r.begin(), r.end());
  Ranges out;
  for (auto [b, e] : r) {
    if (b >= e) continue;
    if (!out.empty() && b <= out.back().second) out.back().second = std::max(out.back().second, e);
    else out.push_back({b, e});
  }
  return out;
}

Ranges granules(const Ranges& bytes, size_t granule) {
  Ranges r;
  for (auto [b, e] : bytes)
    if (b < e) r.push_back({b / granule * granule, (e + granule - 1) / granule * granule});
  return merged(std::move(r));
}

size_t covered(const Ranges& r) {
  size_t n = 0;
  for (auto [b, e] : r) n += e - b;
  return n;
}

std::vector<Run> runs(size_t begin, size_t end, const Ranges& in) {
  std::vector<Run> out;
  size_t at = begin;  // the runs cover [begin, at)
  for (auto [b, e] : in) {
    b = std::clamp(b, at, end), e = std::clamp(e, b, end);
    if (b > at) out.push_back({at, b, false});
    if (e > b) out.push_back({b, e, true});
    at = e;
  }
  if (end > at) out.push_back({at, end, false});
  return out;
}

void advise_huge_pages(void* p, size_t bytes) {
  constexpr uintptr_t kHuge = uintptr_t(2) << 20;  // x86-64's and arm64's (4 KiB base) huge page
  const uintptr_t a = (reinterpret_cast<uintptr_t>(p) + kHuge - 1) & ~(kHuge - 1);
  const uintptr_t b = (reinterpret_cast<uintptr_t>(p) + bytes) & ~(kHuge - 1);
  if (b > a) (void)madvise(reinterpret_cast<void*>(a), b - a, MADV_HUGEPAGE);  // a hint only
}

const char* mem_tag_name(MemTag t) {
  static const char* names[] = {"params", "grads", "optimizer", "activations", "workspace"};
  return names[size_t(t)];
}

template <typename T> std::unique_ptr<Backend<T>> make_cpu_backend() {
  return std::make_unique<CpuBackend<T>>();
}
template std::unique_ptr<Backend<float>> make_cpu_backend();
template std::unique_ptr<Backend<double>> make_cpu_backend();

}  // namespace lmt
