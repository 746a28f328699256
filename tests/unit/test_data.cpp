// Token sources: files are read as NumPy writes them and refused when bad; the synthetic chain's
// stated entropy rate is what its samples show.
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <map>

#include "check.hpp"
#include "data.hpp"
#include "helpers.hpp"

using namespace lmt;

namespace {

std::string write_tokens(const lmt::test::TempDir& dir, const std::vector<uint16_t>& t) {
  std::string path = dir.file("tokens.bin");
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(t.data()),
                                              std::streamsize(t.size() * 2));
  return path;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("token file: windows are contiguous, targets are inputs shifted by one") {
  lmt::test::TempDir dir;
  std::vector<uint16_t> tokens(1001);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = uint16_t(i % 50000);
  auto src = open_token_file(write_tokens(dir, tokens), 50000, 17);
  Rng rng(lmt::test::rng()());
  std::vector<int32_t> in(3 * 17), tg(3 * 17);
  for (int rep = 0; rep < 50; ++rep) {
    src->sample(rng, 3, 17, in.data(), tg.data());
    for (int b = 0; b < 3; ++b)
      for (int t = 0; t < 17; ++t) {
        CHECK(tg[size_t(b * 17 + t)] == in[size_t(b * 17 + t)] + 1);
        if (t) CHECK(in[size_t(b * 17 + t)] == in[size_t(b * 17 + t - 1)] + 1);
        CHECK(tg[size_t(b * 17 + t)] <= 1000);
      }
  }
}

TEST_CASE("token file: bad files are refused with the reason") {
  lmt::test::TempDir dir;
  CHECK(error_of([&] { open_token_file(dir.path + "/missing.bin", 100, 8); }).find("cannot open") != std::string::npos);
  std::string odd = dir.file("odd.bin", "12345");
  CHECK(error_of([&] { open_token_file(odd, 100, 2); }).find("5 bytes is odd") != std::string::npos);
  std::string path = write_tokens(dir, {1, 2, 3, 4});
  CHECK(error_of([&] { open_token_file(path, 100, 4); }).find("expected at least model.context_length + 1 = 5") != std::string::npos);
  path = write_tokens(dir, {1, 2, 99, 4, 5, 6});
  CHECK(error_of([&] { open_token_file(path, 99, 3); }).find("token 99 at index 2") != std::string::npos);
  CHECK(error_of([&] { open_token_file(path, 100, 3); }).empty());
}

TEST_CASE("markov: the stated entropy rate is the conditional entropy its samples show") {
  const int64_t V = 16, K = 3, T = 4000;
  uint64_t seed = lmt::test::rng()();
  auto src = make_markov_source(V, K, seed);
  REQUIRE(src->loss_floor().has_value());
  double H = *src->loss_floor();
  CHECK(H > 0);
  CHECK(H < std::log(double(K)));
  // Plug-in estimate of H(next | current) from counts over 400k transitions.
  std::map<std::pair<int, int>, double> pair;
  std::map<int, double> first;
  std::vector<int32_t> in(static_cast<size_t>(T)), tg(static_cast<size_t>(T));
  Rng rng(seed, 7);
  for (int rep = 0; rep < 100; ++rep) {
    src->sample(rng, 1, T, in.data(), tg.data());
    for (int64_t t = 0; t < T; ++t) {
      pair[{in[size_t(t)], tg[size_t(t)]}] += 1;
      first[in[size_t(t)]] += 1;
    }
  }
  double n = 100.0 * T, est = 0;
  for (auto& [k, c] : pair) est -= c / n * std::log(c / first[k.first]);
  for (auto& [tok, c] : first) CHECK(c > 0);
  CHECK(pair.size() <= size_t(V * K));
  CHECK(est == doctest::Approx(H).epsilon(0.01));
}

TEST_CASE("markov: the same seed gives the same chain, another seed another one") {
  std::vector<int32_t> a(64), b(64), c(64), t(64);
  Rng r1(5), r2(5), r3(5);
  make_markov_source(50, 4, 1)->sample(r1, 1, 64, a.data(), t.data());
  make_markov_source(50, 4, 1)->sample(r2, 1, 64, b.data(), t.data());
  make_markov_source(50, 4, 2)->sample(r3, 1, 64, c.data(), t.data());
  CHECK(a == b);
  CHECK(a != c);
}
