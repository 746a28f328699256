// Whole runs of build/lmtrain: training lowers the loss, checkpoints resume bit for bit, bad
// checkpoints and CSV files are refused with exit code 2, ranks must agree on the config.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "check.hpp"
#include "checkpoint.hpp"
#include "gpu.hpp"
#include "../helpers.hpp"
#include "safetensors.hpp"

using namespace lmt;
using lmt::test::run;
using lmt::test::TempDir;
using lmt::test::kTiny;
using lmt::test::progress_losses;

TEST_CASE("train: two ranks on the synthetic source lower the loss toward its floor") {
  auto r = run(lmt::test::mpirun(2) + lmt::test::lmtrain() +
               " --set train.steps=80 --set train.log_every=10 --set optim.lr=1e-2 --set "
               "model.precision=\"fp32\"" + kTiny);
  INFO(r.output);
  REQUIRE(r.code == 0);
  auto losses = progress_losses(r.output);
  REQUIRE(losses.size() == 8);
  CHECK(losses.front() > std::log(32.0) - 0.5);  // starts near uniform guessing
  CHECK(losses.back() < losses.front() - 1.0);   // and learns the chain
  CHECK(r.output.find("loss floor") != std::string::npos);
  CHECK(r.output.find("exposed comm") != std::string::npos);  // several ranks: sync is timed
}

TEST_CASE("train: zero1 on 2 ranks follows flat's curve and holds half the optimizer state per rank") {
  TempDir dir;
  std::string csv = dir.file("runs.csv");
  std::string base = lmt::test::mpirun(2) + lmt::test::lmtrain() + kTiny +
                     " --set train.steps=20 --set train.log_every=5 --set model.precision=fp32"
                     " --csv " + csv;
  auto flat = run(base + " --set ddp.strategy=flat");
  auto zero = run(base + " --set ddp.strategy=zero1");
  INFO(zero.output);
  REQUIRE(flat.code == 0);
  REQUIRE(zero.code == 0);
  auto a = progress_losses(flat.output), b = progress_losses(zero.output);
  REQUIRE(a.size() == 4);
  REQUIRE(b.size() == a.size());
  for (size_t i = 0; i < a.size(); ++i) CHECK(b[i] == doctest::Approx(a[i]).epsilon(1e-4));
  // Per-rank optimizer memory after init, before and after the first step: each rank holds the
  // moments of its half (the model's 3.2k parameters split evenly), not of all of them.
  for (const char* when : {"after init", "before step 1", "after step 1"}) {
    size_t at = zero.output.find(std::string("optimizer state per rank ") + when);
    REQUIRE(at != std::string::npos);
    std::string line = zero.output.substr(at, zero.output.find('\n', at) - at);
    CHECK(line.find("0: 12.7 KiB, 1: 12.7 KiB") != std::string::npos);
  }
  CHECK(zero.output.find("unsharded: 25.4 KiB") != std::string::npos);
  CHECK(flat.output.find("optimizer state per rank") == std::string::npos);
  // The CSV rows: rank 0's optimizer bytes (3248 parameters, two fp32 moments; half of them for
  // zero1) and the timing columns.
  std::ifstream f(csv);
  std::string header, flat_row, zero_row;
  std::getline(f, header), std::getline(f, flat_row), std::getline(f, zero_row);
  CHECK(header.find(",compute_ms_per_step,comm_ms_per_step,exposed_ms_per_step,"
                    "optimizer_bytes_rank0") != std::string::npos);
  const std::vector<std::string> names = lmt::test::csv_cells(header);
  const size_t col = size_t(std::find(names.begin(), names.end(), "optimizer_bytes_rank0") -
                            names.begin());
  CHECK(lmt::test::csv_cells(flat_row).at(col) == std::to_string(2 * 3248 * 4));
  CHECK(lmt::test::csv_cells(zero_row).at(col) == std::to_string(2 * 1624 * 4));
  // The steps after the first, timed apart: their mean is at most 20/19 of the whole run's, and
  // the closing table prints it.
  auto cell = [&](const std::string& row, const char* name) {
    const size_t at = size_t(std::find(names.begin(), names.end(), name) - names.begin());
    return std::stod(lmt::test::csv_cells(row).at(at));
  };
  for (const std::string& row : {flat_row, zero_row}) {
    const double all = cell(row, "ms_per_step"), after = cell(row, "ms_per_step_after_first");
    CHECK(after > 0);
    CHECK(after < all * 20.0 / 19.0);  // 20 steps: the 19 after the first took at most all of it
  }
  const size_t end = flat.output.find(" after the first)");
  REQUIRE(end != std::string::npos);
  const size_t open = flat.output.rfind('(', end);
  const double printed = std::stod(flat.output.substr(open + 1, end - open - 1));
  CHECK(std::fabs(printed - cell(flat_row, "ms_per_step_after_first")) <= 0.0501);  // one decimal
  // The progress lines' ms/step: two decimals below 100 ms, one from there.
  size_t lines = 0;
  for (size_t at = flat.output.find(" ms/step | "); at != std::string::npos;
       at = flat.output.find(" ms/step | ", at + 1), ++lines) {
    const size_t start = flat.output.rfind("| ", at) + 2;
    const std::string number = flat.output.substr(start, at - start);
    INFO(number);
    const size_t point = number.find('.');
    REQUIRE(point != std::string::npos);
    CHECK(number.size() - point - 1 == (std::stod(number) < 100 ? 2u : 1u));
  }
  CHECK(lines == 4);
}

