// What every FlashAttention kernel reads (built by the launchers in flash_attention.cu from a
// FlashShape), the tile shapes per head dim ("traits"), and the per-head addressing.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace lmt::cuda::attn {

struct Params {
  const void *q, *k, *v, *o, *dout;
  void *out, *dq, *dk, *dv;
  float *lse, *D;
  int64_t H, T;
  int64_t qkv_batch, qkv_row, o_batch, o_row;
  float scale;       // 1 / sqrt(dh)
  float scale_log2;  // scale * log2(e): softmax runs on exp2
  bool causal;
};

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// Tile shapes of the tensor-core kernels. Each warp owns 16 rows of the block's tile (queries in
// forward and dQ, keys in dK/dV); the other side is streamed in tiles of kTile rows through two
// shared-memory buffers (the next tile is copied while the current one is used).
// Chosen so that the accumulators fit in registers without spilling: dK/dV holds two DH-wide
// accumulators per warp, hence its smaller streamed tile at DH 128 (see ptxas -v in the notes).
template <int DH> struct FwdTraits {
  static constexpr int kWarps = 4, kTile = 64;
};
template <int DH> struct DkdvTraits {
  static constexpr int kWarps = 4, kTile = DH >= 128 ? 32 : 64;
};
template <int DH> struct DqTraits {
  static constexpr int kWarps = 4, kTile = 64;
};

__host__ __device__ constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

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

// Key tiles of `tile` rows that queries q0 .. q0 + rows - 1 see.
__device__ __forceinline__ int64_t key_tiles(const Params& p, int64_t q0, int rows, int tile) {
  const int64_t all = ceil_div(p.T, tile);
  if (!p.causal) return all;
  const int64_t last = (q0 + rows - 1) / tile + 1;
  return last < all ? last : all;
}

// The kernels' launchers, by file: E is float or __nv_bfloat16 (storage); grid over B * H heads.
template <typename E> void fwd_tc(const Params& p, int64_t B, int64_t dh, cudaStream_t s);
template <typename E> void bwd_tc(const Params& p, int64_t B, int64_t dh, cudaStream_t s);
void fwd_fp32(const Params& p, int64_t B, int64_t dh, cudaStream_t s);
void bwd_fp32(const Params& p, int64_t B, int64_t dh, cudaStream_t s);
// D = rowsum(dO * O) per (b, h, t); with round_do, dO rounded to bf16 first (as the matmuls read it).
template <typename E> void bwd_rowsum(const Params& p, int64_t B, int64_t dh, bool round_do, cudaStream_t s);

}  // namespace lmt::cuda::attn
