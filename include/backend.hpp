// A backend: where tensors live and how each op of the graph runs on them.
//
// The model graph (model.cpp) is written once against this interface; the CPU backend forwards
// to the reference loops of cpu_ops.hpp (which document each op's maths and layout), the CUDA
// backend to our kernels and cuBLAS. Pointers passed to ops are the backend's own memory.
#pragma once
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "check.hpp"
#include "cpu_ops.hpp"

namespace lmt {

// [begin, end) offsets (elements or bytes, as each use says), sorted and disjoint.
using Ranges = std::vector<std::pair<size_t, size_t>>;
// The ranges sorted, empty ones dropped, those that overlap or touch joined.
Ranges merged(Ranges r);
// What a sparse allocation backs of byte ranges: each widened to whole granules of `granule`
// bytes (from offset 0, which the allocation aligns), merged.
Ranges granules(const Ranges& bytes, size_t granule);
size_t covered(const Ranges& r);  // the sum of the ranges' lengths
// [begin, end) cut where the ranges `in` (sorted, disjoint) begin or end: its runs in order,
// each inside them or outside them all.
struct Run {
  size_t begin, end;
  bool inside;
};
std::vector<Run> runs(size_t begin, size_t end, const Ranges& in);
inline bool is_whole(const Ranges& r, size_t n) { return r == Ranges{{0, n}}; }  // [0, n), all
inline Ranges in_bytes(Ranges elems, size_t elem_bytes) {  // element ranges as byte ranges
  for (auto& [b, e] : elems) b *= elem_bytes, e *= elem_bytes;
  return elems;
}

// How a tensor's elements are stored in backend memory: as T, or as bf16 values (the bf16
// activations of Backend's notes: the GPU packs them 2 bytes each, Backend::bf16_elems; the CPU
// keeps them as T, rounded to bf16).
enum class Stored { full, bf16 };

// A tensor in backend memory and its storage: what an op reads or writes, so that its signature
// says so. A plain pointer is a View of a tensor stored in T.
template <typename E> struct View {
  E* data;
  Stored stored = Stored::full;
  View(E* d, Stored s = Stored::full) : data(d), stored(s) {}
  template <typename F>
    requires std::is_convertible_v<F*, E*>
  View(View<F> v) : data(v.data), stored(v.stored) {}
  bool bf16() const { return stored == Stored::bf16; }
};

// What an allocation holds: every byte a backend hands out carries one of these.
enum class MemTag { params, grads, optimizer, activations, workspace, count };
const char* mem_tag_name(MemTag t);

// Bytes in use per tag, their total, and the total's high-water mark.
struct MemoryStats {
  std::array<size_t, size_t(MemTag::count)> current{};
  size_t total = 0, peak = 0;
};

template <typename T> class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;
  virtual std::string device_name() const { return name(); }  // e.g. the GPU's model

  // Memory: the one tagged allocator. allocate returns zeroed memory and records it under its tag;
  // release forgets it. upload/download copy from/to host memory.
  void* allocate(size_t bytes, MemTag tag) {
    void* p = device_alloc(bytes);
    record(p, {bytes, tag, false, 0, {}});
    return p;
  }
  // `bytes` of address space of which only the byte ranges `backed` are memory (zeroed), each
  // widened to whole granules (sparse_granule()); an access elsewhere faults. It is recorded with
  // the granules' bytes only, so that memory reports and plan mode count what is really held
  // (ZeRO-1's sharded masters: zero1.hpp).
  void* allocate_sparse(size_t bytes, MemTag tag, const Ranges& backed) {
    Ranges mapped = granules(backed, sparse_granule());
    LMT_ASSERT(mapped.empty() || merged(backed).back().second <= bytes,
               "a backed range past the end of a sparse allocation");
    void* p = device_alloc_sparse(bytes, mapped);
    record(p, {covered(mapped), tag, true, bytes, std::move(mapped)});
    return p;
  }
  void release(void* p) {
    auto it = live_.find(p);
    if (it == live_.end()) return;
    const Allocation& a = it->second;
    mem_.current[size_t(a.tag)] -= a.bytes;
    mem_.total -= a.bytes;
    if (a.sparse) device_free_sparse(p, a.reserved, a.mapped);
    else device_free(p);
    live_.erase(it);
  }
  const MemoryStats& memory() const { return mem_; }
  // What allocate_sparse backs at a time: the host's page, or the GPU's mapping granularity.
  virtual size_t sparse_granule() const = 0;

