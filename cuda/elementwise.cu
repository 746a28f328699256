// Elementwise kernels: SwiGLU's gate g = silu(a) * b and its backward
//   da = dg * b * sig(a) * (1 + a (1 - sig(a))),  db = dg * silu(a),
// the residual add y += x, and x *= factor.
#include "common.cuh"
#include "cuda_kernels.hpp"

namespace lmt::cuda {
namespace {

template <typename Out>
__global__ void swiglu_fwd_kernel(const float* a, const float* b, Out* g, int64_t n) {
  int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  float sig = 1.0f / (1.0f + expf(-a[i]));
  g[i] = stored<Out>(a[i] * sig * b[i]);
}

__global__ void swiglu_bwd_kernel(const float* a, const float* b, const float* dg, float* da,
                                  float* db, int64_t n) {
  int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  float x = a[i], sig = 1.0f / (1.0f + expf(-x));
  da[i] = dg[i] * b[i] * sig * (1.0f + x * (1.0f - sig));
  db[i] = dg[i] * x * sig;
}

__global__ void add_kernel(float* y, const float* x, int64_t n) {
  int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < n) y[i] += x[i];
}

__global__ void scale_kernel(float* x, int64_t n, float factor) {
  int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < n) x[i] *= factor;
}

}  // namespace

void swiglu_fwd(const float* a, const float* b, void* g, bool g_bf16, int64_t n, cudaStream_t s) {
  if (g_bf16)
    swiglu_fwd_kernel<<<blocks_for(n, 256), 256, 0, s>>>(a, b, static_cast<__nv_bfloat16*>(g), n);
  else
    swiglu_fwd_kernel<<<blocks_for(n, 256), 256, 0, s>>>(a, b, static_cast<float*>(g), n);
  CUDA_LAUNCH_CHECK();
}

void swiglu_bwd(const float* a, const float* b, const float* dg, float* da, float* db, int64_t n,
                cudaStream_t s) {
  swiglu_bwd_kernel<<<blocks_for(n, 256), 256, 0, s>>>(a, b, dg, da, db, n);
  CUDA_LAUNCH_CHECK();
}

void add_inplace(float* y, const float* x, int64_t n, cudaStream_t s) {
  add_kernel<<<blocks_for(n, 256), 256, 0, s>>>(y, x, n);
  CUDA_LAUNCH_CHECK();
}

void scale(float* x, int64_t n, float factor, cudaStream_t s) {
  scale_kernel<<<blocks_for(n, 256), 256, 0, s>>>(x, n, factor);
  CUDA_LAUNCH_CHECK();
}

}  // namespace lmt::cuda
