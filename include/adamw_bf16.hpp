// AdamW's element code where something it stores is bf16, one element at a time: the code that
// both the CPU reference (cpu::adamw_bf16, cpu::adamw_bf16_weights) and the CUDA kernels
// (cuda/adamw.cu) run, so that for the same inputs they write the same bits. Two cases:
//   bf16 moments   (optim.state_dtype = "bf16"): m and v read from bf16 (exact in T), updated in
//                  T registers as optimizer.hpp's rule says, the parameter moved with the
//                  unrounded values, m and v written back rounded stochastically
//   bf16 weights   (optim.master_weights = false): a weight with no fp32 master is read from its
//                  bf16 value, updated in T registers by the same rule, and written back rounded
//                  stochastically; its moments are stored as T or as bf16 (as above)
// Stochastic rounding: x goes to one of its two bf16 neighbours, up with probability equal to
// the distance from the lower one over their gap, so that the stored value is x on average. The
// random bits come from a counter-based hash of (run.seed, AdamW's step t, the element's index in
// the flat parameter buffer): no generator state to store, the same bits on every backend, every
// rank, every ZeRO-1 sharding and after a resume (docs/design.md says why stochastic rounding,
// and why not round-to-nearest). Of the hash's 64 bits m takes 0-15, v 16-31 and the weight
// 32-47: three independent draws.
//
// Every operation is one IEEE-rounded op, the multiply-adds explicit fmas (no compiler
// contraction can reorder them).
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "cpu_ops.hpp"

#ifdef __CUDACC__
#define LMT_HD __host__ __device__
#else
#define LMT_HD
#endif