  virtual void upload_bytes(void* dst, const void* src, size_t bytes) = 0;
  virtual void download_bytes(void* dst, const void* src, size_t bytes) = 0;
  // Page-locks `bytes` of host memory at p until unpin_host(p), so that copies to and from it run
  // at the link's speed (cudaHostRegister); false where it could not (they then go as before,
  // through pageable memory). Nothing to do on the CPU. HostPin (below) holds such memory.
  virtual bool pin_host(void* p, size_t bytes) {
    (void)p, (void)bytes;
    return false;
  }
  virtual void unpin_host(void* p) { (void)p; }
  virtual void zero_bytes(void* p, size_t bytes) = 0;
  // Backend memory to backend memory. Unlike the others it leaves the weights' low-precision copy
  // alone: a caller that writes weights with it says so with weights_written().
  virtual void copy_bytes(void* dst, const void* src, size_t bytes) = 0;

  // The model's parameters [params, params + n): a backend may keep a low-precision copy of them
  // for matmuls (refreshed whenever they are written through the backend; weights_written() says
  // that a part was written outside, by a collective or copy_bytes, and refreshes that part in
  // stream order).
  // `backed`: the element ranges of them that are memory. Where that is not all of them (ZeRO-1's
  // sharded masters under bf16, zero1.hpp; weights without masters, optim.master_weights =
  // false) the matmuls read every weight from the bf16 copy, which is then kept whole from here
  // on and never made from the fp32 weights wholesale (that would read what is not there): its
  // writers are whoever writes the weights, each its own part (the model's set_params from host
  // values, AdamW, a collective into the copy itself, weights_written).
  virtual void set_weights(const T* params, size_t n, const Ranges& backed) {
    (void)params, (void)n, (void)backed;
  }
  virtual void forget_weights(const T* params) { (void)params; }  // before they are freed
  virtual void weights_written(const T* p, size_t n) { (void)p, (void)n; }
  // weights_bf16(): that copy of all the set_weights() weights, 2-byte elements in the same order,
  // made current if it is not (the GPU's own; the CPU backend, whose matmuls round fp32 themselves
  // where the weights are whole, keeps one only once asked, for ZeRO-1's bf16 all-gather). Where
  // it exists AdamW writes its part in the same pass as the fp32 weights, so it stays current.
  virtual void* weights_bf16() = 0;

