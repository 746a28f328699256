// What every FlashAttention kernel reads (built by the launchers in flash_attention.cu from a
// FlashShape), the tile shapes per head dim ("traits"), and the per-head addressing.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <iterator>
#include <type_traits>
#include <utility>

#include "../common.cuh"
#include "cuda_check.hpp"
#include "flash_head_dims.hpp"
#include "flash_scratch.hpp"

namespace lmt::cuda::attn {

struct Params {
  const void *q, *k, *v, *o, *dout;
  void *out, *dq, *dk, *dv;
  float *lse, *D;
  // The fused backward's (flash_sm90_bwd.cu; flash_scratch.hpp): dQ's sums in kFlashFusedChains
  // orders of dq_units 64 x 64 units each, and its counters (a ticket, then a turn counter a unit
  // and order), zeroed before it runs.
  float* dq_sums;
  uint32_t* dq_turns;
  int64_t dq_units;
  // The (cos, sin) of each position and pair [T][dh / 2] by which RoPE rotates q and k, or null.
  // Backward: q and k were rotated; dQ and dK are stored rotated back (unrotate), the gradients
  // of the unrotated q and k. Forward (the persistent Hopper kernels, fwd_sm90_rotates): q
  // arrives unrotated (k rotated), and is rotated and stored back rotated.
  const float2* rope;
  int64_t H, T;
  int64_t qkv_batch, qkv_row, o_batch, o_row;
  float scale;       // 1 / sqrt(dh)
  float scale_log2;  // scale * log2(e): softmax runs on exp2
  bool causal;
};

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// Tile shapes: one value per kernel and head dim, each with the reason it was chosen; the
// timings behind the reasons are in results/flash_tuning.md. The sweeps measured head dims 64
// and 128; the smaller head dims and 80 take d 64's entry. A tuning build replaces one kernel's
// entry at every head dim: EXTRA_NVCCFLAGS="-DLMT_FLASH_DQ_WARPS=w -DLMT_FLASH_DQ_MTILES=m
// -DLMT_FLASH_DQ_TILE=t" (likewise FWD, DKDV; SM90_FWD_GROUPS / _TILE / _STAGES / _PINGPONG,
// SM90_DKDV_GROUPS / _TILE / _STAGES / _PINGPONG, SM90_DQ_GROUPS / _TILE / _PINGPONG): that is how
// dev/tune_flash.py tries candidates (one macro per number: nvcc splits a -D value at commas).

// The mma.sync kernels (flash_sm80_*.cu): warps per block, row tiles of 16 per warp (each warp
// owns 16 * mtiles rows: queries in forward and dQ, keys in dK/dV), and the streamed tile (rows
// of the other side, double-buffered through shared memory). More row tiles per warp reuse each
// fragment read from shared memory for more tensor-core work; the limit is registers (the
// accumulators, one DH-wide for O and dQ, two for dK and dV, plus the S/dS tiles).
struct MmaTiles {
  int warps, mtiles, tile;
};
constexpr MmaTiles fwd_tiles([[maybe_unused]] int dh) {
#ifdef LMT_FLASH_FWD_WARPS  // a tuning build
  return {LMT_FLASH_FWD_WARPS, LMT_FLASH_FWD_MTILES, LMT_FLASH_FWD_TILE};
#else
  return {4, 2, 64};  // fastest of seven at d 64 and at d 128, where it spills registers
#endif
}
constexpr MmaTiles dkdv_tiles([[maybe_unused]] int dh) {
#ifdef LMT_FLASH_DKDV_WARPS  // a tuning build
  return {LMT_FLASH_DKDV_WARPS, LMT_FLASH_DKDV_MTILES, LMT_FLASH_DKDV_TILE};
#else
  return dh >= 128 ? MmaTiles{4, 1, 64}   // fastest of four, 10% ahead of (8, 1, 32)
                   : MmaTiles{4, 2, 32};  // fastest of four, 3% ahead of (4, 1, 64)
#endif
}
constexpr MmaTiles dq_tiles([[maybe_unused]] int dh) {
#ifdef LMT_FLASH_DQ_WARPS  // a tuning build
  return {LMT_FLASH_DQ_WARPS, LMT_FLASH_DQ_MTILES, LMT_FLASH_DQ_TILE};
#else
  return dh >= 128 ? MmaTiles{4, 2, 32}   // fastest of four, 5% ahead of (4, 1, 64)
                   : MmaTiles{4, 2, 64};  // fastest of four, 5% ahead of (4, 1, 64)
#endif
}
template <MmaTiles Tiles> struct MmaTraits {
  static constexpr int kWarps = Tiles.warps, kMTiles = Tiles.mtiles, kTile = Tiles.tile;
};
template <int DH> using FwdTraits = MmaTraits<fwd_tiles(DH)>;
template <int DH> using DkdvTraits = MmaTraits<dkdv_tiles(DH)>;
template <int DH> using DqTraits = MmaTraits<dq_tiles(DH)>;

// The Hopper kernels (flash_sm90_*.cu, wgmma): warpgroups per block that compute (each owns 64
// rows: queries in forward and dQ, keys in dK/dV; the TMA-fed forward and dQ add a producer
// warpgroup) and the streamed tile's rows; both tiles' row counts are wgmma N sizes (64 or 128).
struct Sm90Tiles {
  int groups, tile;
  int blocks = 1;  // blocks an SM (with two, tma.cuh's specialize gives one consumer 232 registers)
};
constexpr Sm90Tiles sm90_fwd_tiles([[maybe_unused]] int dh) {
#ifdef LMT_FLASH_SM90_FWD_GROUPS  // a tuning build
  return {LMT_FLASH_SM90_FWD_GROUPS, LMT_FLASH_SM90_FWD_TILE};
#else
  return dh >= 128 ? Sm90Tiles{2, 128}   // fastest of four; three consumers spill (3.5x as long)
                   : Sm90Tiles{3, 128};  // fastest of four, 1% ahead of (2, 128)
#endif
}
constexpr Sm90Tiles sm90_dkdv_tiles([[maybe_unused]] int dh) {
#ifdef LMT_FLASH_SM90_DKDV_GROUPS  // a tuning build
  return {LMT_FLASH_SM90_DKDV_GROUPS, LMT_FLASH_SM90_DKDV_TILE};
#else
  return dh >= 128 ? Sm90Tiles{2, 64}    // fastest of four, 15% ahead of (1, 64); more spill
                   : Sm90Tiles{2, 128};  // fastest of four, 6% ahead of (3, 64)
#endif
}
constexpr Sm90Tiles sm90_dq_tiles([[maybe_unused]] int dh) {
#ifdef LMT_FLASH_SM90_DQ_GROUPS  // a tuning build
  return {LMT_FLASH_SM90_DQ_GROUPS, LMT_FLASH_SM90_DQ_TILE};
#else
  return dh >= 128 ? Sm90Tiles{2, 64}    // fastest of four; the others spill
                   : Sm90Tiles{2, 128};  // fastest of four, 9% ahead of (3, 64)
#endif
}
// Short sequences (T up to sm90_short_t) run a persistent forward (tma.cuh's Work): blocks of a
// few key tiles each, whose start and end would leave the tensor cores idle, follow one another
// in a block per SM, with their own tile entry and more buffers for Q (the next blocks').
constexpr int64_t sm90_short_t([[maybe_unused]] int dh) {
#ifdef LMT_FLASH_SM90_SHORT_T  // a tuning build
  return LMT_FLASH_SM90_SHORT_T;
#else
  return dh >= 128 ? 0      // 2% slower at T 2048, 10% at 4096
                   : 4096;  // 10-17% faster up to T 2048, 2% at 4096, no faster at 8192
#endif
}
constexpr Sm90Tiles sm90_fwd_short_tiles([[maybe_unused]] int dh) {
#ifdef LMT_FLASH_SM90_FWD_SHORT_GROUPS  // a tuning build
  return {LMT_FLASH_SM90_FWD_SHORT_GROUPS, LMT_FLASH_SM90_FWD_SHORT_TILE};
#else
  return {2, 128};  // (3, 128) spills once persistent: 25% longer; (2, 64): 3-18% longer
#endif
}
// The shortest (T up to sm90_fwd_shortest_t) take the persistent forward with an entry of their
// own: blocks of one consumer, three an SM (key tiles of 64, so that three fit in shared memory;
// 136 registers a consumer), so that one block's items start and end (its Q and first key tiles
// awaited, its last P V, its O stored) under the others' matmuls, where the two consumers of
// sm90_fwd_short_tiles share each item and start and end it together.
constexpr int64_t sm90_fwd_shortest_t([[maybe_unused]] int dh) {
#ifdef LMT_FLASH_SM90_FWD_SHORTEST_T  // a tuning build (it may name dh: "(dh>=128?0:2048)")
  return LMT_FLASH_SM90_FWD_SHORTEST_T;
#else
  return dh >= 128 ? 0 : 1024;  // 5-10 % faster at T 1024 (5 % slower at 2 x 12 heads, T 768);
                                // 3-14 % slower at T 2048 and 4096 (7 % faster at 2 x 16, T 3000)
#endif
}
constexpr Sm90Tiles sm90_fwd_shortest_tiles([[maybe_unused]] int dh) {
#ifdef LMT_FLASH_SM90_FWD_SHORTEST_GROUPS  // a tuning build
  return {LMT_FLASH_SM90_FWD_SHORTEST_GROUPS, LMT_FLASH_SM90_FWD_SHORTEST_TILE,
          LMT_FLASH_SM90_FWD_SHORTEST_BLOCKS};
#else
  return {1, 64, 3};  // (1, 128, 2) took 5-26 % longer at T 256 and 512 (flash_tuning.md)
#endif
}
// The backward at short T (up to sm90_bwd_short_t) has tile entries of its own: blocks of one
// consumer warpgroup, two an SM, so that one block's start and end (its barriers, first copies and
// last stores) run under the other's matmuls; a block of two consumers takes all of an SM's
// registers, so its start and end leave the tensor cores idle, and at short T a block has few
// tiles to amortise them over.
constexpr int64_t sm90_bwd_short_t([[maybe_unused]] int dh) {
#ifdef LMT_FLASH_SM90_BWD_SHORT_T  // a tuning build
  return LMT_FLASH_SM90_BWD_SHORT_T;
#else
  return dh >= 128 ? 0      // one consumer of 64 keys would spill at head dim 128
                   : 2048;  // 3-13 % faster up to T 2048, 1 % slower at 4096
#endif
}
// The dQ kernel's last heads start tile-major (every one's longest tile, then every one's second,
// ...) up to this T, so that the backward's last blocks to start are short ones. At the long-T
// entries the backward was 2-16 % faster at T 1024-8192, level at 16384 and 32768 (d 64), up to
// 3 % slower at 16384 (d 128).
constexpr int64_t sm90_dq_tail_t() { return 8192; }
constexpr Sm90Tiles sm90_dkdv_short_tiles([[maybe_unused]] int dh) {
#ifdef LMT_FLASH_SM90_DKDV_SHORT_GROUPS  // a tuning build
  return {LMT_FLASH_SM90_DKDV_SHORT_GROUPS, LMT_FLASH_SM90_DKDV_SHORT_TILE,
          LMT_FLASH_SM90_DKDV_SHORT_BLOCKS};
#else
  return {1, 128, 2};
#endif
}
constexpr Sm90Tiles sm90_dq_short_tiles([[maybe_unused]] int dh) {
#ifdef LMT_FLASH_SM90_DQ_SHORT_GROUPS  // a tuning build
  return {LMT_FLASH_SM90_DQ_SHORT_GROUPS, LMT_FLASH_SM90_DQ_SHORT_TILE,
          LMT_FLASH_SM90_DQ_SHORT_BLOCKS};
#else
  return {1, 64, 2};  // (1, 128) spills under two blocks' 232 registers
#endif
}
template <Sm90Tiles Tiles> struct Sm90Traits {
  static constexpr int kGroups = Tiles.groups, kTile = Tiles.tile, kBlocks = Tiles.blocks;
};
template <int DH> struct Sm90FwdTraits : Sm90Traits<sm90_fwd_tiles(DH)> {
#ifdef LMT_FLASH_SM90_FWD_STAGES
  static constexpr int kStages = LMT_FLASH_SM90_FWD_STAGES;
#else
  static constexpr int kStages = 2;  // K and V buffers each; three took 10% longer at d 64
#endif
#ifdef LMT_FLASH_SM90_FWD_PINGPONG
  static constexpr bool kPingPong = LMT_FLASH_SM90_FWD_PINGPONG;
#else
  static constexpr bool kPingPong = true;  // consumers take turns at the tensor cores: 7% faster
#endif
};
template <int DH, bool Short>
struct Sm90DkdvTraits : Sm90Traits<Short ? sm90_dkdv_short_tiles(DH) : sm90_dkdv_tiles(DH)> {
#ifdef LMT_FLASH_SM90_DKDV_STAGES
  static constexpr int kStages = LMT_FLASH_SM90_DKDV_STAGES;
#else
  static constexpr int kStages = 2;  // Q and dO buffers each; three were no faster
#endif
#ifdef LMT_FLASH_SM90_DKDV_PINGPONG
  static constexpr bool kPingPong = LMT_FLASH_SM90_DKDV_PINGPONG;
#else
  static constexpr bool kPingPong = true;  // consumers take turns: 2-7% faster
#endif
};
template <int DH, bool Short>
struct Sm90DqTraits : Sm90Traits<Short ? sm90_dq_short_tiles(DH) : sm90_dq_tiles(DH)> {
#ifdef LMT_FLASH_SM90_DQ_KSTAGES
  static constexpr int kKStages = LMT_FLASH_SM90_DQ_KSTAGES;
#else
  // The pipeline reads K_j and K_{j+1}, two more in flight: 4-6 % faster than one more at T 512
  // to 2048, 3-9 % at 8192 and 16384 (head dim 128); six were no faster.
  static constexpr int kKStages = 4;
#endif
#ifdef LMT_FLASH_SM90_DQ_VSTAGES
  static constexpr int kVStages = LMT_FLASH_SM90_DQ_VSTAGES;
#else
  static constexpr int kVStages = 2;  // three (with four K buffers) were slower
#endif
#ifdef LMT_FLASH_SM90_DQ_PINGPONG
  static constexpr bool kPingPong = LMT_FLASH_SM90_DQ_PINGPONG;
#else
  static constexpr bool kPingPong = true;  // as the forward's; off was 2.5% faster once, unchecked
#endif
  // The consumer's rows of Q and dO held in registers as the A operands of S and dP, read from
  // shared memory once: backward 3-4 % faster at T 8192 and 16384, head dim 128. At head dim 64
  // the long-T entry (two consumers of 64 queries against key tiles of 128) spills with them
  // (25 % slower), and the short-T entry was level (0-1 % at gpt2-small's and xl's shapes).
  static constexpr bool kRegisterA = DH >= 128;
};

// The head dims that have kernels (kFlashHeadDims). dispatch(dh, f) calls f with
// std::integral_constant<int, dh>: the one place a run-time head dim becomes a template argument.
template <int... Ds> struct HeadDimList {
  static constexpr bool has(int64_t dh) { return ((dh == Ds) || ...); }
  template <typename F> static void dispatch(int64_t dh, F&& f) {
    if (!((dh == Ds ? (f(std::integral_constant<int, Ds>{}), true) : false) || ...))
      LMT_FATAL("flash attention: no kernel for head dim " + std::to_string(dh));
  }
};
template <size_t... I>
HeadDimList<int(kFlashHeadDims[I])...> head_dim_list(std::index_sequence<I...>);
using HeadDims = decltype(head_dim_list(std::make_index_sequence<std::size(kFlashHeadDims)>{}));

// Lets Kernel use `bytes` of dynamic shared memory (more than the default 48 KB). Launchers call it
// before every launch; only the first call per kernel asks the driver.
template <auto Kernel> void allow_smem(size_t bytes) {
  static const bool done = [bytes] {
    CUDA_CHECK(cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
    return true;
  }();
  (void)done;
}

__host__ __device__ constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
__host__ __device__ constexpr int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

// Programmatic dependent launch (sm90; no-ops on earlier GPUs): a kernel launched after this one
// as its dependent (launch_kernel, `dependent`) starts once every block of this one has called
// allow_dependents (or ended), rather than once this one has ended; grid_dependency_wait returns
// once the kernel before has ended and its writes are visible (at once where the kernel was not
// launched as a dependent). A dependent reads nothing the kernel before writes, and writes nothing,
// until it has waited.
__device__ __forceinline__ void allow_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void grid_dependency_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// Launches kernel(args...) on s; `dependent`: as the programmatic dependent of the kernel before
// it on s (above).
template <typename... KernelArgs, typename... Args>
void launch_kernel(void (*kernel)(KernelArgs...), dim3 grid, int threads, size_t smem,
                   cudaStream_t s, bool dependent, const Args&... args) {
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = dependent;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = dim3(unsigned(threads));
  config.dynamicSmemBytes = smem;
  config.stream = s;
  config.attrs = &attr;
  config.numAttrs = 1;
  CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, args...));
}

