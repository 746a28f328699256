// FlashAttention-2 forward on Hopper's warpgroup tensor cores (wgmma, sm_90a): flash_fwd.cu's
// algorithm and arithmetic (online softmax in fp32 on exp2, P rounded to bf16 for P V, causal
// tiles past the last query never visited, only diagonal and end tiles masked), with each
// warpgroup computing a 64-query slice of S = Q K^T and of O += P V per instruction instead of
// each warp a 16-row one: Q and the K tile are read by the tensor cores straight from shared
// memory, P from registers, V from shared memory as stored (MN-major).
//
// Block: kGroups warpgroups, 64 * kGroups queries of one (batch, head); K and V stream through
// shared memory in tiles of kTile keys, double-buffered with cp.async by all threads (swizzled
// tiles, wgmma.cuh). Software-pipelined by one tile (key_pipeline): while the tensor cores run
// P_j V_j, the warpgroup takes the softmax of S_{j+1}, issued just before it. So key tile j + 1
// must be in shared memory with value tile j: K runs one tile ahead of V.
#include "../common.cuh"
#include "flash.cuh"
#include "softmax.cuh"
#include "wgmma.cuh"

namespace lmt::cuda::attn {
namespace {

template <typename E, int DH>
__global__ void __launch_bounds__(Sm90FwdTraits<E, DH>::kGroups * 128, 1)
    flash_fwd_sm90_kernel(const Params p) {
#ifdef LMT_SM90_DEVICE_CODE
  constexpr int BC = Sm90FwdTraits<E, DH>::kTile, BR = 64 * Sm90FwdTraits<E, DH>::kGroups;
  constexpr int THREADS = BR * 2, KV = BC * DH;  // KV: elements of one K or V buffer
  bf16* sQ = smem_1024();
  bf16* sK = sQ + BR * DH;  // key tile t in buffer t % 2
  bf16* sV = sK + 2 * KV;   // value tile t in buffer t % 2

  const int group = threadIdx.x / 128, warp = threadIdx.x / 32 % 4, lane = threadIdx.x % 32;
  const int64_t b = blockIdx.y / p.H, h = blockIdx.y % p.H, q0 = query_tile(p) * BR;
  const E* K = head<E>(p.k, b, h, DH, p.qkv_batch);
  const E* V = head<E>(p.v, b, h, DH, p.qkv_batch);
  const int64_t group_q0 = q0 + 64 * group, warp_q0 = group_q0 + 16 * warp, row = warp_q0 + lane / 4;
  // Key tiles the block loads, and those this warpgroup uses (causal: the first warpgroup may
  // need one fewer); tiles from `clean` on need the mask for some query of the block.
  const int64_t tiles = key_tiles(p, q0, BR, BC), mine = key_tiles(p, group_q0, 64, BC);
  const int64_t clean = unmasked_key_tiles(p, q0, tiles, BC);
  auto load = [&](bf16* buffers, const E* src, int64_t t) {
    load_tile<E, BC, DH, THREADS, true>(buffers + (t % 2) * KV, src, t * BC, p.T, p.qkv_row);
  };

  // cp.async groups: {Q, K_0}, {K_1, V_0}, then in iteration j {K_{j+2}, V_{j+1}}; iteration j
  // waits for all but the newest group: K_{j+1} and V_j.
  load_tile<E, BR, DH, THREADS, true>(sQ, head<E>(p.q, b, h, DH, p.qkv_batch), q0, p.T, p.qkv_row);
  load(sK, K, 0);
  cp_async_commit();
  if (tiles > 1) load(sK, K, 1);
  load(sV, V, 0);
  cp_async_commit();
  cp_async_wait<1>();
  fence_async_smem();
  __syncthreads();

  float o[1][DH / 8][4], m[1][2], l[1][2], alpha[1][2], s[1][BC / 8][4];
  uint32_t pa[BC / 16][4];  // P_j, the A operand of P V
  zero(o);
  fill(m, -INFINITY);
  fill(l, 0.0f);
  auto scores = [&](int64_t t) {  // s = Q K_t^T
    wgmma_abt<BC, DH, BR>(s[0], sQ, 64 * group, sK + (t % 2) * KV);
    wgmma_commit();
  };
  auto softmax = [&](int64_t t, auto mask) {  // s = P_t; alpha
    fence_regs(s[0]);
    if constexpr (decltype(mask)::value)
      mask_tile<false, 1, BC>(s, int(warp_q0), int(t * BC), int(p.T), p.causal, lane);
    softmax_tile<1, BC>(s, m, l, alpha, p.scale_log2);
  };
  auto pv = [&](int64_t j) {  // O += P_j V_j
    wgmma_pb<DH, BC>(o[0], pa, sV + (j % 2) * KV);
    wgmma_commit();
  };
  auto after = [&](auto has_next) {  // O is final for tile j: rescale for j + 1, P_{j+1} to bf16
    fence_regs(o[0]);
    if constexpr (decltype(has_next)::value) {
      rescale<1, DH>(o, alpha);
      to_a<BC>(pa, s[0]);
    }
  };
  // Iteration j: tile j + 2 of K and j + 1 of V start to load, K_{j+1} and V_j are waited for.
  auto advance = [&](int64_t j) {
    __syncthreads();  // K_j's and V_{j-1}'s buffers, refilled now, were last read in iteration j - 1
    if (j + 2 < tiles) load(sK, K, j + 2);
    if (j + 1 < tiles) load(sV, V, j + 1);
    cp_async_commit();
    cp_async_wait<1>();
    fence_async_smem();
    __syncthreads();
  };
  key_pipeline(tiles, mine, clean, scores, softmax, pv, after, advance);

  store_fwd<E, 1, DH>(p, b, h, row, o, m, l, lane);
#else
  __trap();  // launched only where sm90() holds
#endif
}

template <typename E, int DH> void launch(const Params& p, int64_t B, cudaStream_t stream) {
  constexpr int BR = 64 * Sm90FwdTraits<E, DH>::kGroups, BC = Sm90FwdTraits<E, DH>::kTile;
  constexpr size_t smem = size_t(BR + 4 * BC) * DH * sizeof(bf16) + kSmemAlignSlack;
  launch_tiles<flash_fwd_sm90_kernel<E, DH>>(p, B, BR, BR * 2, smem, stream);
}

}  // namespace

template <typename E> void fwd_sm90(const Params& p, int64_t B, int64_t dh, cudaStream_t s) {
  Sm90HeadDims::dispatch(dh, [&](auto d) { launch<E, decltype(d)::value>(p, B, s); });
}
template void fwd_sm90<float>(const Params&, int64_t, int64_t, cudaStream_t);
template void fwd_sm90<bf16>(const Params&, int64_t, int64_t, cudaStream_t);

}  // namespace lmt::cuda::attn
