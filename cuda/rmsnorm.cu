// RMSNorm over rows of length d: y = x * r * g, r = (mean(x^2) + eps)^(-1/2), statistics in fp32;
// x read in fp32, or in bf16 where the residual stream is kept so (model.residual_dtype); y stored
// in fp32, or rounded to bf16 when only bf16 matmuls read it.
// Backward, s = sum_j g_j dy_j x_j:  dx_i += r g_i dy_i - x_i r^3 s / d;  dg_i = sum_rows dy_i x_i r;
// dy read in fp32, or in bf16 as the matmuls under bf16 write it; dx (the residual stream's
// gradient) read and written in fp32, its update also rounded to bf16 where the next matmul reads
// it so (no cast pass of its own), or, with a bf16 residual stream, read and written in bf16
// alone (the sum taken in fp32, rounded once).
// Forward: rows of four-value loads (Vec4: d a multiple of 4, rows then 16-byte aligned, the
// launcher checks the pointers) up to 256 loads are taken a warp a row, a lane's loads in
// registers (up to 8: independent loads in flight), the sum reduced by shuffles alone, eight rows
// a block. Else one block per row, a thread a load (the row read once) up to 256 loads, else 256
// threads looping over the row twice. On an H100, at gpt2-small's rows (16 384 x 768, bf16 x) the
// 25 calls took 0.42 ms a warp a row against 0.60 a block a row; at xl's (2 048 x 1600, 400 loads,
// 16 a lane) the 97 calls took 0.79 against 0.66 with 256 threads looping. (A block a row, a
// thread a load up to 1024 loads, was slower at xl's rows too: 3.14 and 3.16 ms against 2.94 and
// 2.94 with 256 threads looping.)
// Backward in one pass over x and dy, deterministic on a GPU (a partition fixed by the GPU and
// the row width, a fixed order, no atomics): the rows are cut into at most
// kRmsnormDgChunks blocks of consecutive rows, each thread adding its columns' dy x r over the
// rows it takes, then the block's sums into its row of scratch; then each column adds the blocks'
// rows in order. (dg in a pass of its own would read x and dy a second time.) Where dx is bf16
// (a bf16 residual stream), rows of four-value loads up to 256 loads take
// rmsnorm_bwd_warp_kernel: a warp a row (the block's rows dealt to its eight warps in turn), a
// lane's x, dy and dx in registers, the warps' column sums added in warp order at the end. On an
// H100 at gpt2-small's rows its 25 calls took 0.95 ms against 1.03 a block a row; with dx in
// fp32 (and x) 1.78 against 1.71, so those keep a block a row. Other rows of up to 1024 loads
// (d up to 4096, or 1024 where not a multiple of 4) take rmsnorm_bwd_kernel: a block a row at a
// time, a thread a load, x, dy and dx read once into registers, the next row's while this row's
// sum is reduced, the column sums in registers.
// Wider rows take rmsnorm_bwd_wide_kernel: up to 256 threads a row, each row read twice (for the
// sum, then for dx), the column sums in shared memory. On an H100 at xl's rows (8192 x 1600) the
// wide kernel's dependent reads (x and dy for the sum, dx only after it) kept DRAM at 69 % of its
// bandwidth.
#include <algorithm>

#include "common.cuh"
#include "cuda_kernels.hpp"

namespace lmt::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxRowThreads = 1024;  // the widest backward block: a row of 1024 loads
constexpr int kSumCols = 8, kSumLanes = 32;  // a dg sum block: columns x row lanes

