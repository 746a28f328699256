// The classifier's softmax cross-entropy fused with its gradient, in place, one block per row of
// logits[n, V] (fp32, or bf16 as the LM head writes them under the bf16 policy; fp32 arithmetic):
//   row_loss = logsumexp(z) - z[target];  z <- (softmax(z) - onehot(target)) * grad_scale.
// Pass 1 reads the row once: each thread keeps a running max m and the sum s of exp(z - m) over
// its elements (s rescaled when m grows), and the block merges the threads' (m, s) in a fixed
// order, so the result does not depend on timing. Pass 2 reads the row again (from L2: the
// block read it a moment ago, 100 KB at V 50 304 in bf16) and writes the gradient over it in the
// same dtype, which the head's backward matmul reads as it is. grad_scale 0: the loss only, the
// logits left as they are. Keeping each thread's share of the row in registers between the passes
// instead (up to eight 16-byte vectors a thread; the row read once, its max taken before its sum)
// took as long at gpt2-small's 16 384 x 50 304: 1.36, 1.38, 1.36, 1.36 ms against 1.35, 1.36,
// 1.39, 1.36 (bench's kernel summary, on an H100, one call): at 58 registers a thread a block
// holds its SM alone, where two blocks of this kernel share one. Nor did staging rows in shared
// memory pay (on a Hopper GPU a block an SM holding two rows, each copied in with one bulk copy
// as its buffer came free, both passes reading the copy): 1.28, 1.34 ms against 1.34, 1.36 at
// 16 x 1024 rows, but 0.77, 0.77 against 0.69, 0.68 at 8 x 1024 (bench's kernel summary, on an
// H100, one call, the step no faster). Nor did pass 2 with streaming stores (__stcs, evict-first),
// or walking the row backwards (its most recently read lines first), or both: gpt2-small's
// 16 x 1024 step 30.71, 30.59 | 30.70, 30.73 | 30.70, 30.79 ms against 30.57, 30.73 (bench,
// graphs, on an H100, one call). Nor fewer instructions: under ncu (an H100, base clock) the
// kernel issues 920M warp instructions, the issue slots busy 79 % of the time, DRAM at 75 % of its
// bandwidth and 1.88 GB read where the logits are 1.65; with exp_of on ex2.approx.ftz (exp2f is
// ex2.approx, denormals kept) and the target's compare taken out of the elements' loop, 637M,
// 53 %, 1.65 GB read, and 1.45 ms against 1.39 (in two calls); with pass 2's four loads also
// issued before its stores, 1.44, and the step 30.34, 30.23, 30.33 ms against 30.08, 30.21, 30.19
// (bench, graphs, alternating, one call).
#include <type_traits>

#include "common.cuh"
#include "cuda_kernels.hpp"

namespace lmt::cuda {
namespace {

// A block of 1024 threads a row: at gpt2-small's 16 384 rows of 50 304 bf16 logits the kernel
// took 1.35 and 1.38 ms against 1.65 with 512 and 1.67 with 256 (on an H100, one call).
constexpr int kThreads = 1024;

// A 16-byte vector holds kPer<E> elements; rows are read and written so where aligned.
template <typename E> constexpr int kPer = 16 / int(sizeof(E));

template <typename E> __device__ inline void unpack(uint4 u, float (&f)[kPer<E>]) {
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (std::is_same_v<E, float>) {
      f[i] = __uint_as_float(w[i]);
    } else {
      const float2 p = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w[i]));
      f[2 * i] = p.x, f[2 * i + 1] = p.y;
    }
  }
}
template <typename E> __device__ inline uint4 pack(const float (&f)[kPer<E>]) {
  uint32_t w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (std::is_same_v<E, float>) {
      w[i] = __float_as_uint(f[i]);
    } else {
      const __nv_bfloat162 p = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
      w[i] = *reinterpret_cast<const uint32_t*>(&p);
    }
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}
__device__ inline float to_float(float x) { return x; }
__device__ inline float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

// e^d for d = x - (a max or the logsumexp), d <= 0: expf for fp32 logits; for bf16 ones exp2f of
// d log2(e) (MUFU's ex2, 2 ulp, plus the product's rounding: ~1e-6 relative where |d| < 20), a
// third of expf's instructions, where the gradient is rounded to bf16's 8 bits anyway.
template <typename E> __device__ inline float exp_of(float d) {
  if constexpr (std::is_same_v<E, float>) return expf(d);
  else return exp2f(d * 1.4426950408889634f);
}

// A running max m and sum s of exp(z - m); merging two is exact up to rounding in any order.
struct MaxSum {
  float m, s;
};
template <typename E> __device__ inline MaxSum merge(MaxSum a, MaxSum b) {
  const float m = fmaxf(a.m, b.m);
  if (m == -INFINITY) return a;  // nothing yet on either side
  return {m, a.s * exp_of<E>(a.m - m) + b.s * exp_of<E>(b.m - m)};
}

