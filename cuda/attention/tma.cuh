// Hopper (sm_90a) streaming for the FlashAttention kernels of flash_sm90_*.cu with bf16 storage:
// warp specialization. Warpgroup 0 of a block, the producer, only copies tiles from global into
// shared memory with TMA (one thread issues each copy; the hardware swizzles it as wgmma.cuh's
// tiles are, and fills rows past T with zeros); the other warpgroups, the consumers, only compute.
// A streamed operand is a Ring of buffers with two mbarriers each: `full` completes when a copy's
// bytes have landed, `free` when every consumer warp is done with the buffer. No barrier spans the
// block, so the consumers drift apart and one's softmax runs under another's matmuls; Turns makes
// that a rule (ping-pong). The producer gives most of its registers to the consumers (setmaxnreg).
#pragma once
#include <cuda.h>
#include <cudaTypedefs.h>

#include <cstdint>

#include "../common.cuh"
#include "flash.cuh"
#include "mma.cuh"
#include "wgmma.cuh"

namespace lmt::cuda::attn {

// mbarriers (PTX "mbarrier"): 64-bit shared-memory barriers that count arrivals and, for TMA, the
// bytes still to land; a phase completes when both reach zero, and waiters test its parity
// (phase k of a barrier used once per k-th reuse has parity k & 1).
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(arrivals));
}
// Makes the initialized barriers visible to the async proxy (TMA); a block barrier follows.
__device__ __forceinline__ void mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// A kernel's start: thread 0 initializes the block's barriers (`init`: its rings' init calls)
// and fences them for TMA, then every thread waits for that.
template <typename Init> __device__ __forceinline__ void init_barriers(Init init) {
  if (threadIdx.x == 0) {
    init();
    mbar_init_fence();
  }
  __syncthreads();
}
// One arrival that also announces `bytes` to come from TMA copies signalling this barrier.
__device__ __forceinline__ void mbar_expect(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)),
               "r"(bytes) : "memory");
}
// One arrival where `yes` holds, without a branch (one lane per warp arrives).
__device__ __forceinline__ void mbar_arrive_if(uint64_t* bar, bool yes) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %1, 0;\n@p mbarrier.arrive.shared::cta.b64 _, [%0];\n}\n"
               ::"r"(smem_addr(bar)), "r"(int(yes)) : "memory");
}
// Until the phase of parity `parity` has completed.
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  asm volatile("{\n.reg .pred done;\nLMT_MBAR_WAIT:\n"
               "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
               "@!done bra LMT_MBAR_WAIT;\n}\n" ::"r"(smem_addr(bar)), "r"(parity) : "memory");
}

// TMA (cp.async.bulk.tensor): one thread copies a box of a 4-d tensor, described by a tensor map
// made on the host (a __grid_constant__ kernel parameter), into shared memory, swizzled as the
// map says; rows outside the tensor arrive as zeros; the bytes count down `bar`.
__device__ __forceinline__ void tma_load_4d(void* dst, const void* map, int c0, int c1, int c2,
                                            int c3, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, "
      "%3, %4, %5}], [%6];\n" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(smem_addr(bar))
      : "memory");
}

// TMA's store (cp.async.bulk.tensor, shared to global): one thread copies a box of rows from shared
// memory, laid out as `map` swizzles them, into the tensor `map` describes (rows outside it are
// left alone), in a bulk group. The writers of those bytes each make them visible to the copy
// first (fence_async_shared, then a barrier among them); the copying thread waits until the copy
// has read them (tma_store_wait_read) before the buffer is written again or the block ends.
__device__ __forceinline__ void fence_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
__device__ __forceinline__ void tma_store_4d(const void* map, const void* src, int c0, int c1,
                                             int c2, int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5}], [%1];\n"
      ::"l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(src)), "r"(c0), "r"(c1), "r"(c2),
      "r"(c3) : "memory");
}
__device__ __forceinline__ void tma_store_commit() {
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}
__device__ __forceinline__ void tma_store_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
}