// Element i of a row, and its vector of four under Vec4 (a float4 of four consecutive values).
template <bool Vec4, typename E> __device__ inline float4 at4(const E* p, int64_t i) {
  if constexpr (Vec4) return load4(p + 4 * i);
  else return make_float4(float(p[i]), 0.0f, 0.0f, 0.0f);
}
template <bool Vec4, typename Out> __device__ inline void put4(Out* p, int64_t i, float4 v) {
  if constexpr (Vec4) store4(p + 4 * i, v);
  else p[i] = stored<Out>(v.x);
}
__device__ inline float4 mul(float4 a, float4 b) {
  return make_float4(a.x * b.x, a.y * b.y, a.z * b.z, a.w * b.w);
}
__device__ inline float sum4(float4 a) { return a.x + a.y + a.z + a.w; }

template <typename X, typename Out, bool Vec4>
__global__ void __launch_bounds__(kThreads)
    rmsnorm_fwd_kernel(const X* x, const float* g, Out* y, float* rstd, int64_t d, float eps) {
  __shared__ float scratch[32];
  const X* xr = x + blockIdx.x * d;
  Out* yr = y + blockIdx.x * d;
  const int64_t n = Vec4 ? d / 4 : d;
  if (n <= blockDim.x) {  // a load a thread: the row read once, kept in registers
    const int64_t i = threadIdx.x;
    const float4 v = i < n ? at4<Vec4>(xr, i) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    const float r = rsqrtf(block_reduce<false>(sum4(mul(v, v)), scratch) / float(d) + eps);
    if (threadIdx.x == 0) rstd[blockIdx.x] = r;
    if (i < n) put4<Vec4>(yr, i, mul(mul(v, make_float4(r, r, r, r)), at4<Vec4>(g, i)));
    return;
  }
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

// Rows of up to 32 * kLoads loads (four values each: Vec4 only), a warp a row: a lane's loads in
// registers (kLoads independent loads in flight), the sum reduced by shuffles alone, kThreads / 32
// rows a block.
template <typename X, typename Out, int kLoads>
__global__ void __launch_bounds__(kThreads)
    rmsnorm_fwd_warp_kernel(const X* x, const float* g, Out* y, float* rstd, int64_t rows,
                            int64_t d, float eps) {
  const int64_t row = blockIdx.x * int64_t(kThreads / 32) + threadIdx.x / 32;
  if (row >= rows) return;
  const int lane = threadIdx.x % 32;
  const int64_t n = d / 4;
  float4 v[kLoads];
  float ss = 0;
#pragma unroll
  for (int k = 0; k < kLoads; ++k) {
    const int64_t i = lane + 32 * k;
    v[k] = i < n ? load4(x + row * d + 4 * i) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    ss += sum4(mul(v[k], v[k]));
  }
  const float r = rsqrtf(warp_reduce<false>(ss) / float(d) + eps);
  if (lane == 0) rstd[row] = r;
  const float4 rr = make_float4(r, r, r, r);
#pragma unroll
  for (int k = 0; k < kLoads; ++k) {
    const int64_t i = lane + 32 * k;
    if (i < n) store4(y + row * d + 4 * i, mul(mul(v[k], rr), load4(g + 4 * i)));
  }
}

// The same rows in backward: block b's rows [b * per, (b + 1) * per) dealt to its warps in turn
// (warp w: rows begin + w, begin + w + kThreads / 32, ...), a lane's loads of x, dy and dx in
// registers, each lane adding its columns' dy x r over its warp's rows; at the end the warps'
// sums are added in warp order (a fixed order: deterministic) into the block's row of partials.
// g is loaded twice a row (the second from L1): held in registers for all the block's rows, the
// kernel's 25 calls at gpt2-small's rows took 1.02 ms against 0.94 on an H100. dx is bf16 here,
// so there is no bf16 copy to write (rmsnorm_bwd refuses one): the launcher's dx16 is null.
template <typename X, typename DY, typename DX, int kLoads>
__global__ void __launch_bounds__(kThreads)
    rmsnorm_bwd_warp_kernel(const X* x, const float* g, const float* rstd, const DY* dy, DX* dx,
                            __nv_bfloat16*, float* partials, int64_t rows, int64_t per,
                            int64_t d) {
  extern __shared__ float4 block_sums[];  // d floats
  constexpr int kWarps = kThreads / 32;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t n = d / 4;
  const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  float4 acc[kLoads];
#pragma unroll
  for (int k = 0; k < kLoads; ++k) acc[k] = zero;
  const int64_t begin = blockIdx.x * per, end = begin + per < rows ? begin + per : rows;
  for (int64_t row = begin + warp; row < end; row += kWarps) {
    float4 xs[kLoads], dys[kLoads], dxs[kLoads];
    float s = 0;
#pragma unroll
    for (int k = 0; k < kLoads; ++k) {
      const int64_t i = lane + 32 * k;
      const bool in = i < n;
      xs[k] = in ? load4(x + row * d + 4 * i) : zero;
      dys[k] = in ? load4(dy + row * d + 4 * i) : zero;
      dxs[k] = in ? load4(dx + row * d + 4 * i) : zero;
      s += sum4(mul(mul(in ? load4(g + 4 * i) : zero, dys[k]), xs[k]));
    }
    s = warp_reduce<false>(s);
    const float r = rstd[row], c = r * r * r * s / float(d);
#pragma unroll
    for (int k = 0; k < kLoads; ++k) {
      const int64_t i = lane + 32 * k;
      if (i >= n) continue;
      const float4 gi = load4(g + 4 * i), dyi = dys[k], xi = xs[k];
      float4 v = dxs[k];
      v.x += r * gi.x * dyi.x - xi.x * c, v.y += r * gi.y * dyi.y - xi.y * c;
      v.z += r * gi.z * dyi.z - xi.z * c, v.w += r * gi.w * dyi.w - xi.w * c;
      store4(dx + row * d + 4 * i, v);
      acc[k].x += dyi.x * xi.x * r, acc[k].y += dyi.y * xi.y * r, acc[k].z += dyi.z * xi.z * r,
          acc[k].w += dyi.w * xi.w * r;
    }
  }
  for (int w = 0; w < kWarps; ++w) {  // warp w adds its sums, warp 0 first
    if (warp == w)
#pragma unroll
      for (int k = 0; k < kLoads; ++k) {
        const int64_t i = lane + 32 * k;
        if (i >= n) continue;
        const float4 before = w == 0 ? zero : block_sums[i];
        block_sums[i] = make_float4(before.x + acc[k].x, before.y + acc[k].y,
                                    before.z + acc[k].z, before.w + acc[k].w);
      }
    __syncthreads();
  }
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    store4(partials + blockIdx.x * d + 4 * i, block_sums[i]);
}

// Rows [b * per, (b + 1) * per) of block b, one after another, a thread a load of each row (the
// launcher makes the block as wide as the row): the row's x, dy and dx in registers (the next
// row's loaded before this row's sum is reduced), dx updated, and the sum of dy x r over the
// block's rows in registers (a thread owns the same columns in every row), written at the end to
// the block's row of partials. At most 48 registers a thread (the bf16, four-a-load kernel needs
// 55 uncapped, and spills nothing at 48): at xl's rows, blocks of 416 threads, three fit an SM
// instead of two; on an H100 the kernel's 97 calls took 7.29 and 7.30 ms against 7.43 and 7.42
// uncapped (bench's kernel summary, two runs each in one call).
template <typename X, typename DY, typename DX, bool Vec4>
__global__ void __maxnreg__(48)
    rmsnorm_bwd_kernel(const X* x, const float* g, const float* rstd, const DY* dy, DX* dx,
                       __nv_bfloat16* dx16, float* partials, int64_t rows, int64_t per,
                       int64_t d) {
  __shared__ float scratch[32];
  const int64_t n = Vec4 ? d / 4 : d, i = threadIdx.x;
  const bool mine = i < n;  // the block's last warp may reach past the row
  const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  const float4 gi = mine ? at4<Vec4>(g, i) : zero;
  float4 acc = zero, xs = zero, dys = zero, dxs = zero;
  float r_next = 0;
  auto load = [&](int64_t row) {
    if (mine)
      xs = at4<Vec4>(x + row * d, i), dys = at4<Vec4>(dy + row * d, i), dxs = at4<Vec4>(dx + row * d, i);
    r_next = rstd[row];
  };
  const int64_t begin = blockIdx.x * per, end = begin + per < rows ? begin + per : rows;
  if (begin < end) load(begin);
  for (int64_t row = begin; row < end; ++row) {
    const float4 xi = xs, dyi = dys;
    float4 v = dxs;
    const float r = r_next;
    if (row + 1 < end) load(row + 1);
    const float s = block_reduce<false>(sum4(mul(mul(gi, dyi), xi)), scratch);
    const float c = r * r * r * s / float(d);
    if (!mine) continue;
    v.x += r * gi.x * dyi.x - xi.x * c, v.y += r * gi.y * dyi.y - xi.y * c;
    v.z += r * gi.z * dyi.z - xi.z * c, v.w += r * gi.w * dyi.w - xi.w * c;
    put4<Vec4>(dx + row * d, i, v);
    if (dx16) put4<Vec4>(dx16 + row * d, i, v);
    acc.x += dyi.x * xi.x * r, acc.y += dyi.y * xi.y * r, acc.z += dyi.z * xi.z * r,
        acc.w += dyi.w * xi.w * r;
  }
  if (mine) put4<Vec4>(partials + blockIdx.x * d, i, acc);
}

// The same for rows of any width: up to 256 threads across a row, each row read twice, the sum
// of dy x r over the block's rows in d floats of shared memory.
template <typename X, typename DY, typename DX, bool Vec4>
__global__ void rmsnorm_bwd_wide_kernel(const X* x, const float* g, const float* rstd,
                                   const DY* dy, DX* dx, __nv_bfloat16* dx16,
                                   float* partials, int64_t rows, int64_t per, int64_t d) {
  extern __shared__ float4 acc4[];  // d floats
  float* acc = reinterpret_cast<float*>(acc4);
  __shared__ float scratch[32];
  const int64_t n = Vec4 ? d / 4 : d;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    put4<Vec4>(acc, i, make_float4(0.0f, 0.0f, 0.0f, 0.0f));
  const int64_t begin = blockIdx.x * per, end = begin + per < rows ? begin + per : rows;
  for (int64_t row = begin; row < end; ++row) {
    const X* xr = x + row * d;
    const DY* dyr = dy + row * d;
    float s = 0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
      s += sum4(mul(mul(at4<Vec4>(g, i), at4<Vec4>(dyr, i)), at4<Vec4>(xr, i)));
    s = block_reduce<false>(s, scratch);
    const float r = rstd[row], c = r * r * r * s / float(d);
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      const float4 gi = at4<Vec4>(g, i), dyi = at4<Vec4>(dyr, i), xi = at4<Vec4>(xr, i);
      float4 v = at4<Vec4>(dx + row * d, i);
      v.x += r * gi.x * dyi.x - xi.x * c, v.y += r * gi.y * dyi.y - xi.y * c;
      v.z += r * gi.z * dyi.z - xi.z * c, v.w += r * gi.w * dyi.w - xi.w * c;
      put4<Vec4>(dx + row * d, i, v);
      if (dx16) put4<Vec4>(dx16 + row * d, i, v);
      float4 a = at4<Vec4>(acc, i);
      a.x += dyi.x * xi.x * r, a.y += dyi.y * xi.y * r, a.z += dyi.z * xi.z * r,
          a.w += dyi.w * xi.w * r;
      put4<Vec4>(acc, i, a);
    }
  }
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    put4<Vec4>(partials + blockIdx.x * d, i, at4<Vec4>(acc, i));
}

