// FlashAttention-2 backward on bf16 tensor cores, by recomputation from Q, K, V, dO and the
// forward's logsumexp L (no T x T matrix is stored):
//   D = rowsum(dO * O)                                   (flash_bwd_rowsum_kernel)
//   P = exp(scale Q K^T - L), dP = dO V^T, dS = P * (dP - D)
//   dV = P^T dO, dK = scale dS^T Q                       (flash_dkdv_kernel: a block owns keys)
//   dQ = scale dS K                                      (flash_dq_kernel: a block owns queries)
// Each output row is written by the one block that owns it: no atomics, deterministic. The dK/dV
// kernel computes the transposes S^T, dP^T directly (keys as rows), so P^T and dS^T feed the next
// matmul from registers. P and dS are rounded to bf16 as matmul operands; the rest is fp32.
// Causal: a key tile only visits query tiles at or below the diagonal, a query tile only key tiles
// at or left of it; only tiles crossing the diagonal compare indices.
#include <type_traits>

#include "../common.cuh"
#include "flash.cuh"
#include "mma.cuh"
#include "softmax.cuh"

namespace lmt::cuda::attn {
namespace {

// The dot product of 16 bytes of dO and of O: 8 bf16 or 4 fp32 values.
__device__ inline float dot16(uint4 x, uint4 y, bf16) {
  const auto* a = reinterpret_cast<const __nv_bfloat162*>(&x);
  const auto* b = reinterpret_cast<const __nv_bfloat162*>(&y);
  float acc = 0;
  for (int i = 0; i < 4; ++i) {
    const float2 u = __bfloat1622float2(a[i]), v = __bfloat1622float2(b[i]);
    acc += u.x * v.x + u.y * v.y;
  }
  return acc;
}
__device__ inline float dot16(uint4 x, uint4 y, float) {
  const float4 a = *reinterpret_cast<const float4*>(&x), b = *reinterpret_cast<const float4*>(&y);
  return a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w;
}

// D for fp32 storage (flash_fp32.cu's kernels) or bf16: G lanes a row, each summing its 16-byte
// chunks of the row in order (dh a multiple of 8, rows 16-byte aligned: every flash head dim),
// then the G lanes' sums by shuffles in a fixed order (deterministic). G: the power of two that
// covers the row's chunks, up to a warp. Rows are taken in (b, t, h) order, so that a warp reads
// one token's neighbouring heads, contiguous memory; 32-bit index maths (rows < 2^31).
template <typename E, int G>
__global__ void flash_bwd_rowsum_kernel(const Params p, int rows, int dh) {
  allow_dependents();  // the Hopper dK/dV kernel's blocks may start (flash_sm90_bwd.cu)
  const int r = int((blockIdx.x * blockDim.x + threadIdx.x) / G), lane = int(threadIdx.x % G);
  const int H = int(p.H), T = int(p.T), h = r % H, t = r / H % T, b = r / H / T;
  float acc = 0;
  if (r < rows) {
    const int64_t row = t * p.o_row;
    const auto* o = reinterpret_cast<const uint4*>(head<E>(p.o, b, h, dh, p.o_batch) + row);
    const auto* g = reinterpret_cast<const uint4*>(head<E>(p.dout, b, h, dh, p.o_batch) + row);
    for (int k = lane; k < dh * int(sizeof(E)) / 16; k += G) acc += dot16(g[k], o[k], E{});
  }
  for (int o = G / 2; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if (r < rows && lane == 0) p.D[(int64_t(b) * H + h) * T + t] = acc;
}

template <int DH>
__global__ void __launch_bounds__(DkdvTraits<DH>::kWarps * 32) flash_dkdv_kernel(const Params p) {
  constexpr int kWarps = DkdvTraits<DH>::kWarps, MT = DkdvTraits<DH>::kMTiles;
  constexpr int BR = DkdvTraits<DH>::kTile, BC = 16 * MT * kWarps, LD = kLd<DH>;
  constexpr int THREADS = kWarps * 32;
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* sK = reinterpret_cast<bf16*>(smem);
  bf16* sV = sK + BC * LD;
  bf16* sQ = sV + BC * LD;       // 2 buffers of BR rows
  bf16* sdO = sQ + 2 * BR * LD;  // 2 buffers of BR rows
  float* sL = reinterpret_cast<float*>(sdO + 2 * BR * LD);  // 2 x BR
  float* sD = sL + 2 * BR;                                   // 2 x BR

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t bh = blockIdx.y, b = bh / p.H, h = bh % p.H, k0 = int64_t(blockIdx.x) * BC;
  const bf16* Q = head<bf16>(p.q, b, h, DH, p.qkv_batch);
  const bf16* G = head<bf16>(p.dout, b, h, DH, p.o_batch);
  const int64_t first = p.causal ? k0 / BR : 0, tiles = ceil_div(p.T, BR);

  load_tile<BC, DH, THREADS>(sK, head<bf16>(p.k, b, h, DH, p.qkv_batch), k0, p.T, p.qkv_row);
  load_tile<BC, DH, THREADS>(sV, head<bf16>(p.v, b, h, DH, p.qkv_batch), k0, p.T, p.qkv_row);
  load_tile<BR, DH, THREADS>(sQ, Q, first * BR, p.T, p.qkv_row);
  load_tile<BR, DH, THREADS>(sdO, G, first * BR, p.T, p.o_row);
  cp_async_commit();
  load_stats<BR>(sL, sD, p, bh, first * BR);

  float dk[MT][DH / 8][4], dv[MT][DH / 8][4];
  zero(dk);
  zero(dv);
  // Row tile i of this warp holds keys key + 16 i and key + 16 i + 8.
  const int64_t warp_k0 = k0 + warp * 16 * MT, key = warp_k0 + lane / 4;

  // Query tiles that no key of the block must mask (causal: from the block's last key on) run a
  // body without the mask; the first ones, at the diagonal, with it. (Queries past T have
  // L = +inf, hence P = 0: no mask needed for them.)
  const int64_t masked_end = masked_query_tiles_end(p, k0, BC, BR, first, tiles);
  auto step = [&](int64_t i, auto mask) {
    const int buf =
        next_query_tile<BR, DH, THREADS>(sQ, sdO, sL, sD, Q, G, p, bh, i, first, tiles);
    const bf16 *q_t = sQ + buf * BR * LD, *g_t = sdO + buf * BR * LD;
    const float *l_t = sL + buf * BR, *d_t = sD + buf * BR;
    const int64_t q0 = i * BR;
    // A warp whose keys all lie after this tile's last query gets nothing from it.
    if (!p.causal || warp_k0 <= q0 + BR - 1) {
      float s[MT][BR / 8][4];  // S^T, then P^T: keys x queries
      zero(s);
      mma_abt<MT, DH, BR, LD>(s, sK, warp * 16 * MT, q_t, lane);
      if constexpr (decltype(mask)::value)
        mask_tile<true, MT, BR>(s, int(warp_k0), int(q0), int(p.T), true, lane);
      probs<MT, BR>(s, p.scale_log2, by_col(l_t, lane));
      mma_pb<MT, BR, DH, LD>(dv, s, g_t, lane);  // dV += P^T dO

      float ds[MT][BR / 8][4];  // dP^T, then dS^T
      zero(ds);
      mma_abt<MT, DH, BR, LD>(ds, sV, warp * 16 * MT, g_t, lane);
      dscores<MT, BR>(ds, s, by_col(d_t, lane));
      mma_pb<MT, BR, DH, LD>(dk, ds, q_t, lane);  // dK += dS^T Q (scaled at the end)
    }
    __syncthreads();  // every warp is done with `buf` before the next iteration refills it
  };
  int64_t i = first;
  for (; i < masked_end; ++i) step(i, std::true_type{});
  for (; i < tiles; ++i) step(i, std::false_type{});

  store_dkdv<MT, DH>(p, b, h, key, dk, dv, lane, GlobalRope{p.rope, DH / 2});
}

template <int DH>
__global__ void __launch_bounds__(DqTraits<DH>::kWarps * 32) flash_dq_kernel(const Params p) {
  constexpr int kWarps = DqTraits<DH>::kWarps, MT = DqTraits<DH>::kMTiles;
  constexpr int BC = DqTraits<DH>::kTile, BR = 16 * MT * kWarps, LD = kLd<DH>;
  constexpr int THREADS = kWarps * 32;
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* sQ = reinterpret_cast<bf16*>(smem);
  bf16* sdO = sQ + BR * LD;
  bf16* sK = sdO + BR * LD;     // 2 buffers of BC rows
  bf16* sV = sK + 2 * BC * LD;  // 2 buffers of BC rows

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t bh = blockIdx.y, b = bh / p.H, h = bh % p.H, q0 = query_tile(p) * BR;
  const bf16* K = head<bf16>(p.k, b, h, DH, p.qkv_batch);
  const bf16* V = head<bf16>(p.v, b, h, DH, p.qkv_batch);
  const int64_t tiles = key_tiles(p, q0, BR, BC);

  load_tile<BR, DH, THREADS>(sQ, head<bf16>(p.q, b, h, DH, p.qkv_batch), q0, p.T, p.qkv_row);
  load_tile<BR, DH, THREADS>(sdO, head<bf16>(p.dout, b, h, DH, p.o_batch), q0, p.T, p.o_row);
  load_tile<BC, DH, THREADS>(sK, K, 0, p.T, p.qkv_row);
  load_tile<BC, DH, THREADS>(sV, V, 0, p.T, p.qkv_row);
  cp_async_commit();

  // Row tile i of this warp holds queries row + 16 i and row + 16 i + 8.
  const int64_t warp_q0 = q0 + warp * 16 * MT, row = warp_q0 + lane / 4;
  float L[MT][2], D[MT][2];
  row_stats(L, D, p, bh, row);
  to_log2(L);
  float dq[MT][DH / 8][4];
  zero(dq);

  // As in forward: key tiles without any masking first, then the diagonal and end tiles.
  const int64_t clean = unmasked_key_tiles(p, q0, tiles, BC);
  auto step = [&](int64_t j, auto mask) {
    const int buf = next_kv_tile<BC, DH, THREADS>(sK, sV, K, V, j, tiles, p.T, p.qkv_row);
    const bf16 *k_t = sK + buf * BC * LD, *v_t = sV + buf * BC * LD;
    const int64_t k0 = j * BC;
    if (!p.causal || k0 <= warp_q0 + 16 * MT - 1) {
      float s[MT][BC / 8][4];  // S, then P
      zero(s);
      mma_abt<MT, DH, BC, LD>(s, sQ, warp * 16 * MT, k_t, lane);
      if constexpr (decltype(mask)::value)
        mask_tile<false, MT, BC>(s, int(warp_q0), int(k0), int(p.T), p.causal, lane);
      probs<MT, BC>(s, p.scale_log2, by_row(L));
      float ds[MT][BC / 8][4];  // dP, then dS
      zero(ds);
      mma_abt<MT, DH, BC, LD>(ds, sdO, warp * 16 * MT, v_t, lane);
      dscores<MT, BC>(ds, s, by_row(D));
      mma_pb<MT, BC, DH, LD>(dq, ds, k_t, lane);  // dQ += dS K (scaled at the end)
    }
    __syncthreads();
  };
  int64_t j = 0;
  for (; j < clean; ++j) step(j, std::false_type{});
  for (; j < tiles; ++j) step(j, std::true_type{});

  store_dq<MT, DH>(p, b, h, row, dq, lane, GlobalRope{p.rope, DH / 2});
}

template <int DH> void launch(const Params& p, int64_t B, cudaStream_t stream) {
  {
    constexpr int BR = DkdvTraits<DH>::kTile;
    constexpr int BC = 16 * DkdvTraits<DH>::kMTiles * DkdvTraits<DH>::kWarps;
    constexpr size_t smem = size_t(2 * BC + 4 * BR) * kLd<DH> * sizeof(bf16) + 4 * BR * sizeof(float);
    launch_tiles<flash_dkdv_kernel<DH>>(p, B, BC, DkdvTraits<DH>::kWarps * 32, smem, stream);
  }
  {
    constexpr int BR = 16 * DqTraits<DH>::kMTiles * DqTraits<DH>::kWarps;
    constexpr int BC = DqTraits<DH>::kTile;
    constexpr size_t smem = size_t(2 * BR + 4 * BC) * kLd<DH> * sizeof(bf16);
    launch_tiles<flash_dq_kernel<DH>>(p, B, BR, DqTraits<DH>::kWarps * 32, smem, stream);
  }
}

}  // namespace

template <typename E> void bwd_rowsum(const Params& p, int64_t B, int64_t dh, cudaStream_t s) {
  LMT_ASSERT(dh % 8 == 0, "FlashAttention's head dims are multiples of 8");
  const int64_t rows = B * p.H * p.T, chunks = dh * int64_t(sizeof(E)) / 16;
  LMT_ASSERT(rows < (int64_t(1) << 31) / 32, "more attention rows than 32-bit indices reach");
  auto launch = [&](auto lanes) {
    constexpr int G = decltype(lanes)::value;
    flash_bwd_rowsum_kernel<E, G>
        <<<unsigned(ceil_div(rows * G, 256)), 256, 0, s>>>(p, int(rows), int(dh));
  };
  if (chunks <= 4) launch(std::integral_constant<int, 4>{});
  else if (chunks <= 8) launch(std::integral_constant<int, 8>{});
  else if (chunks <= 16) launch(std::integral_constant<int, 16>{});
  else launch(std::integral_constant<int, 32>{});
  CUDA_LAUNCH_CHECK();
}
template void bwd_rowsum<float>(const Params&, int64_t, int64_t, cudaStream_t);
template void bwd_rowsum<bf16>(const Params&, int64_t, int64_t, cudaStream_t);

void bwd_tc(const Params& p, int64_t B, int64_t dh, cudaStream_t s) {
  HeadDims::dispatch(dh, [&](auto d) { launch<decltype(d)::value>(p, B, s); });
}

}  // namespace lmt::cuda::attn
