// FlashAttention-2 backward on Hopper's warpgroup tensor cores (wgmma, sm_90a): flash_sm80_bwd.cu's
// algorithm and arithmetic (D from flash_bwd_rowsum_kernel; P and dS recomputed per tile and
// rounded to bf16 as matmul operands; a dK/dV kernel whose blocks own keys and a dQ kernel whose
// blocks own queries, each output row written once: no atomics, deterministic), each warpgroup
// owning 64 rows. Operands from shared memory are read K-major (the left factor and the tile whose
// rows are the output's columns: K, Q, V, dO for S, S^T, dP, dP^T) or MN-major (the streamed tile
// as stored, for dV += P^T dO, dK += dS^T Q, dQ += dS K), P and dS from registers. Both kernels
// are warp-specialized (tma.cuh): a producer warpgroup feeds the consumers through TMA.
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
//
// Fused (causal only): the block also computes dQ_i += dS_i K for each query tile, its share of
// the sum over key blocks. Each consumer stores its dS^T rows (bf16, as rounded for dK) into a
// shared tile of the block's keys x the tile's queries (two buffers); in its second turn of tile
// i + 1 it multiplies tile i's, read MN-major as dS, by K into one 64 x 64 unit of dQ_i (the
// tile's BR x DH is kGroups units), and stages the unit in shared memory. Producer thread 32,
// the writer, adds each staged unit into dq_accum with a bulk reduction, in a fixed order: unit
// by unit, the key blocks from the diagonal's down, each waiting on the unit's turn counter for
// the block before it. So the sums are the same bits every run, and a block waits only for
// blocks that started before it: the grid runs the key blocks last first.
template <int DH, bool Short, bool Fused> struct TmaDkdv {
  using T = Sm90DkdvTraits<DH, Short>;
  static constexpr int kGroups = T::kGroups, BC = 64 * kGroups, BR = T::kTile, kStages = T::kStages;
  using KRing = Ring<1, BC, DH>;
  using QRing = Ring<kStages, BR, DH>;
  // Fused: the dS tiles (full: every consumer warp has stored its rows; free: every consumer warp's
  // dQ matmul has read it) and each consumer's staged unit (full: its warps have stored it; free:
  // the writer's reduction has read it), fp32 in a 16 KB buffer.
  using DsRing = Ring<2, BC, BR>;
  using StageRing = Ring<kGroups, 64, 128>;
  using Rings = std::conditional_t<Fused, SmemRings<KRing, KRing, QRing, QRing, DsRing, StageRing>,
                                   SmemRings<KRing, KRing, QRing, QRing>>;
  // The rings, then each consumer's L and D, two tiles of each, then (split) the block's keys'
  // rows of the RoPE table (stage_rope; the fused kernel's shared memory has no room for them, its
  // dK stores read the table from global memory).
  struct Smem : Rings {
    static constexpr size_t kStatsFloats = size_t(kGroups) * 2 * 2 * BR;
    static constexpr size_t kBytes =
        Rings::kBytes + kStatsFloats * sizeof(float) + (Fused ? 0 : kRopeStageBytes<DH, BC>);
  };
  static_assert(!Fused || BR * DH == 4096 * kGroups, "fused: a 64 x 64 unit of dQ per consumer");
  // Fused: the units of a head's query tiles, and the key block whose turn in query tile i's order
  // is first (the last that sees it).
  static __host__ __device__ int64_t units(int64_t T) { return ceil_div(T, BR) * kGroups; }
  static __device__ int64_t diagonal(int64_t i, int64_t T) {
    return min64(ceil_div(T, BC) - 1, ((i + 1) * BR - 1) / BC);
  }
};