// The tiny model on `ranks` ranks (2 unless said) for 6 steps, a checkpoint every 3, with `sets`
// added.
std::string six_steps(const std::string& sets, int ranks = 2) {
  return lmt::test::mpirun(ranks) + lmt::test::lmtrain() + kTiny +
         " --set train.steps=6 --set train.checkpoint_every=3" + sets;
}

// Six steps on `ranks` ranks with `sets`, straight (checkpoints in dir/a) and resumed from step 3
// (dir/b): the resumed run says so, its losses are the straight run's last three, and its final
// checkpoint is the straight run's, every bit (parameters, moments, data streams). The straight
// run's final checkpoint.
Safetensors resumes_bit_for_bit(const std::string& sets, const std::string& dir, int ranks = 2) {
  const std::string base = six_steps(sets + " --set train.log_every=1", ranks);
  auto a = run(base + " --set train.checkpoint_dir=" + dir + "/a");
  auto b = run(base + " --set train.checkpoint_dir=" + dir + "/b --set train.resume=" +
               checkpoint_path(dir + "/a", 3));
  INFO(a.output, b.output);
  REQUIRE(a.code == 0);
  REQUIRE(b.code == 0);
  CHECK(b.output.find("resumed from") != std::string::npos);
  const auto la = progress_losses(a.output), lb = progress_losses(b.output);
  REQUIRE(la.size() == 6);
  REQUIRE(lb.size() == 3);
  for (size_t i = 0; i < 3; ++i) CHECK(lb[i] == la[i + 3]);
  Safetensors sa = Safetensors::read(checkpoint_path(dir + "/a", 6));
  Safetensors sb = Safetensors::read(checkpoint_path(dir + "/b", 6));
  CHECK(sa.data == sb.data);
  std::vector<std::string> keys = {"adam_t", "optim.state_dtype", "optim.master_weights"};
  for (int r = 0; r < ranks; ++r) keys.push_back("rng." + std::to_string(r));
  for (const std::string& key : keys) {
    INFO(key);
    REQUIRE(sa.metadata.count(key) == 1);
    CHECK(sa.metadata[key] == sb.metadata[key]);
  }
  CHECK(Safetensors::read(checkpoint_path(dir + "/a", 3)).data != sa.data);  // the run moved
  return sa;
}

TEST_CASE("train: a resumed run continues bit for bit like an uninterrupted one (2 ranks)") {
  for (std::string prec : {"fp32", "bf16", "fp64"}) {
    INFO(prec);
    TempDir dir;  // one run's checkpoints per directory
    resumes_bit_for_bit(" --set model.precision=\"" + prec + "\"", dir.path);
  }
}

TEST_CASE("train: zero1 checkpoints hold the whole moments and masters, resume bit for bit, and "
          "interchange with flat's") {
  // Under bf16 each rank holds only its shard's fp32 masters: rank 0 gathers them to write.
  for (std::string prec : {"fp32", "bf16"}) {
    INFO(prec);
    TempDir dir;
    std::string base = six_steps(" --set model.precision=" + prec);
    auto z = [&](const std::string& sub) { return checkpoint_path(dir.path + "/" + sub, 6); };
    auto a = run(base + " --set ddp.strategy=zero1 --set train.checkpoint_dir=" + dir.path + "/a");
    auto f = run(base + " --set ddp.strategy=flat --set train.checkpoint_dir=" + dir.path + "/f");
    auto b = run(base + " --set ddp.strategy=zero1 --set train.checkpoint_dir=" + dir.path +
                 "/b --set train.resume=" + checkpoint_path(dir.path + "/a", 3));
    auto x = run(base + " --set ddp.strategy=zero1 --set train.checkpoint_dir=" + dir.path +
                 "/x --set train.resume=" + checkpoint_path(dir.path + "/f", 3));
    INFO(a.output, b.output, x.output);
    REQUIRE(a.code == 0);
    REQUIRE(f.code == 0);
    REQUIRE(b.code == 0);
    REQUIRE(x.code == 0);
    Safetensors sa = Safetensors::read(z("a")), sf = Safetensors::read(z("f"));
    CHECK(sa.data == Safetensors::read(z("b")).data);  // zero1 resumed from zero1: every bit
    // Every tensor, moments included (both ranks' shards), close to flat's: the shards were
    // gathered whole. The same for zero1 resumed from flat's checkpoint.
    auto close_to_flat = [&](const Safetensors& st) {
      for (auto& [name, t] : sf.tensors) {
        INFO(name);
        REQUIRE(st.tensors.count(name) == 1);
        const size_t n = (t.end - t.begin) / sizeof(float);
        std::vector<float> want(n), got(n);
        std::memcpy(want.data(), sf.data.data() + t.begin, n * sizeof(float));
        std::memcpy(got.data(), st.data.data() + st.tensors.at(name).begin, n * sizeof(float));
        CHECK(lmt::test::rel_err(got, want) < 1e-4);
      }
    };
    close_to_flat(sa);
    close_to_flat(Safetensors::read(z("x")));
  }
}

