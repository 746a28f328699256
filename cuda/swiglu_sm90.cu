// W2's input gradient and SwiGLU's backward in one kernel on Hopper (sm_90a, wgmma and TMA, as
// attention/'s kernels): dg = dy W2 (dy [M, d], W2 [d, f], bf16) is never stored. Each 128 x 128
// tile of it is rounded to bf16 in registers, as W2's matmul would store it, and turned into da and
// db (swiglu.cuh's gate_bwd, as elementwise.cu's kernel computes them) with the tile's a and b,
// copied into shared memory while the tile's matmul ran; da and db are written over them there
// and leave through TMA stores. Apart, the matmul writes dg and the elementwise pass reads it
// back beside u at DRAM bandwidth while the tensor cores idle; here the tiles' loads and stores
// run under the matmuls. (backend.cpp says where it is used.)
//
// A block per SM takes tiles in turn (persistent). Warpgroup 0's thread 0 produces the matmuls'
// operands: each tile's dy and W2 panels of 64 along d through kStages buffers. Warpgroups 1 and
// 2 consume the block's tiles in turn, each a whole tile, S = dy W2 with both operands from shared
// memory (dy K-major, W2 MN-major, as stored), taking turns at the tensor cores (tma.cuh's Turns):
// one consumer's matmuls run while the other takes its last tile's SwiGLU backward, so a consumer
// has buffers of a and b of its own. A tile's a and b pass through them in four units of 64 rows by
// 64 columns, two slots a consumer, so that while the consumer's math takes one unit the next one
// is already being copied in, and the stages' ring is five deep: the producer's thread 32 stores a
// unit's da and db once its consumer has written them and, once the stores have read the slot,
// copies in the unit two on, of this tile or of the consumer's next one (the block's first two
// tiles' first two as it starts). (docs/design.md has the timings, and the variants not kept.)
#include "attention/tma.cuh"
#include "attention/wgmma.cuh"
#include "common.cuh"
#include "cuda_kernels.hpp"
#include "swiglu.cuh"

