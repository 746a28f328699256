// The FlashAttention backward's fp32 scratch (flash_bwd's `scratch`), CUDA-free so that plan mode
// counts it as the CUDA backend asks for it: D = rowsum(dO * O), [B, H, T]; and where the fused
// backward runs (cuda/attention/flash_sm90_bwd.cu: Hopper, bf16, causal, head dims 64 and 128),
// its sums of dQ and their turn counters.
#pragma once
#include <cstdint>

namespace lmt {

// The fused backward sums each query tile's dQ over the key blocks that see it in kFlashFusedChains
// fixed orders (key block j of query tile i with diagonal block d in order (d - j) %
// kFlashFusedChains), each order's sums [B, H, T rounded up to a query tile, dh] in fp32, added in
// order by a last pass. A query tile holds two 64 x 64 units of dQ (flash_fused_tile rows). Chosen
// by default from kFlashFusedMinT (flash_fused_bwd): on an H200 the backward 2-9 % faster than the
// two kernels at T 8192, 11 % slower at 4096 (head dim 64; level at 128), 12-14 % faster at
// 16384 and 32768 (head dim 64), 2-7 % (128); two orders faster than three or four
// (results/flash_tuning.md).
inline constexpr int64_t kFlashFusedChains = 2, kFlashFusedMinT = 8192;
constexpr int64_t flash_fused_tile(int64_t dh) { return 8192 / dh; }
// The problems the fused kernel can take (on Hopper, under bf16), and those it takes by default.
constexpr bool flash_fused_kernel(int64_t dh, bool causal) {
  return causal && (dh == 64 || dh == 128);
}
constexpr bool flash_fused_bwd(int64_t T, int64_t dh, bool causal) {
  return flash_fused_kernel(dh, causal) && T >= kFlashFusedMinT;
}

struct FlashBwdScratch {
  int64_t d;      // floats of D (rounded up to 32: the sums start 128-byte aligned)
  int64_t units;  // 64 x 64 units of dQ in each order's sums (0: not fused)
  int64_t sums() const { return kFlashFusedChains * units * 4096; }  // floats
  // 32-bit turn counters: a ticket, then one a unit and order.
  int64_t turns() const { return units > 0 ? 1 + kFlashFusedChains * units : 0; }
  int64_t floats() const { return d + sums() + turns(); }
};
constexpr FlashBwdScratch flash_bwd_scratch(int64_t B, int64_t H, int64_t T, int64_t dh,
                                            bool fused) {
  const int64_t tile = flash_fused_tile(dh);
  return {(B * H * T + 31) / 32 * 32, fused ? B * H * ((T + tile - 1) / tile) * 2 : 0};
}

}  // namespace lmt
