// The checkpoints' checksums (hash.hpp): hash_wide over fresh random bytes of odd lengths.
#include <doctest/doctest.h>

#include <random>
#include <vector>

#include "hash.hpp"
#include "../helpers.hpp"

using lmt::hash_wide;

TEST_CASE("hash_wide: every one-bit change of the bytes, in any lane or the tail, changes it, and "
          "so does a trailing zero byte") {
  for (size_t n : {size_t(1), size_t(31), size_t(32), size_t(33), size_t(97),
                   size_t(lmt::test::rng()() % 300 + 1)}) {
    INFO(n);
    std::vector<unsigned char> x(n + 1);
    for (auto& b : x) b = (unsigned char)(lmt::test::rng()() & 0xff);
    x[n] = 0;
    const uint64_t h = hash_wide(x.data(), n);
    CHECK(hash_wide(x.data(), n) == h);            // deterministic
    CHECK(hash_wide(x.data(), n + 1) != h);        // the length counts, not only the bytes
    for (size_t i = 0; i < n; ++i)
      for (int bit = 0; bit < 8; ++bit) {
        x[i] ^= (unsigned char)(1u << bit);
        const uint64_t changed = hash_wide(x.data(), n);
        x[i] ^= (unsigned char)(1u << bit);
        if (changed == h) FAIL_CHECK("byte " << i << ", bit " << bit << ": the same hash");
      }
  }
}
