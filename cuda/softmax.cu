// The softmax of naive attention, over materialised scores [rows, T] where row r is query
// position q = r % T and only keys j <= q are visible (causal).
// Forward, in place: P[r, j] = exp(S[r, j] - max) / sum for j <= q, 0 above the diagonal.
// Backward, in place over dP: dS = P * (dP - sum_j P dP) * scale (scale: the 1/sqrt(dh) that the
// scores were multiplied by, folded in here). One warp per row (rows are short next to the
// work a block's reductions would cost: T = 512 is 16 values a lane), statistics in fp32.
// Under bf16 the scores and dP come from their matmuls in bf16 (as autocast's do) and are
// overwritten by P and dS in bf16, the next matmuls' operands; the forward also keeps P in fp32
// for the backward (j <= q only: nothing reads above the diagonal), and the backward writes P
// in bf16, which it reads anyway, for the matmul of dV.
#include <cuda_bf16.h>

#include "common.cuh"
#include "cuda_kernels.hpp"

namespace lmt::cuda {
namespace {

constexpr int kRowsPerBlock = 8;  // one warp each

// S: float (P over the scores, and P32 null) or bf16 (P32: P in fp32, j <= q only).
template <typename S>
__global__ void softmax_fwd_kernel(S* scores, float* P32, int64_t rows, int64_t T) {
  const int64_t r = blockIdx.x * int64_t(kRowsPerBlock) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;
  S* row = scores + r * T;
  const int64_t q = r % T;
  float mx = -INFINITY;
  for (int64_t j = lane; j <= q; j += 32) mx = fmaxf(mx, float(row[j]));
  mx = warp_reduce<true>(mx);
  float sum = 0;
  for (int64_t j = lane; j <= q; j += 32) sum += expf(float(row[j]) - mx);
  const float inv = 1.0f / warp_reduce<false>(sum);
  for (int64_t j = lane; j < T; j += 32) {
    float p = j <= q ? expf(float(row[j]) - mx) * inv : 0.0f;
    row[j] = stored<S>(p);
    if (P32 && j <= q) P32[r * T + j] = p;
  }
}

// D: float (P16 null) or bf16 (P16: P rounded to bf16).
template <typename D>
__global__ void softmax_bwd_kernel(const float* P, D* dP, __nv_bfloat16* P16, int64_t rows,
                                   int64_t T, float scale) {
  const int64_t r = blockIdx.x * int64_t(kRowsPerBlock) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;
  const float* p = P + r * T;
  D* dp = dP + r * T;
  const int64_t q = r % T;
  float dot = 0;
  for (int64_t j = lane; j <= q; j += 32) dot += p[j] * float(dp[j]);
  dot = warp_reduce<false>(dot);
  for (int64_t j = lane; j < T; j += 32) {
    const float pj = j <= q ? p[j] : 0.0f, ds = j <= q ? pj * (float(dp[j]) - dot) * scale : 0.0f;
    dp[j] = stored<D>(ds);
    if (P16) P16[r * T + j] = __float2bfloat16_rn(pj);
  }
}

}  // namespace

void softmax_causal_fwd(void* scores, float* probs, int64_t rows, int64_t T, cudaStream_t s) {
  const int blocks = blocks_for(rows, kRowsPerBlock), threads = 32 * kRowsPerBlock;
  if (probs)
    softmax_fwd_kernel<<<blocks, threads, 0, s>>>(static_cast<__nv_bfloat16*>(scores), probs,
                                                  rows, T);
  else
    softmax_fwd_kernel<<<blocks, threads, 0, s>>>(static_cast<float*>(scores), probs, rows, T);
  CUDA_LAUNCH_CHECK();
}

void softmax_causal_bwd(const float* P, void* dP, void* P_bf16, int64_t rows, int64_t T,
                        float scale, cudaStream_t s) {
  auto* P16 = static_cast<__nv_bfloat16*>(P_bf16);
  const int blocks = blocks_for(rows, kRowsPerBlock), threads = 32 * kRowsPerBlock;
  if (P16)
    softmax_bwd_kernel<<<blocks, threads, 0, s>>>(P, static_cast<__nv_bfloat16*>(dP), P16, rows,
                                                  T, scale);
  else
    softmax_bwd_kernel<<<blocks, threads, 0, s>>>(P, static_cast<float*>(dP), P16, rows, T, scale);
  CUDA_LAUNCH_CHECK();
}

}  // namespace lmt::cuda