TEST_CASE("train: bf16 optimizer state is checkpointed as BF16 moments, resumes bit for bit "
          "(flat and zero1 on 2 ranks), and a resume under fp32 state is refused") {
  for (std::string strategy : {"flat", "zero1"}) {
    INFO(strategy);
    TempDir dir;
    Safetensors sa = resumes_bit_for_bit(" --set optim.state_dtype=bf16 --set ddp.strategy=" +
                                         strategy, dir.path);
    // Moments in BF16, 2 bytes an element; parameters in F32.
    CHECK(sa.metadata["optim.state_dtype"] == "bf16");
    size_t moments = 0;
    for (auto& [name, t] : sa.tensors) {
      INFO(name);
      const bool moment = name.rfind("optim.", 0) == 0;
      int64_t numel = 1;
      for (int64_t d : t.shape) numel *= d;
      CHECK(t.dtype == (moment ? "BF16" : "F32"));
      CHECK(t.end - t.begin == size_t(numel) * (moment ? 2 : 4));
      moments += moment;
    }
    CHECK(moments == 2 * (sa.tensors.size() - moments));
    // Resuming it with fp32 moments: one line naming the key, exit code 2, no step taken.
    auto c = run(lmt::test::mpirun(2) + lmt::test::lmtrain() + kTiny + " --set ddp.strategy=" +
                 strategy + " --set train.steps=6 --set train.resume=" +
                 checkpoint_path(dir.path + "/a", 3));
    INFO(c.output);
    CHECK(c.code == 2);
    CHECK(c.output.find("AdamW's moments are stored in bf16, this run has optim.state_dtype = "
                        "\"fp32\"") != std::string::npos);
    CHECK(std::count(c.output.begin(), c.output.end(), '\n') == 1);
    CHECK(c.output.find("step ") == std::string::npos);
  }
}

TEST_CASE("train: without master weights the matmul weights are checkpointed as BF16, resume bit "
          "for bit (flat and zero1 on 2 ranks, fp32 and bf16 moments), and a resume with master "
          "weights is refused") {
  for (auto [strategy, state] : {std::pair<std::string, std::string>{"flat", "fp32"}, {"zero1", "bf16"}}) {
    INFO(strategy << ", " << state << " moments");
    TempDir dir;
    Safetensors sa = resumes_bit_for_bit(" --set model.precision=bf16 --set optim.master_weights="
                                         "false --set optim.state_dtype=" + state +
                                         " --set ddp.strategy=" + strategy, dir.path);
    CHECK(sa.metadata["optim.master_weights"] == "false");
    // The weights only matmuls read in BF16, 2 bytes an element; the RMSNorm gains and the
    // embedding (read in fp32) in F32.
    size_t bf16 = 0;
    for (auto& [name, t] : sa.tensors) {
      if (name.rfind("optim.", 0) == 0) continue;
      INFO(name);
      const bool fp32_read = name.find("ln") != std::string::npos || name == "token_embeddings.weight";
      int64_t numel = 1;
      for (int64_t d : t.shape) numel *= d;
      CHECK(t.dtype == (fp32_read ? "F32" : "BF16"));
      CHECK(t.end - t.begin == size_t(numel) * (fp32_read ? 4 : 2));
      bf16 += !fp32_read;
    }
    CHECK(bf16 == 6);  // qkv, output projection, W1, W2, W3 of the one layer, and the LM head
    // Resuming it with master weights: one line naming the file and the key, exit code 2.
    const std::string file = checkpoint_path(dir.path + "/a", 3);
    auto c = run(lmt::test::mpirun(2) + lmt::test::lmtrain() + kTiny + " --set ddp.strategy=" +
                 strategy + " --set optim.state_dtype=" + state +
                 " --set train.steps=6 --set train.resume=" + file);
    INFO(c.output);
    CHECK(c.code == 2);
    CHECK(c.output.find(file + ": written with optim.master_weights = false, this run has true") !=
          std::string::npos);
    CHECK(std::count(c.output.begin(), c.output.end(), '\n') == 1);
    CHECK(c.output.find("step ") == std::string::npos);
  }
}

