// Elementwise kernels: SwiGLU's gate g = silu(a) * b and its backward
//   da = dg * b * sig(a) * (1 + a (1 - sig(a))),  db = dg * silu(a),
// and the residual add y += x. SwiGLU reads u[rows, 2f], each row [b | a] (W3's and W1's
// outputs, one matmul's: cpu_ops.hpp), and writes g[rows, f]; backward writes du laid out as u.
// Its tensors (u, g; u, dg, du) are all fp32, or all bf16 (the matmul's output and W2's input
// gradient in bf16, results rounded to nearest even for the bf16 matmuls that read them).
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

// Both SwiGLU kernels: thread i takes g's elements [4i, 4i + 4) of the rows * f; with f a
// multiple of 4 (Vec4) they lie in one row, one load4/store4 each (u's rows then start 16-byte
// aligned too); otherwise one element at a time.
template <typename E, bool Vec4>
__global__ void swiglu_fwd_kernel(const E* u, E* g, int64_t n, int64_t f) {
  const int64_t i = 4 * (blockIdx.x * int64_t(blockDim.x) + threadIdx.x);
  if (Vec4 && i < n) {
    const E* b = u + i / f * f + i;  // row r = i / f: b at u[2 f r + i - f r]
    float4 x = load4(b + f), y = load4(b);
    store4(g + i, make_float4(gate(x.x, y.x), gate(x.y, y.y), gate(x.z, y.z), gate(x.w, y.w)));
    return;
  }
  for (int64_t k = i; k < i + 4 && k < n; ++k) {
    const E* b = u + k / f * f + k;
    g[k] = stored<E>(gate(float(b[f]), float(b[0])));
  }
}

template <typename E, bool Vec4>
__global__ void swiglu_bwd_kernel(const E* u, const E* dg, E* du, int64_t n, int64_t f) {
  const int64_t i = 4 * (blockIdx.x * int64_t(blockDim.x) + threadIdx.x);
  if (Vec4 && i < n) {
    const int64_t at = i / f * f + i;
    float4 x = load4(u + at + f), y = load4(u + at), d = load4(dg + i);
    float2 r0 = gate_bwd(x.x, y.x, d.x), r1 = gate_bwd(x.y, y.y, d.y);
    float2 r2 = gate_bwd(x.z, y.z, d.z), r3 = gate_bwd(x.w, y.w, d.w);
    store4(du + at + f, make_float4(r0.x, r1.x, r2.x, r3.x));
    store4(du + at, make_float4(r0.y, r1.y, r2.y, r3.y));
    return;
  }
  for (int64_t k = i; k < i + 4 && k < n; ++k) {
    const int64_t at = k / f * f + k;
    float2 r = gate_bwd(float(u[at + f]), float(u[at]), float(dg[k]));
    du[at + f] = stored<E>(r.x), du[at] = stored<E>(r.y);
  }
}

__global__ void add_kernel(float* y, const float* x, int64_t n) {
  int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < n) y[i] += x[i];
}

constexpr const char* kUnaligned = "SwiGLU's buffers must be 16-byte aligned";

template <typename E>
void launch_swiglu_fwd(const void* u, void* g, int64_t rows, int64_t f, cudaStream_t s) {
  const int64_t n = rows * f;
  const int blocks = blocks_for((n + 3) / 4, 256);
  const E* in = static_cast<const E*>(u);
  E* out = static_cast<E*>(g);
  if (f % 4 == 0) swiglu_fwd_kernel<E, true><<<blocks, 256, 0, s>>>(in, out, n, f);
  else swiglu_fwd_kernel<E, false><<<blocks, 256, 0, s>>>(in, out, n, f);
  CUDA_LAUNCH_CHECK();
}

template <typename E>
void launch_swiglu_bwd(const void* u, const void* dg, void* du, int64_t rows, int64_t f,
                       cudaStream_t s) {
  const int64_t n = rows * f;
  const int blocks = blocks_for((n + 3) / 4, 256);
  const E *in = static_cast<const E*>(u), *d = static_cast<const E*>(dg);
  E* out = static_cast<E*>(du);
  if (f % 4 == 0) swiglu_bwd_kernel<E, true><<<blocks, 256, 0, s>>>(in, d, out, n, f);
  else swiglu_bwd_kernel<E, false><<<blocks, 256, 0, s>>>(in, d, out, n, f);
  CUDA_LAUNCH_CHECK();
}

}  // namespace

void swiglu_fwd(const void* u, void* g, bool bf16, int64_t rows, int64_t f, cudaStream_t s) {
  check_aligned16({u, g}, kUnaligned);
  if (bf16) launch_swiglu_fwd<__nv_bfloat16>(u, g, rows, f, s);
  else launch_swiglu_fwd<float>(u, g, rows, f, s);
}

void swiglu_bwd(const void* u, const void* dg, void* du, bool bf16, int64_t rows, int64_t f,
                cudaStream_t s) {
  check_aligned16({u, dg, du}, kUnaligned);
  if (bf16) launch_swiglu_bwd<__nv_bfloat16>(u, dg, du, rows, f, s);
  else launch_swiglu_bwd<float>(u, dg, du, rows, f, s);
}

void add_inplace(float* y, const float* x, int64_t n, cudaStream_t s) {
  add_kernel<<<blocks_for(n, 256), 256, 0, s>>>(y, x, n);
  CUDA_LAUNCH_CHECK();
}

}  // namespace lmt::cuda
