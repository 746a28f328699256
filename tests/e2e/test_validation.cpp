// Whole runs with validation: its loss has the same bits on 1, 2 and 4 ranks and across a
// resume, evaluating never changes training, and bad validation input is refused before any
// work with one line and exit code 2.
#include <doctest/doctest.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include "checkpoint.hpp"
#include "gpu.hpp"
#include "../helpers.hpp"
#include "safetensors.hpp"

using namespace lmt;
using lmt::test::kTiny;
using lmt::test::progress_losses;
using lmt::test::run;
using lmt::test::TempDir;

namespace {

// The val_loss cell of each row of an lmtrain CSV, in order.
std::vector<std::string> val_losses(const std::string& csv) {
  std::ifstream f(csv);
  std::string header, line;
  std::getline(f, header);
  const std::vector<std::string> names = lmt::test::csv_cells(header);
  size_t col = 0;
  while (col < names.size() && names[col] != "val_loss") ++col;
  REQUIRE(col < names.size());
  std::vector<std::string> out;
  while (std::getline(f, line)) {
    std::vector<std::string> cells = lmt::test::csv_cells(line);
    out.push_back(col < cells.size() ? cells[col] : "");
  }
  return out;
}

// The validation losses of a run's progress lines, in order.
std::vector<double> progress_vals(const std::string& out) {
  std::vector<double> v;
  for (size_t at = 0; (at = out.find("| val ", at)) != std::string::npos; at += 6)
    v.push_back(std::stod(out.substr(at + 6)));
  return v;
}

std::string write_tokens(const TempDir& dir, const std::string& name, size_t n, uint16_t vocab) {
  std::vector<uint16_t> t(n);
  for (auto& x : t) x = uint16_t(lmt::test::rng()() % vocab);
  std::string path = dir.file(name);
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(t.data()),
                                              std::streamsize(n * 2));
  return path;
}

}  // namespace

TEST_CASE("validation: the same loss to the last bit on 1, 2 and 4 ranks (synthetic and a file)") {
  // No step: every world size validates the same initial parameters. 7 batches: 4 and 3 on 2
  // ranks, 2, 2, 2 and 1 on 4. (Each rank summing its part before the all-reduce differs from
  // one rank's sum in the last bits here, under fp64: this test sees it.) On the CPU device: on a
  // machine with one GPU, auto would put the one-rank run on it and the others on the CPU.
  TempDir dir;
  const std::string train = write_tokens(dir, "train.bin", 5000, 32);
  const std::string val = write_tokens(dir, "val.bin", 3000, 32);
  for (std::string data : {std::string(""), " --set data.source=file --set data.path=" + train +
                                                " --set data.val_path=" + val}) {
    for (std::string prec : {"fp32", "fp64"}) {
      INFO(data, " ", prec);
      const std::string csv = dir.file("ws_" + prec + std::to_string(data.size()) + ".csv");
      for (int np : {1, 2, 4}) {
        auto r = run(lmt::test::mpirun(np) + lmt::test::lmtrain() + kTiny + data +
                     " --set run.device=cpu --set model.precision=" + prec +
                     " --set train.steps=0 --set train.eval_batches=7 --csv " + csv);
        INFO(r.output);
        REQUIRE(r.code == 0);
        CHECK(r.output.find("val loss ") != std::string::npos);
        CHECK(r.output.find("validation: 7 held-out batches of 2 windows (224 tokens)") !=
              std::string::npos);
      }
      const std::vector<std::string> v = val_losses(csv);
      REQUIRE(v.size() == 3);
      CHECK(!v[0].empty());
      CHECK(std::stod(v[0]) > 2.5);  // near ln 32 = 3.47 at init
      CHECK(v[1] == v[0]);
      CHECK(v[2] == v[0]);
    }
  }
}

