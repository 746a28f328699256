// RMSNorm over rows of length d: y = x * r * g, r = (mean(x^2) + eps)^(-1/2), statistics in fp32;
// y stored in fp32, or rounded to bf16 when only bf16 matmuls read it.
// Backward, s = sum_j g_j dy_j x_j:  dx_i += r g_i dy_i - x_i r^3 s / d;  dg_i = sum_rows dy_i x_i r;
// the updated dx also rounded to bf16 where the next matmul reads it so (no cast pass of its own).
// Forward and dx: one block per row, four values a load where d is a multiple of 4 (Vec4: rows
// then 16-byte aligned, the launcher checks the pointers), else one. dg in two passes,
// deterministic (fixed partition and order, no atomics): the rows are cut into kRmsnormDgChunks
// chunks, a 32 x 8 block sums one chunk's rows for 32 columns, or 32 groups of four under Vec4
// (each row lane every 8th row, then the lanes in order) into scratch; then each column adds its
// chunks' sums in order. (One block per 32 columns over all rows left xl's 1600 columns 50
// blocks: a third of the GPU.)
#include "common.cuh"
#include "cuda_kernels.hpp"

namespace lmt::cuda {
namespace {

constexpr int kThreads = 256;

// Element i of a row, and its vector of four under Vec4 (a float4 of four consecutive values).
template <bool Vec4> __device__ inline float4 at4(const float* p, int64_t i) {
  if constexpr (Vec4) return load4(p + 4 * i);
  else return make_float4(p[i], 0.0f, 0.0f, 0.0f);
}
template <bool Vec4, typename Out> __device__ inline void put4(Out* p, int64_t i, float4 v) {
  if constexpr (Vec4) store4(p + 4 * i, v);
  else p[i] = stored<Out>(v.x);
}
__device__ inline float4 mul(float4 a, float4 b) {
  return make_float4(a.x * b.x, a.y * b.y, a.z * b.z, a.w * b.w);
}
__device__ inline float sum4(float4 a) { return a.x + a.y + a.z + a.w; }

template <typename Out, bool Vec4>
__global__ void rmsnorm_fwd_kernel(const float* x, const float* g, Out* y, float* rstd, int64_t d,
                                   float eps) {
  __shared__ float scratch[32];
  const float* xr = x + blockIdx.x * d;
  Out* yr = y + blockIdx.x * d;
  const int64_t n = Vec4 ? d / 4 : d;
  float ss = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const float4 v = at4<Vec4>(xr, i);
    ss += sum4(mul(v, v));
  }
  const float r = rsqrtf(block_reduce<false>(ss, scratch) / float(d) + eps);
  if (threadIdx.x == 0) rstd[blockIdx.x] = r;
  const float4 rr = make_float4(r, r, r, r);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    put4<Vec4>(yr, i, mul(mul(at4<Vec4>(xr, i), rr), at4<Vec4>(g, i)));
}

template <bool Vec4>
__global__ void rmsnorm_dx_kernel(const float* x, const float* g, const float* rstd,
                                  const float* dy, float* dx, __nv_bfloat16* dx16, int64_t d) {
  __shared__ float scratch[32];
  const int64_t row = int64_t(blockIdx.x) * d, n = Vec4 ? d / 4 : d;
  const float *xr = x + row, *dyr = dy + row;
  float s = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    s += sum4(mul(mul(at4<Vec4>(g, i), at4<Vec4>(dyr, i)), at4<Vec4>(xr, i)));
  s = block_reduce<false>(s, scratch);
  const float r = rstd[blockIdx.x], c = r * r * r * s / float(d);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const float4 gi = at4<Vec4>(g, i), dyi = at4<Vec4>(dyr, i), xi = at4<Vec4>(xr, i);
    float4 v = at4<Vec4>(dx + row, i);
    v.x += r * gi.x * dyi.x - xi.x * c, v.y += r * gi.y * dyi.y - xi.y * c;
    v.z += r * gi.z * dyi.z - xi.z * c, v.w += r * gi.w * dyi.w - xi.w * c;
    put4<Vec4>(dx + row, i, v);
    if (dx16) put4<Vec4>(dx16 + row, i, v);
  }
}

constexpr int kDgLanes = 8;  // row lanes of a dg block