// dg[i] (+)= the sum over the blocks' partials in order: a block per kSumCols columns (narrow,
// so that the partials' kRmsnormDgChunks rows spread over many SMs), row lane k adding partials
// k, k + kSumLanes, ..., then lane 0 the lanes' sums in order.
__global__ void rmsnorm_dg_sum_kernel(const float* partials, int64_t nparts, float* dg,
                                      int64_t d, bool add) {
  __shared__ float part[kSumLanes][kSumCols + 1];
  const int64_t i = blockIdx.x * kSumCols + threadIdx.x;
  float total = 0;
  if (i < d)
    for (int64_t k = threadIdx.y; k < nparts; k += kSumLanes) total += partials[k * d + i];
  part[threadIdx.y][threadIdx.x] = total;
  __syncthreads();
  if (threadIdx.y != 0 || i >= d) return;
  for (int k = 1; k < kSumLanes; ++k) total += part[k][threadIdx.x];
  dg[i] = add ? dg[i] + total : total;
}

}  // namespace

namespace {

// Rows of up to this many four-value loads are taken a warp a row; f(std::integral_constant<int,
// k>) with the least k of 2, 4, 6, 8 such that 32 k loads cover n (n at most kWarpRowLoads).
constexpr int64_t kWarpRowLoads = 256;
template <typename F> void with_loads(int64_t n, F&& f) {
  if (n <= 64) f(std::integral_constant<int, 2>{});
  else if (n <= 128) f(std::integral_constant<int, 4>{});
  else if (n <= 192) f(std::integral_constant<int, 6>{});
  else f(std::integral_constant<int, 8>{});
}

// Whether rows of d values at these pointers can be read and written four at a time.
bool vec4_rows(int64_t d, std::initializer_list<const void*> ptrs) {
  if (d % 4 != 0) return false;
  for (const void* p : ptrs)
    if (p && !aligned_for(p, 16)) return false;
  return true;
}

template <typename X, typename Out>
void launch_fwd(const X* x, const float* g, Out* y, float* rstd, int64_t rows, int64_t d,
                float eps, cudaStream_t s) {
  const bool vec = vec4_rows(d, {x, g, y});
  const int64_t n = vec ? d / 4 : d;  // a row's loads: a thread each up to kThreads
  if (vec && n <= kWarpRowLoads) {
    with_loads(n, [&](auto loads) {
      rmsnorm_fwd_warp_kernel<X, Out, decltype(loads)::value>
          <<<unsigned((rows + kThreads / 32 - 1) / (kThreads / 32)), kThreads, 0, s>>>(
              x, g, y, rstd, rows, d, eps);
    });
    CUDA_LAUNCH_CHECK();
    return;
  }
  const unsigned threads = unsigned(n <= kThreads ? (n + 31) / 32 * 32 : kThreads);
  if (vec) rmsnorm_fwd_kernel<X, Out, true><<<unsigned(rows), threads, 0, s>>>(x, g, y, rstd, d, eps);
  else rmsnorm_fwd_kernel<X, Out, false><<<unsigned(rows), threads, 0, s>>>(x, g, y, rstd, d, eps);
  CUDA_LAUNCH_CHECK();
}

}  // namespace