// Launches Kernel(p, more...) on a grid of row tiles (`rows` of T each) x B * H heads; Dependent:
// as the kernel before's dependent (launch_kernel).
template <auto Kernel, bool Dependent = false, typename... More>
void launch_tiles(const Params& p, int64_t B, int rows, int threads, size_t smem, cudaStream_t s,
                  const More&... more) {
  allow_smem<Kernel>(smem);
  launch_kernel(Kernel, dim3(unsigned(ceil_div(p.T, rows)), unsigned(B * p.H)), threads, smem, s,
                Dependent, p, more...);
}

// Element (b, h, row 0, column 0) of a tensor with the given strides.
template <typename E>
__device__ __forceinline__ const E* head(const void* base, int64_t b, int64_t h, int64_t dh,
                                         int64_t batch_stride) {
  return static_cast<const E*>(base) + b * batch_stride + h * dh;
}
template <typename E>
__device__ __forceinline__ E* head(void* base, int64_t b, int64_t h, int64_t dh,
                                   int64_t batch_stride) {
  return static_cast<E*>(base) + b * batch_stride + h * dh;
}

// The query tile a block of a query-tiled kernel owns: causal blocks differ in work, and the
// longest (the last query tiles) start first.
__device__ __forceinline__ int64_t query_tile(const Params& p) {
  return p.causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
}

