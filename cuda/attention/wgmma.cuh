// Hopper (sm_90a) building blocks for the FlashAttention kernels of flash_sm90_*.cu: warpgroup
// matrix multiplies (wgmma.mma_async, bf16 operands, fp32 accumulators) reading B, and A where it
// is not in registers, from shared memory through 64-bit matrix descriptors of 128-byte swizzled
// tiles, as TMA fills them (tma.cuh): ROWS rows of DH bf16 as DH / 64 panels of ROWS x 64, each
// panel row 128 bytes whose eight 16-byte chunks are permuted by XOR with (row % 8) (every group
// of 8 rows, 1024 bytes, starts 1024-byte aligned).
//
// A warpgroup is 4 consecutive warps (128 threads, the first warp index a multiple of 4); one
// wgmma computes a 64 x N tile, warp w of the group holding rows 16 w .. 16 w + 15. Per warp the
// accumulator d[N/8][4] has mma.sync's C layout (mma.cuh) for each 8-column block, and an A
// operand in registers has its A layout: the S -> P -> next-matmul hand-over of mma.cuh carries
// over unchanged (PTX ISA, "wgmma.mma_async": register fragments, shared memory layouts).
//
// Swizzled tiles serve both ways a matmul reads them: K-major (rows are M or N, the contiguous
// dimension is K, as K for S = Q K^T) and MN-major (rows are K, as V for O = P V). The swizzle
// keeps both the loader's 16-byte stores and the tensor cores' reads free of bank conflicts.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>
#include <type_traits>

#include "mma.cuh"

// The sm90 kernels' bodies exist only in the sm_90a pass of the build; other targets get a trap
// (the launchers run them only where sm90() holds).
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define LMT_SM90_DEVICE_CODE 1
#endif

namespace lmt::cuda::attn {

// Dynamic shared memory from its first 1024-byte boundary (swizzled tiles need it); launchers ask
// for kSmemAlignSlack bytes more than the tiles take.
constexpr size_t kSmemAlignSlack = 1024;
__device__ __forceinline__ bf16* smem_1024() {
  extern __shared__ __align__(16) unsigned char smem_dynamic[];
  return reinterpret_cast<bf16*>(smem_dynamic + ((1024 - (smem_addr(smem_dynamic) & 1023)) & 1023));
}

// Descriptor of a swizzled operand starting at p: `lbo` is the leading byte offset (MN-major: from
// one panel to the next; K-major: unused, 16), the stride byte offset is 1024 (from one group of
// 8 rows to the next), swizzle mode 1 (128 bytes).
__device__ __forceinline__ uint64_t smem_desc(const bf16* p, uint32_t lbo) {
  return uint64_t((smem_addr(p) & 0x3FFFF) >> 4) | uint64_t((lbo & 0x3FFFF) >> 4) << 16 |
         uint64_t(1024 >> 4) << 32 | uint64_t(1) << 62;
}
// The descriptor d with its start `elems` bf16 further on: one add to the start address field
// (bits 0-13, in 16 bytes), which never carries into the next (shared memory ends below 2^18
// bytes), the high word as it was. So a tile's descriptor is made once and each of a matmul's
// k-steps adds a constant, instead of each building its descriptor from the address (ncu counted
// about 11 instructions a wgmma for that in the dK/dV kernel, a fifth of all it issued).
__device__ __forceinline__ uint64_t desc_advance(uint64_t d, uint32_t elems) {
  const uint32_t lo = uint32_t(d) + elems * uint32_t(sizeof(bf16)) / 16;
  return (d & 0xFFFFFFFF00000000ull) | lo;
}
// K-major operand: rows row0 .. row0 + 63 (A) or all ROWS (B) of a tile, columns 16 ks .. 16 ks + 15.
// Within a panel the 16 columns are 32 bytes further along each row; the hardware applies the
// swizzle to the address it forms, so the start may sit inside a 128-byte row.
template <int ROWS>
__device__ __forceinline__ uint64_t kmajor_desc(const bf16* tile, int row0, int ks) {
  const int elems = (ks / 4) * ROWS * 64 + row0 * 64 + (ks % 4) * 16;
  return desc_advance(smem_desc(tile, 16), uint32_t(elems));
}
// MN-major operand (B = the tile as stored, K along rows): rows 16 ks .. 16 ks + 15, every column.
template <int ROWS> __device__ __forceinline__ uint64_t mnmajor_desc(const bf16* tile, int ks) {
  return desc_advance(smem_desc(tile, ROWS * 128), uint32_t(ks * 16 * 64));
}

// The element offset of row r, columns 8 j + c (c < 8), in a swizzled panel of 64 columns as the
// tiles above hold it (the row's 16-byte chunk j at chunk j ^ (r % 8)): where a thread writes its
// results for a TMA store, so that a warp's eight rows of one chunk fall in distinct banks.
__device__ __forceinline__ int swizzled(int r, int j, int c) {
  return r * 64 + (j ^ (r % 8)) * 8 + c;
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N> __device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
#define LMT_D4(j) "+f"(d[j][0]), "+f"(d[j][1]), "+f"(d[j][2]), "+f"(d[j][3])
#define LMT_D32 LMT_D4(0), LMT_D4(1), LMT_D4(2), LMT_D4(3), LMT_D4(4), LMT_D4(5), LMT_D4(6), LMT_D4(7)
#define LMT_D64 LMT_D32, LMT_D4(8), LMT_D4(9), LMT_D4(10), LMT_D4(11), LMT_D4(12), LMT_D4(13), \
                LMT_D4(14), LMT_D4(15)
#define LMT_R32                                                                                 \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define LMT_R64                                                                                 \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, "   \
  "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, "   \
  "%56, %57, %58, %59, %60, %61, %62, %63}"

// d (64 x N) = [d +] A B: A in shared memory K-major (TransA 0) or MN-major (1), B K-major
// (TransB 0) or MN-major (1). `accumulate` false starts from zero.
template <int N, int TransB = 0, int TransA = 0>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 8][4], uint64_t a, uint64_t b, bool accumulate) {
  static_assert(N == 64 || N == 128, "wgmma_ss: N 64 or 128");
  if constexpr (N == 64)
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " LMT_R32
                 ", %32, %33, p, 1, 1, %36, %35;\n}\n"
                 : LMT_D32
                 : "l"(a), "l"(b), "r"(int(accumulate)), "n"(TransB), "n"(TransA));
  else
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " LMT_R64
                 ", %64, %65, p, 1, 1, %68, %67;\n}\n"
                 : LMT_D64
                 : "l"(a), "l"(b), "r"(int(accumulate)), "n"(TransB), "n"(TransA));
}