  // Ops, as in cpu_ops.hpp.
  //
  // bf16 activations (Stored::bf16): under the bf16 policy the model stores in bf16 what
  // autocast would make bf16 and what only matmuls read, so that no matmul casts its operands:
  // the RMSNorms' outputs, the QKV projection's output (rotated in place), attention's output,
  // SwiGLU's input u and output, the logits; in backward their gradients (the RMSNorms' output
  // gradients as the matmuls write them, which the RMSNorm backward reads), and the residual
  // stream's gradient where matmuls read it (rmsnorm_bwd writes it twice: in T for the residual
  // sums and, given dx_bf16, rounded). The values are what a matmul would have rounded its
  // operand to, so results do not change. The GPU packs them as 2-byte bf16 (half the memory);
  // the CPU keeps them as T. bf16_elems(n) is the number of T elements that n such values
  // occupy. An op reads and writes each View as its `stored` says; attention's tensors (qkv,
  // out and their gradients) are stored so under p = bf16.
  virtual int64_t bf16_elems(int64_t n) const { return n; }
  // Residual adds ride on the matmuls (on the GPU, in their epilogue: no pass of their own):
  // linear_fwd's residual, if not null, is stored as y is and added to y (y = x w^T + residual,
  // summed in T, then stored).
  //
  // The residual stream in bf16 (model.residual_dtype): unlike the activations above, which hold
  // what a matmul would round them to, this changes results: the stream (the embedding's output,
  // each residual add's sum) is rounded to bf16 where it is stored, as llm.c keeps it; the
  // RMSNorms read it so (rmsnorm_fwd's and rmsnorm_bwd's x), the sums are taken in fp32. Its
  // gradient likewise: rmsnorm_bwd's dx stored in bf16 is read so and its update rounded where
  // it is stored (then the matmuls read it as it is: no rounded copy), embedding_bwd's dout too.
  virtual void linear_fwd(View<const T> x, const T* w, View<T> y, int64_t M, int64_t N,
                          int64_t K, Precision p, const T* residual) = 0;
  // The weight gradients (linear_bwd's dw, rmsnorm_bwd's dg) are written or added to as gw says.
  virtual void linear_bwd(View<const T> x, const T* w, View<const T> dy, View<T> dx, T* dw,
                          int64_t M, int64_t N, int64_t K, Precision p,
                          GradWrite gw = GradWrite::set) = 0;
  virtual void rmsnorm_fwd(View<const T> x, const T* g, View<T> y, T* rstd, int64_t rows,
                           int64_t d, double eps) = 0;
  // dx += the gradient (in place, as stored); dx_bf16, if not null (dx then in T), receives the
  // updated dx rounded to bf16, as matmuls read it.
  virtual void rmsnorm_bwd(View<const T> x, const T* g, const T* rstd, View<const T> dy,
                           View<T> dx, T* dg, int64_t rows, int64_t d, T* dx_bf16,
                           GradWrite gw = GradWrite::set) = 0;
  // RoPE's rotation (attention_fwd applies it to q and k; its inverse rides on attention_bwd).
  virtual void rope(View<T> x, int64_t B, int64_t T_, int64_t H, int64_t dh, int64_t row_stride,
                    double theta) = 0;
  // Attention saves `saved` for backward: the probabilities [B, H, T, T] (naive, where only the
  // causal part, key <= query, need be written; the CPU reference always), or the rows'
  // logsumexp [B, H, T] (flash), in fp32; attention_saved() says how many elements. Backward
  // reads qkv, the forward's out and saved. Under p = bf16, qkv, out, dout and dqkv are bf16
  // activations (above). rope_theta: 0, or RoPE's theta: the forward first rotates q and k in
  // qkv by it, in place (on the GPU, flash's Hopper kernels rotate q as they load it at short T;
  // rope's pass does the rest), and the backward's dq and dk are then the gradients of the
  // unrotated q and k, rotated back before they are stored (on the GPU, flash's kernels do so as
  // they write them).
  virtual int64_t attention_saved(int64_t B, int64_t T_, int64_t H, int64_t dh,
                                  AttentionImpl a) const {
    (void)dh, (void)a;
    return B * H * T_ * T_;
  }
  virtual void attention_fwd(T* qkv, T* out, T* saved, int64_t B, int64_t T_, int64_t H,
                             int64_t dh, Precision p, AttentionImpl a, double rope_theta) = 0;
  virtual void attention_bwd(const T* qkv, const T* out, const T* saved, const T* dout, T* dqkv,
                             int64_t B, int64_t T_, int64_t H, int64_t dh, Precision p,
                             AttentionImpl a, double rope_theta) = 0;
  // u[rows, 2f] is [W3's output | W1's] per row, one matmul's output (cpu_ops.hpp). SwiGLU's
  // tensors share one storage.
  virtual void swiglu_fwd(View<const T> u, View<T> g, int64_t rows, int64_t f) = 0;
  virtual void swiglu_bwd(View<const T> u, View<const T> dg, View<T> du, int64_t rows,
                          int64_t f) = 0;
  // W2's backward and then SwiGLU's: linear_bwd(g, w2, dy, dg, dw2, M, N, f) and
  // swiglu_bwd(u, dg, du, M, f). A backend may take dg straight into SwiGLU's backward and
  // leave the dg buffer unwritten (the GPU under bf16 on Hopper: swiglu_sm90.cu).
  virtual void swiglu_linear_bwd(View<const T> g, const T* w2, View<const T> dy, View<const T> u,
                                 View<T> dg, View<T> du, T* dw2, int64_t M, int64_t N, int64_t f,
                                 Precision p, GradWrite gw) {
    linear_bwd(g, w2, dy, dg, dw2, M, N, f, p, gw);
    swiglu_bwd(u, dg, du, M, f);
  }
  virtual void embedding_fwd(const int32_t* tokens, const T* table, View<T> out, int64_t n,
                             int64_t d) = 0;
  // order: cpu::token_order of tokens, in backend memory.
  virtual void embedding_bwd(const int32_t* tokens, const int32_t* order, View<const T> dout,
                             T* dtable, int64_t n, int64_t d) = 0;
  // The classifier: row_loss[i] = loss of row i of logits[n, V], and logits overwritten in place
  // by their gradient (cpu::cross_entropy's dlogits), stored as the logits are, unless
  // grad_scale is 0 (the loss only, logits kept). Under bf16 both are bf16 activations: one
  // [n, V] buffer in bf16, which the head's backward matmul reads as it is.
  virtual void cross_entropy(View<T> logits, const int32_t* targets, T* row_loss, int64_t n,
                             int64_t V, double grad_scale) = 0;

