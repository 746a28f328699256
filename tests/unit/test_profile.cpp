// The kernel summary's busy time (kernel_profile.hpp's busy_ms): the length of the union of the
// kernels' [start, end) intervals, whatever their order and overlaps; the idle time bench prints
// is the span less it. And the namespace that groups kernels (kernel_namespace).
#include <doctest/doctest.h>

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "kernel_profile.hpp"

using namespace lmt;
using Spans = std::vector<std::pair<uint64_t, uint64_t>>;

TEST_CASE("kernel summary: busy time is the union of the kernels' intervals") {
  CHECK(busy_ms({}) == 0.0);
  CHECK(busy_ms({{5'000'000, 7'000'000}}) == doctest::Approx(2.0));
  // Disjoint, out of order: the sum; a gap between them is not counted.
  CHECK(busy_ms({{9'000'000, 10'000'000}, {1'000'000, 3'000'000}}) == doctest::Approx(3.0));
  // Overlapping, nested, touching, and a zero-length record: each instant once.
  CHECK(busy_ms({{0, 4'000'000}, {1'000'000, 2'000'000}, {3'000'000, 6'000'000},
                 {6'000'000, 7'000'000}, {8'000'000, 8'000'000}}) == doctest::Approx(7.0));
  // Random intervals against a count of covered nanosecond slots.
  std::mt19937_64 rng(17);
  for (int trial = 0; trial < 20; ++trial) {
    Spans spans;
    std::vector<bool> covered(1000, false);
    for (int k = 0; k < 15; ++k) {
      const uint64_t b = rng() % 1000, e = b + rng() % (1000 - b + 1);
      spans.push_back({b, e});
      for (uint64_t t = b; t < e; ++t) covered[t] = true;
    }
    uint64_t n = 0;
    for (bool c : covered) n += c;
    CHECK(busy_ms(spans) == doctest::Approx(double(n) * 1e-6));
  }
}

TEST_CASE("kernel summary: a kernel's namespace, before any template arguments") {
  CHECK(kernel_namespace("attn::fwd_tma_kernel<64, 512, true>") == "attn");
  CHECK(kernel_namespace("attn::flash_bwd_rowsum_kernel<__nv_bfloat16, 8>") == "attn");
  CHECK(kernel_namespace("adamw_kernel") == "");
  CHECK(kernel_namespace("nvjet_sm90_tst_128x160_64x5_2x1_v_bz_TNT") == "");
  CHECK(kernel_namespace("cross_entropy_kernel<cute::bf16, 3>") == "");
  CHECK(kernel_namespace("a::b::c<int>") == "a");
}
