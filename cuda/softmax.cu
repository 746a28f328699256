// The softmax of naive attention, over materialised scores [rows, T] where row r is query
// position q = r % T and only keys j <= q are visible (causal).
// Forward, in place: P[r, j] = exp(S[r, j] - max) / sum for j <= q, 0 above the diagonal.
// Backward, in place over dP: dS = P * (dP - sum_j P dP) * scale (scale: the 1/sqrt(dh) that the
// scores were multiplied by, folded in here). One warp per row (rows are short next to the
// work a block's reductions would cost: T = 512 is 16 values a lane), statistics in fp32.
// The forward also writes P in fp32 for the backward, only where j <= q, packed: row r's at
// tri_row(r, T) (half the memory of T x T). Under bf16 the scores and dP come from their
// matmuls in bf16 (as autocast's do) and are overwritten by P and dS in bf16, the next matmuls'
// operands. The backward also writes P whole, as dS's type, which it reads anyway, for the
// matmul of dV.
#include <cuda_bf16.h>

#include "common.cuh"
#include "cuda_kernels.hpp"

namespace lmt::cuda {
namespace {

constexpr int kRowsPerBlock = 8;  // one warp each

// Where row r (query r % T of head r / T) of the packed causal P starts.
__device__ inline int64_t tri_row(int64_t r, int64_t T) {
  const int64_t q = r % T;
  return r / T * (T * (T + 1) / 2) + q * (q + 1) / 2;
}

// S: float or bf16.
template <typename S>
__global__ void softmax_fwd_kernel(S* scores, float* P32, int64_t rows, int64_t T) {
  const int64_t r = blockIdx.x * int64_t(kRowsPerBlock) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;
  S* row = scores + r * T;
  float* packed = P32 + tri_row(r, T);
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
    if (j <= q) packed[j] = p;
  }
}

// D: float or bf16.
template <typename D>
__global__ void softmax_bwd_kernel(const float* P, D* dP, D* P_out, int64_t rows, int64_t T,
                                   float scale) {
  const int64_t r = blockIdx.x * int64_t(kRowsPerBlock) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;
  const float* p = P + tri_row(r, T);
  D* dp = dP + r * T;
  const int64_t q = r % T;
  float dot = 0;
  for (int64_t j = lane; j <= q; j += 32) dot += p[j] * float(dp[j]);
  dot = warp_reduce<false>(dot);
  for (int64_t j = lane; j < T; j += 32) {
    const float pj = j <= q ? p[j] : 0.0f, ds = j <= q ? pj * (float(dp[j]) - dot) * scale : 0.0f;
    dp[j] = stored<D>(ds);
    P_out[r * T + j] = stored<D>(pj);
  }
}

}  // namespace

void softmax_causal_fwd(void* scores, bool bf16, float* probs, int64_t rows, int64_t T,
                        cudaStream_t s) {
  const int blocks = blocks_for(rows, kRowsPerBlock), threads = 32 * kRowsPerBlock;
  if (bf16)
    softmax_fwd_kernel<<<blocks, threads, 0, s>>>(static_cast<__nv_bfloat16*>(scores), probs,
                                                  rows, T);
  else
    softmax_fwd_kernel<<<blocks, threads, 0, s>>>(static_cast<float*>(scores), probs, rows, T);
  CUDA_LAUNCH_CHECK();
}

void softmax_causal_bwd(const float* P, void* dP, void* P_out, bool bf16, int64_t rows,
                        int64_t T, float scale, cudaStream_t s) {
  const int blocks = blocks_for(rows, kRowsPerBlock), threads = 32 * kRowsPerBlock;
  if (bf16)
    softmax_bwd_kernel<<<blocks, threads, 0, s>>>(P, static_cast<__nv_bfloat16*>(dP),
                                                  static_cast<__nv_bfloat16*>(P_out), rows, T,
                                                  scale);
  else
    softmax_bwd_kernel<<<blocks, threads, 0, s>>>(P, static_cast<float*>(dP),
                                                  static_cast<float*>(P_out), rows, T, scale);
  CUDA_LAUNCH_CHECK();
}

}  // namespace lmt::cuda