// d (64 x N) = [d +] A B: A (64 x 16) in registers (mma.sync's A fragment per warp), B in shared
// memory, MN-major (TransB 1) or K-major (0). `accumulate` false starts from zero.
template <int N, int TransB = 1>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 8][4], const uint32_t (&a)[4], uint64_t b,
                                         bool accumulate = true) {
  static_assert(N == 64 || N == 128, "wgmma_rs: N 64 or 128");
  if constexpr (N == 64)
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " LMT_R32
                 ", {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
                 : LMT_D32
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(int(accumulate)),
                   "n"(TransB));
  else
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " LMT_R64
                 ", {%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n"
                 : LMT_D64
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(int(accumulate)),
                   "n"(TransB));
}
#undef LMT_D4
#undef LMT_D32
#undef LMT_D64
#undef LMT_R32
#undef LMT_R64

// acc (64 x N) = A B^T over K = DH: A rows row0 .. row0 + 63 of tile `a` (AR rows), B^T = all N
// rows of tile `bt`; both K-major. Issued, not waited for.
template <int N, int DH, int AR>
__device__ __forceinline__ void wgmma_abt(float (&acc)[N / 8][4], const bf16* a, int row0, const bf16* bt) {
#pragma unroll
  for (int ks = 0; ks < DH / 16; ++ks)
    wgmma_ss<N>(acc, kmajor_desc<AR>(a, row0, ks), kmajor_desc<N>(bt, 0, ks), ks > 0);
}
// The same with A in registers (load_a_rows' fragments): acc (64 x N) = A B^T over K = DH.
template <int N, int DH>
__device__ __forceinline__ void wgmma_abt(float (&acc)[N / 8][4], const uint32_t (&a)[DH / 16][4],
                                          const bf16* bt) {
#pragma unroll
  for (int ks = 0; ks < DH / 16; ++ks)
    wgmma_rs<N, 0>(acc, a[ks], kmajor_desc<N>(bt, 0, ks), ks > 0);
}
// Rows row0 .. row0 + 63 of a swizzled tile of ROWS rows and DH columns as A fragments, one per
// 16 columns (this warp's 16 rows each, ldmatrix: lane l reads row l % 16 of its warp's, columns
// 8 (l / 16) on of the 16), for wgmma_rs.
template <int ROWS, int DH>
__device__ __forceinline__ void load_a_rows(uint32_t (&a)[DH / 16][4], const bf16* tile, int row0,
                                            int warp, int lane) {
  const int r = row0 + 16 * warp + lane % 16;
#pragma unroll
  for (int ks = 0; ks < DH / 16; ++ks) {
    const int j = 2 * ks + lane / 16;  // the 8-column chunk
    ldmatrix_x4(a[ks], tile + (j / 8) * ROWS * 64 + swizzled(r, j % 8, 0));
  }
}
// P (64 x K, C fragments) rounded to bf16 A fragments, one per 16 columns.
template <int K>
__device__ __forceinline__ void to_a(uint32_t (&pa)[K / 16][4], const float (&p)[K / 8][4]) {
#pragma unroll
  for (int ks = 0; ks < K / 16; ++ks) c_to_a(pa[ks], p[2 * ks], p[2 * ks + 1]);
}
// acc (64 x N) += P B over K: P in registers (pa, which must stay untouched until the wgmma
// completes), B = tile `b` of K rows, MN-major. Issued, not waited for.
template <int N, int K>
__device__ __forceinline__ void wgmma_pb(float (&acc)[N / 8][4], const uint32_t (&pa)[K / 16][4],
                                         const bf16* b) {
#pragma unroll
  for (int ks = 0; ks < K / 16; ++ks) wgmma_rs<N>(acc, pa[ks], mnmajor_desc<K>(b, ks));
}

