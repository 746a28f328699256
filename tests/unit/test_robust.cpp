// Runs that go wrong lose nothing: divergence stops before the bad update with exit code 3,
// bad setups are refused before step 1, signals checkpoint and resume bit for bit, a stopped
// peer ends the job by name, checkpoints are sealed (exit_codes.hpp lists the codes).
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "checkpoint.hpp"
#include "exit_codes.hpp"
#include "helpers.hpp"
#include "safetensors.hpp"

using namespace lmt;
using lmt::test::kTiny;
using lmt::test::run;
using lmt::test::TempDir;

namespace {

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

bool all_finite(const Safetensors& st) {
  for (auto& [name, t] : st.tensors)
    for (size_t at = t.begin; at < t.end; at += sizeof(float)) {
      float x;
      std::memcpy(&x, st.data.data() + at, sizeof x);
      if (!std::isfinite(x)) return false;
    }
  return true;
}

std::vector<std::string> files_in(const std::string& dir) {
  std::vector<std::string> names;
  for (auto& e : std::filesystem::directory_iterator(dir)) names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

TEST_CASE("robust: a diverging run stops at that step with exit code 3 and no checkpoint of it") {
  // lr 1e12 after a long warm-up: step 1 (lr 1e8) blows the weights up, step 2's loss is NaN.
  TempDir dir;
  auto r = run(lmt::test::mpirun(2) + lmt::test::lmtrain() + kTiny +
               " --set model.precision=fp32 --set optim.lr=1e12 --set optim.warmup_steps=10000"
               " --set train.steps=50 --set train.log_every=1 --set train.checkpoint_every=1"
               " --set train.checkpoint_dir=" + dir.path);
  INFO(r.output);
  CHECK(r.code == kExitDiverged);
  CHECK(count(r.output, "diverged") == 1);  // one line, from one rank
  CHECK(r.output.find("lmtrain: diverged at step 2 (rank 0): loss = ") != std::string::npos);
  CHECK(r.output.find("last checkpoint: " + checkpoint_path(dir.path, 1)) != std::string::npos);
  CHECK(r.output.find("step 2/50") == std::string::npos);  // no progress line of the bad step
  CHECK(files_in(dir.path) == std::vector<std::string>{"step_00000001.safetensors"});
  CHECK(all_finite(Safetensors::read(checkpoint_path(dir.path, 1))));
}