namespace lmt::cuda {
namespace {

using attn::bf16;

constexpr int kBM = 128, kBN = 128, kBK = 64, kStages = 5, kGroups = 2, kHalf = kBM / 2;
// A tile's a and b in units of kHalf rows by 64 columns (unit u: rows kHalf (u / 2) on, columns
// 64 (u % 2) on), through kSlots slots a consumer (unit u in slot u % kSlots).
constexpr int kUnits = (kBM / kHalf) * (kBN / 64), kSlots = 2;
static_assert(kUnits == 2 * kSlots, "a slot takes two units a tile: unit u's parity is u / kSlots");
constexpr int kAElems = kBM * kBK, kBElems = kBK * kBN, kUElems = kHalf * 64;
// Shared memory from the 1024-byte boundary: the dy and W2 rings, the consumers' slots (slot e =
// consumer kSlots + its slot: a unit's a, then its b), then the barriers: full and free per
// stage, and per slot its a and b landed and its da and db written.
constexpr size_t kTileBytes =
    (size_t(kStages) * (kAElems + kBElems) + kGroups * kSlots * 2 * kUElems) * sizeof(bf16);
constexpr int kBarriers = 2 * kStages + 2 * kGroups * kSlots;
constexpr size_t kSmemBytes = kTileBytes + kBarriers * sizeof(uint64_t) + attn::kSmemAlignSlack;
static_assert(kSmemBytes <= 227 * 1024, "a block's shared memory on Hopper");

__global__ void __launch_bounds__(128 * (kGroups + 1), 1)
    swiglu_dgrad_kernel(const int d, const int tiles_n, const int tiles,
                        const __grid_constant__ CUtensorMap dy_map,
                        const __grid_constant__ CUtensorMap w2_map,
                        const __grid_constant__ CUtensorMap a_map,
                        const __grid_constant__ CUtensorMap b_map,
                        const __grid_constant__ CUtensorMap da_map,
                        const __grid_constant__ CUtensorMap db_map) {
#ifdef LMT_SM90_DEVICE_CODE
  using namespace attn;
  bf16* const sA = smem_1024();
  bf16* const sB = sA + kStages * kAElems;
  bf16* const sE = sB + kStages * kBElems;  // slot e: a unit's a at sE + 2 e kUElems, then b
  uint64_t* const full = reinterpret_cast<uint64_t*>(sE + kGroups * kSlots * 2 * kUElems);
  uint64_t *const empty = full + kStages, *const e_full = empty + kStages;
  uint64_t* const e_written = e_full + kGroups * kSlots;
  init_barriers([&] {
    for (int i = 0; i < kStages; ++i) mbar_init(full + i, 1), mbar_init(empty + i, 4);
    for (int e = 0; e < kGroups * kSlots; ++e)
      mbar_init(e_full + e, 1), mbar_init(e_written + e, 1);
  });
  const int steps = (d + kBK - 1) / kBK;
  // The block's n-th tile: its origin (n0, m0); consumer and buffer n % kGroups take it, and its
  // stages are the block's n steps-th on, buffer s % kStages used for the s / kStages-th time.
  auto origin = [&](int n) {
    const int t = int(blockIdx.x) + n * int(gridDim.x);
    return int2{t % tiles_n * kBN, t / tiles_n * kBM};
  };
  const int mine = (tiles - int(blockIdx.x) + int(gridDim.x) - 1) / int(gridDim.x);  // tiles

  // Unit u of tile n's a and b into its slot, or (store_unit) its da and db out of it: the
  // storer's. A slot takes units u and u + kSlots of each of its consumer's tiles, in turn its
  // barriers' phases, so unit u's parity is u / kSlots.
  auto group_slot = [](int g, int u) { return g * kSlots + u % kSlots; };  // consumer g's
  auto slot = [&](int n, int u) { return group_slot(n % kGroups, u); };
  auto unit_at = [&](int n, int u) {
    const int2 o = origin(n);
    return int2{o.x + 64 * (u % 2), o.y + kHalf * (u / 2)};
  };
  auto load_unit = [&](int n, int u) {
    const int e = slot(n, u);
    const int2 c = unit_at(n, u);
    mbar_expect(e_full + e, uint32_t(2 * kUElems * sizeof(bf16)));
    tma_load_4d(sE + 2 * e * kUElems, &a_map, c.x, c.y, 0, 0, e_full + e);
    tma_load_4d(sE + (2 * e + 1) * kUElems, &b_map, c.x, c.y, 0, 0, e_full + e);
  };
  auto store_unit = [&](int n, int u) {
    const int e = slot(n, u);
    const int2 c = unit_at(n, u);
    tma_store_4d(&da_map, sE + 2 * e * kUElems, c.x, c.y, 0, 0);
    tma_store_4d(&db_map, sE + (2 * e + 1) * kUElems, c.x, c.y, 0, 0);
    tma_store_commit();
  };
  auto store = [&](int) {
    for (int n = 0; n < kGroups && n < mine; ++n)
      for (int u = 0; u < kSlots; ++u) load_unit(n, u);
    for (int n = 0; n < mine; ++n)
      for (int u = 0; u < kUnits; ++u) {
        mbar_wait(e_written + slot(n, u), uint32_t(u / kSlots));
        store_unit(n, u);
        // The slot's next unit: two on in this tile, or the first ones of the consumer's next.
        const bool here = u + kSlots < kUnits;
        if (here || n + kGroups < mine) {
          tma_store_wait_read();
          if (here) load_unit(n, u + kSlots);
          else load_unit(n + kGroups, u + kSlots - kUnits);
        }
      }
    tma_store_wait_read();  // before the block ends
  };

  auto produce = [&] {
    int i = 0, r = 0;  // the stage's buffer and its use
    for (int n = 0; n < mine; ++n) {
      const int y = origin(n).y, x = origin(n).x;
      for (int k = 0; k < steps; ++k) {
        if (r > 0) mbar_wait(empty + i, uint32_t(r - 1) & 1);
        mbar_expect(full + i, uint32_t((kAElems + kBElems) * sizeof(bf16)));
        tma_load_4d(sA + i * kAElems, &dy_map, k * kBK, y, 0, 0, full + i);
        for (int p = 0; p < kBN / 64; ++p)
          tma_load_4d(sB + i * kBElems + p * kBK * 64, &w2_map, x + 64 * p, k * kBK, 0, 0,
                      full + i);
        if (++i == kStages) i = 0, ++r;
      }
    }
  };

  auto consume = [&](int g) {
    const int warp = threadIdx.x / 32 % 4, lane = threadIdx.x % 32;
    const bool signal = lane == 0;  // one arrival per warp frees a stage
    // A consumer's matmuls start once the other's are issued (ping-pong, tma.cuh's Turns): its
    // stages' barriers are then no more than a phase ahead of the waits. Both take as many turns
    // (an empty one past the block's tiles).
    const Turns<kGroups, true> turns{g};
    turns.begin();
    for (int q = 0; q < (mine + kGroups - 1) / kGroups; ++q) {
      const int n = q * kGroups + g;
      if (q > 0) turns.take();
      if (n >= mine) {
        turns.pass();
        continue;
      }
      float acc[2][kBN / 8][4];  // rows 0-63 and 64-127 of the tile
      int i = n * steps % kStages, r = n * steps / kStages;
      for (int k = 0; k < steps; ++k) {
        mbar_wait(full + i, uint32_t(r) & 1);
        wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < kBK / 16; ++ks) {
          const uint64_t b = mnmajor_desc<kBK>(sB + i * kBElems, ks);
#pragma unroll
          for (int half = 0; half < 2; ++half)
            wgmma_ss<kBN, 1>(acc[half], kmajor_desc<kBM>(sA + i * kAElems, 64 * half, ks), b,
                             k > 0 || ks > 0);
        }
        wgmma_commit();
        // The stage's matmuls done, it is freed at once: the other kStages - 1 are the copies'
        // lead (waiting for the stage before instead, one step behind: 168 us against 157 at
        // gpt2-small's shape).
        wgmma_wait<0>();
        mbar_arrive_if(empty + i, signal);
        if (++i == kStages) i = 0, ++r;
      }
      turns.pass();
      fence_regs(acc[0]);
      fence_regs(acc[1]);

      // dg rounded as stored, then da and db over a and b (the thread's own elements: no other
      // thread reads them), swizzled as the stores read them, a unit at a time. A unit's a and b
      // are read into registers before any of its results is written: the compiler cannot tell
      // the swizzled addresses apart, and element by element each load waited on the store before
      // it (one warp a scheduler here, so that chain was the consumer's time).
      constexpr int kUnitJ = 64 / 8;  // fragments of 8 columns in a unit
#pragma unroll
      for (int u = 0; u < kUnits; ++u) {
        const int e = group_slot(g, u);  // slot(n, u): g is n % kGroups
        bf16 *const ta = sE + 2 * e * kUElems, *const tb = ta + kUElems;
        mbar_wait(e_full + e, uint32_t(u / kSlots));
        int at[kUnitJ][2];
        __nv_bfloat162 va[kUnitJ][2], vb[kUnitJ][2];
#pragma unroll
        for (int jj = 0; jj < kUnitJ; ++jj)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            at[jj][h] = swizzled(16 * warp + lane / 4 + 8 * h, jj, 2 * (lane % 4));  // in the unit
            va[jj][h] = *reinterpret_cast<const __nv_bfloat162*>(ta + at[jj][h]);
            vb[jj][h] = *reinterpret_cast<const __nv_bfloat162*>(tb + at[jj][h]);
          }
#pragma unroll
        for (int jj = 0; jj < kUnitJ; ++jj)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const float* const s = acc[u / 2][u % 2 * kUnitJ + jj];
            const float2 a = __bfloat1622float2(va[jj][h]), b = __bfloat1622float2(vb[jj][h]);
            const float2 dg = __bfloat1622float2(__floats2bfloat162_rn(s[2 * h], s[2 * h + 1]));
            const float2 r0 = gate_bwd(a.x, b.x, dg.x), r1 = gate_bwd(a.y, b.y, dg.y);
            auto* const pa = reinterpret_cast<__nv_bfloat162*>(ta + at[jj][h]);
            auto* const pb = reinterpret_cast<__nv_bfloat162*>(tb + at[jj][h]);
            *pa = __floats2bfloat162_rn(r0.x, r1.x);
            *pb = __floats2bfloat162_rn(r0.y, r1.y);
          }
        fence_async_shared();
        bar_sync(kFirstGroupBarrier + g, 128);
        if (threadIdx.x % 128 == 0) mbar_arrive_if(e_written + e, true);
      }
    }
    turns.end();
  };
  specialize<kGroups>(produce, consume, store);
