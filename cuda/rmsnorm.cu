// RMSNorm over rows of length d: y = x * r * g, r = (mean(x^2) + eps)^(-1/2), statistics in fp32;
// y stored in fp32, or rounded to bf16 when only bf16 matmuls read it.
// Backward, s = sum_j g_j dy_j x_j:  dx_i += r g_i dy_i - x_i r^3 s / d;  dg_i = sum_rows dy_i x_i r;
// the updated dx also rounded to bf16 where the next matmul reads it so (no cast pass of its own).
// Forward and dx: one block per row. dg in two passes, deterministic (fixed partition and order,
// no atomics): the rows are cut into kRmsnormDgChunks chunks, a 32 x 8 block sums one chunk's
// rows for 32 columns (each row lane every 8th row, then the lanes in order) into scratch; then
// each column adds its chunks' sums in order. (One block per 32 columns over all rows left xl's
// 1600 columns 50 blocks: a third of the GPU.)
#include "common.cuh"
#include "cuda_kernels.hpp"

namespace lmt::cuda {
namespace {

constexpr int kThreads = 256;

template <typename Out>
__global__ void rmsnorm_fwd_kernel(const float* x, const float* g, Out* y, float* rstd, int64_t d,
                                   float eps) {
  __shared__ float scratch[32];
  const float* xr = x + blockIdx.x * d;
  float ss = 0;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) ss += xr[i] * xr[i];
  float r = rsqrtf(block_reduce<false>(ss, scratch) / float(d) + eps);
  if (threadIdx.x == 0) rstd[blockIdx.x] = r;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) y[blockIdx.x * d + i] = stored<Out>(xr[i] * r * g[i]);
}

__global__ void rmsnorm_dx_kernel(const float* x, const float* g, const float* rstd,
                                  const float* dy, float* dx, __nv_bfloat16* dx16, int64_t d) {
  __shared__ float scratch[32];
  const float *xr = x + blockIdx.x * d, *dyr = dy + blockIdx.x * d;
  float s = 0;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) s += g[i] * dyr[i] * xr[i];
  s = block_reduce<false>(s, scratch);
  float r = rstd[blockIdx.x], c = r * r * r * s / float(d);
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
    const float v = dx[blockIdx.x * d + i] + (r * g[i] * dyr[i] - xr[i] * c);
    dx[blockIdx.x * d + i] = v;
    if (dx16) dx16[blockIdx.x * d + i] = __float2bfloat16_rn(v);
  }
}

constexpr int kDgLanes = 8;  // row lanes of a dg block

__global__ void rmsnorm_dg_chunk_kernel(const float* x, const float* rstd, const float* dy,
                                        float* chunk_sums, int64_t rows, int64_t d) {
  __shared__ float part[kDgLanes][33];
  const int64_t i = blockIdx.x * 32 + threadIdx.x;
  const int64_t per = (rows + kRmsnormDgChunks - 1) / kRmsnormDgChunks;
  const int64_t begin = blockIdx.y * per, end = begin + per < rows ? begin + per : rows;
  float acc = 0;
  if (i < d)
    for (int64_t r = begin + threadIdx.y; r < end; r += kDgLanes)
      acc += dy[r * d + i] * x[r * d + i] * rstd[r];
  part[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y != 0 || i >= d) return;
  float total = 0;
  for (int k = 0; k < kDgLanes; ++k) total += part[k][threadIdx.x];
  chunk_sums[blockIdx.y * d + i] = total;
}

__global__ void rmsnorm_dg_sum_kernel(const float* chunk_sums, float* dg, int64_t d) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= d) return;
  float total = 0;
  for (int c = 0; c < kRmsnormDgChunks; ++c) total += chunk_sums[c * d + i];
  dg[i] = total;
}

}  // namespace

void rmsnorm_fwd(const float* x, const float* g, void* y, bool y_bf16, float* rstd, int64_t rows,
                 int64_t d, double eps, cudaStream_t s) {
  if (y_bf16)
    rmsnorm_fwd_kernel<<<unsigned(rows), kThreads, 0, s>>>(x, g, static_cast<__nv_bfloat16*>(y),
                                                           rstd, d, float(eps));
  else
    rmsnorm_fwd_kernel<<<unsigned(rows), kThreads, 0, s>>>(x, g, static_cast<float*>(y), rstd, d,
                                                           float(eps));
  CUDA_LAUNCH_CHECK();
}

void rmsnorm_bwd(const float* x, const float* g, const float* rstd, const float* dy, float* dx,
                 void* dx_bf16, float* dg, float* scratch, int64_t rows, int64_t d,
                 cudaStream_t s) {
  rmsnorm_dx_kernel<<<unsigned(rows), kThreads, 0, s>>>(x, g, rstd, dy, dx,
                                                        static_cast<__nv_bfloat16*>(dx_bf16), d);
  CUDA_LAUNCH_CHECK();
  const dim3 grid(unsigned(blocks_for(d, 32)), kRmsnormDgChunks);
  rmsnorm_dg_chunk_kernel<<<grid, dim3(32, kDgLanes), 0, s>>>(x, rstd, dy, scratch, rows, d);
  CUDA_LAUNCH_CHECK();
  rmsnorm_dg_sum_kernel<<<blocks_for(d, 256), 256, 0, s>>>(scratch, dg, d);
  CUDA_LAUNCH_CHECK();
}

}  // namespace lmt::cuda
