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
//
// Fused (causal; key blocks of 128, query tiles of flash_fused_tile): the block also takes its
// share of each query tile's dQ, dS_i K over its keys, and adds it into dQ's sums
// (flash_scratch.hpp) in a fixed order, so that no dQ kernel recomputes S and dP. Each consumer
// stores its rows of dS^T (bf16, as rounded for dK) into a shared tile of the block's keys x the
// query tile's queries (two buffers); in its second turn of tile i + 1 it multiplies tile i's,
// read transposed as dS, by the block's K into one 64 x 64 unit of dQ_i (its 64 queries at head
// dim 64, its 64 columns at 128), and stages the unit in shared memory (fp32, 16 KiB). A writer
// thread a consumer (the producer warpgroup's warps 1 .. kGroups) adds each staged unit with a
// bulk reduction into the sums of the unit's order: query tile i's key blocks j = d (its
// diagonal's) .. 0 fall into kFlashFusedChains orders by (d - j) % kFlashFusedChains, each order's
// blocks adding in turn (the first copies, so the sums need no clearing), so that consecutive adds
// of an order come from blocks that many key blocks apart. A writer waits (an acquire load)
// until the unit's counter for its order says every block before it has added, and bumps the
// counter (a release) once its add has completed, which it waits for only after issuing its next
// one. Blocks take their (head, key block) from a ticket counter as they start, a head's key
// blocks last first, so a block waits only on blocks already running.
template <int DH, bool Short, bool Fused = false> struct TmaDkdv {
  using T = Sm90DkdvTraits<DH, Short>;
  static constexpr int kGroups = T::kGroups, BC = 64 * kGroups, BR = T::kTile, kStages = T::kStages;
  using KRing = Ring<1, BC, DH>;
  using QRing = Ring<kStages, BR, DH>;
  // Fused: the dS^T tiles (full: every consumer warp has stored its rows; free: every consumer
  // warp's dQ matmul has read it) and each consumer's staged unit (full: its warps have stored it;
  // free: its writer's add has read it), 64 x 64 fp32 in the bytes of 64 x 128 bf16.
  using DsRing = Ring<2, BC, BR>;
  using UnitRing = Ring<kGroups, 64, 128>;
  using Rings = std::conditional_t<Fused, SmemRings<KRing, KRing, QRing, QRing, DsRing, UnitRing>,
                                   SmemRings<KRing, KRing, QRing, QRing>>;
  // The rings, then each consumer's L and D, two tiles of each, then (not fused) the block's keys'
  // rows of the RoPE table (stage_rope; the fused kernel's shared memory has no room for them, its
  // dK stores read the table from global memory).
  struct Smem : Rings {
    static constexpr size_t kStatsFloats = size_t(kGroups) * 2 * 2 * BR;
    static constexpr size_t kBytes =
        Rings::kBytes + kStatsFloats * sizeof(float) + (Fused ? 0 : kRopeStageBytes<DH, BC>);
  };
  // Fused: key blocks of 128, query tiles of flash_fused_tile (as many rows as one 64 x 64 unit
  // of dQ a consumer makes: 128 at head dim 64, 64 at 128).
  static constexpr bool kFusable =
      BC == 128 && BR == flash_fused_tile(DH) && BR * DH == 4096 * kGroups && !Short;
  static_assert(!Fused || kFusable, "the fused backward's tiles");
  // Fused: the last key block that sees query tile i (the first to add to its dQ), of `blocks`.
  static __host__ __device__ int64_t diagonal(int64_t i, int64_t blocks) {
    return min64(blocks - 1, ((i + 1) * BR - 1) / BC);
  }
  // Fused: unit u's sums in order c and its turn counter there (flash_scratch.hpp's layout).
  static __device__ float* sums(const Params& p, int64_t u, int64_t c) {
    return p.dq_sums + (c * p.dq_units + u) * 4096;
  }
  static __device__ uint32_t* counter(const Params& p, int64_t u, int64_t c) {
    return p.dq_turns + 1 + u * kFlashFusedChains + c;
  }
};