TEST_CASE("validation: a resumed run validates as the uninterrupted one did, at the same steps; "
          "one resumed at its last step only validates") {
  TempDir dir;
  const std::string base = lmt::test::mpirun(2) + lmt::test::lmtrain() + kTiny +
                           " --set model.precision=fp32 --set train.steps=6 --set "
                           "train.checkpoint_every=3 --set train.eval_every=2 --set "
                           "train.log_every=3";
  const std::string csv = dir.file("resume.csv");
  auto a = run(base + " --set train.checkpoint_dir=" + dir.path + "/a --csv " + csv);
  INFO(a.output);
  REQUIRE(a.code == 0);
  auto b = run(base + " --set train.checkpoint_dir=" + dir.path + "/b --set train.resume=" +
               checkpoint_path(dir.path + "/a", 3) + " --csv " + csv);
  INFO(b.output);
  REQUIRE(b.code == 0);
  // Progress lines at steps 2, 3, 4, 6: validation at 2, 4 and 6; the resumed run's at 4 and 6.
  const std::vector<double> va = progress_vals(a.output), vb = progress_vals(b.output);
  REQUIRE(va.size() == 3);
  REQUIRE(vb.size() == 2);
  CHECK(vb[0] == va[1]);
  CHECK(vb[1] == va[2]);
  CHECK(va[2] < va[0]);  // it learns
  CHECK(progress_losses(a.output).size() == 4);
  // Resumed at its last step: no step, the checkpoint validated.
  auto c = run(base + " --set train.checkpoint_dir=" + dir.path + "/c --set train.resume=" +
               checkpoint_path(dir.path + "/a", 6) + " --csv " + csv);
  INFO(c.output);
  REQUIRE(c.code == 0);
  CHECK(progress_losses(c.output).empty());
  const std::vector<std::string> v = val_losses(csv);  // after step 6, every bit
  REQUIRE(v.size() == 3);
  CHECK(!v[0].empty());
  CHECK(v[1] == v[0]);
  CHECK(v[2] == v[0]);
}

TEST_CASE("validation: evaluating every step changes no bit of training") {
  for (std::string prec : {"fp32", "bf16"}) {
    INFO(prec);
    TempDir dir;
    const std::string base = lmt::test::mpirun(2) + lmt::test::lmtrain() + kTiny +
                             " --set model.precision=" + prec +
                             " --set train.steps=6 --set train.log_every=1";
    auto with = run(base + " --set train.eval_every=1 --set train.checkpoint_dir=" + dir.path +
                    "/with");
    auto without = run(base + " --set train.eval_batches=0 --set train.checkpoint_dir=" +
                       dir.path + "/without");
    INFO(with.output, without.output);
    REQUIRE(with.code == 0);
    REQUIRE(without.code == 0);
    CHECK(progress_vals(with.output).size() == 6);
    CHECK(progress_vals(without.output).empty());
    CHECK(without.output.find("val loss") == std::string::npos);
    CHECK(progress_losses(with.output) == progress_losses(without.output));
    Safetensors a = Safetensors::read(checkpoint_path(dir.path + "/with", 6));
    Safetensors b = Safetensors::read(checkpoint_path(dir.path + "/without", 6));
    CHECK(a.data == b.data);  // parameters and moments
    CHECK(a.metadata["rng.0"] == b.metadata["rng.0"]);
    CHECK(a.metadata["rng.1"] == b.metadata["rng.1"]);
  }
}

TEST_CASE("validation: a token file without data.val_path has none: the CSV cell stays empty") {
  TempDir dir;
  const std::string train = write_tokens(dir, "train.bin", 2000, 32);
  const std::string csv = dir.file("none.csv");
  auto r = run(std::string(lmt::test::lmtrain()) + kTiny + " --set data.source=file " +
               "--set data.path=" + train + " --set train.steps=2 --csv " + csv);
  INFO(r.output);
  REQUIRE(r.code == 0);
  CHECK(r.output.find("validation") == std::string::npos);
  CHECK(r.output.find("val loss") == std::string::npos);
  CHECK(val_losses(csv) == std::vector<std::string>{""});
}