// Bulk copies from shared memory into global memory (cp.async.bulk, TMA's 1-d form), each its own
// bulk group of the issuing thread: bulk_store copies `bytes`, bulk_reduce_add adds the fp32
// values element by element into what is there (in L2). bulk_wait_read<N> returns once all but the
// last N groups have read their shared memory, bulk_wait<N> once their writes are done. Global
// writes of other threads that the copy must follow are ordered before it by fence_async_global.
__device__ __forceinline__ void bulk_store(float* dst, const void* src, uint32_t bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n"
               "cp.async.bulk.commit_group;\n" ::"l"(dst), "r"(smem_addr(src)), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void bulk_reduce_add(float* dst, const void* src, uint32_t bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n"
               "cp.async.bulk.commit_group;\n" ::"l"(dst), "r"(smem_addr(src)), "r"(bytes)
               : "memory");
}
template <int N> __device__ __forceinline__ void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}
template <int N> __device__ __forceinline__ void bulk_wait() {
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
}
__device__ __forceinline__ void fence_async_global() {
  asm volatile("fence.proxy.async.global;\n" ::: "memory");
}
// A counter in global memory that blocks take turns by: read with acquire, bumped with release.
__device__ __forceinline__ uint32_t load_acquire(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void add_release(uint32_t* p, uint32_t v) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}

// Named barriers: ids 0 .. kNamedBarriers - 1, 0 being __syncthreads'. `threads` arrivals complete
// one; sync waits for it, arrive does not. The ids this code uses are NamedBarrier's.
constexpr int kNamedBarriers = 16;
constexpr int kMaxConsumers = 4;
enum NamedBarrier : int {
  kFirstTurnBarrier = 1,  // Turns: consumer c's turn is kFirstTurnBarrier + c
  kFirstGroupBarrier = kFirstTurnBarrier + kMaxConsumers,  // consumer c's own 128 threads
  kConsumersBarrier = kFirstGroupBarrier + kMaxConsumers,   // every consumer's threads
  kHelpersBarrier,  // specialize_warps' helpers (the producer warpgroup's warps 1 .. 3)
};
static_assert(kHelpersBarrier < kNamedBarriers);
__device__ __forceinline__ void bar_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void bar_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// A consumer warpgroup's rows staged by softmax.cuh's stage_rows, each a tile's 64 rows in
// DH / 64 panels of 64 columns (panel c `panel` elements after `tile`), stored to rows row0 on of
// head (b, h) through `map`: its 128 threads make their writes visible to TMA and meet at named
// barrier `bar`; then one of them stores every panel of every tile and (Wait) waits for the
// copies to read them; without Wait, that thread (threadIdx.x % 128 == 0) calls
// tma_store_wait_read itself before the tiles are written again or the block ends.
struct Staged {
  const CUtensorMap& map;
  const bf16* tile;
};
template <int DH, bool Wait = true, typename... Tiles>
__device__ __forceinline__ void store_staged(int bar, int panel, int64_t row0, int64_t b,
                                             int64_t h, const Tiles&... tiles) {
  fence_async_shared();
  bar_sync(bar, 128);
  if (threadIdx.x % 128 != 0) return;
  auto store = [&](const Staged& s) {
#pragma unroll
    for (int c = 0; c < DH / 64; ++c)
      tma_store_4d(&s.map, s.tile + c * panel, 64 * c, int(row0), int(h), int(b));
  };
  (store(tiles), ...);
  tma_store_commit();
  if constexpr (Wait) tma_store_wait_read();
}

