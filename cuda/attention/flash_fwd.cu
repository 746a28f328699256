// FlashAttention-2 forward on bf16 tensor cores.
//
// Block: a tile of 16 * kWarps queries of one (batch, head); warp w owns queries 16w .. 16w + 15.
// Its Q fragments stay in registers; K and V stream through shared memory in tiles of kTile keys,
// double-buffered. Per key tile, in registers:
//   S = Q K^T (fp32), x = S * scale * log2(e) (-inf where masked),
//   m' = max(m, rowmax x), P = exp2(x - m'), l = l * exp2(m - m') + rowsum P, O = O * exp2(m - m') + P V
// and at the end O / l and L = (m + log2 l) * ln 2. P is rounded to bf16 for the P V matmul (the
// precision policy's matmul operand), everything else is fp32. Causal: key tiles past the block's
// last query are never loaded; only tiles crossing the diagonal (or the end, T) compare indices.
#include "../common.cuh"
#include "flash.cuh"
#include "mma.cuh"

namespace lmt::cuda::attn {
namespace {

template <typename E, int DH>
__global__ void __launch_bounds__(FwdTraits<DH>::kWarps * 32)
    flash_fwd_kernel(const Params p) {
  constexpr int kWarps = FwdTraits<DH>::kWarps, BC = FwdTraits<DH>::kTile;
  constexpr int BR = 16 * kWarps, LD = kLd<DH>, THREADS = kWarps * 32;
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* sQ = reinterpret_cast<bf16*>(smem);
  bf16* sK = sQ + BR * LD;      // 2 buffers of BC rows
  bf16* sV = sK + 2 * BC * LD;  // 2 buffers of BC rows

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  // Causal blocks differ in work: the longest (last query tiles) start first.
  const int64_t qtile = p.causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
  const int64_t b = blockIdx.y / p.H, h = blockIdx.y % p.H, q0 = qtile * BR;
  const E* Q = head<E>(p.q, b, h, DH, p.qkv_batch);
  const E* K = head<E>(p.k, b, h, DH, p.qkv_batch);
  const E* V = head<E>(p.v, b, h, DH, p.qkv_batch);
  const int64_t tiles = key_tiles(p, q0, BR, BC);

  load_tile<E, BR, DH, THREADS>(sQ, Q, q0, p.T, p.qkv_row);
  load_tile<E, BC, DH, THREADS>(sK, K, 0, p.T, p.qkv_row);
  load_tile<E, BC, DH, THREADS>(sV, V, 0, p.T, p.qkv_row);
  cp_async_commit();

  float o[DH / 8][4];
  zero(o);
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  const int64_t warp_q0 = q0 + warp * 16, row = warp_q0 + lane / 4;  // rows `row`, `row + 8`
  uint32_t qf[DH / 16][4];

  for (int64_t j = 0; j < tiles; ++j) {
    const int buf = int(j & 1);
    if (j + 1 < tiles) {
      load_tile<E, BC, DH, THREADS>(sK + (buf ^ 1) * BC * LD, K, (j + 1) * BC, p.T, p.qkv_row);
      load_tile<E, BC, DH, THREADS>(sV + (buf ^ 1) * BC * LD, V, (j + 1) * BC, p.T, p.qkv_row);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    if (j == 0) {
#pragma unroll
      for (int k = 0; k < DH / 16; ++k) load_a<LD>(qf[k], sQ, warp * 16, k * 16, lane);
    }
    const bf16 *k_t = sK + buf * BC * LD, *v_t = sV + buf * BC * LD;

    float s[BC / 8][4];
    zero(s);
#pragma unroll
    for (int k = 0; k < DH / 16; ++k)
#pragma unroll
      for (int n = 0; n < BC; n += 16) {
        uint32_t bf[4];
        load_bt<LD>(bf, k_t, n, k * 16, lane);
        mma(s[n / 8], qf[k], bf[0], bf[1]);
        mma(s[n / 8 + 1], qf[k], bf[2], bf[3]);
      }

    const int64_t k0 = j * BC;
    const bool masked = (p.causal && k0 + BC - 1 > warp_q0) || k0 + BC > p.T;
#pragma unroll
    for (int n = 0; n < BC / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float x = s[n][e] * p.scale_log2;
        if (masked) {
          const int64_t key = k0 + n * 8 + 2 * (lane % 4) + (e & 1), q = row + (e >= 2 ? 8 : 0);
          if (key >= p.T || (p.causal && key > q)) x = -INFINITY;
        }
        s[n][e] = x;
      }
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      float mx = m[hh];
#pragma unroll
      for (int n = 0; n < BC / 8; ++n) mx = fmaxf(mx, fmaxf(s[n][2 * hh], s[n][2 * hh + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float base = mx == -INFINITY ? 0.0f : mx;  // a row with nothing visible yet
      const float alpha = exp2f(m[hh] - base);
      m[hh] = mx;
      float sum = 0;
#pragma unroll
      for (int n = 0; n < BC / 8; ++n)
#pragma unroll
        for (int e = 2 * hh; e < 2 * hh + 2; ++e) sum += (s[n][e] = exp2f(s[n][e] - base));
      l[hh] = l[hh] * alpha + sum;  // this thread's columns; the quad is summed at the end
#pragma unroll
      for (int n = 0; n < DH / 8; ++n) o[n][2 * hh] *= alpha, o[n][2 * hh + 1] *= alpha;
    }
    mma_pb<BC, DH, LD>(o, s, v_t, lane);
    __syncthreads();  // every warp is done with `buf` before the next iteration refills it
  }

  E* O = head<E>(p.out, b, h, DH, p.o_batch);
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    float sum = l[hh];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    const int64_t t = row + 8 * hh;
    if (t >= p.T) continue;
    const float inv = 1.0f / sum;
#pragma unroll
    for (int n = 0; n < DH / 8; ++n)
      store2(O + t * p.o_row + n * 8 + 2 * (lane % 4), o[n][2 * hh] * inv, o[n][2 * hh + 1] * inv);
    if (lane % 4 == 0) p.lse[blockIdx.y * p.T + t] = (m[hh] + log2f(sum)) * kLn2;
  }
}

template <typename E, int DH> void launch(const Params& p, int64_t B, cudaStream_t stream) {
  constexpr int BR = 16 * FwdTraits<DH>::kWarps, BC = FwdTraits<DH>::kTile;
  constexpr size_t smem = size_t(BR + 4 * BC) * kLd<DH> * sizeof(bf16);
  static bool configured = false;  // the attribute is per kernel, set once
  if (!configured) {
    CUDA_CHECK(cudaFuncSetAttribute(flash_fwd_kernel<E, DH>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    configured = true;
  }
  dim3 grid(unsigned(ceil_div(p.T, BR)), unsigned(B * p.H));
  flash_fwd_kernel<E, DH><<<grid, FwdTraits<DH>::kWarps * 32, smem, stream>>>(p);
  CUDA_LAUNCH_CHECK();
}

}  // namespace

template <typename E> void fwd_tc(const Params& p, int64_t B, int64_t dh, cudaStream_t s) {
  switch (dh) {
    case 16: return launch<E, 16>(p, B, s);
    case 32: return launch<E, 32>(p, B, s);
    case 64: return launch<E, 64>(p, B, s);
    case 80: return launch<E, 80>(p, B, s);  // the 2.7b model's head dim
    case 128: return launch<E, 128>(p, B, s);
  }
  LMT_FATAL("flash attention: head dim must be 16, 32, 64, 80 or 128");
}
template void fwd_tc<float>(const Params&, int64_t, int64_t, cudaStream_t);
template void fwd_tc<bf16>(const Params&, int64_t, int64_t, cudaStream_t);

}  // namespace lmt::cuda::attn