// A persistent kernel's (tma.cuh's Work) query tile of rank k among a head's `tiles`: causal,
// the longest (the last) first.
__host__ __device__ __forceinline__ int64_t query_tile(const Params& p, int64_t tiles, int64_t k) {
  return p.causal ? tiles - 1 - k : k;
}

// Key tiles of `tile` rows that queries q0 .. q0 + rows - 1 see.
__host__ __device__ __forceinline__ int64_t key_tiles(const Params& p, int64_t q0, int rows,
                                                     int tile) {
  const int64_t all = ceil_div(p.T, tile);
  if (!p.causal) return all;
  const int64_t last = (q0 + rows - 1) / tile + 1;
  return last < all ? last : all;
}

// Of those `tiles`, how many come first that no query from q0 on must mask (inside T, causal:
// before q0); the rest, at the diagonal or the end, need mask_tile.
__device__ __forceinline__ int64_t unmasked_key_tiles(const Params& p, int64_t q0, int64_t tiles,
                                                      int tile) {
  return min64(tiles, p.causal ? min64(p.T, q0 + 1) / tile : p.T / tile);
}
// For keys k0 .. k0 + keys - 1 (dK/dV), visiting query tiles `first` .. `tiles` - 1: the end of
// those that need mask_tile (causal: the ones at the diagonal; queries past T have L = +inf, hence
// P = 0, and need no mask).
__device__ __forceinline__ int64_t masked_query_tiles_end(const Params& p, int64_t k0, int keys,
                                                          int tile, int64_t first, int64_t tiles) {
  return p.causal ? min64(tiles, ceil_div(k0 + keys - 1, tile)) : first;
}

