// Shared by the kernel files: launch checks and block-wide reductions.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>
#include <map>
#include <string>
#include <tuple>
#include <type_traits>

#include "check.hpp"
#include "cuda_check.hpp"

#define CUDA_LAUNCH_CHECK()                                                          \
  do {                                                                               \
    cudaError_t launch_rc_ = cudaGetLastError();                                     \
    if (launch_rc_ != cudaSuccess)                                                   \
      LMT_FATAL(std::string("kernel launch failed: ") + cudaGetErrorString(launch_rc_)); \
  } while (0)

namespace lmt::cuda {

inline int blocks_for(int64_t n, int threads) { return int((n + threads - 1) / threads); }
// The current device's SMs, asked once: a process drives one device.
inline int sm_count() {
  static const int n = [] {
    int dev = 0, count = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, dev));
    return count;
  }();
  return n;
}
// Blocks of `kernel` with `threads` threads and `smem` bytes of dynamic shared memory that one SM
// holds at once, asked of the runtime once per kernel and shape (launchers ask on every launch).
inline int blocks_per_sm(const void* kernel, int threads, size_t smem) {
  static std::map<std::tuple<const void*, int, size_t>, int> known;
  auto [it, fresh] = known.try_emplace({kernel, threads, smem}, 0);
  if (fresh)
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&it->second, kernel, threads, smem));
  return it->second;
}

// v stored as Out: fp32 as it is, bf16 rounded to nearest even.
template <typename Out> __device__ inline Out stored(float v) {
  if constexpr (std::is_same_v<Out, float>) return v;
  else return __float2bfloat16_rn(v);
}

// RoPE's rotation of the pair (x0, x1) by the angle whose (cos, sin) is cs, times sign (-1: the
// inverse). The products are rounded apart (no contraction into other FMAs), so that every kernel
// that rotates (rope.cu's pass, the Hopper forward's rotation of Q) gives the same bits.
__device__ __forceinline__ float2 rope_rotate(float x0, float x1, float2 cs, float sign) {
  const float fs = sign * cs.y, fc = cs.x;
  return {__fmaf_rn(x0, fc, -__fmul_rn(x1, fs)), __fmaf_rn(x0, fs, __fmul_rn(x1, fc))};
}

// Four consecutive values: one 16-byte (fp32) or 8-byte (bf16) load or store.
// The pointers must be aligned to that many bytes (aligned_for checks it on the host).
__device__ inline float4 load4(const float* p) { return *reinterpret_cast<const float4*>(p); }
__device__ inline float4 load4(const __nv_bfloat16* p) {
  const uint2 u = *reinterpret_cast<const uint2*>(p);
  const float2 lo = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u.x));
  const float2 hi = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u.y));
  return make_float4(lo.x, lo.y, hi.x, hi.y);
}
template <typename Out> __device__ inline void store4(Out* p, float4 v) {
  if constexpr (std::is_same_v<Out, float>) {
    *reinterpret_cast<float4*>(p) = v;
  } else {
    __nv_bfloat162 lo = __floats2bfloat162_rn(v.x, v.y), hi = __floats2bfloat162_rn(v.z, v.w);
    *reinterpret_cast<uint2*>(p) =
        make_uint2(*reinterpret_cast<uint32_t*>(&lo), *reinterpret_cast<uint32_t*>(&hi));
  }
}
// f called with p as the element type its storage flag names: float*, or __nv_bfloat16* with
// bf16 (const kept). Launchers dispatch each operand's type so, one call inside another.
template <typename F> auto typed(void* p, bool bf16, F&& f) {
  return bf16 ? f(static_cast<__nv_bfloat16*>(p)) : f(static_cast<float*>(p));
}
template <typename F> auto typed(const void* p, bool bf16, F&& f) {
  return bf16 ? f(static_cast<const __nv_bfloat16*>(p)) : f(static_cast<const float*>(p));
}
inline bool aligned_for(const void* p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}
// Stops with `message` unless every pointer is 16-byte aligned (launchers' precondition).
inline void check_aligned16(std::initializer_list<const void*> ptrs, const char* message) {
  for (const void* p : ptrs) LMT_ASSERT(aligned_for(p, 16), message);
}

// Sum (or max) over the warp; every lane gets the result.
template <bool Max> __device__ inline float warp_reduce(float v) {
  for (int o = 16; o > 0; o >>= 1) {
    float other = __shfl_xor_sync(0xffffffffu, v, o);
    v = Max ? fmaxf(v, other) : v + other;
  }
  return v;
}

// Sum (or max) over the block; every thread gets the result. blockDim.x is a multiple of 32,
// at most 1024; `scratch` is 32 floats of shared memory.
template <bool Max> __device__ inline float block_reduce(float v, float* scratch) {
  v = warp_reduce<Max>(v);
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  __syncthreads();  // scratch may still be read by a previous reduction
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : (Max ? -INFINITY : 0.0f);
  return warp_reduce<Max>(v);
}

}  // namespace lmt::cuda
