// FlashAttention-2 forward on Hopper's warpgroup tensor cores (wgmma, sm_90a): flash_sm80_fwd.cu's
// algorithm and arithmetic (online softmax in fp32 on exp2, P rounded to bf16 for P V, causal
// tiles past the last query never visited, only diagonal and end tiles masked), with each
// warpgroup computing a 64-query slice of S = Q K^T and of O += P V per instruction instead of
// each warp a 16-row one: Q and the K tile are read by the tensor cores straight from shared
// memory, P from registers, V from shared memory as stored (MN-major).
//
// Item: 64 * kGroups queries of one (batch, head), computed by kGroups consumer warpgroups; a block
// takes one item, or at short T several in turn (persistent: tma.cuh's Work). K and V stream
// through shared memory in tiles of kTile keys (swizzled tiles, wgmma.cuh). Each warpgroup is
// software-pipelined by one tile (key_pipeline): while the tensor cores run P_j V_j, it takes the
// softmax of S_{j+1}, issued just before it. So key tile j + 1 must be in shared memory with
// value tile j: K runs one tile ahead of V. The kernel is warp-specialized (tma.cuh): a producer
// warpgroup copies Q and the K and V tiles with TMA into kStages buffers each; no barrier spans
// the block, and the consumer warpgroups take turns at the tensor cores (ping-pong, kPingPong).
#include "../common.cuh"
#include "flash.cuh"
#include "softmax.cuh"
#include "tma.cuh"
#include "wgmma.cuh"

