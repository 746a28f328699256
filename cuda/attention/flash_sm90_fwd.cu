// FlashAttention-2 forward on Hopper's warpgroup tensor cores (wgmma, sm_90a): flash_fwd.cu's
// algorithm and arithmetic (online softmax in fp32 on exp2, P rounded to bf16 for P V, causal
// tiles past the last query never visited, only diagonal and end tiles masked), with each
// warpgroup computing a 64-query slice of S = Q K^T and of O += P V per instruction instead of
// each warp a 16-row one: Q and the K tile are read by the tensor cores straight from shared
// memory, P from registers, V from shared memory as stored (MN-major).
//
// Block: kGroups consumer warpgroups, 64 * kGroups queries of one (batch, head); K and V stream
// through shared memory in tiles of kTile keys (swizzled tiles, wgmma.cuh). Each warpgroup is
// software-pipelined by one tile (key_pipeline): while the tensor cores run P_j V_j, it takes the
// softmax of S_{j+1}, issued just before it. So key tile j + 1 must be in shared memory with
// value tile j: K runs one tile ahead of V. Two ways to stream them:
//   bf16 storage (fwd_tma_kernel): one more warpgroup, the producer, copies Q and the K and V
//     tiles with TMA into kStages buffers each, and mbarriers say when a buffer is full (the
//     bytes landed) and when it is free again (every consumer warp is done with it). No barrier
//     spans the block: the consumer warpgroups drift apart, one's softmax running under the
//     other's matmuls. The producer hands most of its registers to the consumers.
//   fp32 storage (the model's; fwd_kernel): every thread converts rows to bf16 as it copies them
//     (TMA cannot), two buffers each, with block barriers around every tile.
#include <cuda.h>
#include <cudaTypedefs.h>

#include "../common.cuh"
#include "flash.cuh"
#include "softmax.cuh"
#include "wgmma.cuh"

