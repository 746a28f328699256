// The softmax of naive attention, over materialised scores [rows, T] where row r is query
// position q = r % T and only keys j <= q are visible (causal).
// Forward, in place: P[r, j] = exp(S[r, j] - max) / sum for j <= q, 0 above the diagonal.
// Backward, in place over dP: dS = P * (dP - sum_j P dP) * scale (scale: the 1/sqrt(dh) that the
// scores were multiplied by, folded in here). One block per row, statistics in fp32. Either may
// also write its result rounded to bf16 (for a bf16 matmul next), saving a separate pass; the
// backward also P, which it reads anyway, for the matmul of dV.
#include <cuda_bf16.h>

#include "common.cuh"
#include "cuda_kernels.hpp"

namespace lmt::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void softmax_fwd_kernel(float* S, __nv_bfloat16* P16, int64_t T) {
  __shared__ float scratch[32];
  float* row = S + blockIdx.x * T;
  const int64_t q = blockIdx.x % T;
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j <= q; j += blockDim.x) mx = fmaxf(mx, row[j]);
  mx = block_reduce<true>(mx, scratch);
  float sum = 0;
  for (int64_t j = threadIdx.x; j <= q; j += blockDim.x) sum += expf(row[j] - mx);
  float inv = 1.0f / block_reduce<false>(sum, scratch);
  for (int64_t j = threadIdx.x; j < T; j += blockDim.x) {
    float p = j <= q ? expf(row[j] - mx) * inv : 0.0f;
    row[j] = p;
    if (P16) P16[blockIdx.x * T + j] = __float2bfloat16_rn(p);
  }
}

__global__ void softmax_bwd_kernel(const float* P, float* dP, __nv_bfloat16* dS16,
                                   __nv_bfloat16* P16, int64_t T, float scale) {
  __shared__ float scratch[32];
  const float* p = P + blockIdx.x * T;
  float* dp = dP + blockIdx.x * T;
  const int64_t q = blockIdx.x % T;
  float dot = 0;
  for (int64_t j = threadIdx.x; j <= q; j += blockDim.x) dot += p[j] * dp[j];
  dot = block_reduce<false>(dot, scratch);
  for (int64_t j = threadIdx.x; j < T; j += blockDim.x) {
    const float pj = j <= q ? p[j] : 0.0f, ds = j <= q ? pj * (dp[j] - dot) * scale : 0.0f;
    dp[j] = ds;
    if (dS16) dS16[blockIdx.x * T + j] = __float2bfloat16_rn(ds);
    if (P16) P16[blockIdx.x * T + j] = __float2bfloat16_rn(pj);
  }
}

}  // namespace

void softmax_causal_fwd(float* scores, void* probs_bf16, int64_t rows, int64_t T, cudaStream_t s) {
  softmax_fwd_kernel<<<unsigned(rows), kThreads, 0, s>>>(
      scores, static_cast<__nv_bfloat16*>(probs_bf16), T);
  CUDA_LAUNCH_CHECK();
}

void softmax_causal_bwd(const float* P, float* dP, void* dS_bf16, void* P_bf16, int64_t rows,
                        int64_t T, float scale, cudaStream_t s) {
  softmax_bwd_kernel<<<unsigned(rows), kThreads, 0, s>>>(
      P, dP, static_cast<__nv_bfloat16*>(dS_bf16), static_cast<__nv_bfloat16*>(P_bf16), T, scale);
  CUDA_LAUNCH_CHECK();
}

}  // namespace lmt::cuda
