// Token sources: files are read as NumPy writes them and refused when bad; the synthetic chain's
// stated entropy rate is what its samples show.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <map>

#include "check.hpp"
#include "data.hpp"
#include "../helpers.hpp"

using namespace lmt;

namespace {

std::string write_tokens(const lmt::test::TempDir& dir, const std::vector<uint16_t>& t) {
  std::string path = dir.file("tokens.bin");
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(t.data()),
                                              std::streamsize(t.size() * 2));
  return path;
}

// A NumPy .npy file as np.save writes it (format 1.0, header padded so the data starts at a
// multiple of 64), with the header's dict given as text and the data as bytes.
std::string write_npy(const lmt::test::TempDir& dir, const std::string& name,
                      const std::string& dict, const std::string& data) {
  std::string header = dict;
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string file = std::string("\x93NUMPY\x01\x00", 8);
  file += char(header.size() & 0xff), file += char(header.size() >> 8);
  return dir.file(name, file + header + data);
}
template <typename E> std::string bytes_of(const std::vector<E>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(E));
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

TEST_CASE("token file: NumPy .npy files of uint16 and int32 give the raw file's windows") {
  lmt::test::TempDir dir;
  std::vector<uint16_t> raw(777);
  for (auto& t : raw) t = uint16_t(lmt::test::rng()() % 1000);
  const std::vector<int32_t> wide(raw.begin(), raw.end());
  auto a = open_token_file(write_tokens(dir, raw), 1000, 31);
  auto b = open_token_file(write_npy(dir, "u2.npy", "{'descr': '<u2', 'fortran_order': False, "
                                     "'shape': (777,), }", bytes_of(raw)), 1000, 31);
  auto c = open_token_file(write_npy(dir, "i4.npy", "{'descr': '<i4', 'fortran_order': False, "
                                     "'shape': (777,), }", bytes_of(wide)), 1000, 31);
  CHECK(b->describe().find("777 tokens, uint16") != std::string::npos);
  CHECK(c->describe().find("777 tokens, int32") != std::string::npos);
  const uint64_t seed = lmt::test::rng()();
  Rng ra(seed), rb(seed), rc(seed);
  std::vector<int32_t> in[3], tg[3];
  for (auto* v : {in, tg})
    for (int k = 0; k < 3; ++k) v[k].resize(4 * 31);
  for (int rep = 0; rep < 20; ++rep) {
    a->sample(ra, 4, 31, in[0].data(), tg[0].data());
    b->sample(rb, 4, 31, in[1].data(), tg[1].data());
    c->sample(rc, 4, 31, in[2].data(), tg[2].data());
    CHECK(in[1] == in[0]);
    CHECK(tg[1] == tg[0]);
    CHECK(in[2] == in[0]);
    CHECK(tg[2] == tg[0]);
  }
}