template <int DH, bool Short, bool Fused>
__global__ void __launch_bounds__(128 * (TmaDkdv<DH, Short, Fused>::kGroups + 1),
                                  TmaDkdv<DH, Short, Fused>::T::kBlocks)
    dkdv_tma_kernel(const Params p, const __grid_constant__ CUtensorMap q_map,
                    const __grid_constant__ CUtensorMap do_map,
                    const __grid_constant__ CUtensorMap k_map,
                    const __grid_constant__ CUtensorMap v_map) {
#ifdef LMT_SM90_DEVICE_CODE
  using F = TmaDkdv<DH, Short, Fused>;
  constexpr int BR = F::BR, BC = F::BC, G = F::kGroups;
  typename F::Smem smem;
  const auto K = smem.template next<typename F::KRing>();
  const auto V = smem.template next<typename F::KRing>();
  const auto Q = smem.template next<typename F::QRing>();
  const auto dO = smem.template next<typename F::QRing>();
  typename F::DsRing dS{};
  typename F::StageRing stage{};
  if constexpr (Fused) {
    dS = smem.template next<typename F::DsRing>();
    stage = smem.template next<typename F::StageRing>();
  }
  float* stats = smem.template rest<float>();
  // The RoPE rows' staging, found where used (held across the loop, a pointer spilled).
  auto rope = [] {
    return rope_stage(F::Smem::kRest + F::Smem::kStatsFloats * sizeof(float));
  };
  const int64_t kb = Fused ? gridDim.x - 1 - blockIdx.x : blockIdx.x;  // the key block
  const int64_t bh = blockIdx.y, b = bh / p.H, h = bh % p.H, k0 = kb * BC;
  const int64_t first = p.causal ? k0 / BR : 0, tiles = ceil_div(p.T, BR);
  init_barriers([&] {
    K.init(1), V.init(1), Q.init(4 * G), dO.init(4 * G);
    if constexpr (Fused) {
      for (int i = 0; i < 4; ++i) mbar_init(dS.bars + i, 4 * G);
      for (int g = 0; g < G; ++g) mbar_init(stage.bars + g, 4), mbar_init(stage.bars + G + g, 1);
    } else {
      mbar_init(rope().bar, 1);
    }
  });

  auto produce = [&] {
    if (!Fused && p.rope) stage_rope<DH, BC>(p, k0, rope());
    K.fill(0, k_map, k0, b, h);
    V.fill(0, v_map, k0, b, h);
    for (int64_t i = first; i < tiles; ++i)
      Q.fill(i - first, q_map, i * BR, b, h), dO.fill(i - first, do_map, i * BR, b, h);
  };
  // Fused: each query tile's units, consumer by consumer, added in their turn.
  auto write = [&] {
    if constexpr (Fused) {
      const int64_t units = F::units(p.T);
      for (int64_t i = first; i < tiles; ++i) {
        const uint32_t n = uint32_t(i - first), turn = uint32_t(F::diagonal(i, p.T) - kb);
        uint32_t* turns = p.dq_turns + bh * units + i * G;
        for (int g = 0; g < G; ++g) {
          mbar_wait(stage.bars + g, n & 1);
          while (load_acquire(turns + g) != turn) {
          }
          bulk_reduce_add(p.dq_accum + (bh * units + i * G + g) * 4096, stage.tile(g), 4096 * 4);
        }
        bulk_wait_read();
        for (int g = 0; g < G; ++g) mbar_arrive_if(stage.bars + G + g, true);
        bulk_wait();
        __threadfence();
        for (int g = 0; g < G; ++g) add_release(turns + g, 1);
      }
    }
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
    // Fused: tile n's dS^T rows (A fragments, keys x queries) into dS buffer n % 2, once the
    // buffer's dQ matmul of tile n - 2 (n = 1: the dummy's, below) is done: 16-byte chunks
    // swizzled as TMA's tiles (wgmma.cuh), a key row's chunks XOR its row % 8 (lane / 4 here).
    auto ds_put = [&](int64_t n, const uint32_t (&a)[BR / 16][4]) {
      if constexpr (Fused) {
        const int buf = int(n & 1);
        if (n >= 1) mbar_wait(dS.bars + 2 + buf, uint32_t((n - 1) >> 1) & 1);
        bf16* t = const_cast<bf16*>(dS.tile(buf));
        const int r = 64 * group + 16 * warp + lane / 4;
#pragma unroll
        for (int ks = 0; ks < BR / 16; ++ks)
#pragma unroll
          for (int hi = 0; hi < 2; ++hi) {  // 8-column block 2 ks + hi: rows r, r + 8
            const int nb = 2 * ks + hi;
            bf16* at = t + nb / 8 * BC * 64 + ((nb % 8) ^ (lane / 4)) * 8 + 2 * (lane % 4);
            *reinterpret_cast<uint32_t*>(at + r * 64) = a[ks][2 * hi];
            *reinterpret_cast<uint32_t*>(at + (r + 8) * 64) = a[ks][2 * hi + 1];
          }
        fence_proxy_async();
        __syncwarp();
        mbar_arrive_if(dS.bars + buf, signal);
      }
    };
    // Fused: before tile n's second turn, tile n - 1's dS whole (every consumer's rows).
    auto dq_ready = [&](int64_t n) {
      if (Fused && n >= 1) mbar_wait(dS.bars + ((n - 1) & 1), uint32_t((n - 1) >> 1) & 1);
    };
    // Fused: in tile n's second turn, this consumer's unit of dQ_{n-1} (rows 64 rm, columns
    // 64 cn of the tile). At n = 0 a dummy on buffer 1, discarded (the turn's matmuls are issued
    // without a branch between them and their wait: C7520), whose free arrival ds_put(1) waits for.
    auto dq_issue = [&](int64_t n, float (&acc)[8][4]) {
      if constexpr (Fused) {
        const int rm = group / (DH / 64), cn = group % (DH / 64);
        wgmma_atb<BC>(acc, dS.tile((n - 1) & 1) + rm * BC * 64, K.tile(0) + cn * BC * 64);
      }
    };
    // Fused: the unit of dQ_m into this consumer's staging, thread by thread in float4s
    // (8 per thread: the 8-column blocks of its C fragment), once the writer has read the last.
    auto stage_dq = [&](int64_t m, const float (&acc)[8][4]) {
      if (m >= 1) mbar_wait(stage.bars + G + group, uint32_t(m - 1) & 1);
      float4* to = reinterpret_cast<float4*>(const_cast<bf16*>(stage.tile(group)));
#pragma unroll
      for (int n = 0; n < 8; ++n) to[n * 128 + me] = make_float4(acc[n][0], acc[n][1], acc[n][2], acc[n][3]);
      fence_proxy_async();
      __syncwarp();
      mbar_arrive_if(stage.bars + group, signal);
    };
    auto dq_done = [&](int64_t n, float (&acc)[8][4]) {
      if constexpr (Fused) {
        fence_regs(acc);
        mbar_arrive_if(dS.bars + 2 + ((n - 1) & 1), signal);
        if (n >= 1) stage_dq(n - 1, acc);
      }
    };
    fetch(first);
    put(0);
    K.wait(0);
    V.wait(0);
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
      [[maybe_unused]] float dq[8][4];
      // A warpgroup whose keys all lie after this tile's last query gets nothing from it (and
      // takes its turns empty; fused, its dS rows are zeros).
      if (p.causal && group_k0 > q0 + BR - 1) {
        turns.pass();
        if constexpr (Fused) {
          const uint32_t none[BR / 16][4] = {};
          ds_put(n, none);
          dq_ready(n);
        }
        turns.take();
        if constexpr (Fused) {
          wgmma_fence();
          dq_issue(n, dq);
          wgmma_commit();
        }
        turns.pass();
        if constexpr (Fused) {
          wgmma_wait<0>();
          dq_done(n, dq);
        }
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
        ds_put(n, dsa);
        dq_ready(n);
        turns.take();
        wgmma_fence();
        wgmma_pb<DH, BR>(dv[0], pa, g_t);   // dV += P^T dO
        wgmma_pb<DH, BR>(dk[0], dsa, q_t);  // dK += dS^T Q (scaled at the end)
        dq_issue(n, dq);                    // fused: dQ_{n-1}'s unit
        wgmma_commit();
        turns.pass();
        wgmma_wait<0>();
        fence_regs(dv[0]);
        fence_regs(dk[0]);
        dq_done(n, dq);
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
    if constexpr (Fused) {  // the last tile's unit
      const int64_t n = tiles - first;
      float dq[8][4];
      dq_ready(n);
      wgmma_fence();
      dq_issue(n, dq);
      wgmma_commit();
      wgmma_wait<0>();
      fence_regs(dq);
      stage_dq(n - 1, dq);
      store_dkdv<1, DH>(p, b, h, key, dk, dv, lane, GlobalRope{p.rope, DH / 2});
    } else {
      store_dkdv<1, DH>(p, b, h, key, dk, dv, lane, warp_rope<DH>(p, rope(), group, warp, warp_k0));
    }
  };
  specialize<G, F::T::kBlocks>(produce, consume, write);
#else
  __trap();  // launched only where sm90() holds
#endif
}

// dQ from the fused kernel's sums (dq_accum: a 64 x 64 unit per block, thread by thread as the
// consumer staged it): scaled, rotated back by RoPE where p.rope is given, rounded to bf16.
template <int DH, bool Short>
__global__ void __launch_bounds__(128) dq_from_sums_kernel(const Params p) {
  using F = TmaDkdv<DH, Short, true>;
  const int64_t unit = blockIdx.x, head_units = F::units(p.T), bh = unit / head_units;
  const int64_t u = unit % head_units, i = u / F::kGroups, g = u % F::kGroups;
  const int me = threadIdx.x, warp = me / 32, lane = me % 32;
  const int64_t rm = g / (DH / 64), cn = g % (DH / 64);
  const float4* from = reinterpret_cast<const float4*>(p.dq_accum) + unit * 1024;
  float acc[1][8][4];
#pragma unroll
  for (int n = 0; n < 8; ++n) {
    const float4 x = from[n * 128 + me];
    acc[0][n][0] = x.x, acc[0][n][1] = x.y, acc[0][n][2] = x.z, acc[0][n][3] = x.w;
  }
  float scale[1][2];
  fill(scale, p.scale);
  const int64_t row = i * F::BR + 64 * rm + 16 * warp + lane / 4;
  bf16* out = head<bf16>(p.dq, bh / p.H, bh % p.H, DH, p.qkv_batch) + 64 * cn;
  if (!p.rope) return store_rows<1, 64>(p, out, p.qkv_row, row, acc, scale, lane);
  store_rows<1, 64>(p, out, p.qkv_row, row, acc, scale, lane, GlobalRope{p.rope + 32 * cn, DH / 2});
}

// dQ for one consumer warpgroup's queries 64 group .. + 63 of the block's tile at q0 (sQ and sdO
// hold its BR rows): key tile t at K.tile(t), value tile t at V.tile(t); rope() gives the
// block's staging of the RoPE table (stage_rope), its rows from q0 on. Software-pipelined by one
// tile as the forward is (key_pipeline): while the tensor cores run dQ += dS_j K_j, the
// warpgroup turns S_{j+1} and dP_{j+1}, issued just before it, into dS_{j+1}; so K_j and K_{j+1}
// are read in iteration j. advance(j) is key_pipeline's (K_{j+1} and V_{j+1} ready once it
// returns); issued() follows the issue of each dS K; release(j, has_next) follows each tile's
// matmuls (j = -1: the first scores), when V_{j+1} (if has_next) and K_j (if j >= 0) are no
// longer read.
template <int DH, int BR, int BC, typename KTiles, typename VTiles, typename Rope,
          typename Advance, typename Issued, typename Release>
__device__ __forceinline__ void dq_rows(const Params& p, int64_t b, int64_t h, int64_t q0, int group,
                                        const bf16* sQ, const bf16* sdO, const KTiles& K,
                                        const VTiles& V, Rope&& rope, Advance&& advance,
                                        Issued&& issued, Release&& release) {
  const int warp = threadIdx.x / 32 % 4, lane = threadIdx.x % 32;
  const int64_t bh = b * p.H + h;
  const int64_t group_q0 = q0 + 64 * group, warp_q0 = group_q0 + 16 * warp, row = warp_q0 + lane / 4;
  const int64_t tiles = key_tiles(p, q0, BR, BC), mine = key_tiles(p, group_q0, 64, BC);
  const int64_t clean = unmasked_key_tiles(p, q0, tiles, BC);
  float L[1][2], D[1][2], dq[1][DH / 8][4], s[1][BC / 8][4], ds[1][BC / 8][4];  // s, ds: S/P, dP/dS
  uint32_t dsa[BC / 16][4];  // dS_j, the A operand of dS K
  row_stats(L, D, p, bh, row);
  zero(dq);

  auto scores = [&](int64_t t) {  // s = Q K_t^T, ds = dO V_t^T
    wgmma_abt<BC, DH, BR>(s[0], sQ, 64 * group, K.tile(t));
    wgmma_abt<BC, DH, BR>(ds[0], sdO, 64 * group, V.tile(t));
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

  store_dq<1, DH>(p, b, h, row, dq, lane, warp_rope<DH>(p, rope(), group, warp, warp_q0));
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
    dq_tma_kernel(const Params p, const __grid_constant__ CUtensorMap q_map,
                  const __grid_constant__ CUtensorMap do_map, const __grid_constant__ CUtensorMap k_map,
                  const __grid_constant__ CUtensorMap v_map) {
#ifdef LMT_SM90_DEVICE_CODE
  using F = TmaDq<DH, Short>;
  constexpr int BR = F::BR, BC = F::BC, G = F::kGroups;
  typename F::Smem smem;
  const auto Q = smem.template next<typename F::QRing>(), dO = smem.template next<typename F::QRing>();
  const auto K = smem.template next<typename F::KRing>();
  const auto V = smem.template next<typename F::VRing>();
  const int64_t b = blockIdx.y / p.H, h = blockIdx.y % p.H, q0 = query_tile(p) * BR;
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
    Q.wait(0);
    dO.wait(0);
    K.wait(0);
    V.wait(0);
    turns.begin();
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
    dq_rows<DH, BR, BC>(p, b, h, q0, me, Q.tile(0), dO.tile(0), K, V, rope, advance,
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
  using K = TmaDkdv<DH, Short, false>;
  launch_specialized<dkdv_tma_kernel<DH, Short, false>, K>(
      p, B, K::BC, stream, qkv_map(p, B, DH, p.q, K::BR), o_map(p, B, DH, p.dout, K::BR),
      qkv_map(p, B, DH, p.k, K::BC), qkv_map(p, B, DH, p.v, K::BC));
  using F = TmaDq<DH, Short>;
  launch_specialized<dq_tma_kernel<DH, Short>, F>(
      p, B, F::BR, b.stream, qkv_map(p, B, DH, p.q, F::BR), o_map(p, B, DH, p.dout, F::BR),
      qkv_map(p, B, DH, p.k, F::BC), qkv_map(p, B, DH, p.v, F::BC));
  CUDA_CHECK(cudaEventRecord(b.join, b.stream));
  CUDA_CHECK(cudaStreamWaitEvent(stream, b.join, 0));
}

// The fused backward: the sums and turn counters zeroed, the fused kernel, dQ's pass.
template <int DH> void launch_fused(const Params& p, int64_t B, cudaStream_t stream) {
  using K = TmaDkdv<DH, false, true>;
  const int64_t units = B * p.H * K::units(p.T);
  CUDA_CHECK(cudaMemsetAsync(p.dq_accum, 0, size_t(units) * 4096 * sizeof(float), stream));
  CUDA_CHECK(cudaMemsetAsync(p.dq_turns, 0, size_t(units) * sizeof(uint32_t), stream));
  launch_specialized<dkdv_tma_kernel<DH, false, true>, K>(
      p, B, K::BC, stream, qkv_map(p, B, DH, p.q, K::BR), o_map(p, B, DH, p.dout, K::BR),
      qkv_map(p, B, DH, p.k, K::BC), qkv_map(p, B, DH, p.v, K::BC));
  dq_from_sums_kernel<DH, false><<<unsigned(units), 128, 0, stream>>>(p);
  CUDA_LAUNCH_CHECK();
}

}  // namespace

int64_t fused_units(int64_t B, int64_t H, int64_t T, int64_t dh) {
  int64_t units = 0;
  Sm90HeadDims::dispatch(dh, [&](auto d) {
    units = B * H * TmaDkdv<decltype(d)::value, false, true>::units(T);
  });
  return units;
}

void bwd_sm90_fused(const Params& p, int64_t B, int64_t dh, cudaStream_t s) {
  LMT_ASSERT(p.causal, "flash attention: the fused backward is causal only");
  Sm90HeadDims::dispatch(dh, [&](auto d) { launch_fused<decltype(d)::value>(p, B, s); });
}

void bwd_sm90(const Params& p, int64_t B, int64_t dh, cudaStream_t s) {
  Sm90HeadDims::dispatch(dh, [&](auto d) {
    constexpr int D = decltype(d)::value;
    if constexpr (sm90_bwd_short_t(D) > 0)
      if (p.T <= sm90_bwd_short_t(D)) return launch<D, true>(p, B, s);
    launch<D, false>(p, B, s);
  });
}

}  // namespace lmt::cuda::attn
