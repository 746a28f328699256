// SwiGLU's gate g = silu(a) * b and its backward
//   da = dg * b * sig(a) * (1 + a (1 - sig(a))),  db = dg * silu(a).
// It reads u[rows, 2f], each row [b | a] (W3's and W1's outputs, one matmul's: cpu_ops.hpp), and
// writes g[rows, f]; backward writes du laid out as u.
// Its tensors (u, g; u, dg, du) are all fp32, or all bf16 (the matmul's output and W2's input
// gradient in bf16, results rounded to nearest even for the bf16 matmuls that read them).
#include <algorithm>
#include <type_traits>

#include "common.cuh"
#include "cuda_kernels.hpp"
#include "swiglu.cuh"

namespace lmt::cuda {
namespace {

// Both SwiGLU kernels: thread j of the x dimension takes g's elements [4j, 4j + 4) of a row: with
// f a multiple of 4 (Vec4) one load4/store4 each (u's rows then start 16-byte aligned too),
// otherwise one element at a time. The forward's blockIdx.y picks kSwigluRows consecutive rows
// (and every gridDim.y-th run after them), their loads issued before any store; the backward's
// one row (and every gridDim.y-th after it). On an H100, in one call, four rows a thread instead
// of one took the forward's 12 calls at gpt2-small 16 x 1024 from 0.90 and 0.87 ms to 0.83 and
// 0.83, and xl 4 x 512's 48 calls from 1.33 to 1.22. (RoPE given a thread a load, up to 1024
// threads a row instead of 256, went the other way: 0.47 -> 0.51 ms there, 0.43 -> 0.62 at xl;
// not kept.)
constexpr int kSwigluRows = 4;
template <typename E, bool Vec4>
__global__ void swiglu_fwd_kernel(const E* u, E* g, int64_t rows, int64_t f) {
  const int64_t j = 4 * (blockIdx.x * int64_t(blockDim.x) + threadIdx.x);
  if (j >= f) return;
  for (int64_t r0 = blockIdx.y * int64_t(kSwigluRows); r0 < rows;
       r0 += gridDim.y * int64_t(kSwigluRows)) {
    if constexpr (Vec4) {
      float4 a[kSwigluRows], b[kSwigluRows];
#pragma unroll
      for (int k = 0; k < kSwigluRows; ++k) {
        const bool in = r0 + k < rows;
        const E* row = u + 2 * f * (r0 + k) + j;
        a[k] = in ? load4(row + f) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        b[k] = in ? load4(row) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
#pragma unroll
      for (int k = 0; k < kSwigluRows; ++k)
        if (r0 + k < rows)
          store4(g + f * (r0 + k) + j, make_float4(gate(a[k].x, b[k].x), gate(a[k].y, b[k].y),
                                                   gate(a[k].z, b[k].z), gate(a[k].w, b[k].w)));
    } else {
      for (int64_t r = r0; r < r0 + kSwigluRows && r < rows; ++r) {
        const E* b = u + 2 * f * r + j;
        for (int64_t k = 0; k < 4 && j + k < f; ++k)
          g[f * r + j + k] = stored<E>(gate(float(b[f + k]), float(b[k])));
      }
    }
  }
}

template <typename E, bool Vec4>
__global__ void swiglu_bwd_kernel(const E* u, const E* dg, E* du, int64_t rows, int64_t f) {
  const int64_t j = 4 * (blockIdx.x * int64_t(blockDim.x) + threadIdx.x);
  if (j >= f) return;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const int64_t at = 2 * f * r + j, i = f * r + j;
    if constexpr (Vec4) {
      const float4 x = load4(u + at + f), y = load4(u + at), d = load4(dg + i);
      const float2 r0 = gate_bwd(x.x, y.x, d.x), r1 = gate_bwd(x.y, y.y, d.y);
      const float2 r2 = gate_bwd(x.z, y.z, d.z), r3 = gate_bwd(x.w, y.w, d.w);
      store4(du + at + f, make_float4(r0.x, r1.x, r2.x, r3.x));
      store4(du + at, make_float4(r0.y, r1.y, r2.y, r3.y));
    } else {
      for (int64_t k = 0; k < 4 && j + k < f; ++k) {
        const float2 v = gate_bwd(float(u[at + f + k]), float(u[at + k]), float(dg[i + k]));
        du[at + f + k] = stored<E>(v.x), du[at + k] = stored<E>(v.y);
      }
    }
  }
}

constexpr const char* kUnaligned = "SwiGLU's buffers must be 16-byte aligned";

// The SwiGLU kernels' grid: a row's 4-element groups by kSwigluThreads, times up to 65535 runs
// of rows_each rows.
constexpr int kSwigluThreads = 128;
dim3 swiglu_grid(int64_t rows, int64_t f, int64_t rows_each) {
  return dim3(unsigned(blocks_for((f + 3) / 4, kSwigluThreads)),
              unsigned(std::min<int64_t>((rows + rows_each - 1) / rows_each, 65535)));
}

template <typename E>
void launch_swiglu_fwd(const E* in, E* out, int64_t rows, int64_t f, cudaStream_t s) {
  const dim3 grid = swiglu_grid(rows, f, kSwigluRows);
  if (f % 4 == 0) swiglu_fwd_kernel<E, true><<<grid, kSwigluThreads, 0, s>>>(in, out, rows, f);
  else swiglu_fwd_kernel<E, false><<<grid, kSwigluThreads, 0, s>>>(in, out, rows, f);
  CUDA_LAUNCH_CHECK();
}

template <typename E>
void launch_swiglu_bwd(const E* in, const E* d, E* out, int64_t rows, int64_t f, cudaStream_t s) {
  const dim3 grid = swiglu_grid(rows, f, 1);
  if (f % 4 == 0) swiglu_bwd_kernel<E, true><<<grid, kSwigluThreads, 0, s>>>(in, d, out, rows, f);
  else swiglu_bwd_kernel<E, false><<<grid, kSwigluThreads, 0, s>>>(in, d, out, rows, f);
  CUDA_LAUNCH_CHECK();
}

}  // namespace

void swiglu_fwd(const void* u, void* g, bool bf16, int64_t rows, int64_t f, cudaStream_t s) {
  check_aligned16({u, g}, kUnaligned);
  typed(g, bf16, [&](auto* out) {
    using E = std::remove_pointer_t<decltype(out)>;
    launch_swiglu_fwd(static_cast<const E*>(u), out, rows, f, s);
  });
}

void swiglu_bwd(const void* u, const void* dg, void* du, bool bf16, int64_t rows, int64_t f,
                cudaStream_t s) {
  check_aligned16({u, dg, du}, kUnaligned);
  typed(du, bf16, [&](auto* out) {
    using E = std::remove_pointer_t<decltype(out)>;
    launch_swiglu_bwd(static_cast<const E*>(u), static_cast<const E*>(dg), out, rows, f, s);
  });
}

}  // namespace lmt::cuda