void rmsnorm_fwd(const void* x, bool x_bf16, const float* g, void* y, bool y_bf16, float* rstd,
                 int64_t rows, int64_t d, double eps, cudaStream_t s) {
  typed(x, x_bf16, [&](auto* xt) {
    typed(y, y_bf16, [&](auto* yt) { launch_fwd(xt, g, yt, rstd, rows, d, float(eps), s); });
  });
}

namespace {

// The backward's pass over the rows, dy as stored: as many blocks as the GPU runs at once (at
// most kRmsnormDgChunks, at most a block a row), each taking an equal run of consecutive rows,
// so that no block waits for a second wave; returns the blocks, each of which writes a row of
// partial sums to scratch. (A fixed count of 1024 blocks left 2.6 waves at xl's rows, the third
// wave's SMs partly idle.) The partition depends on the GPU's SMs and the kernel's occupancy,
// so the dg sums of two GPU models may differ in their last bits, as their matmuls' may; on one
// GPU it is fixed.
template <typename X, typename DY, typename DX>
int64_t launch_bwd(const X* x, const float* g, const float* rstd, const DY* dy, DX* dx,
                   __nv_bfloat16* dx16, float* scratch, int64_t rows, int64_t d, cudaStream_t s) {
  const bool vec = vec4_rows(d, {x, g, dy, dx, dx16, scratch});
  const int64_t n = vec ? d / 4 : d;  // a row's loads
  int64_t blocks = 0;
  auto launch = [&](auto kernel, int64_t threads, size_t smem) {
    if (smem > 48 * 1024)  // past the default: opt in (up to the device's limit, else it fails)
      CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      int(smem)));
    const int per_sm = blocks_per_sm(reinterpret_cast<const void*>(kernel), int(threads), smem);
    blocks = std::min<int64_t>({int64_t(std::max(per_sm, 1)) * sm_count(), kRmsnormDgChunks, rows});
    const int64_t per = (rows + blocks - 1) / blocks;
    kernel<<<unsigned(blocks), unsigned(threads), smem, s>>>(x, g, rstd, dy, dx, dx16, scratch,
                                                             rows, per, d);
    CUDA_LAUNCH_CHECK();
  };
  if constexpr (std::is_same_v<DX, __nv_bfloat16>)  // a bf16 gradient: narrow rows a warp a row
    if (vec && n <= kWarpRowLoads) {
      with_loads(n, [&](auto loads) {
        launch(rmsnorm_bwd_warp_kernel<X, DY, DX, decltype(loads)::value>, kThreads,
               size_t(d) * sizeof(float));
      });
      return blocks;
    }
  if (n <= kMaxRowThreads) {  // a thread a load, the block a whole number of warps
    const int64_t threads = (n + 31) / 32 * 32;
    if (vec) launch(rmsnorm_bwd_kernel<X, DY, DX, true>, threads, 0);
    else launch(rmsnorm_bwd_kernel<X, DY, DX, false>, threads, 0);
  } else {
    const int64_t threads = std::min<int64_t>(kThreads, (n + 31) / 32 * 32);
    const size_t smem = size_t(d) * sizeof(float);
    if (vec) launch(rmsnorm_bwd_wide_kernel<X, DY, DX, true>, threads, smem);
    else launch(rmsnorm_bwd_wide_kernel<X, DY, DX, false>, threads, smem);
  }
  return blocks;
}

}  // namespace

void rmsnorm_bwd(const void* x, bool x_bf16, const float* g, const float* rstd, const void* dy,
                 bool dy_bf16, void* dx, bool dx_bf16, void* dx_copy16, float* dg, float* scratch,
                 int64_t rows, int64_t d, bool add_dg, cudaStream_t s) {
  LMT_ASSERT(!(dx_bf16 && dx_copy16), "rmsnorm_bwd: a bf16 dx has no bf16 copy");
  auto* dx16 = static_cast<__nv_bfloat16*>(dx_copy16);
  const int64_t blocks = typed(x, x_bf16, [&](auto* xt) {
    return typed(dy, dy_bf16, [&](auto* dyt) {
      return typed(dx, dx_bf16, [&](auto* dxt) {
        return launch_bwd(xt, g, rstd, dyt, dxt, dx16, scratch, rows, d, s);
      });
    });
  });
  rmsnorm_dg_sum_kernel<<<unsigned(blocks_for(d, kSumCols)), dim3(kSumCols, kSumLanes), 0, s>>>(
      scratch, blocks, dg, d, add_dg);
  CUDA_LAUNCH_CHECK();
}

}  // namespace lmt::cuda