template <int DH, bool Short, bool Fused>
__global__ void __launch_bounds__(128 * (TmaDkdv<DH, Short, Fused>::kGroups + 1),
                                  TmaDkdv<DH, Short, Fused>::T::kBlocks)
    dkdv_tma_kernel(const Params p, const __grid_constant__ CUtensorMap q_map,
                    const __grid_constant__ CUtensorMap do_map,
                    const __grid_constant__ CUtensorMap k_map,
                    const __grid_constant__ CUtensorMap v_map,
                    const __grid_constant__ CUtensorMap dk_map,
                    const __grid_constant__ CUtensorMap dv_map) {
#ifdef LMT_SM90_DEVICE_CODE
  using F = TmaDkdv<DH, Short, Fused>;
  constexpr int BR = F::BR, BC = F::BC, G = F::kGroups, kChains = int(kFlashFusedChains);
  typename F::Smem smem;
  const auto K = smem.template next<typename F::KRing>();
  const auto V = smem.template next<typename F::KRing>();
  const auto Q = smem.template next<typename F::QRing>();
  const auto dO = smem.template next<typename F::QRing>();
  typename F::DsRing dS{};
  typename F::UnitRing unit{};
  if constexpr (Fused) {
    dS = smem.template next<typename F::DsRing>();
    unit = smem.template next<typename F::UnitRing>();
  }
  float* stats = smem.template rest<float>();
  // The RoPE rows' staging, found where used (held across the loop, a pointer spilled).
  auto rope = [] {
    return rope_stage(F::Smem::kRest + F::Smem::kStatsFloats * sizeof(float));
  };
  __shared__ uint32_t ticket;  // fused: the block's place in the order blocks start in
  if constexpr (Fused) allow_dependents();  // dQ's pass, on the SMs the last blocks leave idle
  init_barriers([&] {
    K.init(1), V.init(1), Q.init(4 * G), dO.init(4 * G);
    if constexpr (Fused) {
      for (int i = 0; i < 4; ++i) mbar_init(dS.bars + i, 4 * G);
      for (int g = 0; g < G; ++g) mbar_init(unit.bars + g, 4), mbar_init(unit.bars + G + g, 1);
      ticket = atomicAdd(p.dq_turns, 1u);
    } else {
      mbar_init(rope().bar, 1);
    }
  });
  const int64_t blocks = gridDim.x;  // key blocks a head
  const int64_t bh = Fused ? ticket / blocks : blockIdx.y, b = bh / p.H, h = bh % p.H;
  const int64_t kb = Fused ? blocks - 1 - ticket % blocks : blockIdx.x, k0 = kb * BC;
  const int64_t first = p.causal ? k0 / BR : 0, tiles = ceil_div(p.T, BR);

  auto produce = [&] {
    if (!Fused && p.rope) stage_rope<DH, BC>(p, k0, rope());
    K.fill(0, k_map, k0, b, h);
    V.fill(0, v_map, k0, b, h);
    for (int64_t i = first; i < tiles; ++i)
      Q.fill(i - first, q_map, i * BR, b, h), dO.fill(i - first, do_map, i * BR, b, h);
  };
  // Fused: an add, complete, announced. Key blocks 0 .. kChains - 1 add their orders' last
  // (every unit's), which dQ's pass reads with plain loads: their bulk writes are first made
  // visible to those (a proxy fence).
  auto announce = [&](uint32_t* counter) {
    if (kb < kChains) fence_async_global();
    add_release(counter, 1);
  };
  // Fused: consumer g's writer adds its units of query tiles first .. tiles - 1 in their turns
  // (query tile i's key blocks 0 .. diagonal(i), the diagonal's first).
  auto write = [&](int g) {
    if constexpr (Fused) {
      uint32_t* last = nullptr;  // the counter of the add issued last, bumped once it completes
      for (int64_t i = first; i < tiles; ++i) {
        const int64_t n = i - first, u = (bh * tiles + i) * G + g;
        const int64_t ahead = F::diagonal(i, blocks) - kb, chain = ahead % kChains;
        const uint32_t turn = uint32_t(ahead / kChains);
        uint32_t* counter = F::counter(p, u, chain);
        float* sums = F::sums(p, u, chain);
        mbar_wait(unit.bars + g, uint32_t(n) & 1);
        if (turn > 0) {
          while (load_acquire(counter) != turn) {
          }
          fence_async_global();
          bulk_reduce_add(sums, unit.tile(g), 4096 * sizeof(float));
        } else {
          bulk_store(sums, unit.tile(g), 4096 * sizeof(float));
        }
        bulk_wait_read<0>();
        mbar_arrive_if(unit.bars + G + g, true);
        if (last) {
          bulk_wait<1>();
          announce(last);
        }
        last = counter;
      }
      bulk_wait<0>();
      announce(last);
    }
  };
  auto consume = [&](int group) {
    grid_dependency_wait();  // D, from the pass before (launch); fused: returns at once
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
    // Fused: this warp's shared stores made visible to the async proxy (wgmma, bulk copies) and
    // announced on `bar`. Each tile's stores (dS^T rows, a staged unit) are published a while
    // after they are issued, once matmuls are in flight: the fence waits for the stores to
    // complete, which right after the unit's stores took 7 % of the warps' stall samples
    // (publishing later: the backward 2-4 % faster; results/flash_tuning.md).
    auto publish = [&](uint64_t* bar) {
      fence_async_shared();
      __syncwarp();
      mbar_arrive_if(bar, signal);
    };
    // Fused: tile n's dS^T rows (A fragments, keys x queries) into dS buffer n % 2 once the
    // buffer's dQ matmul of tile n - 2 (n = 1: the dummy's, below) is done: 16-byte chunks
    // swizzled as TMA's tiles (wgmma.cuh), a key row's chunks XOR its row % 8 (lane / 4 here).
    // Published (ds_publish) once the tile's second-turn matmuls are issued.
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
      }
    };
    auto ds_publish = [&](int64_t n) {
      if constexpr (Fused) publish(dS.bars + (n & 1));
    };
    // Fused: before tile n's second turn, tile n - 1's dS whole (every consumer's rows).
    auto dq_ready = [&](int64_t n) {
      if (Fused && n >= 1) mbar_wait(dS.bars + ((n - 1) & 1), uint32_t((n - 1) >> 1) & 1);
    };
    // Fused: in tile n's second turn, this consumer's unit of dQ_{n-1} (rows 64 rm, columns
    // 64 cn of the tile, over the block's keys). At n = 0 a dummy on buffer 1, discarded (the
    // turn's matmuls are issued without a branch between them and their wait: C7520), whose free
    // arrival ds_put(1) waits for.
    auto dq_issue = [&](int64_t n, float (&acc)[8][4]) {
      if constexpr (Fused) {
        const int rm = group / (DH / 64), cn = group % (DH / 64);
        wgmma_atb<BC>(acc, dS.tile((n - 1) & 1) + rm * BC * 64, K.tile(0) + cn * BC * 64);
      }
    };
    // Fused: the unit of dQ_m into this consumer's staging, thread by thread in float4s (8 a
    // thread: the 8-column blocks of its C fragment), once the writer has read the last (which
    // needs it published). Published (unit_publish) once the next tile's first-turn matmuls are
    // issued, or after the last tile.
    auto stage_dq = [&](int64_t m, const float (&acc)[8][4]) {
      if (m >= 1) mbar_wait(unit.bars + G + group, uint32_t(m - 1) & 1);
      float4* to = reinterpret_cast<float4*>(const_cast<bf16*>(unit.tile(group)));
#pragma unroll
      for (int c = 0; c < 8; ++c)
        to[c * 128 + me] = make_float4(acc[c][0], acc[c][1], acc[c][2], acc[c][3]);
    };
    auto unit_publish = [&] {
      if constexpr (Fused) publish(unit.bars + group);
    };
    auto dq_done = [&](int64_t n, float (&acc)[8][4]) {
      if constexpr (Fused) {
        fence_regs(acc);
        mbar_arrive_if(dS.bars + 2 + ((n - 1) & 1), signal);
        if (n >= 1) stage_dq(n - 1, acc);
      }
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
      if (!Fused && i + 1 < tiles) fetch(i + 1);
      Q.wait(n);
      dO.wait(n);
      const bf16 *q_t = Q.tile(n), *g_t = dO.tile(n);
      const int64_t q0 = i * BR;
      if (n > 0) turns.take();  // the first turn is begin()'s
      // A warpgroup whose keys all lie after this tile's last query gets nothing from it (and
      // takes its turns empty; fused, it computes the tile, whose dS^T rows, all masked, are the
      // zeros the others' dQ needs).
      if (!Fused && p.causal && group_k0 > q0 + BR - 1) {
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
        if (n >= 2) unit_publish();  // fused: dQ_{n-2}'s, staged in tile n - 1
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
        [[maybe_unused]] float dq[8][4];
        turns.take();
        wgmma_fence();
        wgmma_pb<DH, BR>(dv[0], pa, g_t);   // dV += P^T dO
        wgmma_pb<DH, BR>(dk[0], dsa, q_t);  // dK += dS^T Q (scaled at the end)
        dq_issue(n, dq);                    // fused: dQ_{n-1}'s unit
        wgmma_commit();
        turns.pass();
        ds_publish(n);
        // Fused: the next tile's L and D fetched only now, after the proxy fence, which is
        // compiled with a memory barrier (MEMBAR.ALL.CTA) before it that may wait for loads in
        // flight (2 % faster at T 8192, head dim 64; level elsewhere).
        if (Fused && i + 1 < tiles) fetch(i + 1);
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
    if constexpr (Fused) {  // the last tile's unit; then no consumer reads K again
      const int64_t n = tiles - first;
      float dq[8][4];
      if (n >= 2) unit_publish();  // dQ_{n-2}'s, staged in the last tile
      dq_ready(n);
      wgmma_fence();
      dq_issue(n, dq);
      wgmma_commit();
      wgmma_wait<0>();
      fence_regs(dq);
      stage_dq(n - 1, dq);
      unit_publish();
      bar_sync(kConsumersBarrier, 128 * G);
    }
    // dK and dV leave as dq_rows's dQ does: through the warpgroup's rows of the K and V tiles
    // (read for the last time by its last matmuls) and TMA stores.
    bf16 *tk = const_cast<bf16*>(sK) + 64 * group * 64, *tv = const_cast<bf16*>(sV) + 64 * group * 64;
    float scale[1][2], one[1][2];
    fill(scale, p.scale);
    fill(one, 1.0f);
    if (!p.rope)
      stage_rows<DH>(tk, BC * 64, key, p.T, dk, scale, lane);
    else if constexpr (Fused)
      stage_rows<DH>(tk, BC * 64, key, p.T, dk, scale, lane, GlobalRope{p.rope, DH / 2});
    else
      stage_rows<DH>(tk, BC * 64, key, p.T, dk, scale, lane,
                     warp_rope<DH>(p, rope(), group, warp, warp_k0));
    stage_rows<DH>(tv, BC * 64, key, p.T, dv, one, lane);
    store_staged<DH>(barrier, BC * 64, group_k0, b, h, Staged{dk_map, tk}, Staged{dv_map, tv});
  };
  specialize<G, F::T::kBlocks, Fused ? G : 1>(produce, consume, write);
#else
  __trap();  // launched only where sm90() holds
#endif
}

