// Warp-level tensor-core building blocks for the FlashAttention kernels (sm_80+): bf16
// mma.sync m16n8k16 with fp32 accumulation, ldmatrix loads of its operands from shared memory,
// cp.async copies into shared memory, and the tile loader that copies bf16 rows in global
// memory into bf16 rows in shared memory.
//
// Fragment layouts (PTX ISA, "mma.m16n8k16"), lane = threadIdx.x % 32, g = lane / 4, c = lane % 4:
//   A (16 x 16, row-major)  a[0]: (g, 2c..2c+1)  a[1]: (g+8, 2c..)  a[2]: (g, 2c+8..)  a[3]: (g+8, 2c+8..)
//   B (16 x 8)              b[0]: (k = 2c..2c+1, n = g)             b[1]: (k = 2c+8.., n = g)
//   C (16 x 8, fp32)        c[0..1]: (g, 2c..2c+1)                  c[2..3]: (g+8, 2c..2c+1)
// Two C tiles side by side (n 0-7 and 8-15) hold exactly an A fragment's elements, which is how
// P = softmax(S) goes from one matmul's output to the next one's input without shared memory.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

namespace lmt::cuda::attn {

using bf16 = __nv_bfloat16;

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return uint32_t(__cvta_generic_to_shared(p));
}

// Four 8x8 bf16 matrices; lane l gives the address of row (l % 8) of matrix l / 8.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

// c += a b, bf16 operands, fp32 accumulators.
__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

// The A fragment (16 x 16) made of C tiles n and n + 1 (columns 16k .. 16k + 15), rounded to bf16.
__device__ __forceinline__ void c_to_a(uint32_t (&a)[4], const float (&lo)[4], const float (&hi)[4]) {
  a[0] = pack_bf16(lo[0], lo[1]);
  a[1] = pack_bf16(lo[2], lo[3]);
  a[2] = pack_bf16(hi[0], hi[1]);
  a[3] = pack_bf16(hi[2], hi[3]);
}

// Shared-memory tiles are rows of DH bf16 padded by 8 (16 bytes): the 8 rows one ldmatrix reads
// then start in different banks.
template <int DH> constexpr int kLd = DH + 8;

// A fragment of rows r0..r0+15, columns k0..k0+15 of a row-major tile.
template <int LD>
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const bf16* tile, int r0, int k0, int lane) {
  ldmatrix_x4(a, tile + (r0 + lane % 16) * LD + k0 + (lane / 16) * 8);
}
// B fragments for n-tiles n0..n0+7 and n0+8..n0+15, k0..k0+15, of a tile stored as [n][k]
// (B^T row-major, e.g. K for S = Q K^T): b[0], b[1] for the first n-tile, b[2], b[3] the second.
template <int LD>
__device__ __forceinline__ void load_bt(uint32_t (&b)[4], const bf16* tile, int n0, int k0, int lane) {
  ldmatrix_x4(b, tile + (n0 + lane % 8 + (lane / 16) * 8) * LD + k0 + ((lane / 8) % 2) * 8);
}
// The same for a tile stored as [k][n] (B row-major, e.g. V for O = P V).
template <int LD>
__device__ __forceinline__ void load_b(uint32_t (&b)[4], const bf16* tile, int k0, int n0, int lane) {
  ldmatrix_x4_trans(b, tile + (k0 + lane % 8 + ((lane / 8) % 2) * 8) * LD + n0 + (lane / 16) * 8);
}

// A warp's matmuls over MT row tiles of 16 (rows r0 .. r0 + 16 MT - 1): each B fragment read
// from shared memory feeds MT tensor-core instructions, which is what keeps these kernels from
// being bound by shared-memory bandwidth (an ldmatrix.x4 costs about as much as two mma.sync).
//
// acc[MT][16 x N] += A B, A rows r0.. of tile `a` ([.][K] row-major), B^T stored as [N][K].
template <int MT, int K, int N, int LD>
__device__ __forceinline__ void mma_abt(float (&acc)[MT][N / 8][4], const bf16* a, int r0,
                                        const bf16* bt, int lane) {
#pragma unroll
  for (int k = 0; k < K; k += 16) {
    uint32_t af[MT][4];
#pragma unroll
    for (int m = 0; m < MT; ++m) load_a<LD>(af[m], a, r0 + 16 * m, k, lane);
#pragma unroll
    for (int n = 0; n < N; n += 16) {
      uint32_t bf[4];
      load_bt<LD>(bf, bt, n, k, lane);
#pragma unroll
      for (int m = 0; m < MT; ++m) {
        mma(acc[m][n / 8], af[m], bf[0], bf[1]);
        mma(acc[m][n / 8 + 1], af[m], bf[2], bf[3]);
      }
    }
  }
}
// acc[MT][16 x N] += P B where P (MT x 16 x K) is in C-fragment registers and B is stored [K][N].
template <int MT, int K, int N, int LD>
__device__ __forceinline__ void mma_pb(float (&acc)[MT][N / 8][4], const float (&p)[MT][K / 8][4],
                                       const bf16* b, int lane) {
#pragma unroll
  for (int k = 0; k < K; k += 16) {
    uint32_t af[MT][4];
#pragma unroll
    for (int m = 0; m < MT; ++m) c_to_a(af[m], p[m][k / 8], p[m][k / 8 + 1]);
#pragma unroll
    for (int n = 0; n < N; n += 16) {
      uint32_t bf[4];
      load_b<LD>(bf, b, k, n, lane);
#pragma unroll
      for (int m = 0; m < MT; ++m) {
        mma(acc[m][n / 8], af[m], bf[0], bf[1]);
        mma(acc[m][n / 8 + 1], af[m], bf[2], bf[3]);
      }
    }
  }
}