namespace lmt::cuda::attn {
namespace {

// One consumer warpgroup's queries 64 group .. + 63 of the block's tile at q0 (sQ holds BR rows):
// key tile t in buffer t % STAGES of sK and sV. advance(j) is key_pipeline's (K_{j+1} and V_j
// ready once it returns); issued() follows the issue of each P V; release(j, has_next) follows
// each tile's matmuls (j = -1: the first scores), when K_{j+1} (if has_next) and V_j (if j >= 0)
// are no longer read.
template <typename E, int DH, int BR, int BC, int STAGES, typename Advance, typename Issued,
          typename Release>
__device__ __forceinline__ void fwd_rows(const Params& p, int64_t b, int64_t h, int64_t q0,
                                         int group, const bf16* sQ, const bf16* sK, const bf16* sV,
                                         Advance&& advance, Issued&& issued, Release&& release) {
  constexpr int KV = BC * DH;  // elements of one K or V buffer
  const int warp = threadIdx.x / 32 % 4, lane = threadIdx.x % 32;
  const int64_t group_q0 = q0 + 64 * group, warp_q0 = group_q0 + 16 * warp, row = warp_q0 + lane / 4;
  // Key tiles the block loads, and those this warpgroup uses (causal: the first warpgroup may
  // need one fewer); tiles from `clean` on need the mask for some query of the block.
  const int64_t tiles = key_tiles(p, q0, BR, BC), mine = key_tiles(p, group_q0, 64, BC);
  const int64_t clean = unmasked_key_tiles(p, q0, tiles, BC);

  float o[1][DH / 8][4], m[1][2], l[1][2], alpha[1][2], s[1][BC / 8][4];
  uint32_t pa[BC / 16][4];  // P_j, the A operand of P V
  zero(o);
  fill(m, -INFINITY);
  fill(l, 0.0f);
  auto scores = [&](int64_t t) {  // s = Q K_t^T
    wgmma_abt<BC, DH, BR>(s[0], sQ, 64 * group, sK + (t % STAGES) * KV);
    wgmma_commit();
  };
  auto softmax = [&](int64_t t, auto mask) {  // s = P_t; alpha
    fence_regs(s[0]);
    if constexpr (decltype(mask)::value)
      mask_tile<false, 1, BC>(s, int(warp_q0), int(t * BC), int(p.T), p.causal, lane);
    softmax_tile<1, BC>(s, m, l, alpha, p.scale_log2);
  };
  auto pv = [&](int64_t j) {  // O += P_j V_j
    wgmma_pb<DH, BC>(o[0], pa, sV + (j % STAGES) * KV);
    wgmma_commit();
    issued();
  };
  auto after = [&](int64_t j, auto has_next) {  // O is final for tile j: rescale, P_{j+1} to bf16
    fence_regs(o[0]);
    release(j, has_next);
    if constexpr (decltype(has_next)::value) {
      rescale<1, DH>(o, alpha);
      to_a<BC>(pa, s[0]);
    }
  };
  key_pipeline(tiles, mine, clean, scores, softmax, pv, after, advance);

  store_fwd<E, 1, DH>(p, b, h, row, o, m, l, lane);
}

// fp32 storage: every thread loads, K one tile ahead of V in two buffers each.
template <typename E, int DH>
__global__ void __launch_bounds__(Sm90FwdTraits<E, DH>::kGroups * 128, 1)
    fwd_kernel(const Params p) {
#ifdef LMT_SM90_DEVICE_CODE
  constexpr int BC = Sm90FwdTraits<E, DH>::kTile, BR = 64 * Sm90FwdTraits<E, DH>::kGroups;
  constexpr int THREADS = BR * 2, KV = BC * DH;
  bf16* sQ = smem_1024();
  bf16* sK = sQ + BR * DH;  // key tile t in buffer t % 2
  bf16* sV = sK + 2 * KV;   // value tile t in buffer t % 2

  const int64_t b = blockIdx.y / p.H, h = blockIdx.y % p.H, q0 = query_tile(p) * BR;
  const E* K = head<E>(p.k, b, h, DH, p.qkv_batch);
  const E* V = head<E>(p.v, b, h, DH, p.qkv_batch);
  const int64_t tiles = key_tiles(p, q0, BR, BC);
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
  fwd_rows<E, DH, BR, BC, 2>(p, b, h, q0, threadIdx.x / 128, sQ, sK, sV, advance, [] {},
                             [](int64_t, auto) {});
#else
  __trap();  // launched only where sm90() holds
#endif
}

// bf16 storage: warpgroup 0 produces (TMA), warpgroups 1 .. kGroups consume.
template <int DH> struct TmaFwd {
  static constexpr int kGroups = Sm90FwdTraits<bf16, DH>::kGroups, BC = Sm90FwdTraits<bf16, DH>::kTile;
  static constexpr int BR = 64 * kGroups, kStages = Sm90FwdTraits<bf16, DH>::kStages;
  static constexpr int kThreads = 128 * (kGroups + 1);
  // Shared memory: Q, kStages K and V buffers, then the mbarriers (Q full; K and V full, free).
  static constexpr size_t kTileBytes = size_t(BR + 2 * kStages * BC) * DH * sizeof(bf16);
  static constexpr size_t kSmem = kTileBytes + (1 + 4 * kStages) * sizeof(uint64_t) + kSmemAlignSlack;
};

template <int DH>
__global__ void __launch_bounds__(TmaFwd<DH>::kThreads, 1)
    fwd_tma_kernel(const Params p, const __grid_constant__ CUtensorMap q_map,
                   const __grid_constant__ CUtensorMap k_map, const __grid_constant__ CUtensorMap v_map) {
#ifdef LMT_SM90_DEVICE_CODE
  using F = TmaFwd<DH>;
  constexpr int BR = F::BR, BC = F::BC, S = F::kStages, KV = BC * DH;
  constexpr bool kPingPong = Sm90FwdTraits<bf16, DH>::kPingPong && F::kGroups > 1;
  // Registers per thread after the hand-over: the producer keeps 24, the consumers share the rest
  // of the 64 K (at most 240, in steps of 8).
  constexpr int kProducerRegs = 24, kShare = (65536 / 128 - kProducerRegs) / F::kGroups / 8 * 8;
  constexpr int kConsumerRegs = kShare > 240 ? 240 : kShare;
  bf16* sQ = smem_1024();
  bf16* sK = sQ + BR * DH;       // key tile t in buffer t % S
  bf16* sV = sK + S * KV;        // value tile t in buffer t % S
  uint64_t* q_full = reinterpret_cast<uint64_t*>(sV + S * KV);
  uint64_t *k_full = q_full + 1, *v_full = k_full + S, *k_free = v_full + S, *v_free = k_free + S;
  const int64_t b = blockIdx.y / p.H, h = blockIdx.y % p.H, q0 = query_tile(p) * BR;
  const int64_t tiles = key_tiles(p, q0, BR, BC);
  const int group = threadIdx.x / 128;  // 0: producer

  if (threadIdx.x == 0) {
    mbar_init(q_full, 1);
    for (int i = 0; i < S; ++i) {
      mbar_init(k_full + i, 1), mbar_init(v_full + i, 1);
      mbar_init(k_free + i, 4 * F::kGroups), mbar_init(v_free + i, 4 * F::kGroups);
    }
    mbar_init_fence();
  }
  __syncthreads();

  if (group == 0) {
    regs_down<kProducerRegs>();
    if (threadIdx.x != 0) return;
    // A tile of `rows` rows from row0: DH / 64 panels of 64 columns, one copy each.
    auto copy = [&](bf16* dst, const CUtensorMap& map, int rows, int64_t row0, uint64_t* bar) {
      mbar_expect(bar, uint32_t(rows * DH * sizeof(bf16)));
      for (int c = 0; c < DH / 64; ++c)
        tma_load_4d(dst + c * rows * 64, &map, 64 * c, int(row0), int(h), int(b), bar);
    };
    copy(sQ, q_map, BR, q0, q_full);
    for (int64_t t = 0; t < tiles; ++t) {
      const int i = int(t % S);
      const uint32_t reuse = uint32_t(t / S);  // the buffer's reuse count
      if (reuse > 0) mbar_wait(k_free + i, (reuse - 1) & 1);
      copy(sK + i * KV, k_map, BC, t * BC, k_full + i);
      if (reuse > 0) mbar_wait(v_free + i, (reuse - 1) & 1);
      copy(sV + i * KV, v_map, BC, t * BC, v_full + i);
    }
    return;
  }
  regs_up<kConsumerRegs>();
  const int me = group - 1;
  const bool signal = threadIdx.x % 32 == 0;  // one arrival per warp frees a buffer
  auto full = [&](uint64_t* bars, int64_t t) { mbar_wait(bars + t % S, uint32_t(t / S) & 1); };
  // Ping-pong (kPingPong): the consumers take turns to issue their matmuls, in a ring, so that
  // one's softmax runs while another's matmuls hold the tensor cores. A turn is one issue of
  // matmuls (the first scores; then scores j + 1 with P_j V_j); every consumer takes the block's
  // tiles + 1 turns, empty ones past its own tiles. Named barrier 1 + c: consumer c's turn (its
  // 128 threads wait, the previous consumer's 128 arrive).
  auto turn = [&] {
    if constexpr (kPingPong) bar_sync(1 + me, 256);
  };
  auto pass = [&] {
    if constexpr (kPingPong) bar_arrive(1 + (me + 1) % F::kGroups, 256);
  };
  const int64_t mine = key_tiles(p, q0 + 64 * me, 64, BC);
  if (me == F::kGroups - 1) pass();  // the first turn is consumer 0's
  full(q_full, 0);
  full(k_full, 0);
  turn();
  auto advance = [&](int64_t j) {  // K_{j+1} and V_j, then this consumer's turn
    if (j < mine) {
      if (j + 1 < mine) full(k_full, j + 1);
      full(v_full, j);
      turn();
    } else {
      turn();
      pass();
    }
  };
  auto release = [&](int64_t j, auto has_next) {
    if (j < 0) pass();  // the first scores are done (the other turns pass once issued)
    if constexpr (decltype(has_next)::value) mbar_arrive_if(k_free + (j + 1) % S, signal);
    if (j >= 0) mbar_arrive_if(v_free + j % S, signal);
  };
  fwd_rows<bf16, DH, BR, BC, S>(p, b, h, q0, me, sQ, sK, sV, advance, pass, release);
  if (me == 0) turn();  // the last consumer's last pass
#else
  __trap();  // launched only where sm90() holds
#endif
}

// The driver's cuTensorMapEncodeTiled, found through the runtime (no link against libcuda).
PFN_cuTensorMapEncodeTiled_v12000 encode_tiled() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found{};
    CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000,
                                                cudaEnableDefault, &found));
    LMT_ASSERT(found == cudaDriverEntryPointSuccess && f, "flash attention: no cuTensorMapEncodeTiled");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

