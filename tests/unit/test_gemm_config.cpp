// cuda/gemm_config.cuh's text of a cuBLASLt configuration (what cuda/gemm_choices.inc names):
// a line reads back into the values it was written from, and text that is not such a line is
// refused. CPU only: the text needs no GPU (built where the CUDA toolkit is).
#include <doctest/doctest.h>

#ifdef LMTRAIN_CUDA
#include "../../cuda/gemm_config.cuh"

#include <random>

#include "../helpers.hpp"

using namespace lmt::cuda;

TEST_CASE("gemm config text: values written and read back, every attribute in its place; a "
          "misnamed, missing or non-numeric attribute refused") {
  std::uniform_int_distribution<unsigned long long> value(0, 1000);
  ConfigValues v;
  for (auto& x : v) x = value(lmt::test::rng());
  const std::string text = config_text(v);
  CAPTURE(text);
  CHECK(text.rfind("id " + std::to_string(v[kId]) + " tile " + std::to_string(v[kTile]) +
                       " stages ", 0) == 0);
  CHECK(text.find(" cluster " + std::to_string(v[kCluster])) != std::string::npos);
  ConfigValues back{};
  REQUIRE(parse_config(text, back));
  CHECK(back == v);
  // The table's own kind of line, as the heuristic's choices print.
  REQUIRE(parse_config("id 66 tile 407 stages 35 splitk 1 reduction 0 swizzle 0 custom 3 inner 0 "
                       "cluster 5", back));
  CHECK(back == ConfigValues{66, 407, 35, 1, 0, 0, 3, 0, 5});
  CHECK_FALSE(parse_config("ID" + text.substr(2), back));
  CHECK_FALSE(parse_config(text.substr(0, text.rfind(" cluster")), back));
  CHECK_FALSE(parse_config("id x" + text.substr(text.find(" tile")), back));
  CHECK_FALSE(parse_config("", back));
}
#endif
