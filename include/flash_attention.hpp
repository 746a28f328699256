// FlashAttention-2 launchers (cuda/attention/): softmax attention computed tile by tile, never
// materialising the T x T scores.
//
//   S = scale * Q K^T (causal: key j visible to query i only if j <= i),  scale = 1 / sqrt(dh)
//   O = softmax(S) V,   L = logsumexp of each row of S (natural log, saved for backward)
// Backward by recomputation, with D = rowsum(dO * O):
//   P = exp(S - L),  dV = P^T dO,  dP = dO V^T,  dS = P * (dP - D),  dQ = scale dS K,  dK = scale dS^T Q
// One kernel computes dK and dV (each block owns a tile of keys), another dQ (each block owns a
// tile of queries): every output element is written once, no atomics, results are deterministic.
// On Hopper at head dims 64 and 128, causal, one kernel may take both (FlashShape::backward): its
// blocks' shares of dQ are added in a fixed order, so results are deterministic there too.
//
// Layout: B batches x H heads, T positions, head dim dh one of kFlashHeadDims. Row t of head h of
// batch b of Q is at q + b * qkv.batch + t * qkv.row + h * dh, likewise K, V, dQ, dK, dV (so the
// model passes pointers into its fused [B*T, 3*H*dh] QKV buffer); O and dO use `o`'s strides.
// L and D are [B, H, T] fp32. Strides and pointers must be 16-byte aligned for the element type.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "flash_head_dims.hpp"
#include "flash_scratch.hpp"

namespace lmt::cuda {

struct FlashShape {
  int64_t B, H, T, dh;
  bool causal = true;
  // true: q, k, v, o, do, dq, dk, dv stored in bf16, bf16 tensor cores (P and dS rounded to bf16,
  // fp32 accumulation, softmax in fp32); false: all stored in fp32, fp32 arithmetic throughout.
  bool bf16 = true;
  // Under bf16, Hopper's wgmma kernels (flash_sm90_*.cu) where the GPU (compute
  // capability 9.0) and head dim (64, 128) have them; false: the mma.sync kernels on any GPU (the
  // FlashAttention-2 baseline they are tested and timed against).
  bool wgmma = true;
  struct Strides {
    int64_t batch, row;
  } qkv, o;
  // Where the wgmma kernels run, causal, at head dims 64 and 128: the backward's dK/dV and dQ
  // kernels side by side (split) or one kernel for all three (fused; flash_scratch.hpp);
  // automatic: fused from kFlashFusedMinT. Elsewhere split whatever this says.
  enum class Backward { automatic, split, fused } backward = Backward::automatic;
};

bool flash_supports(int64_t head_dim);

// rope: null, or RoPE's table (cuda::rope_table): q arrives unrotated (k already rotated) and
// leaves rotated in place, as the backward reads it; on Hopper at short T the forward kernel
// rotates it as it loads it (flash_sm90_fwd.cu), else rope.cu's pass does first.
void flash_fwd(const FlashShape& s, void* q, const void* k, const void* v, void* o, float* lse,
               const void* rope, cudaStream_t stream);
// The backward's fp32 scratch for this problem on this GPU (flash_scratch.hpp).
FlashBwdScratch flash_bwd_scratch(const FlashShape& s);
// scratch: flash_bwd_scratch(s).floats() floats, 16-byte aligned. rope: null, or the table
// (cuda::rope_table) by which RoPE rotated q and k after the projection: dq and dk are then the
// gradients of the unrotated q and k (the inverse rotation applied as they are stored, in fp32
// before rounding, not a pass of its own).
void flash_bwd(const FlashShape& s, const void* q, const void* k, const void* v, const void* o,
               const void* dout, const float* lse, float* scratch, void* dq, void* dk, void* dv,
               const void* rope, cudaStream_t stream);

}  // namespace lmt::cuda