TEST_CASE("validation: a bad val file or value stops the run before any work, one line, exit 2") {
  TempDir dir;
  const std::string train = write_tokens(dir, "train.bin", 2000, 32);
  const std::string file = " --set data.source=file --set data.path=" + train;
  struct Case {
    std::string what, args, expect;
  } cases[] = {
      {"missing", file + " --set data.val_path=" + dir.path + "/none.bin",
       "data.val_path = \"" + dir.path + "/none.bin\": cannot open"},
      {"shorter than a context + 1", file + " --set data.val_path=" +
                                         write_tokens(dir, "short.bin", 16, 32),
       "16 tokens, expected at least model.context_length + 1 = 17"},
      {"a token >= vocab", file + " --set data.val_path=" + write_tokens(dir, "wide.bin", 500, 40),
       "is not in [0, model.vocab_size = 32)"},
      {"negative eval_every", " --set train.eval_every=-5",
       "train.eval_every = -5: expected a number >= 0"},
  };
  for (auto& c : cases) {
    INFO(c.what);
    for (int np : {1, 2}) {
      auto r = run((np > 1 ? lmt::test::mpirun(np) : std::string()) + lmt::test::lmtrain() +
                   kTiny + c.args + " --set train.steps=3");
      INFO(r.output);
      CHECK(r.code == 2);
      CHECK(r.output.find(c.expect) != std::string::npos);
      CHECK(r.output.find("step ") == std::string::npos);  // no training happened
      if (np == 1) {
        CHECK(r.output.rfind("lmtrain: error: ", 0) == 0);
        CHECK(std::count(r.output.begin(), r.output.end(), '\n') == 1);
      }
    }
  }
}

// On a machine with a GPU: validation replayed around CUDA graphs changes nothing, and its loss
// is the launched run's, bit for bit.
TEST_CASE("validation on a GPU: the same losses and val loss with run.graphs = 1" *
          doctest::skip(lmt::gpu_count() < 1)) {
  TempDir dir;
  const std::string csv = dir.file("graphs.csv");
  std::vector<double> losses[2], vals[2];
  for (int graphs : {0, 1}) {
    auto r = run(std::string(lmt::test::lmtrain()) + kTiny +
                 " --set run.device=cuda --set model.precision=bf16 --set train.steps=12"
                 " --set train.log_every=4 --set train.eval_every=3 --set run.graphs=" +
                 std::to_string(graphs) + " --csv " + csv);
    INFO(r.output);
    REQUIRE(r.code == 0);
    losses[graphs] = progress_losses(r.output), vals[graphs] = progress_vals(r.output);
  }
  CHECK(vals[0].size() == 4);
  CHECK(losses[1] == losses[0]);
  CHECK(vals[1] == vals[0]);
  const std::vector<std::string> v = val_losses(csv);
  REQUIRE(v.size() == 2);
  CHECK(v[1] == v[0]);
}

// On a machine with 2 GPUs: 1 and 2 ranks over NCCL validate the same parameters to the same bits.
TEST_CASE("validation on GPUs: the same val loss on 1 and 2 GPUs" *
          doctest::skip(lmt::gpu_count() < 2)) {
  TempDir dir;
  const std::string csv = dir.file("gpus.csv");
  for (int np : {1, 2}) {
    auto r = run(lmt::test::mpirun(np) + lmt::test::lmtrain() + kTiny +
                 " --set run.device=cuda --set model.precision=bf16 --set train.steps=0"
                 " --set train.eval_batches=7 --csv " + csv);
    INFO(r.output);
    REQUIRE(r.code == 0);
    CHECK(r.output.find("device cuda") != std::string::npos);
  }
  const std::vector<std::string> v = val_losses(csv);
  REQUIRE(v.size() == 2);
  CHECK(!v[0].empty());
  CHECK(v[1] == v[0]);
}
