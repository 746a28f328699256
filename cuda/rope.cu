// Rotary position embedding, in place: pair i of head h at position t,
// (x[2i], x[2i+1]) rotated by angle t * theta^(-2i/dh) (inverse: by minus that angle).
// Element (b, t, h, c) lives at x[(b*T + t)*row_stride + h*dh + c]. The launcher's caller gives
// (cos, sin) of every (t, i) in a table computed once in fp64 (an fp32 angle at t ~ 1e3 is off by
// ~1e-4 rad), so the kernel is a pure streaming pass.
#include "common.cuh"
#include "cuda_kernels.hpp"

namespace lmt::cuda {
namespace {

__global__ void rope_kernel(float* x, const float2* table, int64_t total, int64_t T, int64_t H,
                            int64_t dh, int64_t row_stride, float sign) {
  int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;  // (b*T + t, h, i)
  if (idx >= total) return;
  int64_t half = dh / 2, i = idx % half, h = (idx / half) % H, bt = idx / (half * H);
  float2 cs = table[(bt % T) * half + i];
  float* p = x + bt * row_stride + h * dh + 2 * i;
  float x0 = p[0], x1 = p[1], fs = sign * cs.y, fc = cs.x;
  p[0] = x0 * fc - x1 * fs;
  p[1] = x0 * fs + x1 * fc;
}

}  // namespace

void rope(float* x, const void* table, int64_t B, int64_t T, int64_t H, int64_t dh,
          int64_t row_stride, bool inverse, cudaStream_t s) {
  int64_t total = B * T * H * (dh / 2);
  rope_kernel<<<blocks_for(total, 256), 256, 0, s>>>(x, static_cast<const float2*>(table), total,
                                                      T, H, dh, row_stride, inverse ? -1.0f : 1.0f);
  CUDA_LAUNCH_CHECK();
}

}  // namespace lmt::cuda
