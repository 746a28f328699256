// Rotary position embedding, in place: pair i of head h at position t,
// (x[2i], x[2i+1]) rotated by angle t * theta^(-2i/dh) (inverse: by minus that angle).
// Element (b, t, h, c) lives at x[(b*T + t)*row_stride + h*dh + c]. The launcher's caller gives
// (cos, sin) of every (t, i) in a table (rope_table: computed once in fp64, an fp32 angle at
// t ~ 1e3 being off by ~1e-4 rad), so the kernel is a pure streaming pass. x is fp32, or bf16
// (read, rotated in fp32, rounded to nearest even).
#include <algorithm>
#include <cmath>

#include "common.cuh"
#include "cuda_kernels.hpp"

namespace lmt::cuda {
namespace {

// One block per row (b*T + t), its threads over the row's H * dh/2 pairs, two at a time with
// Pair2 (one load4/store4 of four values: dh a multiple of 4 and the rows so aligned), else one:
// 32-bit index maths (64-bit division per element made the kernel compute-bound). At gpt2-small's
// 16 384 rows of 24 heads (q and k) it takes 37 us (ncu, an H100, base clock: DRAM at 63 % of its
// bandwidth, the issue slots busy 64 % of the time); eight rows a block, each thread's head and
// pair found once and its rows' positions counted, took as long with half the instructions
// (37.0 and 37.5 us against 37.3 and 37.4 in two calls, the issue slots busy 36 %), and so did
// loading four rows before storing any (38.5 us). With k alone to rotate (the Hopper forward
// rotates q), four rows a block, each thread loading its pairs of all four before storing any:
// gpt2-small's 12 calls at 16 x 1024 0.242 -> 0.212 ms, but xl's 48 at 4 x 512 0.253 -> 0.290
// (bench's kernel summary, one call on an H200, three and two runs each; the steps level).
template <typename E, bool Pair2>
__global__ void rope_kernel(E* x, const float2* table, int T, int H, int dh, int64_t row_stride,
                            float sign) {
  constexpr int P = Pair2 ? 2 : 1;
  const int64_t row = blockIdx.x;
  const int half = dh / 2;
  const float2* cs_row = table + int64_t(row % T) * half;
  E* xr = x + row * row_stride;
  for (int j = P * threadIdx.x; j < H * half; j += P * blockDim.x) {
    const int h = j / half, i = j - h * half;
    E* p = xr + h * dh + 2 * i;
    if constexpr (Pair2) {
      const float4 v = load4(p), cs = *reinterpret_cast<const float4*>(cs_row + i);
      const float2 r0 = rope_rotate(v.x, v.y, {cs.x, cs.y}, sign);
      const float2 r1 = rope_rotate(v.z, v.w, {cs.z, cs.w}, sign);
      store4(p, make_float4(r0.x, r0.y, r1.x, r1.y));
    } else {
      const float2 r = rope_rotate(float(p[0]), float(p[1]), cs_row[i], sign);
      p[0] = stored<E>(r.x), p[1] = stored<E>(r.y);
    }
  }
}

template <typename E>
void launch_rope(E* p, const float2* cs, int64_t rows, int64_t T, int64_t H, int64_t dh,
                 int64_t row_stride, float sign, cudaStream_t s) {
  const bool pair2 = dh % 4 == 0 && row_stride % 4 == 0 && aligned_for(p, 4 * sizeof(E));
  const int threads = int(std::min<int64_t>(256, (H * dh / (pair2 ? 4 : 2) + 31) / 32 * 32));
  if (pair2)
    rope_kernel<E, true><<<unsigned(rows), threads, 0, s>>>(p, cs, int(T), int(H), int(dh),
                                                            row_stride, sign);
  else
    rope_kernel<E, false><<<unsigned(rows), threads, 0, s>>>(p, cs, int(T), int(H), int(dh),
                                                             row_stride, sign);
  CUDA_LAUNCH_CHECK();
}

}  // namespace

std::vector<float> rope_table(int64_t T, int64_t dh, double theta) {
  std::vector<float> host(size_t(T * dh));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < dh / 2; ++i) {
      const double a = cpu::rope_angle(t, i, dh, theta);
      host[size_t(t * dh + 2 * i)] = float(std::cos(a));
      host[size_t(t * dh + 2 * i + 1)] = float(std::sin(a));
    }
  return host;
}

void rope(void* x, bool bf16, const void* table, int64_t B, int64_t T, int64_t H, int64_t dh,
          int64_t row_stride, bool inverse, cudaStream_t s) {
  LMT_ASSERT(T < (int64_t(1) << 31) && H * dh < (int64_t(1) << 31), "rope: a row too long");
  const auto* cs = static_cast<const float2*>(table);
  const float sign = inverse ? -1.0f : 1.0f;
  typed(x, bf16, [&](auto* xt) { launch_rope(xt, cs, B * T, T, H, dh, row_stride, sign, s); });
}

}  // namespace lmt::cuda