TEST_CASE("train: tied embeddings checkpoint one [V, d] weight, no LM head, and resume bit for "
          "bit (flat and zero1 on 2 ranks, bf16, with and without master weights)") {
  for (std::string sets : {" --set ddp.strategy=flat", " --set ddp.strategy=zero1",
                           " --set ddp.strategy=zero1 --set optim.master_weights=false"}) {
    INFO(sets);
    TempDir dir;
    Safetensors sa = resumes_bit_for_bit(" --set model.precision=bf16 --set "
                                         "model.tie_embeddings=true" + sets, dir.path);
    CHECK(sa.tensors.count("lm_head.weight") == 0);
    CHECK(sa.tensors.count("optim.m.lm_head.weight") == 0);
    REQUIRE(sa.tensors.count("token_embeddings.weight") == 1);
    CHECK(sa.tensors.at("token_embeddings.weight").dtype == "F32");  // the embedding reads fp32
  }
}

TEST_CASE("train: keep_checkpoints keeps the run's newest checkpoints, a resumed run's too, and "
          "leaves another run's and unreadable files alone") {
  TempDir dir;
  const std::string ckpt = dir.path + "/ckpt", base = std::string(lmt::test::lmtrain()) + kTiny +
                           " --set train.log_every=1 --set train.checkpoint_every=1";
  auto names = [&] {
    std::vector<std::string> out;
    for (const std::string& path : checkpoint_files(ckpt)) out.push_back(path.substr(ckpt.size() + 1));
    return out;
  };
  // Another run's checkpoint (written at step 2 of a run of its own, under a later step's name)
  // and a file that is not a checkpoint at all, in the folder this run writes to.
  auto other = run(base + " --set train.steps=2 --set train.checkpoint_dir=" + dir.path + "/other");
  REQUIRE(other.code == 0);
  std::filesystem::create_directory(ckpt);
  std::filesystem::copy_file(checkpoint_path(dir.path + "/other", 2), ckpt + "/step_00000100.safetensors");
  std::ofstream(ckpt + "/step_00000099.safetensors") << "not a checkpoint";
  auto r = run(base + " --set train.steps=5 --set train.keep_checkpoints=2 --set train.overwrite=1"
               " --set train.checkpoint_dir=" + ckpt);
  INFO(r.output);
  REQUIRE(r.code == 0);
  CHECK(names() == std::vector<std::string>{"step_00000004.safetensors", "step_00000005.safetensors",
                                            "step_00000099.safetensors", "step_00000100.safetensors"});
  CHECK(r.output.find("beside the steps; removed step_00000001.safetensors)") != std::string::npos);
  CHECK(r.output.find("beside the steps; removed step_00000003.safetensors)") != std::string::npos);
  // Resumed, the run is the same one: its older checkpoint goes once two newer are written.
  r = run(base + " --set train.steps=7 --set train.keep_checkpoints=2 --set train.overwrite=1"
          " --set train.checkpoint_dir=" + ckpt + " --set train.resume=" + checkpoint_path(ckpt, 5));
  INFO(r.output);
  REQUIRE(r.code == 0);
  CHECK(names() == std::vector<std::string>{"step_00000006.safetensors", "step_00000007.safetensors",
                                            "step_00000099.safetensors", "step_00000100.safetensors"});
  // 0, the default, keeps every one.
  r = run(base + " --set train.steps=3 --set train.checkpoint_dir=" + dir.path + "/all");
  REQUIRE(r.code == 0);
  CHECK(checkpoint_files(dir.path + "/all").size() == 3);
  CHECK(r.output.find("removed") == std::string::npos);
}

