// Softmax cross-entropy fused with its gradient, one block per row of logits[n, V]:
//   row_loss = logsumexp(z) - z[target];  dlogits = (softmax(z) - onehot(target)) * grad_scale.
// dlogits may be null (loss only).
#include "common.cuh"
#include "cuda_kernels.hpp"

namespace lmt::cuda {
namespace {

__global__ void cross_entropy_kernel(const float* logits, const int32_t* targets, float* dlogits,
                                     float* row_loss, int64_t V, float grad_scale) {
  __shared__ float scratch[32];
  const float* z = logits + blockIdx.x * V;
  float mx = -INFINITY;
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x) mx = fmaxf(mx, z[v]);
  mx = block_reduce<true>(mx, scratch);
  float sum = 0;
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x) sum += expf(z[v] - mx);
  float lse = mx + logf(block_reduce<false>(sum, scratch));
  const int32_t t = targets[blockIdx.x];
  if (threadIdx.x == 0) row_loss[blockIdx.x] = lse - z[t];
  if (!dlogits) return;
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x)
    dlogits[blockIdx.x * V + v] = (expf(z[v] - lse) - (v == t ? 1.0f : 0.0f)) * grad_scale;
}

}  // namespace

void cross_entropy(const float* logits, const int32_t* targets, float* dlogits, float* row_loss,
                   int64_t n, int64_t V, double grad_scale, cudaStream_t s) {
  cross_entropy_kernel<<<unsigned(n), 512, 0, s>>>(logits, targets, dlogits, row_loss, V,
                                                   float(grad_scale));
  CUDA_LAUNCH_CHECK();
}

}  // namespace lmt::cuda
