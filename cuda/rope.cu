// Rotary position embedding, in place: pair i of head h at position t,
// (x[2i], x[2i+1]) rotated by angle t * theta^(-2i/dh) (inverse: by minus that angle).
// Element (b, t, h, c) lives at x[(b*T + t)*row_stride + h*dh + c]. The launcher's caller gives
// (cos, sin) of every (t, i) in a table computed once in fp64 (an fp32 angle at t ~ 1e3 is off by
// ~1e-4 rad), so the kernel is a pure streaming pass. x is fp32, or bf16 (read, rotated in fp32,
// rounded to nearest even).
#include "common.cuh"
#include "cuda_kernels.hpp"

namespace lmt::cuda {
namespace {

template <typename E>
__global__ void rope_kernel(E* x, const float2* table, int64_t total, int64_t T, int64_t H,
                            int64_t dh, int64_t row_stride, float sign) {
  int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;  // (b*T + t, h, i)
  if (idx >= total) return;
  int64_t half = dh / 2, i = idx % half, h = (idx / half) % H, bt = idx / (half * H);
  float2 cs = table[(bt % T) * half + i];
  E* p = x + bt * row_stride + h * dh + 2 * i;
  float x0 = float(p[0]), x1 = float(p[1]), fs = sign * cs.y, fc = cs.x;
  p[0] = stored<E>(x0 * fc - x1 * fs);
  p[1] = stored<E>(x0 * fs + x1 * fc);
}

}  // namespace

void rope(void* x, bool bf16, const void* table, int64_t B, int64_t T, int64_t H, int64_t dh,
          int64_t row_stride, bool inverse, cudaStream_t s) {
  const int64_t total = B * T * H * (dh / 2);
  const auto* cs = static_cast<const float2*>(table);
  const float sign = inverse ? -1.0f : 1.0f;
  if (bf16)
    rope_kernel<<<blocks_for(total, 256), 256, 0, s>>>(static_cast<__nv_bfloat16*>(x), cs, total,
                                                        T, H, dh, row_stride, sign);
  else
    rope_kernel<<<blocks_for(total, 256), 256, 0, s>>>(static_cast<float*>(x), cs, total, T, H,
                                                        dh, row_stride, sign);
  CUDA_LAUNCH_CHECK();
}

}  // namespace lmt::cuda