TEST_CASE("train: torn, truncated, corrupted or mismatched checkpoints are refused, never loaded") {
  TempDir dir;
  auto a = run(std::string(lmt::test::lmtrain()) + kTiny +
               " --set train.steps=2 --set train.checkpoint_dir=" + dir.path);
  REQUIRE(a.code == 0);
  std::string good = checkpoint_path(dir.path, 2);
  std::ifstream f(good, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(f)), {});
  struct Case {
    const char* name;
    std::string contents, expect;
  } cases[] = {
      {"truncated", bytes.substr(0, bytes.size() - 100), "truncated"},
      {"torn header", bytes.substr(0, 50), "truncated"},
      {"empty", "", "truncated"},
      {"corrupted", bytes.substr(0, bytes.size() - 7) + "X" + bytes.substr(bytes.size() - 6),
       "corrupted"},
      {"not safetensors", std::string("\x10\0\0\0\0\0\0\0{\"a\": [1, 2}   ", 24), "not a safetensors file"},
      {"a token file", std::string(200, '\x05'), "not a safetensors file (no JSON header"},
  };
  for (auto& c : cases) {
    INFO(std::string(c.name));
    std::string path = dir.file(std::string(c.name) + ".safetensors");
    std::ofstream(path, std::ios::binary) << c.contents;
    auto r = run(std::string(lmt::test::lmtrain()) + kTiny +
                 " --set train.steps=4 --set train.resume=\"" + path + "\"");
    INFO(r.output);
    CHECK(r.code == 2);
    CHECK(r.output.find(c.expect) != std::string::npos);
    CHECK(r.output.find("step ") == std::string::npos);  // no training happened
  }
  // Another model is refused from the header, before the model is allocated: its shape, its
  // heads (the same parameters, another model) or its tied embeddings.
  struct Other {
    std::string set, expect;
  } others[] = {
      {"model.d_ff=28", "written for model.d_ff = 24, this run has 28"},
      {"model.num_heads=4", "written for model.num_heads = 2, this run has 4"},
      {"model.tie_embeddings=true", "written for model.tie_embeddings = false, this run has true"},
  };
  for (auto& o : others) {
    auto r = run(std::string(lmt::test::lmtrain()) + kTiny + " --set " + o.set +
                 " --set train.steps=4 --set train.resume=" + good);
    INFO(r.output);
    CHECK(r.code == 2);
    CHECK(r.output.find(good + ": " + o.expect) != std::string::npos);
    CHECK(std::count(r.output.begin(), r.output.end(), '\n') == 1);
  }
  const std::string tied_dir = dir.path + "/tied";
  REQUIRE(run(std::string(lmt::test::lmtrain()) + kTiny + " --set model.tie_embeddings=true "
              "--set train.steps=2 --set train.checkpoint_dir=" + tied_dir).code == 0);
  auto untied = run(std::string(lmt::test::lmtrain()) + kTiny + " --set train.steps=4 "
                    "--set train.resume=" + checkpoint_path(tied_dir, 2));
  CHECK(untied.code == 2);
  CHECK(untied.output.find("written for model.tie_embeddings = true, this run has false") !=
        std::string::npos);
  auto wrong_world = run(lmt::test::mpirun(2) + lmt::test::lmtrain() + kTiny +
                         " --set train.steps=4 --set train.resume=" + good);
  CHECK(wrong_world.code == 2);
  CHECK(wrong_world.output.find("written by 1 ranks, this run has 2") != std::string::npos);
  auto no_masters = run(std::string(lmt::test::lmtrain()) + kTiny + " --set train.steps=4 "
                        "--set optim.master_weights=false --set train.resume=" + good);
  CHECK(no_masters.code == 2);
  CHECK(no_masters.output.find(good + ": written with optim.master_weights = true, this run has "
                               "false") != std::string::npos);
}

TEST_CASE("train: a format-2 checkpoint (its data's checksum taken a byte at a time) still "
          "resumes; one byte of its data changed is refused") {
  // Written by the format-2 writer: kTiny in fp32 on the CPU, 2 steps.
  const std::string old = "tests/e2e/data/format2_step_2.safetensors";
  REQUIRE(Safetensors::read_header(old).metadata.at("format") == "lmtrain-checkpoint-2");
  const std::string base = std::string(lmt::test::lmtrain()) + kTiny +
                           " --set model.precision=fp32 --set run.device=cpu --set train.steps=3"
                           " --set train.resume=";
  auto r = run(base + old);
  INFO(r.output);
  CHECK(r.code == 0);
  CHECK(r.output.find("step 3/3") != std::string::npos);
  TempDir dir;
  std::ifstream f(old, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(f)), {});
  bytes[bytes.size() - 7] ^= 1;
  const std::string changed = dir.file("changed.safetensors");
  std::ofstream(changed, std::ios::binary) << bytes;
  auto bad = run(base + changed);
  INFO(bad.output);
  CHECK(bad.code == 2);
  CHECK(bad.output.find(changed + ": corrupted: checksum of header and data") != std::string::npos);
}