  // Reductions return to the host (a synchronisation on a device backend), summed in double.
  virtual double sum(const T* x, size_t n) = 0;
  virtual double sum_squares(const T* x, size_t n) = 0;
  virtual void adamw(T* p, const T* g, T* m, T* v, size_t n, const AdamWStep& s) = 0;
  // The same with m and v stored as bf16 (n 2-byte values each; optim.state_dtype = "bf16"),
  // element i being element index + i of the flat buffer: cpu::adamw_bf16, bit for bit.
  virtual void adamw_bf16(T* p, const T* g, uint16_t* m, uint16_t* v, size_t n, uint64_t index,
                          const AdamWStep& s) = 0;
  // Weights that have no fp32 master (optim.master_weights = false): w, n values of the weights'
  // bf16 copy (weights_bf16()), updated in place with stochastic rounding, their moments stored
  // in T or in bf16; element i is element index + i of the flat buffer:
  // cpu::adamw_bf16_weights, bit for bit.
  virtual void adamw_bf16_weights(uint16_t* w, const T* g, T* m, T* v, size_t n, uint64_t index,
                                  const AdamWStep& s) = 0;
  virtual void adamw_bf16_weights(uint16_t* w, const T* g, uint16_t* m, uint16_t* v, size_t n,
                                  uint64_t index, const AdamWStep& s) = 0;

  // Timing: mark() records a point in the backend's work (a CUDA event, or the host clock on
  // the CPU); elapsed_ms waits for the later mark and returns the time between the two.
  virtual int mark() = 0;
  virtual void synchronize() {}  // waits for all work enqueued so far (nothing to wait for on the CPU)
  virtual double elapsed_ms(int from, int to) = 0;
  virtual void clear_marks() = 0;

  // Recorded work: capture(body) runs body with the backend recording, not doing, the work it
  // enqueues (on the GPU a CUDA graph), and run() does all of it again with one launch (none of
  // the GPU's kernel-by-kernel launch work). Only the enqueued work is replayed, as it was
  // recorded: body may not wait for results (sum, download, elapsed_ms) nor allocate, so every
  // call in it must have run once before (cuda::Gemm's first-call choice, scratch sizes), and
  // host-side decisions made while recording (which bf16 copies to refresh) are not revisited.
  // Null where the backend records nothing (the CPU).
  struct Replay {
    virtual ~Replay() = default;
    virtual void run() = 0;
  };
  virtual std::unique_ptr<Replay> capture(const std::function<void()>& body) {
    (void)body;
    return nullptr;
  }

  // Typed helpers.
  void upload(T* dst, const T* src, size_t n) { upload_bytes(dst, src, n * sizeof(T)); }
  void download(T* dst, const T* src, size_t n) { download_bytes(dst, src, n * sizeof(T)); }