// dQ from the fused kernel's sums: a 64 x 64 unit at a time (as its consumer staged it, thread by
// thread), its orders added in order, scaled, rotated back by RoPE where p.rope is given, rounded
// to bf16. Query tile i has diagonal(i) + 1 key blocks, and so at most that many orders. Launched
// as the fused kernel's programmatic dependent: its blocks start once every fused block has, on
// the SMs that the last fused blocks leave idle, and take units in order (a head's units are done
// once its key blocks 0 and 1 are: heads end in the order their tickets were taken), a block
// every gridDim.x-th, each unit once its orders' counters say every add to it has completed.
// Before the blocks end they wait for the fused kernel to end, so that what follows in the
// stream sees its dK and dV as well.
template <int DH>
__global__ void __launch_bounds__(128) dq_from_sums_kernel(const Params p) {
#ifdef LMT_SM90_DEVICE_CODE
  using F = TmaDkdv<DH, false, true>;
  const int64_t tiles = ceil_div(p.T, F::BR), blocks = ceil_div(p.T, F::BC);
  const int me = threadIdx.x, warp = me / 32, lane = me % 32;
  for (int64_t u = blockIdx.x; u < p.dq_units; u += gridDim.x) {
    const int64_t bh = u / (tiles * F::kGroups), i = u / F::kGroups % tiles, g = u % F::kGroups;
    const int64_t rm = g / (DH / 64), cn = g % (DH / 64), last = F::diagonal(i, blocks);
    const int64_t orders = min64(last + 1, kFlashFusedChains);
    if (me == 0)
      for (int64_t c = 0; c < orders; ++c) {
        const uint32_t adds = uint32_t((last - c) / kFlashFusedChains + 1);
        while (load_acquire(F::counter(p, u, c)) != adds) {
        }
      }
    __syncthreads();
    float acc[1][8][4];
    for (int64_t c = 0; c < orders; ++c) {
      const float4* from = reinterpret_cast<const float4*>(F::sums(p, u, c)) + me;
#pragma unroll
      for (int n = 0; n < 8; ++n) {
        const float4 x = from[n * 128];
        const float y[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[0][n][e] = c == 0 ? y[e] : acc[0][n][e] + y[e];
      }
    }
    const int64_t row = i * F::BR + 64 * rm + 16 * warp + lane / 4;
    bf16* out = head<bf16>(p.dq, bh / p.H, bh % p.H, DH, p.qkv_batch) + 64 * cn;
    float scale[1][2];
    fill(scale, p.scale);
    if (!p.rope)
      store_rows<1, 64>(p, out, p.qkv_row, row, acc, scale, lane);
    else
      store_rows<1, 64>(p, out, p.qkv_row, row, acc, scale, lane,
                        GlobalRope{p.rope + 32 * cn, DH / 2});
  }
  grid_dependency_wait();
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

// The dK/dV kernel is D's pass's programmatic dependent (flash.cuh): its blocks start, and their
// producers copy tiles, as the pass's last blocks run; its consumers wait for the pass to end
// before they read D. Its producers read only what the kernels before the pass wrote, which
// ended before the pass began (the pass is no one's dependent).
template <int DH, bool Short> void launch(const Params& p, int64_t B, cudaStream_t stream) {
  const Beside& b = beside();
  CUDA_CHECK(cudaEventRecord(b.fork, stream));
  CUDA_CHECK(cudaStreamWaitEvent(b.stream, b.fork, 0));
  using K = TmaDkdv<DH, Short>;
  launch_specialized<dkdv_tma_kernel<DH, Short, false>, K, true>(
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

// The fused backward: the counters zeroed (the sums need no clearing), the fused kernel, dQ's pass.
template <int DH> void launch_fused(const Params& p, int64_t B, cudaStream_t stream) {
  using K = TmaDkdv<DH, false, true>;
  LMT_ASSERT(p.dq_units == B * p.H * ceil_div(p.T, K::BR) * K::kGroups,
             "flash attention: the fused backward's scratch does not match its units");
  CUDA_CHECK(cudaMemsetAsync(p.dq_turns, 0,
                             size_t(1 + kFlashFusedChains * p.dq_units) * sizeof(uint32_t), stream));
  launch_specialized<dkdv_tma_kernel<DH, false, true>, K>(
      p, B, K::BC, stream, qkv_map(p, B, DH, p.q, K::BR), o_map(p, B, DH, p.dout, K::BR),
      qkv_map(p, B, DH, p.k, K::BC), qkv_map(p, B, DH, p.v, K::BC), qkv_map(p, B, DH, p.dk, 64),
      qkv_map(p, B, DH, p.dv, 64));
  // dQ's pass: four blocks an SM (its registers, 94 a thread, would let five fit) read the sums at
  // full bandwidth once the fused kernel has ended.
  launch_kernel(dq_from_sums_kernel<DH>, dim3(unsigned(min64(p.dq_units, 4 * int64_t(sm_count())))),
                128, 0, stream, true, p);
}

}  // namespace

void bwd_sm90(const Params& p, int64_t B, int64_t dh, bool fused, cudaStream_t s) {
  Sm90HeadDims::dispatch(dh, [&](auto d) {
    constexpr int D = decltype(d)::value;
    if (fused) {
      LMT_ASSERT(p.causal, "flash attention: the fused backward is causal only");
      if constexpr (TmaDkdv<D, false>::kFusable) return launch_fused<D>(p, B, s);
      LMT_FATAL("flash attention: this build's dK/dV tiles have no fused backward at head dim " +
                std::to_string(D));
    }
    if constexpr (sm90_bwd_short_t(D) > 0)
      if (p.T <= sm90_bwd_short_t(D)) return launch<D, true>(p, B, s);
    launch<D, false>(p, B, s);
  });
}

}  // namespace lmt::cuda::attn