TEST_CASE("train: --csv appends rows under one header; a file with another header is refused untouched") {
  TempDir dir;
  std::string csv = dir.file("runs.csv");
  for (int i = 0; i < 2; ++i)
    REQUIRE(run(std::string(lmt::test::lmtrain()) + kTiny + " --set train.steps=2 --csv " + csv).code == 0);
  std::ifstream f(csv);
  std::string header, row1, row2, extra;
  std::getline(f, header), std::getline(f, row1), std::getline(f, row2);
  CHECK(!std::getline(f, extra));
  CHECK(header.rfind("run.mode,run.device,run.seed,run.graphs,run.comm_timeout_s,model.d_model",
                     0) == 0);
  CHECK(header.find("final_loss") != std::string::npos);
  CHECK(std::count(row1.begin(), row1.end(), ',') == std::count(header.begin(), header.end(), ','));
  // The config's columns end where the build's begins: what --version prints, beside the metrics.
  const std::vector<std::string> names = lmt::test::csv_cells(header);
  const auto at = std::find(names.begin(), names.end(), "lmtrain_version");
  REQUIRE((at != names.end() && at != names.begin() && at + 1 != names.end()));
  CHECK(at[-1].find('.') != std::string::npos);
  CHECK(at[1] == "date_utc");
  const std::string version = run(std::string(lmt::test::lmtrain()) + " --version").output;
  CHECK(version == "lmtrain " + lmt::test::csv_cells(row2).at(size_t(at - names.begin())) + "\n");
  std::string other = dir.file("other.csv", "a,b\n1,2\n");
  auto r = run(std::string(lmt::test::lmtrain()) + kTiny + " --set train.steps=2 --csv " + other);
  CHECK(r.code == 2);
  CHECK(r.output.find("another header") != std::string::npos);
  std::ifstream g(other);
  std::string kept((std::istreambuf_iterator<char>(g)), {});
  CHECK(kept == "a,b\n1,2\n");
  // A folder given as the file is named as such, / too.
  for (const std::string& folder : {dir.path, std::string("/")}) {
    auto d = run(std::string(lmt::test::lmtrain()) + kTiny + " --set train.steps=2 --csv " + folder);
    INFO(d.output);
    CHECK(d.code == 2);
    CHECK(d.output.find("lmtrain: error: --csv " + folder + ": a directory, not a file") !=
          std::string::npos);
  }
}

TEST_CASE("train: ranks with different configs refuse to start and name the rank") {
  std::string bin = lmt::test::lmtrain();
  auto r = run(lmt::test::mpirun(1) + bin + kTiny + " --set train.steps=3 : -np 1 " + bin + kTiny +
               " --set train.steps=4");
  INFO(r.output);
  CHECK(r.code == 2);
  CHECK(r.output.find("rank(s) 1 differ from rank 0, first at train.steps (rank 0: 3, rank 1: 4)") !=
        std::string::npos);
}

TEST_CASE("train: a bad data file on one rank stops every rank with one line and exit code 2") {
  TempDir dir;
  std::string odd = dir.file("odd.bin", "abc");
  auto r = run(lmt::test::mpirun(2) + lmt::test::lmtrain() + kTiny +
               " --set data.source=\"file\" --set data.path=" + odd);
  INFO(r.output);
  CHECK(r.code == 2);
  CHECK(r.output.find("3 bytes is odd") != std::string::npos);
}

TEST_CASE("configs: every shipped config resolves and validates") {
  for (std::string f : {"configs/train.toml", "configs/models/tiny.toml", "configs/models/small.toml",
                        "configs/models/medium.toml", "configs/models/large.toml",
                        "configs/models/xl.toml", "configs/models/2.7b.toml"}) {
    auto r = run(std::string(lmt::test::lmtrain()) + " --config " + f + " --print-config");
    INFO(f << ": " << r.output);
    CHECK(r.code == 0);
  }
}

TEST_CASE("bench: times forward, forward+backward and the step; one CSV row with every statistic") {
  TempDir dir;
  std::string csv = dir.file("bench.csv");
  auto r = run(std::string(lmt::test::lmtrain()) + kTiny +
               " --set run.mode=bench --set bench.warmup=1 --set bench.steps=3 --csv " + csv);
  INFO(r.output);
  REQUIRE(r.code == 0);
  for (const char* line : {"forward ", "forward+backward", "step (with AdamW)", "step phases",
                           "tokens/s", "memory allocated: params"})
    CHECK(r.output.find(line) != std::string::npos);
  std::ifstream f(csv);
  std::string header, row;
  std::getline(f, header), std::getline(f, row);
  CHECK(header.find("fwd_ms_median,fwd_ms_min") != std::string::npos);
  CHECK(header.find("step_ms_mean") != std::string::npos);
  CHECK(std::count(row.begin(), row.end(), ',') == std::count(header.begin(), header.end(), ','));
}

TEST_CASE("bench: a run whose loss is not finite exits 1 and adds no row to the CSV") {
  TempDir dir;
  std::string csv = dir.file("bench.csv");
  const std::string bench = std::string(lmt::test::lmtrain()) + kTiny +
                            " --set run.mode=bench --set bench.warmup=1 --set bench.steps=3 --csv " +
                            csv;
  auto r = run(bench);
  REQUIRE(r.code == 0);
  auto read = [&] {
    std::ifstream f(csv);
    return std::string(std::istreambuf_iterator<char>(f), {});
  };
  const std::string before = read();
  // lr 1e18 without clipping: the weights blow up within the steps and the loss is NaN.
  r = run(bench + " --set optim.lr=1e18 --set optim.grad_clip=0 --set optim.warmup_steps=0");
  INFO(r.output);
  CHECK(r.code == 1);
  CHECK(r.output.find("not finite: the steps diverged") != std::string::npos);
  CHECK(read() == before);  // the earlier row kept, none added
}