// Over the block, in a fixed order; every thread gets the result. scratch: 32 entries.
template <typename E> __device__ inline MaxSum block_merge(MaxSum v, MaxSum* scratch) {
  for (int o = 16; o > 0; o >>= 1)
    v = merge<E>(v, {__shfl_xor_sync(0xffffffffu, v.m, o), __shfl_xor_sync(0xffffffffu, v.s, o)});
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < int(blockDim.x / 32) ? scratch[lane] : MaxSum{-INFINITY, 0};
  for (int o = 16; o > 0; o >>= 1)
    v = merge<E>(v, {__shfl_xor_sync(0xffffffffu, v.m, o), __shfl_xor_sync(0xffffffffu, v.s, o)});
  return v;
}

// A row [0, V) as a scalar head up to the first 16-byte boundary, whole vectors, a scalar tail.
struct RowSplit {
  int64_t head, vecs, tail;  // tail: where the scalar tail starts
};
template <typename E> __device__ inline RowSplit split(const E* row, int64_t V) {
  const int64_t off = int64_t(reinterpret_cast<uintptr_t>(row) % 16 / sizeof(E));
  const int64_t head = off ? min(V, int64_t(kPer<E>) - off) : 0;
  const int64_t vecs = (V - head) / kPer<E>;
  return {head, vecs, head + vecs * kPer<E>};
}

template <typename E>
__global__ void __launch_bounds__(kThreads)
    cross_entropy_kernel(E* logits, const int32_t* targets, float* row_loss, int64_t V,
                         float grad_scale) {
  __shared__ MaxSum scratch[32];
  E* z = logits + blockIdx.x * V;
  const int32_t t = targets[blockIdx.x];
  const float zt = to_float(z[t]);  // read before any thread writes the row
  const RowSplit r = split(z, V);
  const uint4* zv = reinterpret_cast<const uint4*>(z + r.head);

  MaxSum acc{-INFINITY, 0};
  auto scalar = [&](int64_t v) { acc = merge<E>(acc, {to_float(z[v]), 1}); };
  for (int64_t v = threadIdx.x; v < r.head; v += kThreads) scalar(v);
#pragma unroll 4
  for (int64_t i = threadIdx.x; i < r.vecs; i += kThreads) {
    float f[kPer<E>];
    unpack<E>(zv[i], f);
    float m = acc.m;
#pragma unroll
    for (float x : f) m = fmaxf(m, x);
    if (m == -INFINITY) continue;
    float s = acc.s * exp_of<E>(acc.m - m);
#pragma unroll
    for (float x : f) s += exp_of<E>(x - m);
    acc = {m, s};
  }
  for (int64_t v = r.tail + threadIdx.x; v < V; v += kThreads) scalar(v);
  acc = block_merge<E>(acc, scratch);
  if (threadIdx.x == 0) row_loss[blockIdx.x] = (acc.m - zt) + logf(acc.s);
  if (grad_scale == 0) return;

  const float lse = acc.m + logf(acc.s);
  auto grad = [&](float x, int64_t v) {
    return (exp_of<E>(x - lse) - (v == t ? 1.0f : 0.0f)) * grad_scale;
  };
  for (int64_t v = threadIdx.x; v < r.head; v += kThreads) z[v] = E(grad(to_float(z[v]), v));
  uint4* gv = reinterpret_cast<uint4*>(z + r.head);
#pragma unroll 4
  for (int64_t i = threadIdx.x; i < r.vecs; i += kThreads) {
    float f[kPer<E>];
    unpack<E>(gv[i], f);
    const int64_t v0 = r.head + i * kPer<E>;
#pragma unroll
    for (int k = 0; k < kPer<E>; ++k) f[k] = grad(f[k], v0 + k);
    gv[i] = pack<E>(f);
  }
  for (int64_t v = r.tail + threadIdx.x; v < V; v += kThreads) z[v] = E(grad(to_float(z[v]), v));
}

}  // namespace

void cross_entropy(void* logits, bool bf16, const int32_t* targets, float* row_loss, int64_t n,
                   int64_t V, double grad_scale, cudaStream_t s) {
  if (bf16)
    cross_entropy_kernel<<<unsigned(n), kThreads, 0, s>>>(
        static_cast<__nv_bfloat16*>(logits), targets, row_loss, V, float(grad_scale));
  else
    cross_entropy_kernel<<<unsigned(n), kThreads, 0, s>>>(static_cast<float*>(logits), targets,
                                                          row_loss, V, float(grad_scale));
  CUDA_LAUNCH_CHECK();
}

}  // namespace lmt::cuda
