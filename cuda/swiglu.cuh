// SwiGLU's gate and its backward in fp32, shared by its elementwise kernels (elementwise.cu) and
// the backward fused with W2's matmul (swiglu_sm90.cu), so that both compute the same values:
//   g = silu(a) * b;  da = dg * b * sig(a) * (1 + a (1 - sig(a))),  db = dg * silu(a).
#pragma once
#include <cuda_runtime.h>

namespace lmt::cuda {

__device__ inline float gate(float a, float b) {
  float sig = 1.0f / (1.0f + expf(-a));
  return a * sig * b;
}

// Backward of gate at (a, b) for an incoming gradient dg: (da, db). sig from __expf (MUFU's ex2
// of -a log2(e), within 2 + 1.2 |a| ulp) and __fdividef (2 ulp; 0 past 2^126, the limit): a few
// instructions where expf and an IEEE division take many. In swiglu_sm90.cu this math is on the
// tensor cores' path, not under a DRAM-bound pass (docs/design.md: one call 251 us with the exact
// forms against 156 so). The results are rounded to bf16 (2^-8) under bf16, and in fp32 stay
// within the fp32 GPU tests' 2e-6 of the exact values.
__device__ inline float2 gate_bwd(float a, float b, float dg) {
  float sig = __fdividef(1.0f, 1.0f + __expf(-a));
  return {dg * b * sig * (1.0f + a * (1.0f - sig)), dg * a * sig};
}

}  // namespace lmt::cuda