// STAGES buffers of ROWS x DH bf16 (tile t in buffer t % STAGES), each with its full and free
// mbarriers (barriers: 2 STAGES of them). The producer thread fills, consumers wait and release.
// A persistent block numbers the tiles of all its items in one sequence (the barriers' phases
// follow it); at(n) is the ring seen from the sequence's tile n on, so that an item numbers its
// own tiles from 0.
template <int STAGES, int ROWS, int DH> struct Ring {
  static constexpr int kElems = ROWS * DH;
  static constexpr size_t kTileBytes = size_t(STAGES) * kElems * sizeof(bf16), kBarriers = 2 * STAGES;
  bf16* tiles;
  uint64_t* bars;  // full[STAGES], free[STAGES]
  int base = 0;

  __device__ Ring at(int n) const { return {tiles, bars, base + n}; }
  __device__ const bf16* tile(int64_t t) const { return tiles + ((base + t) % STAGES) * kElems; }
  __device__ void init(uint32_t consumer_warps) const {
    for (int i = 0; i < STAGES; ++i) mbar_init(bars + i, 1), mbar_init(bars + STAGES + i, consumer_warps);
  }
  // Tile t: rows row0 .. row0 + ROWS - 1 of (batch b, head h), once the buffer's previous tile has
  // been released.
  __device__ void fill(int64_t t, const CUtensorMap& map, int64_t row0, int64_t b, int64_t h) const {
    t += base;
    const int i = int(t % STAGES);
    const uint32_t reuse = uint32_t(t / STAGES);
    if (reuse > 0) mbar_wait(bars + STAGES + i, (reuse - 1) & 1);
    mbar_expect(bars + i, uint32_t(kElems * sizeof(bf16)));
#pragma unroll
    for (int c = 0; c < DH / 64; ++c)  // 64-column panels
      tma_load_4d(tiles + i * kElems + c * ROWS * 64, &map, 64 * c, int(row0), int(h), int(b),
                  bars + i);
  }
  __device__ void wait(int64_t t) const {
    t += base;
    mbar_wait(bars + t % STAGES, uint32_t(t / STAGES) & 1);
  }
  // One arrival per consumer warp (`signal`: its lane 0). Every consumer warp releases every tile,
  // those it does not read too (after waiting for them: an arrival before the fill would count
  // toward the buffer's previous release).
  __device__ void release(int64_t t, bool signal) const {
    mbar_arrive_if(bars + STAGES + (base + t) % STAGES, signal);
  }
};

// A block's dynamic shared memory for rings of types Rs, taken in that order by next(): first
// every ring's tiles (from a 1024-byte boundary), then every ring's barriers.
template <typename... Rs> struct SmemRings {
  static constexpr size_t kTileBytes = (Rs::kTileBytes + ...);
  // Where rest() begins, from the tiles' 1024-byte boundary.
  static constexpr size_t kRest = kTileBytes + (Rs::kBarriers + ...) * sizeof(uint64_t);
  static constexpr size_t kBytes = kRest + kSmemAlignSlack;
  char *tiles = reinterpret_cast<char*>(smem_1024()), *bars = tiles + kTileBytes;
  template <typename R> __device__ R next() {
    R r{reinterpret_cast<bf16*>(tiles), reinterpret_cast<uint64_t*>(bars)};
    tiles += R::kTileBytes, bars += R::kBarriers * sizeof(uint64_t);
    return r;
  }
  // What follows the last ring's barriers (a kernel that adds bytes of its own to kBytes).
  template <typename E> __device__ E* rest() const { return reinterpret_cast<E*>(bars); }
};