// Sets the scores that must not count to -inf in a warp's tile of raw scores s[MT][16 x N] (C
// fragments): rows r0 + 16 i + lane / 4 (+ 8), columns c0 + 8 n + 2 (lane % 4) (+ 1). A key at or
// past T, or (causal) after its query, is masked; keys are columns unless KeysAreRows. Callers
// branch on whether a tile needs this at all: inside the element loop the compiler turns the test
// into predicated code that then runs on every tile.
template <bool KeysAreRows, int MT, int N>
__device__ __forceinline__ void mask_tile(float (&s)[MT][N / 8][4], int r0, int c0, int T,
                                          bool causal, int lane) {
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int n = 0; n < N / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = r0 + 16 * i + lane / 4 + (e >= 2 ? 8 : 0), c = c0 + 8 * n + 2 * (lane % 4) + (e & 1);
        const int key = KeysAreRows ? r : c, query = KeysAreRows ? c : r;
        if (key >= T || (causal && key > query)) s[i][n][e] = -INFINITY;
      }
}

// Where dQ and dK are rotated back by RoPE (p.rope given), a store looks up the (cos, sin) of
// position t and pair `pair` through one of these: GlobalRope reads p.rope itself; SharedRope its
// rows from r0 on in shared memory (a block's, copied while the block computes by tma.cuh's
// stage_rope), so that no global load's latency falls at the block's end.
struct GlobalRope {
  const float2* table;
  int half;  // dh / 2
  __device__ float2 operator()(int64_t t, int pair) const { return table[t * half + pair]; }
};
struct SharedRope {
  const float2* rows;
  int64_t r0;
  int half;
  __device__ float2 operator()(int64_t t, int pair) const { return rows[(t - r0) * half + pair]; }
};
// (x0, x1) rotated back by the angle whose (cos, sin) is cs (rope.cu's rotation with the sign
// flipped): the gradient of the unrotated pair.
__device__ __forceinline__ float2 unrotate(float2 cs, float x0, float x1) {
  return {x0 * cs.x + x1 * cs.y, x1 * cs.x - x0 * cs.y};
}

