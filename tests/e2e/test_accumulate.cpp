// Gradient accumulation (train.grad_accum) in whole runs of build/lmtrain: k micro-batches of b
// sequences take the optimizer steps that one batch of k x b does, on every strategy and world
// size; a resume keeps the tokens per step or is refused; bench times every micro-batch.
#include <doctest/doctest.h>

#include <cstring>

#include "../helpers.hpp"
#include "checkpoint.hpp"
#include "exit_codes.hpp"
#include "gpu.hpp"
#include "safetensors.hpp"

using namespace lmt;
using lmt::test::kTiny;
using lmt::test::progress_losses;
using lmt::test::rel_err;
using lmt::test::run;
using lmt::test::TempDir;

namespace {

// fp64 on the CPU, 4 optimizer steps, a checkpoint at the end (parameters and both moments).
const std::string kRun = std::string(lmt::test::lmtrain()) + kTiny +
                         " --set run.device=cpu --set model.precision=fp64 --set train.steps=4"
                         " --set train.log_every=1 --set optim.lr=1e-2";

// Every tensor of a checkpoint (parameters, then AdamW's m and v), as one vector.
std::vector<double> checkpoint_values(const std::string& path) {
  Safetensors st = Safetensors::read(path);
  std::vector<double> all(st.data.size() / sizeof(double));
  std::memcpy(all.data(), st.data.data(), all.size() * sizeof(double));
  return all;
}

// A run's output and final checkpoint's values, with `settings` on `np` ranks.
struct Trained {
  std::string output;
  std::vector<double> values;
};
Trained train(int np, const std::string& settings) {
  TempDir dir;
  auto r = run(lmt::test::mpirun(np) + kRun + settings + " --set train.checkpoint_dir=" + dir.path);
  INFO(r.output);
  REQUIRE(r.code == 0);
  return {r.output, checkpoint_values(checkpoint_path(dir.path, 4))};
}

}  // namespace

TEST_CASE("grad_accum: 3 micro-batches of 2 take the steps of one batch of 6, every strategy on "
          "1, 2 and 4 ranks (fp64)") {
  for (int np : {1, 2, 4})
    for (const char* strategy : {"naive", "flat", "overlap", "bucketed", "zero1"}) {
      if (np == 1 && std::strcmp(strategy, "flat") != 0 && std::strcmp(strategy, "zero1") != 0)
        continue;  // one rank synchronises nothing: flat (none) and zero1 (its own optimizer)
      INFO(np << " rank(s), " << std::string(strategy));
      const std::string s = std::string(" --set ddp.strategy=") + strategy;
      Trained accum = train(np, s + " --set train.batch_size=2 --set train.grad_accum=3");
      Trained whole = train(np, s + " --set train.batch_size=6 --set train.grad_accum=1");
      // 2 sequences of 16 tokens, 3 micro-batches, np ranks.
      CHECK(accum.output.find(std::to_string(96 * np) + " tokens per step (3 micro-batches of "
                              "2 x 16 a rank)") != std::string::npos);
      REQUIRE(accum.values.size() == whole.values.size());
      // Same data (the micro-batches draw their sequences in order from the rank's stream) and
      // the same loss scale: only the order of the sums may differ.
      CHECK(rel_err(accum.values, whole.values) < 1e-12);
      const auto a = progress_losses(accum.output), w = progress_losses(whole.output);
      REQUIRE(a.size() == 4);
      REQUIRE(w.size() == 4);
      for (size_t i = 0; i < a.size(); ++i) CHECK(a[i] == doctest::Approx(w[i]).epsilon(1e-12));
      CHECK(a.back() < a.front());  // and it trains
    }
}

