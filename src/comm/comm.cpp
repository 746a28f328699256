// What every communicator shares: element types and the layout of per-rank counts.
#include <cstring>

#include "comm.hpp"
#include "cpu_ops.hpp"

namespace lmt {

size_t dtype_size(DType t) { return t == DType::f64 ? 8 : t == DType::bf16 ? 2 : 4; }

const char* dtype_name(DType t) {
  return t == DType::f64 ? "fp64" : t == DType::bf16 ? "bf16" : "fp32";
}

uint16_t to_bf16(float x) {
  float r = round_bf16(x);
  uint32_t u;
  std::memcpy(&u, &r, 4);
  return uint16_t(u >> 16);
}

float from_bf16(uint16_t bits) {
  uint32_t u = uint32_t(bits) << 16;
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

size_t displacement(const Counts& counts, int rank) {
  size_t d = 0;
  for (int r = 0; r < rank; ++r) d += counts[size_t(r)];
  return d;
}

}  // namespace lmt
