// Elementwise kernels: SwiGLU's gate g = silu(a) * b and its backward
//   da = dg * b * sig(a) * (1 + a (1 - sig(a))),  db = dg * silu(a),
// and the residual add y += x. SwiGLU's outputs are fp32, or bf16 (rounded to
// nearest even) when only bf16 matmuls read them.
#include "common.cuh"
#include "cuda_kernels.hpp"

namespace lmt::cuda {
namespace {

__device__ inline float gate(float a, float b) {
  float sig = 1.0f / (1.0f + expf(-a));
  return a * sig * b;
}

// Backward of gate at (a, b) for an incoming gradient dg: (da, db).
__device__ inline float2 gate_bwd(float a, float b, float dg) {
  float sig = 1.0f / (1.0f + expf(-a));
  return {dg * b * sig * (1.0f + a * (1.0f - sig)), dg * a * sig};
}

// Both SwiGLU kernels: four elements a thread (load4/store4), the last thread also any tail.
template <typename Out>
__global__ void swiglu_fwd_kernel(const float* a, const float* b, Out* g, int64_t n) {
  const int64_t i = 4 * (blockIdx.x * int64_t(blockDim.x) + threadIdx.x);
  if (i + 4 <= n) {
    float4 x = load4(a + i), y = load4(b + i);
    store4(g + i, make_float4(gate(x.x, y.x), gate(x.y, y.y), gate(x.z, y.z), gate(x.w, y.w)));
    return;
  }
  for (int64_t k = i; k < n; ++k) g[k] = stored<Out>(gate(a[k], b[k]));
}

template <typename Out>
__global__ void swiglu_bwd_kernel(const float* a, const float* b, const float* dg, Out* da,
                                  Out* db, int64_t n) {
  const int64_t i = 4 * (blockIdx.x * int64_t(blockDim.x) + threadIdx.x);
  if (i + 4 <= n) {
    float4 x = load4(a + i), y = load4(b + i), d = load4(dg + i);
    float2 r0 = gate_bwd(x.x, y.x, d.x), r1 = gate_bwd(x.y, y.y, d.y);
    float2 r2 = gate_bwd(x.z, y.z, d.z), r3 = gate_bwd(x.w, y.w, d.w);
    store4(da + i, make_float4(r0.x, r1.x, r2.x, r3.x));
    store4(db + i, make_float4(r0.y, r1.y, r2.y, r3.y));
    return;
  }
  for (int64_t k = i; k < n; ++k) {
    float2 r = gate_bwd(a[k], b[k], dg[k]);
    da[k] = stored<Out>(r.x), db[k] = stored<Out>(r.y);
  }
}


__global__ void add_kernel(float* y, const float* x, int64_t n) {
  int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < n) y[i] += x[i];
}

constexpr const char* kUnaligned = "SwiGLU's buffers must be 16-byte aligned";

}  // namespace

void swiglu_fwd(const float* a, const float* b, void* g, bool g_bf16, int64_t n, cudaStream_t s) {
  check_aligned16({a, b, g}, kUnaligned);
  const int blocks = blocks_for((n + 3) / 4, 256);
  if (g_bf16)
    swiglu_fwd_kernel<<<blocks, 256, 0, s>>>(a, b, static_cast<__nv_bfloat16*>(g), n);
  else
    swiglu_fwd_kernel<<<blocks, 256, 0, s>>>(a, b, static_cast<float*>(g), n);
  CUDA_LAUNCH_CHECK();
}

void swiglu_bwd(const float* a, const float* b, const float* dg, void* da, void* db, bool d_bf16,
                int64_t n, cudaStream_t s) {
  check_aligned16({a, b, dg, da, db}, kUnaligned);
  const int blocks = blocks_for((n + 3) / 4, 256);
  if (d_bf16)
    swiglu_bwd_kernel<<<blocks, 256, 0, s>>>(a, b, dg, static_cast<__nv_bfloat16*>(da),
                                             static_cast<__nv_bfloat16*>(db), n);
  else
    swiglu_bwd_kernel<<<blocks, 256, 0, s>>>(a, b, dg, static_cast<float*>(da),
                                             static_cast<float*>(db), n);
  CUDA_LAUNCH_CHECK();
}

void add_inplace(float* y, const float* x, int64_t n, cudaStream_t s) {
  add_kernel<<<blocks_for(n, 256), 256, 0, s>>>(y, x, n);
  CUDA_LAUNCH_CHECK();
}

}  // namespace lmt::cuda
