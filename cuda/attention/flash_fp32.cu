// FlashAttention in fp32 arithmetic (precision fp32/tf32, fp32 storage): the same tiling and
// online softmax as the tensor-core kernels, written plainly. A block is one warp; each thread owns
// one row (a query in forward and dQ, a key in dK/dV) and the other side streams through shared
// memory in tiles of kRows rows. Accurate to fp32 rounding; meant for correctness and fp32
// training, not speed (the bf16 kernels are the fast path).
#include <cmath>

#include "../common.cuh"
#include "flash.cuh"

namespace lmt::cuda::attn {
namespace {

constexpr int kRows = 32;  // threads per block = rows owned = rows per streamed tile

// Rows row0 .. row0 + kRows - 1 of one head into a [kRows][ld] fp32 tile (zeros past T).
template <int DH>
__device__ void load_rows(float* tile, int ld, const float* g, int64_t row0, int64_t T,
                          int64_t row_stride) {
  for (int i = threadIdx.x; i < kRows * DH; i += kRows) {
    const int r = i / DH, c = i % DH;
    tile[r * ld + c] = row0 + r < T ? g[(row0 + r) * row_stride + c] : 0.0f;
  }
}

template <int DH> __global__ void __launch_bounds__(kRows) flash_fwd_fp32_kernel(const Params p) {
  extern __shared__ float sm[];
  float* sQ = sm;                        // [kRows][DH + 1]: thread t reads row t
  float* sK = sQ + kRows * (DH + 1);     // [kRows][DH]: every thread reads the same row
  float* sV = sK + kRows * DH;
  const int64_t b = blockIdx.y / p.H, h = blockIdx.y % p.H, q0 = query_tile(p) * kRows;
  const int64_t row = q0 + threadIdx.x;
  const float* K = head<float>(p.k, b, h, DH, p.qkv_batch);
  const float* V = head<float>(p.v, b, h, DH, p.qkv_batch);
  load_rows<DH>(sQ, DH + 1, head<float>(p.q, b, h, DH, p.qkv_batch), q0, p.T, p.qkv_row);
  const float* q = sQ + threadIdx.x * (DH + 1);
  float o[DH] = {}, m = -INFINITY, l = 0;
  const int64_t tiles = key_tiles(p, q0, kRows, kRows);
  for (int64_t j = 0; j < tiles; ++j) {
    __syncthreads();
    load_rows<DH>(sK, DH, K, j * kRows, p.T, p.qkv_row);
    load_rows<DH>(sV, DH, V, j * kRows, p.T, p.qkv_row);
    __syncthreads();
    float s[kRows], mx = m;
#pragma unroll
    for (int c = 0; c < kRows; ++c) {
      float acc = 0;
#pragma unroll
      for (int i = 0; i < DH; ++i) acc += q[i] * sK[c * DH + i];
      const int64_t key = j * kRows + c;
      s[c] = key >= p.T || (p.causal && key > row) ? -INFINITY : acc * p.scale;
      mx = fmaxf(mx, s[c]);
    }
    const float base = mx == -INFINITY ? 0.0f : mx, alpha = expf(m - base);
    m = mx;
    l *= alpha;
#pragma unroll
    for (int c = 0; c < kRows; ++c) l += (s[c] = expf(s[c] - base));
#pragma unroll
    for (int i = 0; i < DH; ++i) {
      float acc = o[i] * alpha;
#pragma unroll
      for (int c = 0; c < kRows; ++c) acc += s[c] * sV[c * DH + i];
      o[i] = acc;
    }
  }
  if (row >= p.T) return;
  float* O = head<float>(p.out, b, h, DH, p.o_batch) + row * p.o_row;
  for (int i = 0; i < DH; ++i) O[i] = o[i] / l;
  p.lse[blockIdx.y * p.T + row] = m + logf(l);
}

template <int DH> __global__ void __launch_bounds__(kRows) flash_dkdv_fp32_kernel(const Params p) {
  extern __shared__ float sm[];
  constexpr int LD = DH + 1;
  float *sK = sm, *sV = sK + kRows * LD, *sdK = sV + kRows * LD, *sdV = sdK + kRows * LD;
  float *sQ = sdV + kRows * LD, *sG = sQ + kRows * DH, *sL = sG + kRows * DH, *sD = sL + kRows;
  const int64_t bh = blockIdx.y, b = bh / p.H, h = bh % p.H, k0 = int64_t(blockIdx.x) * kRows;
  const int64_t key = k0 + threadIdx.x;
  const float* Q = head<float>(p.q, b, h, DH, p.qkv_batch);
  const float* G = head<float>(p.dout, b, h, DH, p.o_batch);
  load_rows<DH>(sK, LD, head<float>(p.k, b, h, DH, p.qkv_batch), k0, p.T, p.qkv_row);
  load_rows<DH>(sV, LD, head<float>(p.v, b, h, DH, p.qkv_batch), k0, p.T, p.qkv_row);
  float *k = sK + threadIdx.x * LD, *v = sV + threadIdx.x * LD;
  float *dk = sdK + threadIdx.x * LD, *dv = sdV + threadIdx.x * LD;
  for (int i = 0; i < DH; ++i) dk[i] = dv[i] = 0;
  const int64_t tiles = ceil_div(p.T, kRows);
  for (int64_t j = p.causal ? k0 / kRows : 0; j < tiles; ++j) {
    __syncthreads();
    load_rows<DH>(sQ, DH, Q, j * kRows, p.T, p.qkv_row);
    load_rows<DH>(sG, DH, G, j * kRows, p.T, p.o_row);
    const int64_t t = j * kRows + threadIdx.x;
    sL[threadIdx.x] = t < p.T ? p.lse[bh * p.T + t] : INFINITY;  // P = 0 past T
    sD[threadIdx.x] = t < p.T ? p.D[bh * p.T + t] : 0.0f;
    __syncthreads();
    for (int r = 0; r < kRows; ++r) {
      if (p.causal && key > j * kRows + r) continue;
      const float *q = sQ + r * DH, *g = sG + r * DH;
      float s = 0, dp = 0;
#pragma unroll 16  // not fully: k and v rows would be hoisted into registers and spill
      for (int i = 0; i < DH; ++i) s += k[i] * q[i], dp += v[i] * g[i];
      const float P = expf(s * p.scale - sL[r]), ds = P * (dp - sD[r]);
#pragma unroll 16
      for (int i = 0; i < DH; ++i) dv[i] += P * g[i], dk[i] += ds * q[i];
    }
  }
  if (key >= p.T) return;
  float* dK = head<float>(p.dk, b, h, DH, p.qkv_batch) + key * p.qkv_row;
  float* dV = head<float>(p.dv, b, h, DH, p.qkv_batch) + key * p.qkv_row;
  for (int i = 0; i < DH; i += 2) {
    float2 x{dk[i] * p.scale, dk[i + 1] * p.scale};
    if (p.rope) x = unrotate(p.rope[key * DH / 2 + i / 2], x.x, x.y);
    dK[i] = x.x, dK[i + 1] = x.y, dV[i] = dv[i], dV[i + 1] = dv[i + 1];
  }
}

template <int DH> __global__ void __launch_bounds__(kRows) flash_dq_fp32_kernel(const Params p) {
  extern __shared__ float sm[];
  constexpr int LD = DH + 1;
  float *sQ = sm, *sG = sQ + kRows * LD, *sK = sG + kRows * LD, *sV = sK + kRows * DH;
  const int64_t bh = blockIdx.y, b = bh / p.H, h = bh % p.H, q0 = query_tile(p) * kRows;
  const int64_t row = q0 + threadIdx.x;
  const float* K = head<float>(p.k, b, h, DH, p.qkv_batch);
  const float* V = head<float>(p.v, b, h, DH, p.qkv_batch);
  load_rows<DH>(sQ, LD, head<float>(p.q, b, h, DH, p.qkv_batch), q0, p.T, p.qkv_row);
  load_rows<DH>(sG, LD, head<float>(p.dout, b, h, DH, p.o_batch), q0, p.T, p.o_row);
  const float *q = sQ + threadIdx.x * LD, *g = sG + threadIdx.x * LD;
  const float L = row < p.T ? p.lse[bh * p.T + row] : 0.0f;
  const float D = row < p.T ? p.D[bh * p.T + row] : 0.0f;
  float dq[DH] = {};
  const int64_t tiles = key_tiles(p, q0, kRows, kRows);
  for (int64_t j = 0; j < tiles; ++j) {
    __syncthreads();
    load_rows<DH>(sK, DH, K, j * kRows, p.T, p.qkv_row);
    load_rows<DH>(sV, DH, V, j * kRows, p.T, p.qkv_row);
    __syncthreads();
    for (int c = 0; c < kRows; ++c) {
      const int64_t key = j * kRows + c;
      if (key >= p.T || (p.causal && key > row)) continue;
      const float *k = sK + c * DH, *v = sV + c * DH;
      float s = 0, dp = 0;
#pragma unroll
      for (int i = 0; i < DH; ++i) s += q[i] * k[i], dp += g[i] * v[i];
      const float ds = expf(s * p.scale - L) * (dp - D);
#pragma unroll
      for (int i = 0; i < DH; ++i) dq[i] += ds * k[i];
    }
  }
  if (row >= p.T) return;
  float* dQ = head<float>(p.dq, b, h, DH, p.qkv_batch) + row * p.qkv_row;
  for (int i = 0; i < DH; i += 2) {
    float2 x{dq[i] * p.scale, dq[i + 1] * p.scale};
    if (p.rope) x = unrotate(p.rope[row * DH / 2 + i / 2], x.x, x.y);
    dQ[i] = x.x, dQ[i + 1] = x.y;
  }
}

template <auto Kernel> void launch(const Params& p, int64_t B, size_t smem, cudaStream_t s) {
  allow_smem<Kernel>(smem);
  Kernel<<<dim3(unsigned(ceil_div(p.T, kRows)), unsigned(B * p.H)), kRows, smem, s>>>(p);
  CUDA_LAUNCH_CHECK();
}

template <int DH> void fwd(const Params& p, int64_t B, cudaStream_t s) {
  launch<flash_fwd_fp32_kernel<DH>>(p, B, sizeof(float) * kRows * (3 * DH + 1), s);
}
template <int DH> void bwd(const Params& p, int64_t B, cudaStream_t s) {
  launch<flash_dkdv_fp32_kernel<DH>>(p, B, sizeof(float) * kRows * (4 * (DH + 1) + 2 * DH + 2), s);
  launch<flash_dq_fp32_kernel<DH>>(p, B, sizeof(float) * kRows * (2 * (DH + 1) + 2 * DH), s);
}

}  // namespace

void fwd_fp32(const Params& p, int64_t B, int64_t dh, cudaStream_t s) {
  HeadDims::dispatch(dh, [&](auto d) { fwd<decltype(d)::value>(p, B, s); });
}

void bwd_fp32(const Params& p, int64_t B, int64_t dh, cudaStream_t s) {
  HeadDims::dispatch(dh, [&](auto d) { bwd<decltype(d)::value>(p, B, s); });
}

}  // namespace lmt::cuda::attn
