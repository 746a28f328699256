// FlashAttention-2 forward on Hopper's warpgroup tensor cores (wgmma, sm_90a): flash_fwd.cu's
// algorithm and arithmetic (online softmax in fp32 on exp2, P rounded to bf16 for P V, causal
// tiles past the block's last query never loaded, only diagonal and end tiles masked), with each
// warpgroup computing a 64-query slice of S = Q K^T and of O += P V per instruction instead of
// each warp a 16-row one: Q and the K tile are read by the tensor cores straight from shared
// memory, P from registers, V from shared memory as stored (MN-major).
//
// Block: kGroups warpgroups, 64 * kGroups queries of one (batch, head); K and V stream through
// shared memory in tiles of kTile keys, double-buffered with cp.async by all threads (swizzled
// tiles, wgmma.cuh).
#include <type_traits>

#include "../common.cuh"
#include "flash.cuh"
#include "softmax.cuh"
#include "wgmma.cuh"

namespace lmt::cuda::attn {
namespace {

template <typename E, int DH>
__global__ void __launch_bounds__(Sm90FwdTraits<DH>::kGroups * 128, 1)
    flash_fwd_sm90_kernel(const Params p) {
#ifdef LMT_SM90_DEVICE_CODE
  constexpr int BC = Sm90FwdTraits<DH>::kTile, BR = 64 * Sm90FwdTraits<DH>::kGroups;
  constexpr int THREADS = BR * 2;
  bf16* sQ = smem_1024();
  bf16* sK = sQ + BR * DH;      // 2 buffers of BC rows
  bf16* sV = sK + 2 * BC * DH;  // 2 buffers of BC rows

  const int group = threadIdx.x / 128, warp = threadIdx.x / 32 % 4, lane = threadIdx.x % 32;
  const int64_t qtile = p.causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;  // longest first
  const int64_t b = blockIdx.y / p.H, h = blockIdx.y % p.H, q0 = qtile * BR;
  const E* K = head<E>(p.k, b, h, DH, p.qkv_batch);
  const E* V = head<E>(p.v, b, h, DH, p.qkv_batch);
  const int64_t tiles = key_tiles(p, q0, BR, BC);

  load_tile<E, BR, DH, THREADS, true>(sQ, head<E>(p.q, b, h, DH, p.qkv_batch), q0, p.T, p.qkv_row);
  load_tile<E, BC, DH, THREADS, true>(sK, K, 0, p.T, p.qkv_row);
  load_tile<E, BC, DH, THREADS, true>(sV, V, 0, p.T, p.qkv_row);
  cp_async_commit();

  float o[1][DH / 8][4], m[1][2], l[1][2];
  zero(o);
  fill(m, -INFINITY);
  fill(l, 0.0f);
  const int64_t group_q0 = q0 + 64 * group, warp_q0 = group_q0 + 16 * warp, row = warp_q0 + lane / 4;

  const int64_t clean = min64(tiles, p.causal ? min64(p.T, q0 + 1) / BC : p.T / BC);
  auto step = [&](int64_t j, auto mask) {
    const int buf = next_kv_tile<E, BC, DH, THREADS, true>(sK, sV, K, V, j, tiles, p.T, p.qkv_row);
    const int64_t k0 = j * BC;
    // A warpgroup whose queries all lie before this tile's first key sees none of it.
    if (!p.causal || k0 <= group_q0 + 63) {
      float s[1][BC / 8][4];
      wgmma_fence();
      wgmma_abt<BC, DH, BR>(s[0], sQ, 64 * group, sK + buf * BC * DH);
      wgmma_commit();
      wgmma_wait<0>();
      if constexpr (decltype(mask)::value)
        mask_tile<false, 1, BC>(s, int(warp_q0), int(k0), int(p.T), p.causal, lane);
      online_softmax<1, BC, DH>(s, m, l, o, p.scale_log2);
      uint32_t pa[BC / 16][4];
      wgmma_pb<DH, BC>(o[0], pa, s[0], sV + buf * BC * DH);
      wgmma_commit();
      wgmma_wait<0>();
    }
    __syncthreads();  // every warp is done with `buf` before the next iteration refills it
  };
  int64_t j = 0;
  for (; j < clean; ++j) step(j, std::false_type{});
  for (; j < tiles; ++j) step(j, std::true_type{});

  store_fwd<E, 1, DH>(p, b, h, row, o, m, l, lane);
#else
  __trap();  // launched only where sm90() holds
#endif
}

template <typename E, int DH> void launch(const Params& p, int64_t B, cudaStream_t stream) {
  constexpr int BR = 64 * Sm90FwdTraits<DH>::kGroups, BC = Sm90FwdTraits<DH>::kTile;
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