// Ping-pong among GROUPS consumers (ON): they take turns to issue their matmuls, in a ring. Named
// barrier kFirstTurnBarrier + c is consumer c's turn (its 128 threads wait, the previous
// consumer's 128 arrive), so a consumer passes only after taking: a second arrival before the
// next consumer's wait would complete the barrier without it. Every consumer takes the same
// number of turns; begin() (once a block) makes the first consumer 0's, end() (once a block)
// takes the last consumer's last pass. A persistent block's later items start with a take().
template <int GROUPS, bool ON> struct Turns {
  static_assert(GROUPS <= kMaxConsumers, "a turn barrier per consumer");
  static constexpr int kThreads = 2 * 128;  // the waiting consumer's and the passing one's
  int me;
  __device__ void take() const {
    if constexpr (ON) bar_sync(kFirstTurnBarrier + me, kThreads);
  }
  __device__ void pass() const {
    if constexpr (ON) bar_arrive(kFirstTurnBarrier + (me + 1) % GROUPS, kThreads);
  }
  __device__ void begin() const {
    if (me == GROUPS - 1) pass();
    take();
  }
  __device__ void end() const {
    if (me == 0) take();
  }
  // key_pipeline's advance(j) for a consumer with `mine` tiles: ready() (its waits for the tiles
  // of step j), then its turn; past its tiles, an empty turn.
  template <typename Ready> __device__ void advance(int64_t j, int64_t mine, Ready&& ready) const {
    if (j < mine) {
      ready();
      take();
    } else {
      take();
      pass();
    }
  }
  // The dQ kernel's release hook: its first scores (j = -1) pass their turn once done; later
  // turns pass once issued (issued()). The forward passes every turn once issued, the first
  // scores' too: 4-7 % faster at T 512 and 1024 (results/flash_tuning.md).
  __device__ void released(int64_t j) const {
    if (j < 0) pass();
  }
};

// A block of 128 (GROUPS + 1) threads after its barriers are initialized: thread 0 runs produce(),
// every thread of the producer warpgroup's warps 1 .. 3 runs helpers(threadIdx.x - 32) (0 .. 95),
// the rest of warp 0 leaves; consumer c runs consume(c). A thread starts with the registers
// that BLOCKS blocks an SM leave it (__launch_bounds__, in 8s); the producer warpgroup keeps 24,
// the consumers share the rest of the block's (at most 240 each), never more: setmaxnreg.inc would
// wait for them forever. c is read from lane 0 (a shuffle), so that the compiler knows it is one
// value a warp and keeps what derives from it, the consumer's operand descriptors, in uniform
// registers: the forward 3-12 % faster at T 8192 and 16384 (results/flash_tuning.md).
template <int GROUPS, int BLOCKS = 1, typename Produce, typename Consume, typename Helpers>
__device__ __forceinline__ void specialize_warps(Produce&& produce, Consume&& consume,
                                                 Helpers&& helpers) {
  constexpr int kThreads = 128 * (GROUPS + 1), kProducerRegs = 24;
  constexpr int kStart = 65536 / BLOCKS / kThreads / 8 * 8;
  constexpr int kShare = (kStart * (GROUPS + 1) - kProducerRegs) / GROUPS / 8 * 8;
  constexpr int kConsumerRegs = kShare > 240 ? 240 : kShare;
  if (threadIdx.x < 128) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kProducerRegs));
    if (threadIdx.x == 0) produce();
    else if (threadIdx.x >= 32) helpers(int(threadIdx.x) - 32);
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kConsumerRegs));
    consume(__shfl_sync(0xffffffffu, int(threadIdx.x / 128), 0) - 1);
  }
}
// specialize_warps with store(s) on thread 32 (s + 1) of the producer warpgroup for s < STORES
// (lane 0 of warps other than produce's), for a kernel whose stores wait on its consumers apart
// from its loads.
template <int GROUPS, int BLOCKS = 1, int STORES = 1, typename Produce, typename Consume,
          typename Store>
__device__ __forceinline__ void specialize(Produce&& produce, Consume&& consume, Store&& store) {
  static_assert(STORES <= 3, "a store thread in each of the producer warpgroup's other warps");
  specialize_warps<GROUPS, BLOCKS>(produce, consume, [&](int i) {
    if (i % 32 == 0 && i / 32 < STORES) store(i / 32);
  });
}
template <int GROUPS, int BLOCKS = 1, typename Produce, typename Consume>
__device__ __forceinline__ void specialize(Produce&& produce, Consume&& consume) {
  specialize<GROUPS, BLOCKS>(produce, consume, [](int) {});
}