// One head's [T, DH] bf16 rows as TMA sees them: a 4-d tensor (column, row, head, batch) read in
// boxes of 64 columns x `rows` rows, 128-byte swizzled (the tiles wgmma.cuh describes).
CUtensorMap tensor_map(const void* base, const Params& p, int64_t B, int64_t dh, int rows) {
  CUtensorMap map;
  const cuuint64_t dims[4] = {cuuint64_t(dh), cuuint64_t(p.T), cuuint64_t(p.H), cuuint64_t(B)};
  const cuuint64_t strides[3] = {cuuint64_t(p.qkv_row) * 2, cuuint64_t(dh) * 2,
                                 cuuint64_t(p.qkv_batch) * 2};  // bytes, dims 1..3
  const cuuint32_t box[4] = {64, cuuint32_t(rows), 1, 1}, step[4] = {1, 1, 1, 1};
  const CUresult rc = encode_tiled()(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, const_cast<void*>(base),
                                     dims, strides, box, step, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                     CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                     CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  LMT_ASSERT(rc == CUDA_SUCCESS, strf("flash attention: cuTensorMapEncodeTiled failed (%d)", int(rc)));
  return map;
}

template <typename E, int DH> void launch(const Params& p, int64_t B, cudaStream_t stream) {
  if constexpr (sizeof(E) == 2) {
    using F = TmaFwd<DH>;
    launch_tiles<fwd_tma_kernel<DH>>(p, B, F::BR, F::kThreads, F::kSmem, stream,
                                     tensor_map(p.q, p, B, DH, F::BR), tensor_map(p.k, p, B, DH, F::BC),
                                     tensor_map(p.v, p, B, DH, F::BC));
  } else {
    constexpr int BR = 64 * Sm90FwdTraits<E, DH>::kGroups, BC = Sm90FwdTraits<E, DH>::kTile;
    constexpr size_t smem = size_t(BR + 4 * BC) * DH * sizeof(bf16) + kSmemAlignSlack;
    launch_tiles<fwd_kernel<E, DH>>(p, B, BR, BR * 2, smem, stream);
  }
}

}  // namespace

template <typename E> void fwd_sm90(const Params& p, int64_t B, int64_t dh, cudaStream_t s) {
  Sm90HeadDims::dispatch(dh, [&](auto d) { launch<E, decltype(d)::value>(p, B, s); });
}
template void fwd_sm90<float>(const Params&, int64_t, int64_t, cudaStream_t);
template void fwd_sm90<bf16>(const Params&, int64_t, int64_t, cudaStream_t);

}  // namespace lmt::cuda::attn
