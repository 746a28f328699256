// FlashAttention-2 backward on Hopper's warpgroup tensor cores (wgmma, sm_90a): flash_sm80_bwd.cu's
// algorithm and arithmetic (D from flash_bwd_rowsum_kernel; P and dS recomputed per tile and
// rounded to bf16 as matmul operands; a dK/dV kernel whose blocks own keys and a dQ kernel whose
// blocks own queries, each output row written once: no atomics, deterministic), each warpgroup
// owning 64 rows. Operands from shared memory are read K-major (the left factor and the tile whose
// rows are the output's columns: K, Q, V, dO for S, S^T, dP, dP^T) or MN-major (the streamed tile
// as stored, for dV += P^T dO, dK += dS^T Q, dQ += dS K), P and dS from registers, and where the
// dQ kernel's entry says so (kRegisterA) its Q and dO for S and dP too. Both kernels are
// warp-specialized (tma.cuh): a producer warpgroup feeds the consumers through TMA.
#include <type_traits>

#include "../common.cuh"
#include "flash.cuh"
#include "softmax.cuh"
#include "tma.cuh"
#include "wgmma.cuh"

namespace lmt::cuda::attn {
namespace {

// Warpgroup 0 produces (TMA: the block's K and V once, then Q_i and dO_i for i = first ..
// tiles - 1 through kStages buffers each), warpgroups 1 .. kGroups consume (tma.cuh): each owns 64
// of the block's 64 * kGroups keys, and loads its own copy of each query tile's L and D (a value or
// two a thread, the next tile's while it computes this one's), so that no barrier spans the block.
// If kPingPong, the consumers take turns to issue their matmuls, two turns a tile (S^T and dP^T,
// then dV and dK), so that one's elementwise work runs under another's matmuls.
template <int DH, bool Short> struct TmaDkdv {
  using T = Sm90DkdvTraits<DH, Short>;
  static constexpr int kGroups = T::kGroups, BC = 64 * kGroups, BR = T::kTile, kStages = T::kStages;
  using KRing = Ring<1, BC, DH>;
  using QRing = Ring<kStages, BR, DH>;
  // The rings, then each consumer's L and D, two tiles of each, then the block's keys' rows of
  // the RoPE table (stage_rope).
  struct Smem : SmemRings<KRing, KRing, QRing, QRing> {
    static constexpr size_t kStatsFloats = size_t(kGroups) * 2 * 2 * BR;
    static constexpr size_t kBytes = SmemRings<KRing, KRing, QRing, QRing>::kBytes +
                                     kStatsFloats * sizeof(float) + kRopeStageBytes<DH, BC>;
  };
};

template <int DH, bool Short>
__global__ void __launch_bounds__(128 * (TmaDkdv<DH, Short>::kGroups + 1),
                                  TmaDkdv<DH, Short>::T::kBlocks)
    dkdv_tma_kernel(const Params p, const __grid_constant__ CUtensorMap q_map,
                    const __grid_constant__ CUtensorMap do_map,
                    const __grid_constant__ CUtensorMap k_map,
                    const __grid_constant__ CUtensorMap v_map,
                    const __grid_constant__ CUtensorMap dk_map,
                    const __grid_constant__ CUtensorMap dv_map) {
#ifdef LMT_SM90_DEVICE_CODE
  using F = TmaDkdv<DH, Short>;
  constexpr int BR = F::BR, BC = F::BC, G = F::kGroups;
  typename F::Smem smem;
  const auto K = smem.template next<typename F::KRing>();
  const auto V = smem.template next<typename F::KRing>();
  const auto Q = smem.template next<typename F::QRing>();
  const auto dO = smem.template next<typename F::QRing>();
  float* stats = smem.template rest<float>();
  // The RoPE rows' staging, found where used (held across the loop, a pointer spilled).
  auto rope = [] {
    return rope_stage(F::Smem::kRest + F::Smem::kStatsFloats * sizeof(float));
  };
  const int64_t bh = blockIdx.y, b = bh / p.H, h = bh % p.H, k0 = int64_t(blockIdx.x) * BC;
  const int64_t first = p.causal ? k0 / BR : 0, tiles = ceil_div(p.T, BR);
  init_barriers([&] {
    K.init(1), V.init(1), Q.init(4 * G), dO.init(4 * G);
    mbar_init(rope().bar, 1);
  });

  auto produce = [&] {
    if (p.rope) stage_rope<DH, BC>(p, k0, rope());
    K.fill(0, k_map, k0, b, h);
    V.fill(0, v_map, k0, b, h);
    for (int64_t i = first; i < tiles; ++i)
      Q.fill(i - first, q_map, i * BR, b, h), dO.fill(i - first, do_map, i * BR, b, h);
  };
  auto consume = [&](int group) {
    const int me = threadIdx.x % 128, warp = me / 32, lane = threadIdx.x % 32;
    const bool signal = lane == 0;  // one arrival per warp frees a buffer
    const int64_t group_k0 = k0 + 64 * group, warp_k0 = group_k0 + 16 * warp,
                  key = warp_k0 + lane / 4;
    float* sL = stats + group * 4 * BR;  // L of tiles in buffers 0, 1, then D of them
    float* sD = sL + 2 * BR;
    const int barrier = kFirstGroupBarrier + group;
    // This thread's rows of tile i's L and D (query_stats), kept in registers until stored for
    // the next tile, so that their loads run under this tile's matmuls.
    constexpr int kMine = (BR + 127) / 128;
    float L[kMine], D[kMine];
    auto fetch = [&](int64_t i) {
#pragma unroll
      for (int k = 0; k < kMine; ++k)
        if (me + 128 * k < BR) query_stats(p, bh, i * BR + me + 128 * k, L[k], D[k]);
    };
    auto put = [&](int buf) {
#pragma unroll
      for (int k = 0; k < kMine; ++k) {
        const int row = me + 128 * k;
        if (row < BR) sL[buf * BR + row] = L[k] * kLog2e, sD[buf * BR + row] = D[k];
      }
      bar_sync(barrier, 128);
    };
    fetch(first);  // its loads run under the waits for K and V
    K.wait(0);
    V.wait(0);
    put(0);
    const bf16 *sK = K.tile(0), *sV = V.tile(0);

    float dk[1][DH / 8][4], dv[1][DH / 8][4];
    zero(dk);
    zero(dv);
    const Turns<G, F::T::kPingPong && (G > 1)> turns{group};
    turns.begin();
    // Query tiles at the diagonal are masked, the later ones not (as flash_sm80_bwd.cu).
    const int64_t masked_end = masked_query_tiles_end(p, k0, BC, BR, first, tiles);
    auto step = [&](int64_t i, auto mask) {
      const int64_t n = i - first;
      const int buf = int(n & 1);
      if (i + 1 < tiles) fetch(i + 1);
      Q.wait(n);
      dO.wait(n);
      const bf16 *q_t = Q.tile(n), *g_t = dO.tile(n);
      const int64_t q0 = i * BR;
      if (n > 0) turns.take();  // the first turn is begin()'s
      // A warpgroup whose keys all lie after this tile's last query gets nothing from it (and
      // takes its turns empty).
      if (p.causal && group_k0 > q0 + BR - 1) {
        turns.pass();
        turns.take();
        turns.pass();
      } else {
        // P^T is taken beside the tensor cores' dP^T; dS^T and both operands are ready before
        // dV and dK's matmuls, so that S^T and dP^T in fp32 are dead by then (the registers
        // of a consumer hold them, or the two accumulators and both operands, not all at once).
        float s[1][BR / 8][4], ds[1][BR / 8][4];  // S^T, dP^T: keys x queries
        uint32_t pa[BR / 16][4], dsa[BR / 16][4];
        wgmma_fence();
        wgmma_abt<BR, DH, BC>(s[0], sK, 64 * group, q_t);
        wgmma_commit();
        wgmma_abt<BR, DH, BC>(ds[0], sV, 64 * group, g_t);
        wgmma_commit();
        turns.pass();
        wgmma_wait<1>();
        fence_regs(s[0]);
        if constexpr (decltype(mask)::value)
          mask_tile<true, 1, BR>(s, int(warp_k0), int(q0), int(p.T), true, lane);
        probs<1, BR>(s, p.scale_log2, by_col(sL + buf * BR, lane));
        wgmma_wait<0>();
        fence_regs(ds[0]);
        dscores<1, BR>(ds, s, by_col(sD + buf * BR, lane));
        to_a<BR>(pa, s[0]);
        to_a<BR>(dsa, ds[0]);
        turns.take();
        wgmma_fence();
        wgmma_pb<DH, BR>(dv[0], pa, g_t);   // dV += P^T dO
        wgmma_pb<DH, BR>(dk[0], dsa, q_t);  // dK += dS^T Q (scaled at the end)
        wgmma_commit();
        turns.pass();
        wgmma_wait<0>();
        fence_regs(dv[0]);
        fence_regs(dk[0]);
      }
      Q.release(n, signal);
      dO.release(n, signal);
      // The other buffer's statistics were last read for tile i - 1, before the previous put's
      // barrier: every thread of the warpgroup has passed it.
      if (i + 1 < tiles) put(buf ^ 1);
    };
    int64_t i = first;
    for (; i < masked_end; ++i) step(i, std::true_type{});
    for (; i < tiles; ++i) step(i, std::false_type{});
    turns.end();
    // dK and dV leave as dq_rows's dQ does: through the warpgroup's rows of the K and V tiles
    // (read for the last time by its last matmuls) and TMA stores.
    bf16 *tk = const_cast<bf16*>(sK) + 64 * group * 64, *tv = const_cast<bf16*>(sV) + 64 * group * 64;
    float scale[1][2], one[1][2];
    fill(scale, p.scale);
    fill(one, 1.0f);
    if (p.rope)
      stage_rows<DH>(tk, BC * 64, key, p.T, dk, scale, lane,
                     warp_rope<DH>(p, rope(), group, warp, warp_k0));
    else
      stage_rows<DH>(tk, BC * 64, key, p.T, dk, scale, lane);
    stage_rows<DH>(tv, BC * 64, key, p.T, dv, one, lane);
    store_staged<DH>(barrier, BC * 64, group_k0, b, h, Staged{dk_map, tk}, Staged{dv_map, tv});
  };
  specialize<G, F::T::kBlocks>(produce, consume);
#else
  __trap();  // launched only where sm90() holds
#endif
}

// dQ for one consumer warpgroup's queries 64 group .. + 63 of the block's tile at q0 (sQ and sdO
// hold its BR rows): key tile t at K.tile(t), value tile t at V.tile(t); rope() gives the
// block's staging of the RoPE table (stage_rope), its rows from q0 on. Software-pipelined by one
// tile as the forward is (key_pipeline): while the tensor cores run dQ += dS_j K_j, the
// warpgroup turns S_{j+1} and dP_{j+1}, issued just before it, into dS_{j+1}; so K_j and K_{j+1}
// are read in iteration j. start() returns once the first tiles are in shared memory (its waits
// run under the loads of the rows' statistics); advance(j) is key_pipeline's (K_{j+1} and V_{j+1}
// ready once it returns); issued() follows the issue of each dS K; release(j, has_next) follows
// each tile's matmuls (j = -1: the first scores), when V_{j+1} (if has_next) and K_j (if j >= 0)
// are no longer read. dQ leaves through shared memory, the warpgroup's rows of the Q tile (read
// for the last time by its last scores), and one TMA store (dq_map): its stores then take the
// consumers' load-store path for a few shared stores rather than many narrow global ones, which
// the block's end (its warps' exits) would wait to drain. RegisterA: the warpgroup's rows of Q and
// dO are read from shared memory once, into registers, as the A operands of every S and dP
// (wgmma_rs; else both factors are read from shared memory for each).
template <int DH, int BR, int BC, bool RegisterA, typename KTiles, typename VTiles, typename Rope,
          typename Start, typename Advance, typename Issued, typename Release>
__device__ __forceinline__ void dq_rows(const Params& p, const CUtensorMap& dq_map, int64_t b,
                                        int64_t h, int64_t q0, int group, bf16* sQ,
                                        const bf16* sdO, const KTiles& K,
                                        const VTiles& V, Rope&& rope, Start&& start,
                                        Advance&& advance, Issued&& issued, Release&& release) {
  const int warp = threadIdx.x / 32 % 4, lane = threadIdx.x % 32;
  const int64_t bh = b * p.H + h;
  const int64_t group_q0 = q0 + 64 * group, warp_q0 = group_q0 + 16 * warp, row = warp_q0 + lane / 4;
  const int64_t tiles = key_tiles(p, q0, BR, BC), mine = key_tiles(p, group_q0, 64, BC);
  const int64_t clean = unmasked_key_tiles(p, q0, tiles, BC);
  float L[1][2], D[1][2], dq[1][DH / 8][4], s[1][BC / 8][4], ds[1][BC / 8][4];  // s, ds: S/P, dP/dS
  uint32_t dsa[BC / 16][4];  // dS_j, the A operand of dS K
  uint32_t qa[DH / 16][4], ga[DH / 16][4];  // RegisterA: the warpgroup's rows of Q and dO
  row_stats(L, D, p, bh, row);
  start();
  if constexpr (RegisterA) {
    load_a_rows<BR, DH>(qa, sQ, 64 * group, warp, lane);
    load_a_rows<BR, DH>(ga, sdO, 64 * group, warp, lane);
  }
  to_log2(L);
  zero(dq);

  auto scores = [&](int64_t t) {  // s = Q K_t^T, ds = dO V_t^T
    if constexpr (RegisterA) {
      wgmma_abt<BC, DH>(s[0], qa, K.tile(t));
      wgmma_abt<BC, DH>(ds[0], ga, V.tile(t));
    } else {
      wgmma_abt<BC, DH, BR>(s[0], sQ, 64 * group, K.tile(t));
      wgmma_abt<BC, DH, BR>(ds[0], sdO, 64 * group, V.tile(t));
    }
    wgmma_commit();
  };
  auto grads = [&](int64_t t, auto mask) {  // ds = dS_t
    fence_regs(s[0]);
    fence_regs(ds[0]);
    if constexpr (decltype(mask)::value)
      mask_tile<false, 1, BC>(s, int(warp_q0), int(t * BC), int(p.T), p.causal, lane);
    probs<1, BC>(s, p.scale_log2, by_row(L));
    dscores<1, BC>(ds, s, by_row(D));
  };
  auto dsk = [&](int64_t j) {  // dQ += dS_j K_j (scaled at the end)
    wgmma_pb<DH, BC>(dq[0], dsa, K.tile(j));
    wgmma_commit();
    issued();
  };
  auto after = [&](int64_t j, auto has_next) {
    fence_regs(dq[0]);
    release(j, has_next);
    if constexpr (decltype(has_next)::value) to_a<BC>(dsa, ds[0]);
  };
  key_pipeline(tiles, mine, clean, scores, grads, dsk, after, advance);

  bf16* tile = sQ + 64 * group * 64;  // the warpgroup's rows in each 64-column panel
  float scale[1][2];
  fill(scale, p.scale);
  if (p.rope)
    stage_rows<DH>(tile, BR * 64, row, p.T, dq, scale, lane,
                   warp_rope<DH>(p, rope(), group, warp, warp_q0));
  else
    stage_rows<DH>(tile, BR * 64, row, p.T, dq, scale, lane);
  store_staged<DH>(kFirstGroupBarrier + group, BR * 64, group_q0, b, h, Staged{dq_map, tile});
}

// Warpgroup 0 produces (TMA: Q and dO once, then K_t and V_t in order), warpgroups
// 1 .. kGroups consume (tma.cuh), taking turns at the tensor cores if kPingPong.
template <int DH, bool Short> struct TmaDq {
  using T = Sm90DqTraits<DH, Short>;
  static constexpr int kGroups = T::kGroups, BR = 64 * kGroups, BC = T::kTile;
  using QRing = Ring<1, BR, DH>;
  using KRing = Ring<T::kKStages, BC, DH>;
  using VRing = Ring<T::kVStages, BC, DH>;
  // The rings, then the block's queries' rows of the RoPE table (stage_rope).
  struct Smem : SmemRings<QRing, QRing, KRing, VRing> {
    static constexpr size_t kBytes =
        SmemRings<QRing, QRing, KRing, VRing>::kBytes + kRopeStageBytes<DH, BR>;
  };
};

template <int DH, bool Short>
__global__ void __launch_bounds__(128 * (TmaDq<DH, Short>::kGroups + 1),
                                  TmaDq<DH, Short>::T::kBlocks)
    dq_tma_kernel(const Params p, const int tail, const __grid_constant__ CUtensorMap q_map,
                  const __grid_constant__ CUtensorMap do_map, const __grid_constant__ CUtensorMap k_map,
                  const __grid_constant__ CUtensorMap v_map,
                  const __grid_constant__ CUtensorMap dq_map) {
#ifdef LMT_SM90_DEVICE_CODE
  using F = TmaDq<DH, Short>;
  constexpr int BR = F::BR, BC = F::BC, G = F::kGroups;
  typename F::Smem smem;
  const auto Q = smem.template next<typename F::QRing>(), dO = smem.template next<typename F::QRing>();
  const auto K = smem.template next<typename F::KRing>();
  const auto V = smem.template next<typename F::VRing>();
  // Blocks start in the order of their linear index: head after head (a head's tiles share its K
  // and V in L2), but the last `tail` heads tile-major among themselves (every one's longest
  // tile, then every one's second, ...), so that the grid's last blocks to start are short ones.
  int64_t bh = blockIdx.y, rank = blockIdx.x;
  if (const int64_t first = gridDim.y - tail; bh >= first) {
    const int64_t i = (bh - first) * gridDim.x + rank;
    bh = first + i % tail, rank = i / tail;
  }
  const int64_t b = bh / p.H, h = bh % p.H, q0 = query_tile(p, gridDim.x, rank) * BR;
  const int64_t tiles = key_tiles(p, q0, BR, BC);
  auto rope = [] { return rope_stage(F::Smem::kRest); };  // as dK/dV's
  init_barriers([&] {
    Q.init(1), dO.init(1), K.init(4 * G), V.init(4 * G);
    mbar_init(rope().bar, 1);
  });

  auto produce = [&] {
    if (p.rope) stage_rope<DH, BR>(p, q0, rope());
    Q.fill(0, q_map, q0, b, h);
    dO.fill(0, do_map, q0, b, h);
    for (int64_t t = 0; t < tiles; ++t) K.fill(t, k_map, t * BC, b, h), V.fill(t, v_map, t * BC, b, h);
  };
  auto consume = [&](int me) {
    const Turns<G, F::T::kPingPong && (G > 1)> turns{me};
    const bool signal = threadIdx.x % 32 == 0;  // one arrival per warp frees a buffer
    const int64_t mine = key_tiles(p, q0 + 64 * me, 64, BC);
    auto start = [&] {
      Q.wait(0);
      dO.wait(0);
      K.wait(0);
      V.wait(0);
      turns.begin();
    };
    auto advance = [&](int64_t j) {  // K_{j+1} and V_{j+1}
      turns.advance(j, mine, [&] {
        if (j + 1 < mine) K.wait(j + 1), V.wait(j + 1);
      });
    };
    auto release = [&](int64_t j, auto has_next) {
      turns.released(j);
      if constexpr (decltype(has_next)::value) V.release(j + 1, signal);
      if (j >= 0) K.release(j, signal);
    };
    dq_rows<DH, BR, BC, F::T::kRegisterA>(p, dq_map, b, h, q0, me, const_cast<bf16*>(Q.tile(0)),
                                          dO.tile(0), K, V, rope, start, advance,
                                          [&] { turns.pass(); }, release);
    turns.end();
  };
  specialize<G, F::T::kBlocks>(produce, consume);
#else
  __trap();  // launched only where sm90() holds
#endif
}

// The dQ kernel runs beside the dK/dV kernel, on a stream of its own forked from the caller's
// and joined back into it (a fork and a join in a captured graph too): the two read the same
// inputs and write different outputs, and the SMs that one kernel's last, partly filled wave
// leaves idle take the other's blocks. Made on the first call, which is never inside a capture
// (a graph records a pass that ran before it), for the process's one device.
struct Beside {
  cudaStream_t stream;
  cudaEvent_t fork, join;
};
const Beside& beside() {
  static const Beside b = [] {
    Beside b{};
    CUDA_CHECK(cudaStreamCreateWithFlags(&b.stream, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreateWithFlags(&b.fork, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&b.join, cudaEventDisableTiming));
    return b;
  }();
  return b;
}

template <int DH, bool Short> void launch(const Params& p, int64_t B, cudaStream_t stream) {
  const Beside& b = beside();
  CUDA_CHECK(cudaEventRecord(b.fork, stream));
  CUDA_CHECK(cudaStreamWaitEvent(b.stream, b.fork, 0));
  using K = TmaDkdv<DH, Short>;
  launch_specialized<dkdv_tma_kernel<DH, Short>, K>(
      p, B, K::BC, stream, qkv_map(p, B, DH, p.q, K::BR), o_map(p, B, DH, p.dout, K::BR),
      qkv_map(p, B, DH, p.k, K::BC), qkv_map(p, B, DH, p.v, K::BC), qkv_map(p, B, DH, p.dk, 64),
      qkv_map(p, B, DH, p.dv, 64));
  using F = TmaDq<DH, Short>;
  // The dQ kernel's tail taken tile-major: the last heads, about two blocks an SM's worth (a wave
  // of the short-T entry's, two of the long-T entry's), up to sm90_dq_tail_t; the dK/dV kernel's
  // last blocks run beside the dQ kernel's (taken so as well, they gained nothing more).
  const int64_t heads = B * p.H, tiles = ceil_div(p.T, F::BR);
  const int tail = p.T <= sm90_dq_tail_t() ? int(min64(heads, ceil_div(2 * sm_count(), tiles))) : 0;
  launch_specialized<dq_tma_kernel<DH, Short>, F>(
      p, B, F::BR, b.stream, tail, qkv_map(p, B, DH, p.q, F::BR), o_map(p, B, DH, p.dout, F::BR),
      qkv_map(p, B, DH, p.k, F::BC), qkv_map(p, B, DH, p.v, F::BC), qkv_map(p, B, DH, p.dq, 64));
  CUDA_CHECK(cudaEventRecord(b.join, b.stream));
  CUDA_CHECK(cudaStreamWaitEvent(stream, b.join, 0));
}

}  // namespace

void bwd_sm90(const Params& p, int64_t B, int64_t dh, cudaStream_t s) {
  Sm90HeadDims::dispatch(dh, [&](auto d) {
    constexpr int D = decltype(d)::value;
    if constexpr (sm90_bwd_short_t(D) > 0)
      if (p.T <= sm90_bwd_short_t(D)) return launch<D, true>(p, B, s);
    launch<D, false>(p, B, s);
  });
}

}  // namespace lmt::cuda::attn