// The backward's RoPE rows (flash.cuh's SharedRope): a block's rows r0 .. r0 + ROWS - 1 of p.rope
// (those before T) in shared memory, copied by the producer thread with one bulk copy (TMA's 1-d
// form, cp.async.bulk) as it starts and signalled on the staging's own mbarrier, which the
// consumers wait on before their stores: the copy runs under the block's matmuls and takes no
// thread's registers. Where p.rope is null neither side takes part. A kernel's staging lies
// `offset` bytes past its tiles' 1024-byte boundary, rounded up to 16: the mbarrier, then the
// rows 16 bytes on; kRopeStageBytes<DH, ROWS> with the rounding.
template <int DH, int ROWS>
constexpr size_t kRopeStageBytes = 16 + 16 + size_t(ROWS) * DH / 2 * sizeof(float2);
struct RopeStage {
  uint64_t* bar;
  float2* rows;
};
__device__ __forceinline__ RopeStage rope_stage(size_t offset) {
  char* at = reinterpret_cast<char*>(smem_1024()) + (offset + 15) / 16 * 16;
  return {reinterpret_cast<uint64_t*>(at), reinterpret_cast<float2*>(at + 16)};
}
// The bytes of p.rope's rows r0 .. r0 + ROWS - 1 (those before T), and their copy into `rows` in
// shared memory with one bulk copy whose bytes count down `bar` (announced by the caller).
template <int DH, int ROWS>
__device__ __forceinline__ uint32_t rope_rows_bytes(const Params& p, int64_t r0) {
  return uint32_t(min64(p.T - r0, ROWS) * DH / 2 * sizeof(float2));
}
template <int DH>
__device__ __forceinline__ void copy_rope_rows(const void* rows, const Params& p, int64_t r0,
                                               uint32_t bytes, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
      ::"r"(smem_addr(rows)), "l"(p.rope + r0 * DH / 2), "r"(bytes), "r"(smem_addr(bar))
      : "memory");
}
template <int DH, int ROWS>
__device__ __forceinline__ void stage_rope(const Params& p, int64_t r0, const RopeStage& s) {
  const uint32_t bytes = rope_rows_bytes<DH, ROWS>(p, r0);
  mbar_expect(s.bar, bytes);
  copy_rope_rows<DH>(s.rows, p, r0, bytes, s.bar);
}

// Consumer warp `warp` of warpgroup `group`'s rows of the staging (the block's rows 64 group +
// 16 warp on, the first at position r0) for its stores, once the copy has landed (no wait where
// p.rope is null: the stores then read no table).
template <int DH>
__device__ __forceinline__ SharedRope warp_rope(const Params& p, const RopeStage& s, int group,
                                                int warp, int64_t r0) {
  if (p.rope) mbar_wait(s.bar, 0);
  return {s.rows + (64 * group + 16 * warp) * DH / 2, r0, DH / 2};
}

// Host: one head's [T, dh] bf16 rows (row t at base + b batch + t row + h dh, element strides) as
// TMA reads them: a 4-d tensor (column, row, head, batch) of p's B x H heads in boxes of 64
// columns x `rows` rows, 128-byte swizzled. qkv_map: Q, K, V and their gradients' strides;
// o_map: O's and dO's.
CUtensorMap tensor_map(const Params& p, int64_t B, int64_t dh, const void* base, int64_t batch,
                       int64_t row, int rows);
// Host: a bf16 matrix of `rows` rows of `cols` (row r at base + r row_stride, elements) as TMA
// reads and writes it: boxes of 64 columns x `box_rows` rows, 128-byte swizzled, a 4-d tensor
// whose outer two dimensions are 1 (tma_load_4d's and tma_store_4d's last coordinates 0).
CUtensorMap matrix_map(const void* base, int64_t cols, int64_t rows, int64_t row_stride,
                       int box_rows);
inline CUtensorMap qkv_map(const Params& p, int64_t B, int64_t dh, const void* x, int rows) {
  return tensor_map(p, B, dh, x, p.qkv_batch, p.qkv_row, rows);
}
inline CUtensorMap o_map(const Params& p, int64_t B, int64_t dh, const void* x, int rows) {
  return tensor_map(p, B, dh, x, p.o_batch, p.o_row, rows);
}

