// AdamW over flat buffers, one thread per element (optimizer.hpp has the update rule), optionally
// also writing the new parameters rounded to bf16 (the copy bf16 matmuls read); g is read scaled
// by gradient clipping's factor:
//   g *= grad_scale;  p *= 1 - lr wd;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
//   p -= lr/bc1 * m / (sqrt(v)/sqrt(bc2) + eps)
// With bf16 moments (optim.state_dtype = "bf16") each element runs adamw_bf16.hpp's code, which
// the CPU reference runs too: the same bits, stochastic rounding included; four elements a
// thread where the buffers are aligned for vector loads.
// And the deterministic sum used for the loss and the global gradient norm: a fixed grid of
// kSumPartials blocks writes partial sums (fp64), one block adds them in order.
#include <cuda_bf16.h>

#include <cmath>

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

__global__ void adamw_bf16_kernel(float* p, const float* g, uint16_t* m, uint16_t* v,
                                  __nv_bfloat16* p16, size_t n, uint64_t index,
                                  AdamWBf16Scalars<float> k) {
  size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  uint16_t mi = m[i], vi = v[i];
  const float pi = adamw_bf16_element(p[i], g[i], mi, vi, index + i, k);
  m[i] = mi, v[i] = vi, p[i] = pi;
  if (p16) p16[i] = __float2bfloat16_rn(pi);
}

// The same, four consecutive elements a thread with 16-byte (p, g) and 8-byte (m, v, p16) loads
// and stores: more bytes in flight per thread for a kernel bound by memory traffic. n4: groups
// of four; every pointer aligned for them (the launcher checks).
__global__ void adamw_bf16_x4_kernel(float* p, const float* g, uint16_t* m, uint16_t* v,
                                     __nv_bfloat16* p16, size_t n4, uint64_t index,
                                     AdamWBf16Scalars<float> k) {
  size_t q = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (q >= n4) return;
  const float4 pq = reinterpret_cast<const float4*>(p)[q], gq = reinterpret_cast<const float4*>(g)[q];
  const uint2 mq = reinterpret_cast<const uint2*>(m)[q], vq = reinterpret_cast<const uint2*>(v)[q];
  float ps[4] = {pq.x, pq.y, pq.z, pq.w};
  const float gs[4] = {gq.x, gq.y, gq.z, gq.w};
  uint16_t ms[4] = {uint16_t(mq.x), uint16_t(mq.x >> 16), uint16_t(mq.y), uint16_t(mq.y >> 16)};
  uint16_t vs[4] = {uint16_t(vq.x), uint16_t(vq.x >> 16), uint16_t(vq.y), uint16_t(vq.y >> 16)};
#pragma unroll
  for (int j = 0; j < 4; ++j)
    ps[j] = adamw_bf16_element(ps[j], gs[j], ms[j], vs[j], index + 4 * q + j, k);
  reinterpret_cast<float4*>(p)[q] = make_float4(ps[0], ps[1], ps[2], ps[3]);
  reinterpret_cast<uint2*>(m)[q] = make_uint2(ms[0] | uint32_t(ms[1]) << 16, ms[2] | uint32_t(ms[3]) << 16);
  reinterpret_cast<uint2*>(v)[q] = make_uint2(vs[0] | uint32_t(vs[1]) << 16, vs[2] | uint32_t(vs[3]) << 16);
  if (p16) store4(p16 + 4 * q, make_float4(ps[0], ps[1], ps[2], ps[3]));
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

__global__ void partial_sum_kernel(const float* x, size_t n, bool squares, double* partials) {
  __shared__ double scratch[256];
  double acc = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    acc += squares ? double(x[i]) * double(x[i]) : double(x[i]);
  double total = block_sum_double(acc, scratch);
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
  const AdamWBf16Scalars<float> k = adamw_bf16_scalars<float>(s);
  auto* p16 = static_cast<__nv_bfloat16*>(p_bf16);
  // Groups of four where every array allows their loads (a whole buffer does; a ZeRO-1 piece
  // may start anywhere), then the rest one element a thread: the same bits either way.
  size_t n4 = 0;
  if (aligned_for(p, 16) && aligned_for(g, 16) && aligned_for(m, 8) && aligned_for(v, 8) &&
      (!p16 || aligned_for(p16, 8)))
    n4 = n / 4;
  if (n4) {
    adamw_bf16_x4_kernel<<<blocks_for(int64_t(n4), 256), 256, 0, stream>>>(p, g, m, v, p16, n4,
                                                                            index, k);
    CUDA_LAUNCH_CHECK();
  }
  const size_t done = 4 * n4;
  if (done < n) {
    adamw_bf16_kernel<<<blocks_for(int64_t(n - done), 256), 256, 0, stream>>>(
        p + done, g + done, m + done, v + done, p16 ? p16 + done : nullptr, n - done,
        index + done, k);
    CUDA_LAUNCH_CHECK();
  }
}

void sum(const float* x, size_t n, bool squares, double* partials, double* out,
         cudaStream_t s) {
  partial_sum_kernel<<<kSumPartials, 256, 0, s>>>(x, n, squares, partials);
  CUDA_LAUNCH_CHECK();
  final_sum_kernel<<<1, 256, 0, s>>>(partials, kSumPartials, out);
  CUDA_LAUNCH_CHECK();
}

}  // namespace lmt::cuda
