// Elementwise kernels: SwiGLU's gate g = silu(a) * b and its backward
//   da = dg * b * sig(a) * (1 + a (1 - sig(a))),  db = dg * silu(a),
// and the residual add y += x. SwiGLU's tensors (a, b, g; a, b, dg, da, db) are all fp32, or all
// bf16 (W1's and W3's outputs and W2's input gradient in bf16, results rounded to nearest even
// for the bf16 matmuls that read them).
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
template <typename E> __global__ void swiglu_fwd_kernel(const E* a, const E* b, E* g, int64_t n) {
  const int64_t i = 4 * (blockIdx.x * int64_t(blockDim.x) + threadIdx.x);
  if (i + 4 <= n) {
    float4 x = load4(a + i), y = load4(b + i);
    store4(g + i, make_float4(gate(x.x, y.x), gate(x.y, y.y), gate(x.z, y.z), gate(x.w, y.w)));
    return;
  }
  for (int64_t k = i; k < n; ++k) g[k] = stored<E>(gate(float(a[k]), float(b[k])));
}

template <typename E>
__global__ void swiglu_bwd_kernel(const E* a, const E* b, const E* dg, E* da, E* db, int64_t n) {
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
    float2 r = gate_bwd(float(a[k]), float(b[k]), float(dg[k]));
    da[k] = stored<E>(r.x), db[k] = stored<E>(r.y);
  }
}

__global__ void add_kernel(float* y, const float* x, int64_t n) {
  int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < n) y[i] += x[i];
}

constexpr const char* kUnaligned = "SwiGLU's buffers must be 16-byte aligned";

}  // namespace

void swiglu_fwd(const void* a, const void* b, void* g, bool bf16, int64_t n, cudaStream_t s) {
  check_aligned16({a, b, g}, kUnaligned);
  const int blocks = blocks_for((n + 3) / 4, 256);
  using BF = __nv_bfloat16;
  if (bf16)
    swiglu_fwd_kernel<<<blocks, 256, 0, s>>>(static_cast<const BF*>(a), static_cast<const BF*>(b),
                                             static_cast<BF*>(g), n);
  else
    swiglu_fwd_kernel<<<blocks, 256, 0, s>>>(static_cast<const float*>(a),
                                             static_cast<const float*>(b), static_cast<float*>(g), n);
  CUDA_LAUNCH_CHECK();
}

void swiglu_bwd(const void* a, const void* b, const void* dg, void* da, void* db, bool bf16,
                int64_t n, cudaStream_t s) {
  check_aligned16({a, b, dg, da, db}, kUnaligned);
  const int blocks = blocks_for((n + 3) / 4, 256);
  using BF = __nv_bfloat16;
  if (bf16)
    swiglu_bwd_kernel<<<blocks, 256, 0, s>>>(static_cast<const BF*>(a), static_cast<const BF*>(b),
                                             static_cast<const BF*>(dg), static_cast<BF*>(da),
                                             static_cast<BF*>(db), n);
  else
    swiglu_bwd_kernel<<<blocks, 256, 0, s>>>(static_cast<const float*>(a),
                                             static_cast<const float*>(b),
                                             static_cast<const float*>(dg), static_cast<float*>(da),
                                             static_cast<float*>(db), n);
  CUDA_LAUNCH_CHECK();
}

void add_inplace(float* y, const float* x, int64_t n, cudaStream_t s) {
  add_kernel<<<blocks_for(n, 256), 256, 0, s>>>(y, x, n);
  CUDA_LAUNCH_CHECK();
}

}  // namespace lmt::cuda