TEST_CASE("grad_accum: a resume keeping batch_size x grad_accum continues the run; another is "
          "refused with one line") {
  TempDir dir;
  const std::string base = kRun + " --set train.checkpoint_dir=" + dir.path +
                           " --set train.checkpoint_every=2";
  auto straight = run(base + " --set train.batch_size=2 --set train.grad_accum=3");
  REQUIRE(straight.code == 0);
  const std::vector<double> reference = checkpoint_values(checkpoint_path(dir.path, 4));
  const std::string half = checkpoint_path(dir.path, 2);
  // 6 sequences a step either way: the run goes on as it was (to round-off).
  auto resumed = run(base + " --set train.overwrite=1 --set train.batch_size=3"
                            " --set train.grad_accum=2 --set train.resume=" + half);
  INFO(resumed.output);
  REQUIRE(resumed.code == 0);
  CHECK(rel_err(checkpoint_values(checkpoint_path(dir.path, 4)), reference) < 1e-12);
  // 4 sequences a step: refused before any step.
  auto refused = run(base + " --set train.overwrite=1 --set train.batch_size=2"
                            " --set train.grad_accum=2 --set train.resume=" + half);
  INFO(refused.output);
  CHECK(refused.code == kExitUsage);
  CHECK(refused.output.find("train.grad_accum = 2 with train.batch_size = 2: " + half +
                            " was written by a run of train.grad_accum = 3 and batch_size = 2; "
                            "resuming changes the tokens per optimizer step (set the two so that "
                            "batch_size x grad_accum stays 6)") != std::string::npos);
  CHECK(refused.output.find("step 3/4") == std::string::npos);
}

TEST_CASE("grad_accum = 0 is refused with one line and exit code 2") {
  auto r = run(kRun + " --set train.grad_accum=0");
  INFO(r.output);
  CHECK(r.code == kExitUsage);
  CHECK(r.output.find("train.grad_accum") != std::string::npos);
  CHECK(r.output.find("step ") == std::string::npos);
}

TEST_CASE("bench with grad_accum times every micro-batch of a step") {
  auto r = run(std::string(lmt::test::lmtrain()) + kTiny +
               " --set run.device=cpu --set run.mode=bench --set bench.warmup=1"
               " --set bench.steps=2 --set train.grad_accum=3");
  INFO(r.output);
  REQUIRE(r.code == 0);
  CHECK(r.output.find("batch 2 x context 16, 3 micro-batches a step") != std::string::npos);
  CHECK(r.output.find("(forward and backward: all 3 micro-batches)") != std::string::npos);
}

TEST_CASE("grad_accum on 2 GPUs over NCCL: every strategy, 3 micro-batches of 2 take the steps "
          "of one batch of 6" * doctest::skip(gpu_count() < 2)) {
  for (std::string strategy : {"naive", "flat", "overlap", "bucketed", "zero1"}) {
    std::vector<std::vector<double>> losses, values;
    for (const char* split : {" --set train.batch_size=2 --set train.grad_accum=3",
                              " --set train.batch_size=6 --set train.grad_accum=1"}) {
      TempDir dir;
      auto r = run(lmt::test::mpirun(2) + lmt::test::lmtrain() + kTiny +
                   " --set run.device=cuda --set model.precision=fp32 --set train.steps=4"
                   " --set train.log_every=1 --set optim.lr=1e-2 --set ddp.bucket_mb=0.001"
                   " --set train.checkpoint_dir=" + dir.path + " --set ddp.strategy=" +
                   strategy + split);
      INFO(strategy, split, "\n", r.output);
      REQUIRE(r.code == 0);
      CHECK(r.output.find("device cuda, 2 rank(s)") != std::string::npos);
      losses.push_back(progress_losses(r.output));
      REQUIRE(losses.back().size() == 4);
      Safetensors st = Safetensors::read(checkpoint_path(dir.path, 4));
      values.emplace_back(st.data.size() / sizeof(float));
      const float* f = reinterpret_cast<const float*>(st.data.data());
      std::copy(f, f + values.back().size(), values.back().begin());
    }
    INFO(strategy);
    // fp32 on the GPU: matmuls of other shapes sum in other orders.
    CHECK(rel_err(values[0], values[1]) < 1e-5);
    for (size_t i = 0; i < losses[0].size(); ++i)
      CHECK(losses[0][i] == doctest::Approx(losses[1][i]).epsilon(1e-4));
  }
}
