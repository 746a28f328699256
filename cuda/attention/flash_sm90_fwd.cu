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
//
// RoPE (p.rope given; the persistent kernels only, fwd_sm90_rotates): q arrives unrotated (k
// rotated by rope.cu's pass). The producer warpgroup's three idle warps (helpers) take each item's
// Q tile in turn: they copy it with its rows of RoPE's table into a buffer of their own
// (RopeRows), rotate it there, store it back to q (the backward reads it rotated), and once the
// store has landed copy it from there into the consumers' Q buffer, as the producer thread copies
// Q where there is no rotation. No thread but theirs writes their buffer and they never touch the
// consumers' (which the consumers write O into), so racecheck, which does not follow mbarriers,
// sees no hazard (rotated in place in the consumers' buffer, the consumers' writes of O after the
// helpers' writes were reported as hazards). With a third Q buffer where a block has its SM
// alone, the next items' Q tiles are rotated under this one's.
#include <algorithm>

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

// The helpers' buffers: an item's Q tile of ROWS x DH (DH / 64 swizzled panels of 64 columns, as
// a Ring's tiles) and its ROWS rows of RoPE's table (p.rope, [T][DH / 2] (cos, sin)), both copied
// in on one mbarrier.
template <int ROWS, int DH> struct RopeRows {
  static constexpr size_t kQBytes = size_t(ROWS) * DH * sizeof(bf16);
  static constexpr size_t kTileBytes = kQBytes + size_t(ROWS) * DH / 2 * sizeof(float2);
  static constexpr size_t kBarriers = 1;
  static_assert(kQBytes % 1024 == 0 && kTileBytes % 1024 == 0,
                "the tile and the rings after it 1024-byte aligned (swizzled), the rows 16");
  bf16* tiles;  // the Q tile, then the table's rows
  uint64_t* bars;
  __device__ bf16* q() const { return tiles; }
  __device__ const float2* rows() const {
    return reinterpret_cast<const float2*>(reinterpret_cast<const char*>(tiles) + kQBytes);
  }
  __device__ void init() const {
    for (int i = 0; i < int(kBarriers); ++i) mbar_init(bars + i, 1);
  }
  // The item's Q tile (rows q0 .. of head (b, h)) and its table rows (those before T).
  __device__ void fill(const Params& p, const CUtensorMap& q_map, int64_t q0, int64_t b,
                       int64_t h) const {
    const uint32_t bytes = rope_rows_bytes<DH, ROWS>(p, q0);
    mbar_expect(bars, uint32_t(kQBytes) + bytes);
#pragma unroll
    for (int c = 0; c < DH / 64; ++c)
      tma_load_4d(tiles + c * ROWS * 64, &q_map, 64 * c, int(q0), int(h), int(b), bars);
    copy_rope_rows<DH>(rows(), p, q0, bytes, bars);
  }
  __device__ void wait(int n) const { mbar_wait(bars, uint32_t(n) & 1); }
};

// Helper i (of 96) rotates its share of the q tile `tile` (ROWS rows in DH / 64 swizzled panels),
// the first `rows` of them at positions whose table rows are `cs`: two pairs (8 bytes) at a time
// read, rotated as rope.cu's pass does (common.cuh's rope_rotate, rounded to bf16), written back
// (the helpers have 24 registers). A thread takes the same elements of every item's tile.
template <int ROWS, int DH>
__device__ __forceinline__ void rotate_q(bf16* tile, const float2* cs, int rows, int i) {
  constexpr int kUnits = DH / 4;  // of a row
  auto rotate = [](uint32_t w, float c, float s) {
    const float2 x = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w));
    const float2 r = rope_rotate(x.x, x.y, {c, s}, 1.0f);
    const __nv_bfloat162 v = __floats2bfloat162_rn(r.x, r.y);
    return *reinterpret_cast<const uint32_t*>(&v);
  };
#pragma unroll 1
  for (int u = i; u < rows * kUnits; u += 96) {
    const int r = u / kUnits, j = u % kUnits;  // pairs 2 j, 2 j + 1
    uint2* at = reinterpret_cast<uint2*>(tile + j / 16 * ROWS * 64 + swizzled(r, j / 2 % 8, j % 2 * 4));
    const float4 c = *reinterpret_cast<const float4*>(cs + r * DH / 2 + 2 * j);
    uint2 x = *at;
    x.x = rotate(x.x, c.x, c.y), x.y = rotate(x.y, c.z, c.w);
    *at = x;
  }
}

// Warpgroup 0 produces (TMA: each item's Q, then its K_t and V_t in order; with RoPE its helper
// warps copy Q), warpgroups 1 .. kGroups consume (tma.cuh). Upto: the lengths the kernel takes,
// its entry in flash.cuh's tables; up to sm90_short_t (or sm90_fwd_shortest_t) a persistent
// block (Short), kBlocks an SM, with its own tiles and kQStages Q buffers, so that the next
// items' Q tiles arrive under this one's last tiles;
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
  // Q buffers: a persistent block's next items' Q tiles arrive (and are rotated) under this one;
  // three where a block has its SM alone, two where blocks share one (shared memory).
  static constexpr int kQStages = !kShort ? 1 : kBlocks > 1 ? 2 : 3;
  using QRing = Ring<kQStages, BR, DH>;
  using KVRing = Ring<Sm90FwdTraits<DH>::kStages, BC, DH>;
  using Rope = RopeRows<BR, DH>;  // persistent kernels only
  using Smem = std::conditional_t<kShort, SmemRings<QRing, KVRing, KVRing, Rope>,
                                  SmemRings<QRing, KVRing, KVRing>>;
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
  typename F::Rope rope{};
  if constexpr (Short) rope = smem.template next<typename F::Rope>();
  const bool rotate = Short && p.rope;
  init_barriers([&] {
    Q.init(4 * G), K.init(4 * G), V.init(4 * G);
    if (rotate) rope.init();
  });
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
      if (!rotate) Q.fill(n, q_map, it.q0, it.b, it.h);  // else the helpers copy Q
      ++n;
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
  auto helpers = [&](int i) {  // each item's Q: copied, rotated, stored to q, copied to Q
    if (!rotate) return;
    int n = 0;
    for_each_item<Short, Pairs>(work, [&](int bh, int k) {
      const Item it = item(bh, k);
      if (i == 0) rope.fill(p, q_map, it.q0, it.b, it.h);  // the last item's store has read it
      rope.wait(n);
      rotate_q<BR, DH>(rope.q(), rope.rows(), int(min64(p.T - it.q0, BR)), i);
      fence_async_shared();
      bar_sync(kHelpersBarrier, 96);
      if (i == 0) {
#pragma unroll
        for (int c = 0; c < DH / 64; ++c)
          tma_store_4d(&q_map, rope.q() + c * BR * 64, 64 * c, it.q0, it.h, it.b);
        tma_store_commit();
        bulk_wait<0>();  // landed in q: the copy below reads it
        fence_async_global();
        Q.fill(n, q_map, it.q0, it.b, it.h);
      }
      ++n;
    });
  };
  specialize_warps<G, F::kBlocks>(produce, consume, helpers);
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

bool fwd_sm90_rotates(int64_t dh, int64_t T) {
  bool yes = false;
  Sm90HeadDims::dispatch(dh, [&](auto d) {
    constexpr int D = decltype(d)::value;
    yes = T <= std::max(sm90_short_t(D), sm90_fwd_shortest_t(D));
  });
  return yes;
}

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