// Host: launches a warp-specialized Kernel(p, maps...) (F: its kGroups consumer warpgroups and
// its SmemRings, Smem) on row tiles of `rows`, as launch_tiles does (Dependent too).
template <auto Kernel, typename F, bool Dependent = false, typename... Maps>
void launch_specialized(const Params& p, int64_t B, int rows, cudaStream_t s, const Maps&... maps) {
  launch_tiles<Kernel, Dependent>(p, B, rows, 128 * (F::kGroups + 1), F::Smem::kBytes, s, maps...);
}

// A kernel's work by items: `tiles` row tiles of each of `heads` (B * H) heads. Persistent, the
// blocks (one to three an SM, all at once) take units of one of two orders, and a block's next
// item's copies run under its current one's last tiles:
// - pairs: head after head, a unit being the items of rank k and tiles - 1 - k of one head (the
//   k-th longest and the k-th shortest when causal masking makes them differ; the kernel decides
//   which tiles those are; the middle item alone where tiles is odd), a block taking every
//   gridDim.x-th. A pair's work is the same for every k, so the blocks' totals are even, and the
//   blocks at work at once share few heads' tiles in L2. (Longest first, below, read K and V from
//   DRAM 2.8 times over at B 16, H 12, T 1024.)
// - longest first: an item a unit, every head's item of rank k before any of rank k + 1, dealt
//   to the blocks in rounds of gridDim.x, every other round in reverse (a snake), so that a block
//   that took one of a round's longest takes one of the next round's shortest. At xl's B 4, H 25,
//   T 512 in items of 128 queries (400 items of 1-4 key tiles, 132 blocks; the mean 7.6 key tiles
//   a block; flash.cuh's sm90_fwd_short_tiles, which took that shape before) no block then
//   takes more than 8, where every round dealt in order gave 4 blocks 10 and 32 blocks 9; at B 1,
//   H 16, T 4096 the largest total is the mean, 64, where it was 80. Where there are fewer than
//   two pairs a block (kPairsPerBlock), pairs leave many blocks with the largest total, all of
//   them still at work at the end (at xl's B 4, H 25, T 512: 200 pairs, 132 blocks, pairs'
//   forward 18 % longer in the model than longest first dealt in order; results/flash_tuning.md).
//   Where the items do not divide evenly, `tail` blocks (the last) may instead take one item more
//   than the others, all from the shortest end, round-robin, the others the snake's q rounds:
//   at xl's 4 x 512 in items of 128 queries, 132 blocks of 400 items left 4 blocks with four (8
//   key tiles) where the others had three (7 or 8), and each item costs about two key tiles'
//   time (make_work).
// Else a block an item, a head's items consecutive (they share its tiles in L2), as launch_tiles
// orders them.
struct Work {
  int heads, tiles;
  bool pairs;    // persistent: the first order above (the kernel's instance for it)
  int tail = 0;  // longest first: the blocks that take the shortest items (0: none)
  // A head's pairs (the middle item one of them where tiles is odd), and the units in all.
  __host__ __device__ int head_pairs() const { return (tiles + 1) / 2; }
  int64_t units() const { return int64_t(heads) * (pairs ? head_pairs() : tiles); }
};
constexpr int kPairsPerBlock = 2;
// Longest first: block `block` of `blocks`' items, the n-th i = item(n) (i % heads its head,
// i / heads its rank; -1 past its last): base + n stride, plus flip for odd n (the snake's reversed
// rounds).
struct LongestFirst {
  int base, stride, flip, end;
  __host__ __device__ int item(int n) const {
    const int i = base + n * stride + (n & 1) * flip;
    return i < end ? i : -1;
  }
};
__host__ __device__ inline LongestFirst longest_first(const Work& w, int block, int blocks) {
  const int items = w.heads * w.tiles, snake = blocks - w.tail;
  const int snaked = w.tail ? items - w.tail * (items / blocks + 1) : items;  // the snake's items
  if (block >= snake) return {snaked + block - snake, w.tail, 0, items};
  return {block, snake, snake - 1 - 2 * block, snaked};
}
// f(bh, k) for this block's items in order (Pairs: work.pairs's order, a kernel of its own). f, a
// consumer's whole item, is called from one place: each call site is a copy of its code, and
// copies cost instruction-cache misses (a loop calling it twice a pair, and once more for the
// other order, made the forward up to 55 % slower).
template <bool Persistent, bool Pairs, typename F>
__device__ __forceinline__ void for_each_item(const Work& w, F&& f) {
  if constexpr (Persistent && Pairs) {
    const int pairs = w.head_pairs();
#pragma unroll 1
    for (int n = 0;; ++n) {  // the block's n-th item: its n / 2-th pair's first or second
      const int u = blockIdx.x + n / 2 * gridDim.x;
      if (u >= w.heads * pairs) break;
      const int first = u % pairs, k = n % 2 ? w.tiles - 1 - first : first;
      if (n % 2 && k == first) continue;  // the middle item, taken alone
      f(u / pairs, k);
    }
  } else if constexpr (Persistent) {
    const LongestFirst mine = longest_first(w, int(blockIdx.x), int(gridDim.x));
#pragma unroll 1
    for (int n = 0;; ++n) {
      const int i = mine.item(n);
      if (i < 0) break;
      f(i % w.heads, i / w.heads);
    }
  } else {
    f(int(blockIdx.x) / w.tiles, int(blockIdx.x) % w.tiles);
  }
}
// Host: work's items, with the order that suits their number (persistent kernels). Longest
// first, with the tail deal where it leaves the longest block shorter by the short-T forward's
// fit (results/flash_tuning.md: on an H100 about 1.17 us an SM a key tile, 2.26 an item, fitted
// to blocks of two consumers, one an SM, and taken for the shortest entry's too, whose own fit
// picks the same deals at the shapes tried there); per_sm: the kernel's blocks an SM;
// key_tiles(k): the key tiles of an item of rank k.
template <typename KeyTiles>
Work make_work(int heads, int tiles, int per_sm, KeyTiles&& key_tiles) {
  constexpr double kKeyTileUs = 1.17, kItemUs = 2.26;
  Work w{heads, tiles, true};
  w.pairs = w.units() >= kPairsPerBlock * per_sm * sm_count();
  if (w.pairs) return w;
  const int blocks = int(min64(w.units(), per_sm * sm_count()));
  auto longest = [&](const Work& d) {
    double worst = 0;
    for (int b = 0; b < blocks; ++b) {
      const LongestFirst mine = longest_first(d, b, blocks);
      double t = 0;
      for (int n = 0, i; (i = mine.item(n)) >= 0; ++n)
        t += kKeyTileUs * double(key_tiles(i / heads)) + kItemUs;
      worst = t > worst ? t : worst;
    }
    return worst;
  };
  Work tail = w;
  tail.tail = heads * tiles % blocks;
  return tail.tail && longest(tail) < longest(w) ? tail : w;
}
// Host: launches Kernel(p, work, maps...) as launch_specialized does, on work's items: persistent,
// F::kBlocks blocks an SM (as many fit), fewer if there are fewer units; else a block per item.
template <auto Kernel, typename F, bool Persistent, typename... Maps>
void launch_items(const Params& p, const Work& work, cudaStream_t s, const Maps&... maps) {
  allow_smem<Kernel>(F::Smem::kBytes);
  const int64_t blocks = Persistent ? min64(work.units(), F::kBlocks * int64_t(sm_count()))
                                    : int64_t(work.heads) * work.tiles;
  Kernel<<<unsigned(blocks), 128 * (F::kGroups + 1), F::Smem::kBytes, s>>>(p, work, maps...);
  CUDA_LAUNCH_CHECK();
}

}  // namespace lmt::cuda::attn