namespace lmt::cuda::attn {
namespace {

// One consumer warpgroup's queries 64 group .. + 63 of the block's tile at q0 (sQ holds BR rows):
// key tile t at K.tile(t), value tile t at V.tile(t). advance(j) is key_pipeline's (K_{j+1} and
// V_j ready once it returns); issued() follows the issue of the first scores and of each P V (the
// consumer's turn passes at each); release(j, has_next) follows each tile's matmuls (j = -1: the
// first scores), when K_{j+1} (if has_next) and V_j (if j >= 0) are no longer read. O leaves as
// the dQ kernel's dQ does (flash_sm90_bwd.cu's dq_rows): through the warpgroup's rows of the Q
// tile, read for the last time by its last scores, and a TMA store (o_map), done reading before
// this returns if Wait; else the caller waits for it (tma_store_wait_read, in the storing thread)
// before the tile is written again.
template <int DH, int BR, int BC, bool Wait, typename Tiles, typename Advance, typename Issued,
          typename Release>
__device__ __forceinline__ void fwd_rows(const Params& p, const CUtensorMap& o_map, int64_t b,
                                         int64_t h, int64_t q0, int group, bf16* sQ,
                                         const Tiles& K, const Tiles& V,
                                         Advance&& advance, Issued&& issued, Release&& release) {
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
    wgmma_abt<BC, DH, BR>(s[0], sQ, 64 * group, K.tile(t));
    wgmma_commit();
    if (t == 0) issued();  // the first scores' turn; later scores go with a P V's
  };
  auto softmax = [&](int64_t t, auto mask) {  // s = P_t; alpha
    fence_regs(s[0]);
    if constexpr (decltype(mask)::value)
      mask_tile<false, 1, BC>(s, int(warp_q0), int(t * BC), int(p.T), p.causal, lane);
    softmax_tile<1, BC>(s, m, l, alpha, p.scale_log2);
  };
  auto pv = [&](int64_t j) {  // O += P_j V_j
    wgmma_pb<DH, BC>(o[0], pa, V.tile(j));
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

  float inv[1][2];
  store_lse<1>(p, b * p.H + h, row, m, l, lane, inv);
  bf16* tile = sQ + 64 * group * 64;  // the warpgroup's rows in each 64-column panel
  stage_rows<DH>(tile, BR * 64, row, p.T, o, inv, lane);
  store_staged<DH, Wait>(kFirstGroupBarrier + group, BR * 64, group_q0, b, h, Staged{o_map, tile});
}

// Warpgroup 0 produces (TMA: each item's Q, then its K_t and V_t in order), warpgroups 1 ..
// kGroups consume (tma.cuh). Upto: the lengths the kernel takes, its entry in flash.cuh's tables;
// up to sm90_short_t (or sm90_fwd_shortest_t) a persistent block (Short), kBlocks an SM, with
// its own tiles and two Q buffers, so that the next item's Q arrives under this one's last tiles;
// 0: past them, a block an item. Pairs: a persistent block's items in pairs (tma.cuh's Work),
// else longest first.
template <int DH, int Upto> struct TmaFwd {
  static constexpr bool kShort = Upto > 0;
  static constexpr Sm90Tiles kTiles = !kShort ? sm90_fwd_tiles(DH)
                                      : Upto <= sm90_fwd_shortest_t(DH)
                                          ? sm90_fwd_shortest_tiles(DH)
                                          : sm90_fwd_short_tiles(DH);
  static constexpr int kGroups = kTiles.groups, BR = 64 * kGroups, BC = kTiles.tile;
  static constexpr int kBlocks = kTiles.blocks;
  using QRing = Ring<kShort ? 2 : 1, BR, DH>;
  using KVRing = Ring<Sm90FwdTraits<DH>::kStages, BC, DH>;
  using Smem = SmemRings<QRing, KVRing, KVRing>;
};

template <int DH, int Upto, bool Pairs>
__global__ void __launch_bounds__(128 * (TmaFwd<DH, Upto>::kGroups + 1),
                                  TmaFwd<DH, Upto>::kBlocks)
    fwd_tma_kernel(const Params p, const Work work, const __grid_constant__ CUtensorMap q_map,
                   const __grid_constant__ CUtensorMap k_map, const __grid_constant__ CUtensorMap v_map,
                   const __grid_constant__ CUtensorMap o_map) {
#ifdef LMT_SM90_DEVICE_CODE
  using F = TmaFwd<DH, Upto>;
  constexpr bool Short = F::kShort;
  constexpr int BR = F::BR, BC = F::BC, G = F::kGroups;
  typename F::Smem smem;
  const auto Q = smem.template next<typename F::QRing>();
  const auto K = smem.template next<typename F::KVRing>(), V = smem.template next<typename F::KVRing>();
  init_barriers([&] { Q.init(4 * G), K.init(4 * G), V.init(4 * G); });
  // An item: the query tile at q0 of head bh, and the key tiles it sees. Q numbers the block's
  // items (n), K and V the key tiles of all of them (kv: the item's first).
  struct Item {
    int b, h, q0, tiles;
  };
  auto item = [&](int bh, int k) {
    const int q0 = int(query_tile(p, work.tiles, k)) * BR;
    return Item{bh / int(p.H), bh % int(p.H), q0, int(key_tiles(p, q0, BR, BC))};
  };

  auto produce = [&] {
    int n = 0, kv = 0;
    for_each_item<Short, Pairs>(work, [&](int bh, int k) {
      const Item it = item(bh, k);
      Q.fill(n++, q_map, it.q0, it.b, it.h);
      for (int t = 0; t < it.tiles; ++t)
        K.fill(kv + t, k_map, t * BC, it.b, it.h), V.fill(kv + t, v_map, t * BC, it.b, it.h);
      kv += it.tiles;
    });
  };
  auto consume = [&](int me) {
    const Turns<G, Sm90FwdTraits<DH>::kPingPong && (G > 1)> turns{me};
    const bool signal = threadIdx.x % 32 == 0;  // one arrival per warp frees a buffer
    const bool storer = threadIdx.x % 128 == 0;  // store_staged's thread
    int n = 0, kv = 0;
    for_each_item<Short, Pairs>(work, [&](int bh, int k) {
      const Item it = item(bh, k);
      const auto Kt = K.at(kv), Vt = V.at(kv);
      const int64_t mine = key_tiles(p, it.q0 + 64 * me, 64, BC);
      Q.wait(n);
      Kt.wait(0);
      if (n == 0) turns.begin();
      else turns.take();
      auto advance = [&](int64_t j) {  // K_{j+1} and V_j; past mine, tile j unread (the
        // buffer is reused only by a persistent block's later items)
        if (Short && j >= mine) Kt.wait(j), Vt.wait(j), Kt.release(j, signal), Vt.release(j, signal);
        turns.advance(j, mine, [&] {
          if (j + 1 < mine) Kt.wait(j + 1);
          Vt.wait(j);
        });
      };
      auto release = [&](int64_t j, auto has_next) {
        if constexpr (decltype(has_next)::value) Kt.release(j + 1, signal);
        if (j >= 0) {
          Vt.release(j, signal);
        } else if (Short && n > 0) {  // the first scores are done: the last item's O stores
          // have had their time to read its Q tile, which is released only now
          if (storer) tma_store_wait_read();
          Q.release(n - 1, signal);
        }
      };
      fwd_rows<DH, BR, BC, !Short>(p, o_map, it.b, it.h, it.q0, me, const_cast<bf16*>(Q.tile(n)),
                                   Kt, Vt, advance, [&] { turns.pass(); }, release);
      if constexpr (!Short) Q.release(n, signal);  // Short: under the next item (above)
      ++n;
      kv += it.tiles;
    });
    if (Short && storer) tma_store_wait_read();  // the last item's
    turns.end();
  };
  specialize<G, F::kBlocks>(produce, consume);
#else
  __trap();  // launched only where sm90() holds
#endif
}

template <int DH, int Upto, bool Pairs>
void launch(const Params& p, int64_t B, const Work& work, cudaStream_t stream) {
  using F = TmaFwd<DH, Upto>;
  launch_items<fwd_tma_kernel<DH, Upto, Pairs>, F, F::kShort>(
      p, work, stream, qkv_map(p, B, DH, p.q, F::BR), qkv_map(p, B, DH, p.k, F::BC),
      qkv_map(p, B, DH, p.v, F::BC), o_map(p, B, DH, p.out, 64));
}
template <int DH, int Upto> void launch(const Params& p, int64_t B, cudaStream_t stream) {
  using F = TmaFwd<DH, Upto>;
  const int heads = int(B * p.H), tiles = int(ceil_div(p.T, F::BR));
  if constexpr (!F::kShort) {  // a block an item: no order to choose
    launch<DH, Upto, false>(p, B, Work{heads, tiles, false}, stream);
  } else {
    const Work work = make_work(heads, tiles, F::kBlocks, [&](int k) {
      return key_tiles(p, query_tile(p, tiles, k) * F::BR, F::BR, F::BC);
    });
    if (work.pairs) return launch<DH, Upto, true>(p, B, work, stream);
    launch<DH, Upto, false>(p, B, work, stream);
  }
}

}  // namespace

void fwd_sm90(const Params& p, int64_t B, int64_t dh, cudaStream_t s) {
  Sm90HeadDims::dispatch(dh, [&](auto d) {
    constexpr int D = decltype(d)::value;
    constexpr int kShortest = int(sm90_fwd_shortest_t(D)), kShort = int(sm90_short_t(D));
    if constexpr (kShortest > 0)
      if (p.T <= kShortest) return launch<D, kShortest>(p, B, s);
    if constexpr (kShort > 0)
      if (p.T <= kShort) return launch<D, kShort>(p, B, s);
    launch<D, 0>(p, B, s);
  });
}

}  // namespace lmt::cuda::attn
