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

void store(DType t, void* buf, size_t i, double v) {
  char* at = static_cast<char*>(buf) + i * dtype_size(t);
  if (t == DType::f64) {
    std::memcpy(at, &v, 8);
  } else if (t == DType::f32) {
    float f = float(v);
    std::memcpy(at, &f, 4);
  } else {
    uint16_t b = to_bf16(float(v));
    std::memcpy(at, &b, 2);
  }
}

double load(DType t, const void* buf, size_t i) {
  const char* at = static_cast<const char*>(buf) + i * dtype_size(t);
  if (t == DType::f64) {
    double d;
    std::memcpy(&d, at, 8);
    return d;
  }
  if (t == DType::f32) {
    float f;
    std::memcpy(&f, at, 4);
    return f;
  }
  uint16_t b;
  std::memcpy(&b, at, 2);
  return from_bf16(b);
}

size_t displacement(const Counts& counts, int rank) {
  size_t d = 0;
  for (int r = 0; r < rank; ++r) d += counts[size_t(r)];
  return d;
}

Counts displacements(const Counts& counts) {
  Counts d(counts.size());
  for (size_t r = 1; r < counts.size(); ++r) d[r] = d[r - 1] + counts[r - 1];
  return d;
}

}  // namespace lmt