namespace lmt {

// splitmix64's finaliser: a bijection of 64-bit words whose output bits each depend on every
// input bit.
LMT_HD inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
// The key of step t's rounding (computed once a step, on the host).
inline uint64_t rounding_key(uint64_t seed, int64_t t) {
  return mix64(mix64(seed + 0x9e3779b97f4a7c15ull) ^ uint64_t(t));
}
// 64 random bits for element `index` of the flat buffer under `key` (splitmix64 at that counter).
LMT_HD inline uint64_t rounding_bits(uint64_t key, uint64_t index) {
  return mix64(key + (index + 1) * 0x9e3779b97f4a7c15ull);
}

// The host's expression, or the GPU's in device code (which is only ever instantiated for float).
#ifdef __CUDA_ARCH__
#define LMT_HOST_OR_DEVICE(host, device) device
#else
#define LMT_HOST_OR_DEVICE(host, device) host
#endif
inline uint32_t host_float_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}
inline float host_bits_float(uint32_t u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}
LMT_HD inline uint32_t float_bits(float x) {
  return LMT_HOST_OR_DEVICE(host_float_bits(x), __float_as_uint(x));
}
LMT_HD inline float bf16_to_float(uint16_t b) {
  return LMT_HOST_OR_DEVICE(host_bits_float(uint32_t(b) << 16), __uint_as_float(uint32_t(b) << 16));
}
// x rounded to bf16 stochastically by the 16 random bits r: the 16 bits bf16 drops are added to
// r, the carry (with probability dropped / 2^16) rounds the magnitude up; so E[result] = x
// exactly (for finite x whose neighbours are finite). Infinities stay (their dropped bits are
// zero: no carry); NaN stays a quiet NaN (the sum could carry out of its payload). A select, not
// a branch: no divergent paths in the kernel that runs this three times an element.
LMT_HD inline uint16_t round_bf16_stochastic(float x, uint32_t r) {
  const uint32_t u = float_bits(x);
  const uint32_t rounded = (u + (r & 0xffffu)) >> 16, quiet_nan = (u >> 16) | 0x40u;
  return uint16_t((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}

// Each op rounded once, as IEEE says, on the host and on the GPU whatever nvcc's flags (the
// intrinsics are never contracted into fmas, nor approximated by fast division or square root).
template <typename T> LMT_HD inline T fma_rn(T a, T b, T c) {
  return LMT_HOST_OR_DEVICE(std::fma(a, b, c), __fmaf_rn(a, b, c));
}
template <typename T> LMT_HD inline T mul_rn(T a, T b) { return LMT_HOST_OR_DEVICE(a * b, __fmul_rn(a, b)); }
template <typename T> LMT_HD inline T div_rn(T a, T b) { return LMT_HOST_OR_DEVICE(a / b, __fdiv_rn(a, b)); }
template <typename T> LMT_HD inline T sqrt_rn(T a) { return LMT_HOST_OR_DEVICE(std::sqrt(a), __fsqrt_rn(a)); }

// One step's scalars in T, made on the host from the step (both backends use these bits).
template <typename T> struct AdamWBf16Scalars {
  T grad_scale, b1, one_minus_b1, b2, one_minus_b2, decay, step_size, inv_bc2_sqrt, eps;
  uint64_t key;  // rounding_key(s.seed, s.t)
};
template <typename T> AdamWBf16Scalars<T> adamw_bf16_scalars(const AdamWStep& s) {
  const double bc1 = 1.0 - std::pow(s.beta1, double(s.t)), bc2 = 1.0 - std::pow(s.beta2, double(s.t));
  return {T(s.grad_scale), T(s.beta1),       T(1.0 - s.beta1),    T(s.beta2),
          T(1.0 - s.beta2), T(1.0 - s.lr * s.weight_decay), T(s.lr / bc1), T(1.0 / std::sqrt(bc2)),
          T(s.eps),         rounding_key(s.seed, s.t)};
}

// The update of one element in T registers: m and v as read, updated in place (unrounded); the
// new p returned.
//   g *= grad_scale;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//   p = p (1 - lr wd) - lr/bc1 * m / (sqrt(v)/sqrt(bc2) + eps)
// sqrt(v)/sqrt(bc2) + eps is one fma by 1/sqrt(bc2) (the host's): a division fewer than the fp32
// kernel's torch-shaped expression, in a kernel whose instruction issue is near its limit.
template <typename T>
LMT_HD inline T adamw_rule(T p, T g, T& m, T& v, const AdamWBf16Scalars<T>& k) {
  const T gi = mul_rn(g, k.grad_scale);
  m = fma_rn(k.b1, m, mul_rn(k.one_minus_b1, gi));
  v = fma_rn(k.b2, v, mul_rn(mul_rn(k.one_minus_b2, gi), gi));
  const T denom = fma_rn(sqrt_rn(v), k.inv_bc2_sqrt, k.eps);
  const T update = div_rn(mul_rn(k.step_size, m), denom);
  return fma_rn(p, k.decay, -update);
}

// A moment as stored (M: T itself, or uint16_t bf16 bits) in T, and stored back from T: as it
// is, or rounded stochastically by the 16 random bits r.
template <typename T, typename M> LMT_HD inline T load_moment(M x) {
  if constexpr (std::is_same_v<M, uint16_t>) return T(bf16_to_float(x));
  else return x;
}
template <typename T, typename M> LMT_HD inline M store_moment(T x, uint32_t r) {
  if constexpr (std::is_same_v<M, uint16_t>) return round_bf16_stochastic(float(x), r);
  else return x;
}

// AdamW's rule on an element whose moments are stored as M (above): m and v loaded, updated and
// stored back (bf16 ones rounded by bits 0-15 of r for m, 16-31 for v); the new p returned.
template <typename T, typename M>
LMT_HD inline T adamw_stored_moments(T p, T g, M& m, M& v, uint64_t r,
                                     const AdamWBf16Scalars<T>& k) {
  T mi = load_moment<T>(m), vi = load_moment<T>(v);
  p = adamw_rule(p, g, mi, vi, k);
  m = store_moment<T, M>(mi, uint32_t(r));
  v = store_moment<T, M>(vi, uint32_t(r >> 16));
  return p;
}

// Element `index` (of the flat buffer) with bf16 moments: p, and m, v as bf16 bits, updated in
// place.
template <typename T>
LMT_HD inline T adamw_bf16_element(T p, T g, uint16_t& m, uint16_t& v, uint64_t index,
                                   const AdamWBf16Scalars<T>& k) {
  return adamw_stored_moments(p, g, m, v, rounding_bits(k.key, index), k);
}

// Element `index` of a weight without an fp32 master: w its bf16 bits, m and v as stored (M: T,
// or bf16 bits), all updated in place; w rounded by bits 32-47 of rounding_bits.
template <typename T, typename M>
LMT_HD inline void adamw_bf16_weight_element(uint16_t& w, T g, M& m, M& v, uint64_t index,
                                             const AdamWBf16Scalars<T>& k) {
  const uint64_t r = rounding_bits(k.key, index);
  const T p = adamw_stored_moments(T(bf16_to_float(w)), g, m, v, r, k);
  w = round_bf16_stochastic(float(p), uint32_t(r >> 32));
}

}  // namespace lmt