TEST_CASE("bench: --trace writes the timed steps' phases and a memory counter; train refuses it") {
  TempDir dir;
  std::string path = dir.file("trace.json");
  auto r = run(std::string(lmt::test::lmtrain()) + kTiny +
               " --set run.mode=bench --set bench.warmup=0 --set bench.steps=2 --trace " + path);
  REQUIRE(r.code == 0);
  std::ifstream f(path);
  std::string text((std::istreambuf_iterator<char>(f)), {});
  CHECK(text.rfind("{\"traceEvents\":[", 0) == 0);
  for (const char* phase : {"\"forward\"", "\"backward\"", "\"optimizer\""})
    CHECK(text.find(phase) != std::string::npos);
  // The memory counter at every phase boundary of both steps: 2 x (3 phases + 1) samples.
  size_t samples = 0;
  for (size_t at = text.find("\"allocated MiB\""); at != std::string::npos;
       at = text.find("\"allocated MiB\"", at + 1))
    ++samples;
  CHECK(samples == 8);
  auto train = run(std::string(lmt::test::lmtrain()) + kTiny + " --trace " + path);
  CHECK(train.code == 2);
  CHECK(train.output.find("only run.mode = \"bench\" writes a trace") != std::string::npos);
  // A folder it cannot write in is refused before the run, as --csv's.
  const std::string nowhere = dir.file("no/such/folder/trace.json");
  auto unwritable = run(std::string(lmt::test::lmtrain()) + kTiny +
                        " --set run.mode=bench --set bench.warmup=0 --set bench.steps=1 --trace " + nowhere);
  INFO(unwritable.output);
  CHECK(unwritable.code == 2);
  CHECK(unwritable.output.find("lmtrain: error: --trace " + nowhere + ": cannot write in ") !=
        std::string::npos);
  CHECK(unwritable.output.find("== lmtrain bench") == std::string::npos);
}

TEST_CASE("bench --trace on 2 ranks: one file, each rank's phases, collectives and waits") {
  TempDir dir;
  auto count = [](const std::string& text, const std::string& what) {
    size_t n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  };
  std::map<std::string, std::string> traces;
  for (const char* strategy : {"flat", "naive"}) {
    std::string path = dir.file(std::string(strategy) + ".json");
    auto r = run(lmt::test::mpirun(2) + lmt::test::lmtrain() + kTiny +
                 " --set run.mode=bench --set bench.warmup=1 --set bench.steps=2"
                 " --set ddp.strategy=" + strategy + " --trace " + path);
    INFO(r.output);
    REQUIRE(r.code == 0);
    std::ifstream f(path);
    traces[strategy] = std::string((std::istreambuf_iterator<char>(f)), {});
  }
  for (auto& [strategy, text] : traces) {
    INFO(strategy);
    for (int rank : {0, 1}) {
      const std::string pid = strf("\"pid\":%d,", rank);
      CHECK(count(text, "\"name\":\"backward\",\"ph\":\"X\"," + pid + "\"tid\":0,") == 2);
      CHECK(count(text, "\"name\":\"wait\",\"ph\":\"X\"," + pid + "\"tid\":2,") >= 2);
      CHECK(count(text, strf("\"name\":\"rank %d\"", rank)) == 1);
    }
  }
  // The timed steps' collectives only: flat all-reduces the whole buffer once a step, naive each
  // parameter tensor (the tiny model has more than one), on every rank alike.
  const std::string flat0 = "\"name\":\"all_reduce\",\"ph\":\"X\",\"pid\":0,\"tid\":1,";
  const std::string flat1 = "\"name\":\"all_reduce\",\"ph\":\"X\",\"pid\":1,\"tid\":1,";
  CHECK(count(traces["flat"], flat0) == 2);
  CHECK(count(traces["flat"], flat1) == 2);
  CHECK(count(traces["naive"], flat0) > 2);
  CHECK(count(traces["naive"], flat0) % 2 == 0);
  CHECK(count(traces["naive"], flat0) == count(traces["naive"], flat1));
}

TEST_CASE("run.graphs = 1 off the GPU or on several ranks stops with one line and exit code 2") {
  for (const char* mode : {"train", "bench"}) {
    INFO(mode);
    auto r = run(std::string(lmt::test::lmtrain()) + kTiny + " --set run.mode=" + mode +
                 " --set run.device=cpu --set run.graphs=1");
    CHECK(r.code == 2);
    CHECK(std::count(r.output.begin(), r.output.end(), '\n') == 1);
    CHECK(r.output.find("run.graphs = 1: CUDA graphs need the cuda device (this run's is cpu)") !=
          std::string::npos);
  }
}

