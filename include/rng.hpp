// xoshiro256** seeded through splitmix64: small, fast, and its whole state is four words, so a
// checkpoint can store it and a resumed run draws exactly the numbers it would have drawn.
#pragma once
#include <array>
#include <cmath>
#include <cstdint>

namespace lmt {

class Rng {
 public:
  // Independent streams for the same seed: `stream` separates parameter init, each rank's data...
  explicit Rng(uint64_t seed = 0, uint64_t stream = 0) {
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + stream * 0xd1b54a32d192ed03ull + 1;
    for (auto& w : s_) w = splitmix64(x);
  }
  uint64_t next() {
    uint64_t result = rotl(s_[1] * 5, 7) * 9, t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }
  double uniform() { return double(next() >> 11) * 0x1.0p-53; }  // [0, 1)
  uint64_t below(uint64_t n) { return uint64_t(uniform() * double(n)); }  // [0, n)
  double normal() {  // Box-Muller, no cached spare: the state stays four words
    double u1 = 1.0 - uniform(), u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
  std::array<uint64_t, 4> state() const { return s_; }
  void set_state(const std::array<uint64_t, 4>& s) { s_ = s; }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  static uint64_t splitmix64(uint64_t& x) {
    uint64_t z = (x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  std::array<uint64_t, 4> s_;
};

}  // namespace lmt