// acc (64 x 64) = A B over K: A^T = one 64-column panel of a tile of K rows (`at_panel`: the
// tile's rows are A's columns), B = one 64-column panel of another tile of K rows; both MN-major,
// panels as the tiles above lay them out (a tile's panel c at tile + c * K * 64). Issued, not
// waited for.
template <int K>
__device__ __forceinline__ void wgmma_atb(float (&acc)[8][4], const bf16* at_panel, const bf16* b_panel) {
#pragma unroll
  for (int ks = 0; ks < K / 16; ++ks)
    wgmma_ss<64, 1, 1>(acc, mnmajor_desc<K>(at_panel, ks), mnmajor_desc<K>(b_panel, ks), ks > 0);
}

// Pins registers a wgmma reads or writes at this point of the instruction stream: the compiler
// moves no access to them across it (it knows nothing of the asynchronous wgmma, nor of the wait
// that ends it). After each wait, on what the waited-for wgmma wrote.
template <int N> __device__ __forceinline__ void fence_regs(float (&d)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(d[i][e])::"memory");
}

// The one-tile software pipeline of the forward and dQ kernels over a warpgroup's key tiles
// 0 .. mine - 1 (of the block's `tiles`; from `clean` on they need the mask): while the tensor
// cores run tile j's second matmul, the warpgroup does the elementwise work of tile j + 1's
// scores, issued just before it. scores(t) issues and commits tile t's first matmuls; math(t,
// mask) turns them, once waited for, into the second matmul's operand; second(j) issues and
// commits tile j's second matmul; after(j, has_next) follows its wait (j = -1: the first tile's
// math, no second matmul yet);
// advance(j) streams the block's tiles and holds its barriers, once per tile for every
// warpgroup. The branches that pick a step are uniform per warpgroup and hold whole
// issue-to-wait sequences: a branch between a wgmma and its wait makes ptxas serialize every
// wgmma of the kernel (C7520).
template <typename Scores, typename Math, typename Second, typename After, typename Advance>
__device__ __forceinline__ void key_pipeline(int64_t tiles, int64_t mine, int64_t clean,
                                             Scores&& scores, Math&& math, Second&& second,
                                             After&& after, Advance&& advance) {
  using std::false_type, std::true_type;
  auto step = [&](int64_t j, auto mask_next, auto has_next) {
    advance(j);
    wgmma_fence();
    if constexpr (decltype(has_next)::value) scores(j + 1);
    second(j);
    if constexpr (decltype(has_next)::value) {
      wgmma_wait<1>();  // tile j + 1's scores; tile j's second matmul may still run
      math(j + 1, mask_next);
    }
    wgmma_wait<0>();
    after(j, has_next);
  };
  wgmma_fence();
  scores(0);
  wgmma_wait<0>();
  if (clean > 0) math(0, false_type{});
  else math(0, true_type{});
  after(int64_t(-1), true_type{});
  int64_t j = 0;
  for (; j + 1 < (clean < mine ? clean : mine); ++j) step(j, false_type{}, true_type{});
  for (; j + 1 < mine; ++j) step(j, true_type{}, true_type{});
  step(j, false_type{}, false_type{});
  for (++j; j < tiles; ++j) advance(j);
}

}  // namespace lmt::cuda::attn
