// The softmax of naive attention, over materialised scores [rows, T] where row r is query
// position q = r % T and only keys j <= q are visible (causal).
// Forward, in place: P[r, j] = exp(S[r, j] - max) / sum for j <= q, 0 above the diagonal.
// Backward, in place over dP: dS = P * (dP - sum_j P dP) * scale (scale: the 1/sqrt(dh) that the
// scores were multiplied by, folded in here). One block per row, statistics in fp32.
#include "common.cuh"
#include "cuda_kernels.hpp"

namespace lmt::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void softmax_fwd_kernel(float* S, int64_t T) {
  __shared__ float scratch[32];
  float* row = S + blockIdx.x * T;
  const int64_t q = blockIdx.x % T;
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j <= q; j += blockDim.x) mx = fmaxf(mx, row[j]);
  mx = block_reduce<true>(mx, scratch);
  float sum = 0;
  for (int64_t j = threadIdx.x; j <= q; j += blockDim.x) sum += expf(row[j] - mx);
  float inv = 1.0f / block_reduce<false>(sum, scratch);
  for (int64_t j = threadIdx.x; j < T; j += blockDim.x) row[j] = j <= q ? expf(row[j] - mx) * inv : 0.0f;
}

__global__ void softmax_bwd_kernel(const float* P, float* dP, int64_t T, float scale) {
  __shared__ float scratch[32];
  const float* p = P + blockIdx.x * T;
  float* dp = dP + blockIdx.x * T;
  const int64_t q = blockIdx.x % T;
  float dot = 0;
  for (int64_t j = threadIdx.x; j <= q; j += blockDim.x) dot += p[j] * dp[j];
  dot = block_reduce<false>(dot, scratch);
  for (int64_t j = threadIdx.x; j < T; j += blockDim.x)
    dp[j] = j <= q ? p[j] * (dp[j] - dot) * scale : 0.0f;
}

}  // namespace

void softmax_causal_fwd(float* scores, int64_t rows, int64_t T, cudaStream_t s) {
  softmax_fwd_kernel<<<unsigned(rows), kThreads, 0, s>>>(scores, T);
  CUDA_LAUNCH_CHECK();
}

void softmax_causal_bwd(const float* P, float* dP, int64_t rows, int64_t T, float scale,
                        cudaStream_t s) {
  softmax_bwd_kernel<<<unsigned(rows), kThreads, 0, s>>>(P, dP, T, scale);
  CUDA_LAUNCH_CHECK();
}

}  // namespace lmt::cuda
