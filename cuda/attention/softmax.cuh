// The register-tile arithmetic that every FlashAttention tensor-core kernel shares, whatever
// issues its matmuls (mma.sync in flash_sm80_*.cu, wgmma in flash_sm90_*.cu): a
// thread holds MT row tiles of 16 rows x N columns as C fragments (mma.cuh), rows
// row + 16 i + lane / 4 (+ 8 for elements 2, 3), columns 8 n + 2 (lane % 4) (+ 1 for odd e).
#pragma once
#include <cmath>
#include <type_traits>

#include "flash.cuh"
#include "mma.cuh"
#include "wgmma.cuh"

namespace lmt::cuda::attn {

// One key tile of the forward's online softmax, in place: raw scores s (-inf where masked) become
// P = exp2(c (s - m')) with m' = max(m, rowmax s), c = scale * log2 e; l = l * alpha + rowsum P
// over this thread's columns (the quad is summed at the end), alpha = exp2(c (m - m')), by which
// the caller rescales O (rescale).
template <int MT, int BC>
__device__ __forceinline__ void softmax_tile(float (&s)[MT][BC / 8][4], float (&m)[MT][2],
                                             float (&l)[MT][2], float (&alpha)[MT][2],
                                             float scale_log2) {
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      float mx = m[i][hh];
#pragma unroll
      for (int n = 0; n < BC / 8; ++n) mx = fmaxf(mx, fmaxf(s[i][n][2 * hh], s[i][n][2 * hh + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      // A row with nothing visible yet keeps exponent base 0 (its scores are all -inf).
      const float base = mx == -INFINITY ? 0.0f : mx * scale_log2;
      alpha[i][hh] = fast_exp2(fmaf(m[i][hh], scale_log2, -base));
      m[i][hh] = mx;
      float sum = 0;
#pragma unroll
      for (int n = 0; n < BC / 8; ++n)
#pragma unroll
        for (int e = 2 * hh; e < 2 * hh + 2; ++e)
          sum += (s[i][n][e] = fast_exp2(fmaf(s[i][n][e], scale_log2, -base)));
      l[i][hh] = l[i][hh] * alpha[i][hh] + sum;
    }
}
template <int MT, int DH>
__device__ __forceinline__ void rescale(float (&o)[MT][DH / 8][4], const float (&alpha)[MT][2]) {
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int n = 0; n < DH / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[i][n][e] *= alpha[i][e / 2];
}

// acc * scale[i][hh] into rows t = row + 16 i + 8 hh < T of a [T, DH] tensor (row t at
// base + t * row_stride); with a rope lookup (flash.cuh: GlobalRope, SharedRope) each pair of
// columns rotated back by its angle (a thread holds whole pairs, columns 2c and 2c + 1; a row's
// (cos, sin) are read before its stores, which the compiler would not move loads past).
struct NoRope {};
template <int MT, int DH, typename Rope = NoRope>
__device__ __forceinline__ void store_rows(const Params& p, bf16* base, int64_t row_stride,
                                           int64_t row, const float (&acc)[MT][DH / 8][4],
                                           const float (&scale)[MT][2], int lane, Rope rope = {}) {
  constexpr bool kRope = !std::is_same_v<Rope, NoRope>;
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int64_t t = row + 16 * i + 8 * hh;
      if (t >= p.T) continue;
      float2 cs[DH / 8];
      if constexpr (kRope)
#pragma unroll
        for (int n = 0; n < DH / 8; ++n) cs[n] = rope(t, n * 4 + lane % 4);
#pragma unroll
      for (int n = 0; n < DH / 8; ++n) {
        float2 x{acc[i][n][2 * hh] * scale[i][hh], acc[i][n][2 * hh + 1] * scale[i][hh]};
        if constexpr (kRope) x = unrotate(cs[n], x.x, x.y);
        store2(base + t * row_stride + n * 8 + 2 * (lane % 4), x.x, x.y);
      }
    }
}
// The same for one warpgroup's 64 rows (MT 1), written instead into shared memory as a swizzled
// tile holds them (wgmma.cuh's `swizzled`; `tile` the first of the rows, in each of the DH / 64
// panels of 64 columns, panel c `panel` elements after panel 0), for a TMA store. Rows past T are
// staged unrotated (the table has no rows there); the store leaves them out.
template <int DH, typename Rope = NoRope>
__device__ __forceinline__ void stage_rows(bf16* tile, int panel, int64_t row, int64_t T,
                                           const float (&acc)[1][DH / 8][4],
                                           const float (&scale)[1][2], int lane, Rope rope = {}) {
  constexpr bool kRope = !std::is_same_v<Rope, NoRope>;
  const int warp = threadIdx.x / 32 % 4;
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const int r = 16 * warp + lane / 4 + 8 * hh;  // of the warpgroup's 64
    float2 cs[DH / 8];
    if constexpr (kRope)
#pragma unroll
      for (int n = 0; n < DH / 8; ++n)
        cs[n] = row + 8 * hh < T ? rope(row + 8 * hh, n * 4 + lane % 4) : float2{1.0f, 0.0f};
#pragma unroll
    for (int n = 0; n < DH / 8; ++n) {
      float2 x{acc[0][n][2 * hh] * scale[0][hh], acc[0][n][2 * hh + 1] * scale[0][hh]};
      if constexpr (kRope) x = unrotate(cs[n], x.x, x.y);
      const __nv_bfloat162 v = __floats2bfloat162_rn(x.x, x.y);
      bf16* const panel_n = tile + n / 8 * panel;
      *reinterpret_cast<__nv_bfloat162*>(panel_n + swizzled(r, n % 8, 2 * (lane % 4))) = v;
    }
  }
}
template <int MT> __device__ __forceinline__ void fill(float (&x)[MT][2], float v) {
#pragma unroll
  for (int i = 0; i < MT; ++i) x[i][0] = x[i][1] = v;
}

// The forward's end for one thread's rows: L = scale m + ln l into lse[bh, t], and 1 / l into
// inv (O's scale).
template <int MT>
__device__ __forceinline__ void store_lse(const Params& p, int64_t bh, int64_t row,
                                          const float (&m)[MT][2], const float (&l)[MT][2],
                                          int lane, float (&inv)[MT][2]) {
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      float sum = l[i][hh];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      inv[i][hh] = 1.0f / sum;
      const int64_t t = row + 16 * i + 8 * hh;
      if (t < p.T && lane % 4 == 0) p.lse[bh * p.T + t] = m[i][hh] * p.scale + log2f(sum) * kLn2;
    }
}
// The same, and O / l.
template <int MT, int DH>
__device__ __forceinline__ void store_fwd(const Params& p, int64_t b, int64_t h, int64_t row,
                                          const float (&o)[MT][DH / 8][4], const float (&m)[MT][2],
                                          const float (&l)[MT][2], int lane) {
  float inv[MT][2];
  store_lse<MT>(p, b * p.H + h, row, m, l, lane, inv);
  store_rows<MT, DH>(p, head<bf16>(p.out, b, h, DH, p.o_batch), p.o_row, row, o, inv, lane);
}

