// Rotary position embedding, in place: pair i of head h at position t,
// (x[2i], x[2i+1]) rotated by angle t * theta^(-2i/dh) (inverse: by minus that angle).
// Element (b, t, h, c) lives at x[(b*T + t)*row_stride + h*dh + c]. Angles in fp64: at t ~ 1e3
// an fp32 angle is off by ~1e-4 rad.
#include "common.cuh"
#include "cuda_kernels.hpp"

namespace lmt::cuda {
namespace {

__global__ void rope_kernel(float* x, int64_t total, int64_t T, int64_t H, int64_t dh,
                            int64_t row_stride, double theta, float sign) {
  int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;  // (b*T + t, h, i)
  if (idx >= total) return;
  int64_t half = dh / 2, i = idx % half, h = (idx / half) % H, bt = idx / (half * H);
  double s, c;
  sincos(double(bt % T) * pow(theta, -2.0 * double(i) / double(dh)), &s, &c);
  float* p = x + bt * row_stride + h * dh + 2 * i;
  float x0 = p[0], x1 = p[1], fs = sign * float(s), fc = float(c);
  p[0] = x0 * fc - x1 * fs;
  p[1] = x0 * fs + x1 * fc;
}

}  // namespace

void rope(float* x, int64_t B, int64_t T, int64_t H, int64_t dh, int64_t row_stride,
          double theta, bool inverse, cudaStream_t s) {
  int64_t total = B * T * H * (dh / 2);
  rope_kernel<<<blocks_for(total, 256), 256, 0, s>>>(x, total, T, H, dh, row_stride, theta,
                                                      inverse ? -1.0f : 1.0f);
  CUDA_LAUNCH_CHECK();
}

}  // namespace lmt::cuda
