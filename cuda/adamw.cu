// AdamW over flat buffers, one thread per element (optimizer.hpp has the update rule), optionally
// also writing the new parameters rounded to bf16 (the copy bf16 matmuls read); g is read scaled
// by gradient clipping's factor:
//   g *= grad_scale;  p *= 1 - lr wd;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
//   p -= lr/bc1 * m / (sqrt(v)/sqrt(bc2) + eps)
// With bf16 moments (optim.state_dtype = "bf16"), and for weights that have no fp32 master but
// their bf16 copy (optim.master_weights = false), each element runs adamw_bf16.hpp's code, which
// the CPU reference runs too: the same bits, stochastic rounding included; four elements a
// thread where the buffers are aligned for vector loads.
// And the deterministic sum used for the loss and the global gradient norm: a fixed grid of
// kSumPartials blocks writes partial sums (fp64), one block adds them in order.
#include <cuda_bf16.h>

#include <cmath>
#include <type_traits>

#include "adamw_bf16.hpp"
#include "common.cuh"
#include "cuda_kernels.hpp"

namespace lmt::cuda {
namespace {

__global__ void adamw_kernel(float* p, const float* g, float* m, float* v, __nv_bfloat16* p16,
                             size_t n, float grad_scale, float b1, float b2, float decay,
                             float step_size, float bc2_sqrt, float eps) {
  size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  float gi = g[i] * grad_scale, pi = p[i] * decay;
  float mi = b1 * m[i] + (1.0f - b1) * gi, vi = b2 * v[i] + (1.0f - b2) * gi * gi;
  m[i] = mi, v[i] = vi;
  pi -= step_size * mi / (sqrtf(vi) / bc2_sqrt + eps);
  p[i] = pi;
  if (p16) p16[i] = __float2bfloat16_rn(pi);
}

// Elements [at, at + 4) of x (fp32, or 2-byte bf16 bits) in registers and back, as one 16-byte
// or 8-byte vector where `vec` says they are all there and aligned for it, else those below n
// one at a time.
__device__ inline void load_part(const float* x, float* r, size_t at, size_t n, bool vec) {
  if (vec) {
    const float4 q = *reinterpret_cast<const float4*>(x + at);
    r[0] = q.x, r[1] = q.y, r[2] = q.z, r[3] = q.w;
    return;
  }
  for (int j = 0; j < 4 && at + j < n; ++j) r[j] = x[at + j];
}
__device__ inline void load_part(const uint16_t* x, uint16_t* r, size_t at, size_t n, bool vec) {
  if (vec) {
    const uint2 q = *reinterpret_cast<const uint2*>(x + at);
    r[0] = uint16_t(q.x), r[1] = uint16_t(q.x >> 16), r[2] = uint16_t(q.y), r[3] = uint16_t(q.y >> 16);
    return;
  }
  for (int j = 0; j < 4 && at + j < n; ++j) r[j] = x[at + j];
}
__device__ inline void store_part(float* x, const float* r, size_t at, size_t n, bool vec) {
  if (vec) {
    *reinterpret_cast<float4*>(x + at) = make_float4(r[0], r[1], r[2], r[3]);
    return;
  }
  for (int j = 0; j < 4 && at + j < n; ++j) x[at + j] = r[j];
}
__device__ inline void store_part(uint16_t* x, const uint16_t* r, size_t at, size_t n, bool vec) {
  if (vec) {
    *reinterpret_cast<uint2*>(x + at) =
        make_uint2(r[0] | uint32_t(r[1]) << 16, r[2] | uint32_t(r[3]) << 16);
    return;
  }
  for (int j = 0; j < 4 && at + j < n; ++j) x[at + j] = r[j];
}

// One element of adamw_fours_kernel's: an fp32 master updated and its bf16 copy rounded to
// nearest into `rounded`, or a weight held only as bf16 updated in place.
template <typename W, typename M>
__device__ inline void adamw_element(W& p, float g, M& m, M& v, uint16_t& rounded, uint64_t index,
                                     const AdamWBf16Scalars<float>& k) {
  if constexpr (std::is_same_v<W, float>) {
    p = adamw_bf16_element(p, g, m, v, index, k);
    rounded = __bfloat16_as_ushort(__float2bfloat16_rn(p));
  } else {
    adamw_bf16_weight_element(p, g, m, v, index, k);
  }
}

// Four consecutive elements a thread (fewer in the last), loaded and stored as vectors where Vec
// says every array is aligned for them (more bytes in flight per thread), else element by
// element. The weights p: fp32 masters (W float, moments M bf16 bits; p16 null or the weights'
// bf16 copy of p's part), or weights held only as bf16 (W bf16 bits, p16 null, moments M float
// or bf16 bits). A whole vector's four elements run without a bound check each: the kernel issues
// about as many instructions as its memory traffic allows (the hash, a division, a square root and
// up to three roundings an element), so every one saved counts.
template <typename W, typename M, bool Vec>
__global__ void adamw_fours_kernel(W* p, const float* g, M* m, M* v, uint16_t* p16, size_t n,
                                   uint64_t index, AdamWBf16Scalars<float> k) {
  const size_t at = 4 * (blockIdx.x * size_t(blockDim.x) + threadIdx.x);
  if (at >= n) return;
  const bool vec = Vec && at + 4 <= n;
  W ps[4];
  float gs[4];
  M ms[4], vs[4];
  uint16_t rounded[4];
  load_part(p, ps, at, n, vec), load_part(g, gs, at, n, vec);
  load_part(m, ms, at, n, vec), load_part(v, vs, at, n, vec);
  if (vec) {
#pragma unroll
    for (int j = 0; j < 4; ++j) adamw_element(ps[j], gs[j], ms[j], vs[j], rounded[j], index + at + j, k);
  } else {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if (at + j >= n) break;
      adamw_element(ps[j], gs[j], ms[j], vs[j], rounded[j], index + at + j, k);
    }
  }
  store_part(p, ps, at, n, vec), store_part(m, ms, at, n, vec), store_part(v, vs, at, n, vec);
  if (p16) store_part(p16, rounded, at, n, vec);
}

// Vectors where every array allows them (a whole buffer does; a ZeRO-1 piece may start anywhere):
// the same element code, so the same bits, either way.
template <typename W, typename M>
void launch_fours(W* p, const float* g, M* m, M* v, uint16_t* p16, size_t n, uint64_t index,
                  const AdamWStep& s, cudaStream_t stream) {
  const AdamWBf16Scalars<float> k = adamw_bf16_scalars<float>(s);
  const bool vec = aligned_for(p, 4 * sizeof(W)) && aligned_for(g, 16) &&
                   aligned_for(m, 4 * sizeof(M)) && aligned_for(v, 4 * sizeof(M)) &&
                   (!p16 || aligned_for(p16, 8));
  const int blocks = blocks_for(int64_t((n + 3) / 4), 256);
  if (vec) adamw_fours_kernel<W, M, true><<<blocks, 256, 0, stream>>>(p, g, m, v, p16, n, index, k);
  else adamw_fours_kernel<W, M, false><<<blocks, 256, 0, stream>>>(p, g, m, v, p16, n, index, k);
  CUDA_LAUNCH_CHECK();
}

__device__ double block_sum_double(double v, double* scratch) {
  scratch[threadIdx.x] = v;
  __syncthreads();
  for (int o = blockDim.x / 2; o > 0; o >>= 1) {
    if (int(threadIdx.x) < o) scratch[threadIdx.x] += scratch[threadIdx.x + o];
    __syncthreads();
  }
  return scratch[0];
}

// Each thread adds its elements in a fixed order: 16-byte vectors of x (where x is aligned for
// them) strided by the grid, then the scalar tail; four sums in flight, so that the loads do not
// wait on each other's adds.
__global__ void partial_sum_kernel(const float* x, size_t n, bool squares, double* partials) {
  __shared__ double scratch[256];
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  const size_t first = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  const size_t vecs = reinterpret_cast<uintptr_t>(x) % 16 == 0 ? n / 4 : 0;
  auto term = [squares](float v) { return squares ? double(v) * double(v) : double(v); };
  double acc[4] = {0, 0, 0, 0};
  const float4* xv = reinterpret_cast<const float4*>(x);
  for (size_t i = first; i < vecs; i += stride) {
    const float4 q = xv[i];
    acc[0] += term(q.x), acc[1] += term(q.y), acc[2] += term(q.z), acc[3] += term(q.w);
  }
  for (size_t i = 4 * vecs + first; i < n; i += stride) acc[0] += term(x[i]);
  double total = block_sum_double((acc[0] + acc[1]) + (acc[2] + acc[3]), scratch);
  if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

__global__ void final_sum_kernel(const double* partials, int count, double* out) {
  __shared__ double scratch[256];
  double acc = 0;
  for (int i = threadIdx.x; i < count; i += blockDim.x) acc += partials[i];
  double total = block_sum_double(acc, scratch);
  if (threadIdx.x == 0) *out = total;
}

}  // namespace

void adamw(float* p, const float* g, float* m, float* v, void* p_bf16, size_t n,
           const AdamWStep& s, cudaStream_t stream) {
  const double bc1 = 1.0 - std::pow(s.beta1, double(s.t)), bc2 = 1.0 - std::pow(s.beta2, double(s.t));
  adamw_kernel<<<blocks_for(int64_t(n), 256), 256, 0, stream>>>(
      p, g, m, v, static_cast<__nv_bfloat16*>(p_bf16), n, float(s.grad_scale), float(s.beta1),
      float(s.beta2), float(1.0 - s.lr * s.weight_decay), float(s.lr / bc1), float(std::sqrt(bc2)),
      float(s.eps));
  CUDA_LAUNCH_CHECK();
}

void adamw_bf16(float* p, const float* g, uint16_t* m, uint16_t* v, void* p_bf16, size_t n,
                uint64_t index, const AdamWStep& s, cudaStream_t stream) {
  launch_fours(p, g, m, v, static_cast<uint16_t*>(p_bf16), n, index, s, stream);
}

void adamw_bf16_weights(uint16_t* w, const float* g, float* m, float* v, size_t n, uint64_t index,
                        const AdamWStep& s, cudaStream_t stream) {
  launch_fours(w, g, m, v, nullptr, n, index, s, stream);
}
void adamw_bf16_weights(uint16_t* w, const float* g, uint16_t* m, uint16_t* v, size_t n,
                        uint64_t index, const AdamWStep& s, cudaStream_t stream) {
  launch_fours(w, g, m, v, nullptr, n, index, s, stream);
}

void sum(const float* x, size_t n, bool squares, double* partials, double* out,
         cudaStream_t s) {
  partial_sum_kernel<<<kSumPartials, 256, 0, s>>>(x, n, squares, partials);
  CUDA_LAUNCH_CHECK();
  final_sum_kernel<<<1, 256, 0, s>>>(partials, kSumPartials, out);
  CUDA_LAUNCH_CHECK();
}

}  // namespace lmt::cuda