// The kernels' launchers, by file; grid over B * H heads. fwd_tc / bwd_tc (mma.sync) and
// fwd_sm90 / bwd_sm90 read and write bf16 and multiply on bf16 tensor cores; fwd_fp32 / bwd_fp32
// read and write fp32 and compute in fp32.
void fwd_tc(const Params& p, int64_t B, int64_t dh, cudaStream_t s);
void bwd_tc(const Params& p, int64_t B, int64_t dh, cudaStream_t s);
void fwd_fp32(const Params& p, int64_t B, int64_t dh, cudaStream_t s);
void bwd_fp32(const Params& p, int64_t B, int64_t dh, cudaStream_t s);
// The Hopper kernels: head dims 64 and 128 (whole 64-column panels). sm90(dh): this process's GPU
// runs them (compute capability 9.0) and dh is one of theirs.
using Sm90HeadDims = HeadDimList<64, 128>;
void fwd_sm90(const Params& p, int64_t B, int64_t dh, cudaStream_t s);
// fwd_sm90 rotates q by p.rope at this head dim (one of Sm90HeadDims) and T.
bool fwd_sm90_rotates(int64_t dh, int64_t T);
// fused: one kernel for dK, dV and dQ's sums (causal, head dims 64 and 128; flash_scratch.hpp),
// then a pass for dQ; else the dK/dV and dQ kernels side by side.
void bwd_sm90(const Params& p, int64_t B, int64_t dh, bool fused, cudaStream_t s);
bool sm90(int64_t dh);
bool hopper();  // this process's GPU has compute capability 9.0 (the sm_90a kernels run)
// D = rowsum(dO * O) per (b, h, t); E: the storage, float or bf16.
template <typename E> void bwd_rowsum(const Params& p, int64_t B, int64_t dh, cudaStream_t s);

}  // namespace lmt::cuda::attn