#else
  __trap();  // launched only where swiglu_dgrad_supported holds
#endif
}

}  // namespace

bool swiglu_dgrad_supported(const void* dy, const void* w2, const void* u, const void* du,
                            int64_t M, int64_t d, int64_t f) {
  const auto at16 = [](const void* p) { return aligned_for(p, 16); };
  return attn::hopper() && d % 8 == 0 && f % 8 == 0 && M < (int64_t(1) << 31) &&
         d < (int64_t(1) << 31) && f < (int64_t(1) << 30) && at16(dy) && at16(w2) && at16(u) &&
         at16(du);
}

void swiglu_dgrad(const void* dy, const void* w2, const void* u, void* du, int64_t M, int64_t d,
                  int64_t f, cudaStream_t s) {
  LMT_ASSERT(swiglu_dgrad_supported(dy, w2, u, du, M, d, f), "swiglu_dgrad: unsupported shape");
  const auto* u16 = static_cast<const bf16*>(u);
  auto* du16 = static_cast<bf16*>(du);
  const int tiles_n = int((f + kBN - 1) / kBN);
  const int64_t tiles = (M + kBM - 1) / kBM * tiles_n;
  LMT_ASSERT(tiles < (int64_t(1) << 31), "swiglu_dgrad: too many tiles");
  attn::allow_smem<swiglu_dgrad_kernel>(kSmemBytes);
  const int blocks = int(std::min<int64_t>(tiles, sm_count()));
  swiglu_dgrad_kernel<<<blocks, 128 * (kGroups + 1), kSmemBytes, s>>>(
      int(d), tiles_n, int(tiles), attn::matrix_map(dy, d, M, d, kBM),
      attn::matrix_map(w2, f, d, f, kBK), attn::matrix_map(u16 + f, f, M, 2 * f, kHalf),
      attn::matrix_map(u16, f, M, 2 * f, kHalf), attn::matrix_map(du16 + f, f, M, 2 * f, kHalf),
      attn::matrix_map(du16, f, M, 2 * f, kHalf));
  CUDA_LAUNCH_CHECK();
}

}  // namespace lmt::cuda