TEST_CASE("token file: bad .npy files are refused with the reason") {
  lmt::test::TempDir dir;
  const std::string ok = bytes_of(std::vector<int32_t>{1, 2, 3, 4, 5, 6});
  auto npy = [&](const std::string& dict, const std::string& data) {
    return error_of([&] { open_token_file(write_npy(dir, "x.npy", dict, data), 100, 3); });
  };
  CHECK(npy("{'descr': '<i4', 'fortran_order': False, 'shape': (6,), }", ok).empty());
  CHECK(npy("{'descr': '<f4', 'fortran_order': False, 'shape': (6,), }", ok)
            .find("its dtype is '<f4': expected uint16 ('<u2') or int32 ('<i4')") !=
        std::string::npos);
  CHECK(npy("{'descr': '<i4', 'fortran_order': False, 'shape': (2, 3), }", ok)
            .find("its shape is (2, 3): expected one dimension") != std::string::npos);
  CHECK(npy("{'descr': '<i4', 'fortran_order': True, 'shape': (6,), }", ok)
            .find("Fortran order") != std::string::npos);
  CHECK(npy("{'descr': '<i4', 'fortran_order': False, 'shape': (7,), }", ok)
            .find("truncated: 24 bytes of data for 7 tokens") != std::string::npos);
  // Counts whose byte size overflows 64 bits, and negative ones, are refused, never read.
  CHECK(npy("{'descr': '<i4', 'fortran_order': False, 'shape': (4611686018427387910,), }", ok)
            .find("truncated: 24 bytes of data for 4611686018427387910 tokens") !=
        std::string::npos);
  CHECK(npy("{'descr': '<i4', 'fortran_order': False, 'shape': (-5,), }", ok)
            .find("its shape is (-5,): expected one dimension") != std::string::npos);
  CHECK(npy("{'descr': '<i4', 'fortran_order': False, 'shape': (6,), }",
            bytes_of(std::vector<int32_t>{1, 2, -5, 4, 5, 6}))
            .find("token -5 at index 2 is not in [0, model.vocab_size = 100)") != std::string::npos);
  CHECK(npy("{'descr': '<i4', 'fortran_order': False, 'shape': (6,), }",
            bytes_of(std::vector<int32_t>{1, 2, 3, 4, 100, 6}))
            .find("token 100 at index 4") != std::string::npos);
  CHECK(npy("{'descr': '<i4', 'fortran_order': False, 'shape': (3,), }",
            bytes_of(std::vector<int32_t>{1, 2, 3}))
            .find("3 tokens, expected at least model.context_length + 1 = 4") != std::string::npos);
  CHECK(error_of([&] { open_token_file(dir.file("short.npy", "\x93NUMPY\x01"), 100, 3); })
            .find("truncated in its header") != std::string::npos);
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

TEST_CASE("token file: held-out windows start evenly spaced, from the first token to the last window") {
  lmt::test::TempDir dir;
  std::vector<uint16_t> tokens(1000);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = uint16_t(i);
  auto src = open_token_file(write_tokens(dir, tokens), 1000, 9);
  std::vector<int32_t> in(9), tg(9);
  auto start = [&](int64_t k, int64_t n) {
    src->held_out(k, n, 9, in.data(), tg.data());
    for (int t = 0; t < 9; ++t) {
      CHECK(in[size_t(t)] == in[0] + t);  // contiguous, targets shifted by one
      CHECK(tg[size_t(t)] == in[0] + t + 1);
    }
    return in[0];
  };
  CHECK(start(0, 1) == 0);
  // 7 windows over starts 0 .. 990 (the last window ends at the last token): 990 k / 6.
  for (int64_t k = 0; k < 7; ++k) CHECK(start(k, 7) == 990 * k / 6);
  CHECK(start(12, 13) == 990);
  // More windows than starts: they overlap, still in order and in bounds.
  for (int64_t k = 0; k < 2000; ++k) CHECK(start(k, 2000) == int32_t(990 * k / 1999));
}

TEST_CASE("token file: errors name the key that gave the path (data.val_path for validation)") {
  lmt::test::TempDir dir;
  std::string path = write_tokens(dir, {1, 2, 3});
  CHECK(error_of([&] { open_token_file(path, 100, 3, "data.val_path"); }) ==
        "data.val_path = \"" + path + "\": 3 tokens, expected at least "
        "model.context_length + 1 = 4");
  CHECK(error_of([&] { open_token_file(path, 3, 2, "data.val_path"); })
            .rfind("data.val_path = \"" + path + "\": token 3 at index 2", 0) == 0);
  CHECK(error_of([&] { open_token_file(dir.path + "/none.bin", 3, 2, "data.val_path"); })
            .rfind("data.val_path = \"" + dir.path + "/none.bin\": cannot open", 0) == 0);
  CHECK(error_of([&] { open_token_file(path, 100, 3); }).rfind("data.path = ", 0) == 0);
}

TEST_CASE("markov: held-out windows are the chain's, the same every call, apart from every rank's "
          "stream") {
  const int64_t V = 16, K = 3, T = 4000, n = 100;
  const uint64_t seed = lmt::test::rng()();
  auto src = make_markov_source(V, K, seed);
  const double H = *src->loss_floor();
  std::map<std::pair<int, int>, double> pair;
  std::map<int, double> first;
  std::vector<int32_t> in(static_cast<size_t>(T)), tg(static_cast<size_t>(T));
  std::vector<int32_t> again(static_cast<size_t>(T)), again_tg(static_cast<size_t>(T));
  std::vector<std::vector<int32_t>> windows;
  for (int64_t k = 0; k < n; ++k) {
    src->held_out(k, n, T, in.data(), tg.data());
    src->held_out(k, 7 * n, T, again.data(), again_tg.data());  // n does not matter
    CHECK(again == in);
    CHECK(again_tg == tg);
    for (int64_t t = 0; t < T; ++t) {
      if (t) CHECK(in[size_t(t)] == tg[size_t(t - 1)]);
      pair[{in[size_t(t)], tg[size_t(t)]}] += 1;
      first[in[size_t(t)]] += 1;
    }
    windows.push_back(in);
  }
  // The chain's entropy rate, as its training samples show it (the test above).
  double est = 0;
  for (auto& [k, c] : pair) est -= c / double(n * T) * std::log(c / first[k.first]);
  CHECK(pair.size() <= size_t(V * K));
  CHECK(est == doctest::Approx(H).epsilon(0.01));
  // No window twice, none of them what rank 0..3 train on first.
  std::sort(windows.begin(), windows.end());
  CHECK(std::adjacent_find(windows.begin(), windows.end()) == windows.end());
  for (int rank = 0; rank < 4; ++rank) {
    Rng rng = data_rng(seed, rank);
    src->sample(rng, 1, T, in.data(), tg.data());
    CHECK(!std::binary_search(windows.begin(), windows.end(), in));
  }
  auto other = make_markov_source(V, K, seed + 1);
  other->held_out(0, n, T, in.data(), tg.data());
  CHECK(!std::binary_search(windows.begin(), windows.end(), in));
}
