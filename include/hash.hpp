// FNV-1a, 64 bit: the config hash ranks compare, and the checkpoints' checksum; hash_wide, FNV's
// step over 8-byte words in four lanes, for the checkpoints' tensors.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace lmt {

constexpr uint64_t kFnvPrime = 0x100000001b3ull;

inline uint64_t hash64(const void* data, size_t n, uint64_t h = 0xcbf29ce484222325ull) {
  auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * kFnvPrime;
  return h;
}

// Four lanes, lane l taking words l, l + 4, ... of each whole 32 bytes (h = (h ^ word) * prime,
// a bijection of h for each word: a changed word leaves its lane changed), the bytes past them
// into lane 0 one at a time, then the length and the lanes through hash64. Four independent
// multiplies a step where hash64 has one a byte: on an H200's host hash64 read a 1.48 GB
// checkpoint at about 0.65 GB/s.
inline uint64_t hash_wide(const void* data, size_t n) {
  auto* p = static_cast<const unsigned char*>(data);
  uint64_t h[4] = {hash64(nullptr, 0), hash64("1", 1), hash64("2", 1), hash64("3", 1)};
  size_t i = 0;
  for (; i + 32 <= n; i += 32)
    for (int l = 0; l < 4; ++l) {
      uint64_t w;
      std::memcpy(&w, p + i + 8 * l, 8);
      h[l] = (h[l] ^ w) * kFnvPrime;
    }
  for (; i < n; ++i) h[0] = (h[0] ^ p[i]) * kFnvPrime;
  return hash64(h, sizeof h, hash64(&n, sizeof n));
}

}  // namespace lmt
