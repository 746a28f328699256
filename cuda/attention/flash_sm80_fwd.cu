// FlashAttention-2 forward on bf16 tensor cores.
//
// Block: a tile of 16 * kMTiles * kWarps queries of one (batch, head); each warp owns 16 * kMTiles
// consecutive queries. Q stays in shared memory; K and V stream through it in tiles of kTile keys,
// double-buffered. Per key tile, in registers:
//   S = Q K^T (fp32, -inf where masked), m' = max(m, rowmax S), c = scale * log2(e),
//   P = exp2(c (S - m')), l = l * exp2(c (m - m')) + rowsum P, O = O * exp2(c (m - m')) + P V
// and at the end O / l and L = scale m + ln l. P is rounded to bf16 for the P V matmul (the
// precision policy's matmul operand), everything else is fp32. Causal: key tiles past the block's
// last query are never loaded; only tiles crossing the diagonal (or the end, T) compare indices.
#include <type_traits>

#include "../common.cuh"
#include "flash.cuh"
#include "mma.cuh"
#include "softmax.cuh"

namespace lmt::cuda::attn {
namespace {

template <int DH>
__global__ void __launch_bounds__(FwdTraits<DH>::kWarps * 32)
    flash_fwd_kernel(const Params p) {
  constexpr int kWarps = FwdTraits<DH>::kWarps, MT = FwdTraits<DH>::kMTiles;
  constexpr int BC = FwdTraits<DH>::kTile, BR = 16 * MT * kWarps, LD = kLd<DH>;
  constexpr int THREADS = kWarps * 32;
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* sQ = reinterpret_cast<bf16*>(smem);
  bf16* sK = sQ + BR * LD;      // 2 buffers of BC rows
  bf16* sV = sK + 2 * BC * LD;  // 2 buffers of BC rows

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t b = blockIdx.y / p.H, h = blockIdx.y % p.H, q0 = query_tile(p) * BR;
  const bf16* Q = head<bf16>(p.q, b, h, DH, p.qkv_batch);
  const bf16* K = head<bf16>(p.k, b, h, DH, p.qkv_batch);
  const bf16* V = head<bf16>(p.v, b, h, DH, p.qkv_batch);
  const int64_t tiles = key_tiles(p, q0, BR, BC);

  load_tile<BR, DH, THREADS>(sQ, Q, q0, p.T, p.qkv_row);
  load_tile<BC, DH, THREADS>(sK, K, 0, p.T, p.qkv_row);
  load_tile<BC, DH, THREADS>(sV, V, 0, p.T, p.qkv_row);
  cp_async_commit();

  float o[MT][DH / 8][4];
  zero(o);
  float m[MT][2], l[MT][2];
  fill(m, -INFINITY);
  fill(l, 0.0f);
  // Row tile i of this warp holds queries row + 16 i and row + 16 i + 8.
  const int64_t warp_q0 = q0 + warp * 16 * MT, row = warp_q0 + lane / 4;

  // Key tiles that no query of the block must mask (inside T, causal: before the block's first
  // query) run a body without the mask; the few others, at the diagonal or the end, with it.
  const int64_t clean = unmasked_key_tiles(p, q0, tiles, BC);
  auto step = [&](int64_t j, auto mask) {
    const int buf = next_kv_tile<BC, DH, THREADS>(sK, sV, K, V, j, tiles, p.T, p.qkv_row);
    const bf16 *k_t = sK + buf * BC * LD, *v_t = sV + buf * BC * LD;
    const int64_t k0 = j * BC;
    // A warp whose queries all lie before this tile's first key sees none of it.
    if (!p.causal || k0 <= warp_q0 + 16 * MT - 1) {
      float s[MT][BC / 8][4];
      zero(s);
      mma_abt<MT, DH, BC, LD>(s, sQ, warp * 16 * MT, k_t, lane);

      if constexpr (decltype(mask)::value)
        mask_tile<false, MT, BC>(s, int(warp_q0), int(k0), int(p.T), p.causal, lane);
      float alpha[MT][2];
      softmax_tile<MT, BC>(s, m, l, alpha, p.scale_log2);
      rescale<MT, DH>(o, alpha);
      mma_pb<MT, BC, DH, LD>(o, s, v_t, lane);
    }
    __syncthreads();  // every warp is done with `buf` before the next iteration refills it
  };
  int64_t j = 0;
  for (; j < clean; ++j) step(j, std::false_type{});
  for (; j < tiles; ++j) step(j, std::true_type{});

  store_fwd<MT, DH>(p, b, h, row, o, m, l, lane);
}

template <int DH> void launch(const Params& p, int64_t B, cudaStream_t stream) {
  constexpr int BR = 16 * FwdTraits<DH>::kMTiles * FwdTraits<DH>::kWarps;
  constexpr int BC = FwdTraits<DH>::kTile;
  constexpr size_t smem = size_t(BR + 4 * BC) * kLd<DH> * sizeof(bf16);
  launch_tiles<flash_fwd_kernel<DH>>(p, B, BR, FwdTraits<DH>::kWarps * 32, smem, stream);
}

}  // namespace

void fwd_tc(const Params& p, int64_t B, int64_t dh, cudaStream_t s) {
  HeadDims::dispatch(dh, [&](auto d) { launch<decltype(d)::value>(p, B, s); });
}

}  // namespace lmt::cuda::attn
