// The precision policy on the CPU: matmul operands rounded as tensor cores would see them.
#include <cstring>

#include "check.hpp"
#include "cpu_ops.hpp"

namespace lmt {

AttentionImpl parse_attention(const std::string& name) {
  if (name == "naive") return AttentionImpl::naive;
  if (name == "flash") return AttentionImpl::flash;
  throw UsageError("unknown attention '" + name + "'");
}

// Keeps the top (32 - drop) bits of a float, rounding to nearest even; NaN and inf unchanged.
static float round_mantissa(float x, int drop) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7f800000u) == 0x7f800000u) return x;
  uint32_t half = (1u << (drop - 1)) - 1, lsb = (u >> drop) & 1u;
  u = (u + half + lsb) & ~((1u << drop) - 1);
  std::memcpy(&x, &u, 4);
  return x;
}

float round_tf32(float x) { return round_mantissa(x, 13); }
float round_bf16(float x) { return round_mantissa(x, 16); }

template <typename T> T round_to(Precision p, T x) {
  if (p == Precision::tf32) return T(round_tf32(float(x)));
  if (p == Precision::bf16) return T(round_bf16(float(x)));
  return x;
}
template float round_to(Precision, float);
template double round_to(Precision, double);

}  // namespace lmt
