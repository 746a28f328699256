// The FlashAttention backward's fp32 scratch (flash_bwd's `scratch`), CUDA-free so that plan mode
// counts it as the CUDA backend asks for it: D = rowsum(dO * O), [B, H, T]; and where the fused
// backward runs (cuda/attention/flash_sm90_bwd.cu: Hopper, bf16, causal, head dim 64), its sums of
// dQ and their turn counters.
#pragma once
#include <cstdint>

namespace lmt {

// The fused backward sums each query tile's dQ over the key blocks that see it in kFlashFusedChains
// fixed orders (block j of query tile i in order (i - j) % kFlashFusedChains), each order's sums
// [B, H, T rounded up to kFlashFusedTile, dh] in fp32, added in order by a last pass. Chosen by
// default from kFlashFusedMinT (flash_fused_bwd): on an H100 level with the two kernels at T 8192,
// 20 % slower at 4096, 12-14 % faster at 16384 and 32768; two orders faster than three or four
// (results/flash_tuning.md).
inline constexpr int64_t kFlashFusedTile = 128, kFlashFusedChains = 2, kFlashFusedMinT = 16384;
constexpr bool flash_fused_bwd(int64_t T, int64_t dh, bool causal) {
  return causal && dh == 64 && T >= kFlashFusedMinT;
}

struct FlashBwdScratch {
  int64_t d, sums, turns;  // floats of D (rounded up to 32: the sums start 128-byte aligned),
                           // of the sums, and 32-bit turn counters (a ticket, one a unit and order)
  int64_t floats() const { return d + sums + turns; }
};
// The sums come in units of 64 rows x 64 columns (dh / 32 a query tile).
constexpr FlashBwdScratch flash_bwd_scratch(int64_t B, int64_t H, int64_t T, int64_t dh, bool fused) {
  const int64_t d = (B * H * T + 31) / 32 * 32;
  if (!fused) return {d, 0, 0};
  const int64_t units = B * H * ((T + kFlashFusedTile - 1) / kFlashFusedTile) * (dh / 32);
  return {d, kFlashFusedChains * units * 4096, 1 + kFlashFusedChains * units};
}

}  // namespace lmt