template <int MT, int N> __device__ __forceinline__ void zero(float (&acc)[MT][N][4]) {
#pragma unroll
  for (int m = 0; m < MT; ++m)
#pragma unroll
    for (int i = 0; i < N; ++i) acc[m][i][0] = acc[m][i][1] = acc[m][i][2] = acc[m][i][3] = 0.0f;
}

// 2^x on the special-function unit (ex2.approx: about 2 ulp, flushes denormals to zero), the
// softmax's exponential; 2^-inf = 0.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ void cp_async_16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
               ::"r"(smem_addr(dst)), "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n"); }
template <int N> __device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// One 16-byte chunk of a bf16 tile: elements c .. c + 7 of row t of one head (row t at
// g + t * row_stride), zeros if t is at or past T, copied asynchronously (wait with
// cp_async_wait).
__device__ __forceinline__ void copy_chunk(bf16* dst, const bf16* g, int64_t t, int64_t T,
                                           int64_t row_stride, int c) {
  cp_async_16(dst, t < T ? g + t * row_stride + c : g, t < T);
}

// Rows row0 .. row0 + ROWS - 1 of one head into a padded bf16 tile (copy_chunk per 16 bytes).
template <int ROWS, int DH, int THREADS>
__device__ __forceinline__ void load_tile(bf16* tile, const bf16* g, int64_t row0, int64_t T,
                                          int64_t row_stride) {
  constexpr int kChunks = DH / 8;  // 8 elements = 16 bytes of bf16
  for (int i = threadIdx.x; i < ROWS * kChunks; i += THREADS) {
    const int r = i / kChunks, c = (i % kChunks) * 8;
    copy_chunk(tile + r * kLd<DH> + c, g, row0 + r, T, row_stride, c);
  }
}

// Double-buffered streaming of a pair of tiles (ROWS rows each of A and B, e.g. keys and values;
// buffer b at sA + b * ROWS * kLd<DH>, likewise sB), tile j in buffer `buf`: starts copying tile
// j + 1 into the other buffer if there is a next tile (then calls more(other buffer) for loads
// that go along with it), then waits until tile j is in shared memory for the whole block. The
// buffer being refilled must be free: every caller's loop body ends in a barrier after its last
// read.
template <int ROWS, int DH, int THREADS, typename More>
__device__ __forceinline__ void next_tile_pair(bf16* sA, bf16* sB, const bf16* A, const bf16* B,
                                               int64_t stride_a, int64_t stride_b, int64_t j,
                                               int buf, int64_t tiles, int64_t T, More&& more) {
  constexpr int kStride = ROWS * kLd<DH>;
  if (j + 1 < tiles) {
    load_tile<ROWS, DH, THREADS>(sA + (buf ^ 1) * kStride, A, (j + 1) * ROWS, T, stride_a);
    load_tile<ROWS, DH, THREADS>(sB + (buf ^ 1) * kStride, B, (j + 1) * ROWS, T, stride_b);
    cp_async_commit();
    more(buf ^ 1);
    cp_async_wait<1>();
  } else {
    cp_async_wait<0>();
  }
  __syncthreads();
}
// Key and value tiles of BC rows, tile j in buffer j % 2, which this returns.
template <int BC, int DH, int THREADS>
__device__ __forceinline__ int next_kv_tile(bf16* sK, bf16* sV, const bf16* K, const bf16* V,
                                            int64_t j, int64_t tiles, int64_t T,
                                            int64_t row_stride) {
  const int buf = int(j & 1);
  next_tile_pair<BC, DH, THREADS>(sK, sV, K, V, row_stride, row_stride, j, buf, tiles, T,
                                  [](int) {});
  return buf;
}

// Two adjacent output elements (row t, columns c, c + 1), rounded to bf16.
__device__ __forceinline__ void store2(bf16* p, float x, float y) {
  *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(x, y);
}

}  // namespace lmt::cuda::attn
