// Rotary position embedding, in place: pair i of head h at position t,
// (x[2i], x[2i+1]) rotated by angle t * theta^(-2i/dh) (inverse: by minus that angle).
// Element (b, t, h, c) lives at x[(b*T + t)*row_stride + h*dh + c]. The launcher's caller gives
// (cos, sin) of every (t, i) in a table computed once in fp64 (an fp32 angle at t ~ 1e3 is off by
// ~1e-4 rad), so the kernel is a pure streaming pass. x is fp32, or bf16 (read, rotated in fp32,
// rounded to nearest even).
#include <algorithm>

#include "common.cuh"
#include "cuda_kernels.hpp"

namespace lmt::cuda {
namespace {

// One block per row (b*T + t), its threads over the row's H * dh/2 pairs: 32-bit index maths
// (64-bit division per element made the kernel compute-bound).
template <typename E>
__global__ void rope_kernel(E* x, const float2* table, int T, int H, int dh, int64_t row_stride,
                            float sign) {
  const int64_t row = blockIdx.x;
  const int half = dh / 2;
  const float2* cs_row = table + int64_t(row % T) * half;
  E* xr = x + row * row_stride;
  for (int j = threadIdx.x; j < H * half; j += blockDim.x) {
    const int h = j / half, i = j - h * half;
    const float2 cs = cs_row[i];
    E* p = xr + h * dh + 2 * i;
    const float x0 = float(p[0]), x1 = float(p[1]), fs = sign * cs.y, fc = cs.x;
    p[0] = stored<E>(x0 * fc - x1 * fs);
    p[1] = stored<E>(x0 * fs + x1 * fc);
  }
}

}  // namespace

void rope(void* x, bool bf16, const void* table, int64_t B, int64_t T, int64_t H, int64_t dh,
          int64_t row_stride, bool inverse, cudaStream_t s) {
  LMT_ASSERT(T < (int64_t(1) << 31) && H * dh < (int64_t(1) << 31), "rope: a row too long");
  const auto* cs = static_cast<const float2*>(table);
  const float sign = inverse ? -1.0f : 1.0f;
  const int threads = int(std::min<int64_t>(256, (H * dh / 2 + 31) / 32 * 32));
  const unsigned rows = unsigned(B * T);
  if (bf16)
    rope_kernel<<<rows, threads, 0, s>>>(static_cast<__nv_bfloat16*>(x), cs, int(T), int(H),
                                         int(dh), row_stride, sign);
  else
    rope_kernel<<<rows, threads, 0, s>>>(static_cast<float*>(x), cs, int(T), int(H), int(dh),
                                         row_stride, sign);
  CUDA_LAUNCH_CHECK();
}

}  // namespace lmt::cuda