// The backward's statistics of one thread's query rows: L and D; 0 past T. The kernels take L
// times log2 e (to_log2), scaled where they first need it: scaled as it is loaded, the thread
// would wait there for the load to land.
template <int MT>
__device__ __forceinline__ void row_stats(float (&L)[MT][2], float (&D)[MT][2], const Params& p,
                                          int64_t bh, int64_t row) {
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int64_t t = row + 16 * i + 8 * hh;
      L[i][hh] = t < p.T ? p.lse[bh * p.T + t] : 0.0f;
      D[i][hh] = t < p.T ? p.D[bh * p.T + t] : 0.0f;
    }
}
template <int MT> __device__ __forceinline__ void to_log2(float (&L)[MT][2]) {
#pragma unroll
  for (int i = 0; i < MT; ++i) L[i][0] *= kLog2e, L[i][1] *= kLog2e;
}

// Query t's logsumexp L and D, as the dK/dV kernels load them; a query at or past T gets
// L = +inf, hence P = 0. They stage L times log2 e (so that P = exp2(S * scale_log2 - L)), scaled
// as it is stored: scaled as it is loaded, the thread would wait there for the load to land.
__device__ __forceinline__ void query_stats(const Params& p, int64_t bh, int64_t t, float& L,
                                            float& D) {
  L = t < p.T ? p.lse[bh * p.T + t] : INFINITY;
  D = t < p.T ? p.D[bh * p.T + t] : 0.0f;
}
// One tile of them, for queries q0 .. q0 + rows - 1.
template <int ROWS>
__device__ __forceinline__ void load_stats(float* sL, float* sD, const Params& p, int64_t bh,
                                           int64_t q0) {
  for (int i = threadIdx.x; i < ROWS; i += blockDim.x) {
    float L;
    query_stats(p, bh, q0 + i, L, sD[i]);
    sL[i] = L * kLog2e;
  }
}

