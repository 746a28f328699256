// allreduce mode, whole runs of build/lmtrain: the table and CSV rows of the MPI backend on 2 ranks
// (fp32 and bf16; sizes from the range or from sizes_mb), and bad configs refused with one line
// and exit code 2 before any work.
#include <doctest/doctest.h>

#include <algorithm>
#include <fstream>

#include "gpu.hpp"
#include "../helpers.hpp"

using lmt::test::run;
using lmt::test::TempDir;

namespace {

std::vector<std::vector<std::string>> read_rows(const std::string& csv) {
  std::ifstream f(csv);
  std::vector<std::vector<std::string>> rows;
  for (std::string line; std::getline(f, line);) rows.push_back(lmt::test::csv_cells(line));
  return rows;
}

std::string allreduce(int np, const std::string& args) {
  return lmt::test::mpirun(np) + lmt::test::lmtrain() + " --set run.mode=allreduce " + args;
}

}  // namespace

TEST_CASE("allreduce: mpi backend on 2 ranks, one CSV row per size with exact sums") {
  for (std::string dtype : {"fp32", "bf16"}) {
    SUBCASE(dtype.c_str()) {
      TempDir dir;
      std::string csv = dir.file("allreduce.csv");
      const std::string args = "--set allreduce.backend=mpi --set allreduce.dtype=" + dtype +
                               " --set allreduce.min_mb=0.001 --set allreduce.max_mb=1"
                               " --set allreduce.factor=10 --set allreduce.iters=5 --csv " + csv;
      auto r = run(allreduce(2, args));
      INFO(r.output);
      REQUIRE(r.code == 0);
      CHECK(r.output.find("#wrong") != std::string::npos);
      CHECK(r.output.find("Out of bounds values : 0 OK") != std::string::npos);
      auto again = run(allreduce(2, args));  // a second run appends under the same header
      REQUIRE(again.code == 0);
      auto rows = read_rows(csv);
      REQUIRE(rows.size() == 1 + 2 * 4);  // header, then 4 sizes (1 KiB .. 1 MiB) per run
      const auto& h = rows[0];
      auto col = [&](const char* name) {
        auto it = std::find(h.begin(), h.end(), name);
        REQUIRE(it != h.end());
        return size_t(it - h.begin());
      };
      const size_t elem = dtype == "bf16" ? 2 : 4;
      const char* type = dtype == "bf16" ? "bfloat16" : "float";
      size_t prev = 0;
      for (size_t i = 1; i < rows.size(); ++i) {
        const auto& row = rows[i];
        REQUIRE(row.size() == h.size());
        CHECK(row[col("allreduce.backend")] == "mpi");
        CHECK(row[col("world_size")] == "2");
        CHECK(row[col("type")] == type);
        CHECK(row[col("redop")] == "sum");
        CHECK(row[col("wrong")] == "0");
        const size_t bytes = std::stoul(row[col("size_bytes")]);
        CHECK(std::stoul(row[col("count")]) * elem == bytes);
        if (i != 5) CHECK(bytes > prev);  // increasing within a run
        prev = bytes;
        const double t = std::stod(row[col("time_us")]), algbw = std::stod(row[col("algbw_gbs")]);
        CHECK(t > 0);
        CHECK(std::stod(row[col("time_min_us")]) <= t);
        CHECK(std::stod(row[col("time_max_us")]) >= t);
        CHECK(algbw == doctest::Approx(double(bytes) / (t * 1e-6) / 1e9).epsilon(1e-3));
        CHECK(std::stod(row[col("busbw_gbs")]) == doctest::Approx(algbw).epsilon(1e-3));  // 2(n-1)/n = 1
      }
      CHECK(std::stoul(rows[1][col("size_bytes")]) == size_t(0.001 * (1 << 20)) / elem * elem);
      CHECK(std::stoul(rows[4][col("size_bytes")]) == size_t(1 << 20));
    }
  }
}

TEST_CASE("allreduce: sizes_mb, when it lists sizes (a fraction of a MiB too), replaces the "
          "min_mb..max_mb range") {
  TempDir dir;
  std::string csv = dir.file("allreduce.csv");
  auto r = run(allreduce(2, "--set allreduce.backend=mpi --set 'allreduce.sizes_mb=[0.25,3]' "
                            "--set allreduce.iters=2 --csv " + csv));
  INFO(r.output);
  REQUIRE(r.code == 0);
  auto rows = read_rows(csv);
  REQUIRE(rows.size() == 3);  // header, 0.25 MiB, 3 MiB
  const auto& h = rows[0];
  auto col = [&](const char* name) {
    return size_t(std::find(h.begin(), h.end(), name) - h.begin());
  };
  REQUIRE(col("size_bytes") < h.size());
  REQUIRE(col("allreduce.sizes_mb") < h.size());
  CHECK(rows[1][col("allreduce.sizes_mb")] == "0.25 3");  // a list cell: space-separated
  CHECK(rows[1][col("size_bytes")] == std::to_string(1 << 18));
  CHECK(rows[2][col("size_bytes")] == std::to_string(3 << 20));
  CHECK(rows[2][col("wrong")] == "0");
}

TEST_CASE("allreduce: bad configs stop every rank with one line and exit code 2") {
  struct Bad {
    std::string args, expect;
  } cases[] = {
      {"--set allreduce.min_mb=-1", "allreduce.min_mb = -1: expected a number > 0"},
      {"--set allreduce.min_mb=10 --set allreduce.max_mb=1",
       "allreduce.max_mb = 1: expected at least allreduce.min_mb = 10"},
      {"--set allreduce.factor=1", "allreduce.factor = 1: expected a number > 1"},
      {"--set allreduce.backend=gloo", "allreduce.backend = \"gloo\": expected one of"},
      {"--set allreduce.dtype=fp16", "allreduce.dtype = \"fp16\": expected one of"},
      {"--set allreduce.min_mb=1e-7", "allreduce.min_mb = 1e-07 is less than one fp32 element"},
      {"--set 'allreduce.sizes_mb=[4,2]'",
       "allreduce.sizes_mb has 2 after 4: expected increasing sizes"},
      {"--set 'allreduce.sizes_mb=[0]'",
       "allreduce.sizes_mb = an array holding 0: expected a number > 0"},
      {"--set 'allreduce.sizes_mb=[1e-7, 1]'",
       "allreduce.sizes_mb has 1e-07, less than one fp32 element"},
  };
  for (auto& bad : cases) {
    auto r = run(allreduce(2, "--set allreduce.backend=mpi " + bad.args));
    INFO(bad.args, "\n", r.output);
    CHECK(r.code == 2);
    CHECK(std::count(r.output.begin(), r.output.end(), '\n') == 1);
    CHECK(r.output.find(bad.expect) != std::string::npos);
  }
  auto alone = run(allreduce(1, "--set allreduce.backend=mpi"));  // nothing to reduce across
  INFO(alone.output);
  CHECK(alone.code == 2);
  CHECK(std::count(alone.output.begin(), alone.output.end(), '\n') == 1);
  CHECK(alone.output.find("run.mode = \"allreduce\" on 1 rank has no peer to reduce with") !=
        std::string::npos);
  if (lmt::gpu_count() == 0) {  // nccl needs a GPU: refused before any work
    auto r = run(allreduce(2, "--set allreduce.backend=nccl"));
    INFO(r.output);
    CHECK(r.code == 2);
    CHECK(std::count(r.output.begin(), r.output.end(), '\n') == 1);
    CHECK(r.output.find("allreduce.backend = \"nccl\" needs a GPU") != std::string::npos);
    CHECK(r.output.find("#wrong") == std::string::npos);
  }
}