 protected:
  virtual void* device_alloc(size_t bytes) = 0;  // zeroed
  virtual void device_free(void* p) = 0;
  // `bytes` of address space with the byte ranges `mapped` (whole granules) backed and zeroed.
  virtual void* device_alloc_sparse(size_t bytes, const Ranges& mapped) = 0;
  virtual void device_free_sparse(void* p, size_t bytes, const Ranges& mapped) = 0;

 private:
  struct Allocation {
    size_t bytes;  // what it holds: all of it, or a sparse one's granules
    MemTag tag;
    bool sparse;
    size_t reserved;  // sparse: its address space, and the ranges backed in it
    Ranges mapped;
  };
  void record(void* p, Allocation a) {
    mem_.current[size_t(a.tag)] += a.bytes;
    mem_.peak = std::max(mem_.peak, mem_.total += a.bytes);
    live_[p] = std::move(a);
  }
  std::map<void*, Allocation> live_;
  MemoryStats mem_;
};

// A backend allocation that frees itself.
template <typename T, typename E = T> class BackendArray {
 public:
  BackendArray(Backend<T>& be, size_t n, MemTag tag)
      : be_(&be), p_(static_cast<E*>(be.allocate(n * sizeof(E), tag))), n_(n) {}
  // Only the element ranges `backed` are memory (Backend::allocate_sparse), unless they are all
  // of it.
  BackendArray(Backend<T>& be, size_t n, MemTag tag, const Ranges& backed) : be_(&be), n_(n) {
    const size_t bytes = n * sizeof(E);
    p_ = static_cast<E*>(is_whole(backed, n)
                             ? be.allocate(bytes, tag)
                             : be.allocate_sparse(bytes, tag, in_bytes(backed, sizeof(E))));
  }
  BackendArray(const BackendArray&) = delete;
  BackendArray& operator=(const BackendArray&) = delete;
  ~BackendArray() { be_->release(p_); }
  E* data() const { return p_; }
  size_t size() const { return n_; }

 private:
  Backend<T>* be_;
  E* p_;
  size_t n_;
};

// Asks the kernel to back [p, p + bytes) with transparent huge pages where it can (madvise): a
// fresh buffer's first touch then faults once per 2 MiB instead of once per 4 KiB.
void advise_huge_pages(void* p, size_t bytes);

// A host vector kept from one use to the next and pinned for the backend's copies
// (Backend::pin_host), as a checkpoint's copy of the state is: a fresh vector's pages cost more
// than the copy into them (design.md, Checkpoints). hold() sizes it (size(): on huge pages where
// it grows), unpinning it first where that may move it, and pins it where it is not yet. size()
// alone may run on another thread beforehand: pinning there would hold up the steps' thread's
// CUDA calls (it takes the driver's lock: design.md, Checkpoints).
template <typename T> class HostPin {
 public:
  HostPin() = default;
  HostPin(const HostPin&) = delete;
  HostPin& operator=(const HostPin&) = delete;
  ~HostPin() { release(); }
  template <typename V> static void size(std::vector<V>& v, size_t n) {
    if (v.capacity() < n) v.reserve(n), advise_huge_pages(v.data(), n * sizeof(V));
    v.resize(n);  // every page touched
  }
  template <typename V> V* hold(Backend<T>& be, std::vector<V>& v, size_t n) {
    if (v.size() != n) release(), size(v, n);
    if (at_ != v.data()) {
      release();
      be_ = &be, at_ = v.data(), pinned_ = be.pin_host(at_, n * sizeof(V));
    }
    return v.data();
  }

 private:
  void release() {
    if (pinned_) be_->unpin_host(at_);
    at_ = nullptr, pinned_ = false;
  }
  Backend<T>* be_ = nullptr;
  void* at_ = nullptr;
  bool pinned_ = false;
};

template <typename T> std::unique_ptr<Backend<T>> make_cpu_backend();
#ifdef LMTRAIN_CUDA
// On the current GPU (select_gpu); fp32 parameters, gradients and state, the precision policy in
// the matmuls and (bf16) the bf16 activations above.
std::unique_ptr<Backend<float>> make_cuda_backend();
#endif

}  // namespace lmt