// On a machine with a GPU: the same training run launched op by op and replayed as CUDA graphs
// prints the same losses (the kernels and their order are the same).
TEST_CASE("train with run.graphs = 1 on a GPU follows the launched run's losses exactly" *
          doctest::skip(lmt::gpu_count() < 1)) {
  std::vector<std::string> lines[2];
  for (int graphs : {0, 1}) {
    auto r = run(std::string(lmt::test::lmtrain()) + kTiny +
                 " --set run.device=cuda --set model.precision=bf16 --set train.steps=12"
                 " --set train.log_every=4 --set run.graphs=" + std::to_string(graphs));
    INFO(r.output);
    REQUIRE(r.code == 0);
    std::istringstream text(r.output);
    for (std::string line; std::getline(text, line);)
      if (line.rfind("step ", 0) == 0) {  // step, loss, lr, grad norm: up to the 4th '|'
        size_t at = 0;
        for (int k = 0; k < 4 && at != std::string::npos; ++k) at = line.find('|', at + 1);
        lines[graphs].push_back(line.substr(0, at));
      }
  }
  CHECK(lines[0].size() == 3);
  CHECK(lines[1] == lines[0]);
}

TEST_CASE("bench: on 2 ranks the step synchronises gradients and reports comm, exposed and compute") {
  for (std::string strategy : {"flat", "zero1"}) {
    auto r = run(lmt::test::mpirun(2) + lmt::test::lmtrain() + kTiny +
                 " --set run.mode=bench --set bench.warmup=1 --set bench.steps=3 "
                 "--set model.precision=fp32 --set ddp.strategy=" + strategy);
    INFO(r.output);
    REQUIRE(r.code == 0);
    CHECK(r.output.find("communication (" + strategy + ", 2 ranks): comm ") != std::string::npos);
    CHECK(r.output.find("exposed ") != std::string::npos);
  }
}

// On a machine with 2 GPUs: train with run.device = cuda on 2 ranks over NCCL, every strategy.
TEST_CASE("train on 2 GPUs over NCCL: every strategy runs, reports its timing and follows one curve" *
          doctest::skip(lmt::gpu_count() < 2)) {
  std::vector<double> finals;
  for (std::string strategy : {"naive", "flat", "overlap", "bucketed", "zero1"}) {
    auto r = run(lmt::test::mpirun(2) + lmt::test::lmtrain() + kTiny +
                 " --set run.device=cuda --set model.precision=fp32 --set train.steps=20"
                 " --set train.log_every=10 --set ddp.bucket_mb=0.001 --set ddp.strategy=" +
                 strategy);
    INFO(strategy, "\n", r.output);
    REQUIRE(r.code == 0);
    CHECK(r.output.find("device cuda, 2 rank(s)") != std::string::npos);
    for (const char* line : {"compute ", "comm ", "exposed comm", "the NCCL stream"})
      CHECK(r.output.find(line) != std::string::npos);
    auto losses = progress_losses(r.output);
    REQUIRE(losses.size() == 2);
    finals.push_back(losses.back());
  }
  for (double f : finals) CHECK(f == doctest::Approx(finals[0]).epsilon(1e-4));
}

// The tiny model at head dim 64 under FlashAttention: on a Hopper GPU, the wgmma kernels (RoPE in
// the forward's q) rather than the naive path the head dim 8 of kTiny takes.
const std::string kTinyFlash =
    " --set model.d_model=64 --set model.num_heads=1 --set model.attention=flash";

// On a machine with a GPU: a checkpoint taken from the GPU (device to host, then the writer's
// thread) resumes bit for bit, launched op by op or replayed as CUDA graphs, under fp32 and bf16
// (bf16 moments and weights without fp32 masters too).
TEST_CASE("train on a GPU: a resumed run continues bit for bit like an uninterrupted one" *
          doctest::skip(lmt::gpu_count() < 1)) {
  for (const std::string& sets : std::vector<std::string>{
           " --set model.precision=fp32 --set run.graphs=0",
           " --set model.precision=bf16 --set run.graphs=1" + kTinyFlash,
           " --set model.precision=bf16 --set run.graphs=1 --set optim.state_dtype=bf16"
           " --set optim.master_weights=false"}) {
    INFO(sets);
    TempDir dir;
    resumes_bit_for_bit(" --set run.device=cuda" + sets, dir.path, 1);
  }
}

// On a machine with 2 GPUs, the gradients synchronised over NCCL: every strategy's checkpoint
// (zero1's moments and bf16 masters gathered to rank 0 from both ranks' shards, through host
// memory) resumes bit for bit.
TEST_CASE("train on 2 GPUs over NCCL: every strategy's checkpoint resumes bit for bit" *
          doctest::skip(lmt::gpu_count() < 2)) {
  for (std::string strategy : {"naive", "flat", "overlap", "bucketed", "zero1"}) {
    INFO(strategy);
    TempDir dir;
    resumes_bit_for_bit(" --set run.device=cuda --set model.precision=bf16 --set ddp.bucket_mb=0.001"
                        " --set ddp.strategy=" + strategy + kTinyFlash, dir.path);
  }
}