// The dK/dV kernels' streaming of query tiles: Q, dO (next_tile_pair) and their L and D, tile i
// in buffer (i - first) % 2, which this returns once tile i is in shared memory.
template <int BR, int DH, int THREADS>
__device__ __forceinline__ int next_query_tile(bf16* sQ, bf16* sdO, float* sL, float* sD,
                                               const bf16* Q, const bf16* G, const Params& p,
                                               int64_t bh, int64_t i, int64_t first,
                                               int64_t tiles) {
  const int buf = int((i - first) & 1);
  next_tile_pair<BR, DH, THREADS>(
      sQ, sdO, Q, G, p.qkv_row, p.o_row, i, buf, tiles, p.T,
      [&](int nxt) { load_stats<BR>(sL + nxt * BR, sD + nxt * BR, p, bh, (i + 1) * BR); });
  return buf;
}

// Backward, in place: raw scores s become P = exp2(c s - L), and dP becomes dS = P (dP - D);
// stat(i, n, e) gives element (i, n, e)'s L or D: per row in the dQ kernels (queries are rows),
// per column in the dK/dV kernels (keys are rows).
template <int MT, int N, typename Stat>
__device__ __forceinline__ void probs(float (&s)[MT][N / 8][4], float scale_log2, Stat L) {
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int n = 0; n < N / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[i][n][e] = fast_exp2(fmaf(s[i][n][e], scale_log2, -L(i, n, e)));
}
template <int MT, int N, typename Stat>
__device__ __forceinline__ void dscores(float (&ds)[MT][N / 8][4], const float (&s)[MT][N / 8][4],
                                        Stat D) {
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int n = 0; n < N / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) ds[i][n][e] = s[i][n][e] * (ds[i][n][e] - D(i, n, e));
}

template <int MT> __device__ __forceinline__ auto by_row(const float (&x)[MT][2]) {
  return [&x](int i, int, int e) { return x[i][e / 2]; };
}
__device__ __forceinline__ auto by_col(const float* x, int lane) {
  return [x, lane](int, int n, int e) { return x[n * 8 + 2 * (lane % 4) + (e & 1)]; };
}

// The backward's outputs: dQ = scale dS K for one thread's query rows; dK = scale dS^T Q and
// dV = P^T dO for its key rows; where p.rope is given, dQ and dK rotated back by RoPE, looking
// the angles up through `rope` (flash.cuh's GlobalRope or SharedRope).
template <int MT, int DH, typename Rope>
__device__ __forceinline__ void store_dq(const Params& p, int64_t b, int64_t h, int64_t row,
                                         const float (&dq)[MT][DH / 8][4], int lane,
                                         Rope rope) {
  float scale[MT][2];
  fill(scale, p.scale);
  bf16* out = head<bf16>(p.dq, b, h, DH, p.qkv_batch);
  if (!p.rope) return store_rows<MT, DH>(p, out, p.qkv_row, row, dq, scale, lane);
  store_rows<MT, DH>(p, out, p.qkv_row, row, dq, scale, lane, rope);
}
template <int MT, int DH, typename Rope>
__device__ __forceinline__ void store_dkdv(const Params& p, int64_t b, int64_t h, int64_t key,
                                           const float (&dk)[MT][DH / 8][4],
                                           const float (&dv)[MT][DH / 8][4], int lane,
                                           Rope rope) {
  float scale[MT][2], one[MT][2];
  fill(scale, p.scale);
  fill(one, 1.0f);
  bf16* out = head<bf16>(p.dk, b, h, DH, p.qkv_batch);
  if (!p.rope) store_rows<MT, DH>(p, out, p.qkv_row, key, dk, scale, lane);
  else store_rows<MT, DH>(p, out, p.qkv_row, key, dk, scale, lane, rope);
  store_rows<MT, DH>(p, head<bf16>(p.dv, b, h, DH, p.qkv_batch), p.qkv_row, key, dv, one, lane);
}

}  // namespace lmt::cuda::attn