// Under Vec4 a thread's column i is four columns 4i..4i+3 (one load4 a row).
template <bool Vec4>
__global__ void rmsnorm_dg_chunk_kernel(const float* x, const float* rstd, const float* dy,
                                        float* chunk_sums, int64_t rows, int64_t d) {
  __shared__ float4 part[kDgLanes][33];
  const int64_t i = blockIdx.x * 32 + threadIdx.x, cols = Vec4 ? d / 4 : d;
  const int64_t per = (rows + kRmsnormDgChunks - 1) / kRmsnormDgChunks;
  const int64_t begin = blockIdx.y * per, end = begin + per < rows ? begin + per : rows;
  float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  if (i < cols)
    for (int64_t r = begin + threadIdx.y; r < end; r += kDgLanes) {
      const float4 v = mul(at4<Vec4>(dy + r * d, i), at4<Vec4>(x + r * d, i));
      const float rr = rstd[r];
      acc.x += v.x * rr, acc.y += v.y * rr, acc.z += v.z * rr, acc.w += v.w * rr;
    }
  part[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y != 0 || i >= cols) return;
  float4 total = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  for (int k = 0; k < kDgLanes; ++k) {
    const float4 p = part[k][threadIdx.x];
    total.x += p.x, total.y += p.y, total.z += p.z, total.w += p.w;
  }
  put4<Vec4>(chunk_sums + blockIdx.y * d, i, total);
}

__global__ void rmsnorm_dg_sum_kernel(const float* chunk_sums, float* dg, int64_t d, bool add) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= d) return;
  float total = 0;
  for (int c = 0; c < kRmsnormDgChunks; ++c) total += chunk_sums[c * d + i];
  dg[i] = add ? dg[i] + total : total;
}

}  // namespace

namespace {

// Whether rows of d values at these pointers can be read and written four at a time.
bool vec4_rows(int64_t d, std::initializer_list<const void*> ptrs) {
  if (d % 4 != 0) return false;
  for (const void* p : ptrs)
    if (p && !aligned_for(p, 16)) return false;
  return true;
}

template <typename Out>
void launch_fwd(const float* x, const float* g, Out* y, float* rstd, int64_t rows, int64_t d,
                float eps, cudaStream_t s) {
  if (vec4_rows(d, {x, g, y}))
    rmsnorm_fwd_kernel<Out, true><<<unsigned(rows), kThreads, 0, s>>>(x, g, y, rstd, d, eps);
  else
    rmsnorm_fwd_kernel<Out, false><<<unsigned(rows), kThreads, 0, s>>>(x, g, y, rstd, d, eps);
  CUDA_LAUNCH_CHECK();
}

}  // namespace

void rmsnorm_fwd(const float* x, const float* g, void* y, bool y_bf16, float* rstd, int64_t rows,
                 int64_t d, double eps, cudaStream_t s) {
  if (y_bf16) launch_fwd(x, g, static_cast<__nv_bfloat16*>(y), rstd, rows, d, float(eps), s);
  else launch_fwd(x, g, static_cast<float*>(y), rstd, rows, d, float(eps), s);
}

void rmsnorm_bwd(const float* x, const float* g, const float* rstd, const float* dy, float* dx,
                 void* dx_bf16, float* dg, float* scratch, int64_t rows, int64_t d, bool add_dg,
                 cudaStream_t s) {
  auto* dx16 = static_cast<__nv_bfloat16*>(dx_bf16);
  if (vec4_rows(d, {x, g, dy, dx, dx16}))
    rmsnorm_dx_kernel<true><<<unsigned(rows), kThreads, 0, s>>>(x, g, rstd, dy, dx, dx16, d);
  else
    rmsnorm_dx_kernel<false><<<unsigned(rows), kThreads, 0, s>>>(x, g, rstd, dy, dx, dx16, d);
  CUDA_LAUNCH_CHECK();
  const bool vec4 = vec4_rows(d, {x, dy, scratch});
  const dim3 grid(unsigned(blocks_for(vec4 ? d / 4 : d, 32)), kRmsnormDgChunks);
  const dim3 block(32, kDgLanes);
  if (vec4) rmsnorm_dg_chunk_kernel<true><<<grid, block, 0, s>>>(x, rstd, dy, scratch, rows, d);
  else rmsnorm_dg_chunk_kernel<false><<<grid, block, 0, s>>>(x, rstd, dy, scratch, rows, d);
  CUDA_LAUNCH_CHECK();
  rmsnorm_dg_sum_kernel<<<blocks_for(d, 256), 256, 0, s>>>(scratch, dg, d, add_dg);
  CUDA_LAUNCH_CHECK();
}

}  // namespace lmt::cuda
