// Runs that go wrong lose nothing: divergence stops before the bad update with exit code 3,
// bad setups are refused before step 1, signals checkpoint and resume bit for bit, a stopped
// peer ends the job by name, checkpoints are sealed (exit_codes.hpp lists the codes).
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

#include "checkpoint.hpp"
#include "exit_codes.hpp"
#include "../helpers.hpp"
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
  // lr 1e12 after a long warm-up: step 1 (lr 1e8) blows the weights up, and step 2's loss is NaN
  // (on the CPU), or its gradients are where the loss stays finite (on GPUs): step 2 either way.
  TempDir dir;
  auto r = run(lmt::test::mpirun(2) + lmt::test::lmtrain() + kTiny +
               " --set model.precision=fp32 --set optim.lr=1e12 --set optim.warmup_steps=10000"
               " --set train.steps=50 --set train.log_every=1 --set train.checkpoint_every=1"
               " --set train.checkpoint_dir=" + dir.path);
  INFO(r.output);
  CHECK(r.code == kExitDiverged);
  CHECK(count(r.output, "diverged") == 1);  // one line, from one rank
  const std::string line = "lmtrain: diverged at step 2 (rank 0): ";
  CHECK((r.output.find(line + "loss = ") != std::string::npos ||
         r.output.find(line + "grad norm = ") != std::string::npos));
  CHECK(r.output.find("last checkpoint: " + checkpoint_path(dir.path, 1)) != std::string::npos);
  CHECK(r.output.find("step 2/50") == std::string::npos);  // no progress line of the bad step
  CHECK(files_in(dir.path) == std::vector<std::string>{"step_00000001.safetensors"});
  CHECK(all_finite(Safetensors::read(checkpoint_path(dir.path, 1))));
}

TEST_CASE("robust: an unwritable checkpoint directory is refused before step 1, in seconds") {
  TempDir dir;
  const std::string file = dir.file("a-file", "x");
  struct Case {
    std::string path, expect;
  } cases[] = {
      {file, "a-file is not a directory"},
      {file + "/sub", "a-file is not a directory"},
      {"/proc", "cannot write a file in it"},  // not writable even by root
  };
  for (auto& c : cases) {
    INFO(c.path);
    // Without the check the run would train for ever (and fail at its first checkpoint).
    auto t0 = std::chrono::steady_clock::now();
    auto r = run("timeout 60 " + lmt::test::mpirun(2) + lmt::test::lmtrain() + kTiny +
                 " --set train.steps=1000000000 --set train.checkpoint_dir=" + c.path);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    INFO(r.output);
    CHECK(r.code == kExitUsage);
    CHECK(r.output.find("train.checkpoint_dir = \"" + c.path + "\": " ) != std::string::npos);
    CHECK(r.output.find(c.expect) != std::string::npos);
    CHECK(r.output.find("step ") == std::string::npos);
    CHECK(s < 10);
  }
}

TEST_CASE("robust: checkpoints that would fill the disk are refused before step 1, naming a "
          "keep_checkpoints that fits") {
  TempDir dir;
  const std::string ckpt = dir.path + "/ckpt", base = "timeout 60 " + std::string(lmt::test::lmtrain()) +
      kTiny + " --set train.steps=1000000000 --set train.checkpoint_every=1 --set train.checkpoint_dir=" + ckpt;
  // A checkpoint a step for 10^9 steps: no disk holds them all.
  auto r = run(base);
  INFO(r.output);
  CHECK(r.code == kExitUsage);
  CHECK(r.output.find("train.checkpoint_dir = \"" + ckpt + "\": this run writes 1000000000 "
                      "checkpoints of ") != std::string::npos);
  CHECK(r.output.find(" free; train.keep_checkpoints = ") != std::string::npos);
  CHECK(r.output.find("step ") == std::string::npos);
  CHECK(checkpoint_files(ckpt).empty());
  // Keeping the newest 10^9 - 1 of them holds all but one at once: refused the same way.
  r = run(base + " --set train.keep_checkpoints=999999999");
  INFO(r.output);
  CHECK(r.code == kExitUsage);
  CHECK(r.output.find("train.keep_checkpoints = 999999999 holds up to 1000000000 checkpoints of ") !=
        std::string::npos);
  CHECK(r.output.find(" free; ") != std::string::npos);
  CHECK(r.output.find("step ") == std::string::npos);
}

// Both on the CPU device: on a GPU machine the default (auto) device is the GPU, whose own
// memory check (check_device_memory) would speak first, and flash attention takes no head dim 2.
TEST_CASE("robust: a model too big for host memory is refused in seconds with the byte counts") {
  auto t0 = std::chrono::steady_clock::now();
  const std::string big = "timeout 60 " + std::string(lmt::test::lmtrain()) +
                          " --set run.device=cpu --set model.num_layers=100000 --set model.d_model=4096"
                          " --set model.d_ff=11008 --set model.num_heads=32";
  auto r = run(big);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO(r.output);
  CHECK(r.code == kExitUsage);
  CHECK(r.output.find("out of host memory: this run needs ") != std::string::npos);
  CHECK(r.output.find(" GiB (1 rank(s) on this node x ") != std::string::npos);
  CHECK(r.output.find(" is available (") != std::string::npos);
  CHECK(s < 10);
  // With checkpoints, rank 0's host copy of the state is counted too, and nothing is created.
  TempDir dir;
  const std::string ckpt = dir.path + "/ckpt";
  r = run(big + " --set train.checkpoint_dir=" + ckpt);
  INFO(r.output);
  CHECK(r.code == kExitUsage);
  CHECK(r.output.find(" for checkpoints on the host), ") != std::string::npos);
  CHECK(!std::filesystem::exists(ckpt));
}

TEST_CASE("robust: a batch or context too big for host memory is refused before a byte of it is taken") {
  // Train mode sizes the batch's host buffers (B x T tokens, inputs and targets) only after the
  // memory check, which names the bytes.
  for (std::string set : {"model.context_length=10000000000", "train.batch_size=10000000000"}) {
    auto r = run("timeout 60 " + std::string(lmt::test::lmtrain()) +
                 " --set run.device=cpu --set " + set);
    INFO(set, r.output);
    CHECK(r.code == kExitUsage);
    CHECK(r.output.find("out of host memory: this run needs ") != std::string::npos);
    CHECK(r.output.find("bad_alloc") == std::string::npos);
  }
}

TEST_CASE("robust: a model of 100k layers is laid out and takes a step in seconds") {
  // Small layers: the run fits; what is tested is the parameter layout's cost (its name lookups
  // were quadratic in the layer count).
  auto r = run("timeout 60 " + std::string(lmt::test::lmtrain()) +
               " --set run.device=cpu --set model.num_layers=100000 --set model.d_model=2 --set model.num_heads=1"
               " --set model.d_ff=1 --set model.vocab_size=2 --set model.context_length=2"
               " --set data.synthetic_successors=1 --set train.batch_size=1 --set train.steps=1"
               " --set model.precision=fp32");
  INFO(r.output);
  CHECK(r.code == 0);
  CHECK(r.output.find("== done ==") != std::string::npos);
}

TEST_CASE("robust: partial checkpoints of dead writers are removed, a live writer's and other files kept; a refused run touches nothing") {
  TempDir dir;
  // A process that has exited: its pid names no live writer.
  const std::string dead = lmt::test::run("sh -c 'echo $$'").output;
  const std::string stale = dir.file("step_00000004.safetensors.tmp." + dead.substr(0, dead.size() - 1), "x");
  const std::string live = dir.file("step_00000004.safetensors.tmp." + std::to_string(getpid()), "x");
  // Not a checkpoint's partial: kept, whatever its pid.
  const std::string other = dir.file("notes.tmp." + dead.substr(0, dead.size() - 1), "x");
  // A refused run (no such token file) removes nothing and creates no directory.
  auto refused = run(std::string(lmt::test::lmtrain()) + kTiny + " --set train.steps=1"
                     " --set data.source=file --set data.path=" + dir.file("missing.bin") +
                     " --set train.checkpoint_dir=" + dir.path);
  CHECK(refused.code == kExitUsage);
  CHECK(std::filesystem::exists(stale));
  auto elsewhere = run(std::string(lmt::test::lmtrain()) + kTiny + " --set train.steps=1"
                       " --set data.source=file --set data.path=" + dir.file("missing.bin") +
                       " --set train.checkpoint_dir=" + dir.path + "/new/sub");
  CHECK(elsewhere.code == kExitUsage);
  CHECK(!std::filesystem::exists(dir.path + "/new"));
  auto r = run(std::string(lmt::test::lmtrain()) + kTiny +
               " --set train.steps=1 --set train.checkpoint_dir=" + dir.path);
  INFO(r.output);
  CHECK(r.code == 0);
  CHECK(r.output.find("removed " + stale + ": a partial checkpoint whose writer") != std::string::npos);
  CHECK(!std::filesystem::exists(stale));
  CHECK(std::filesystem::exists(live));
  CHECK(std::filesystem::exists(other));
}

TEST_CASE("robust: SIGTERM to one rank stops both after the same step, checkpointed; the resume "
          "matches an uninterrupted run bit for bit") {
  TempDir dir;
  // Constant lr after warm-up: the schedule does not depend on train.steps, so the interrupted
  // run (steps = 1e9) and the reference (steps = its stop + 4) take identical steps.
  const std::string args = lmt::test::mpirun(2) + lmt::test::lmtrain() + kTiny +
                           " --set model.precision=fp32 --set optim.schedule=constant";
  // Rank 1 alone gets SIGTERM (as Slurm signals every task; rank 0 must learn of it) once
  // training is under way.
  const std::string log = dir.file("log");
  auto b = run(args + " --set train.steps=1000000000 --set train.log_every=100"
               " --set train.checkpoint_dir=" + dir.path + "/b > " + log + " 2>&1 & mp=$!\n"
               "for i in $(seq 1200); do grep -q '| loss' " + log + " && break; sleep 0.05; done\n"
               "for p in $(pgrep -P $mp); do\n"
               "  tr '\\0' '\\n' < /proc/$p/environ | grep -qx OMPI_COMM_WORLD_RANK=1 && kill -TERM $p\n"
               "done\n"
               "wait $mp; echo \"exit code $?\"; cat " + log);
  INFO(b.output);
  CHECK(b.output.find("exit code " + std::to_string(kExitPreempted)) != std::string::npos);
  const std::string said = "lmtrain: SIGTERM (rank 1): stopped after step ";
  const size_t at = b.output.find(said);
  REQUIRE(at != std::string::npos);
  const long stop = std::stol(b.output.substr(at + said.size()));
  CHECK(stop >= 100);
  const std::string saved = checkpoint_path(dir.path + "/b", stop);
  CHECK(b.output.find("resume with --set train.resume=" + saved) != std::string::npos);
  CHECK(files_in(dir.path + "/b") == std::vector<std::string>{std::filesystem::path(saved).filename()});

  const std::string to = " --set train.log_every=1 --set train.steps=" + std::to_string(stop + 4);
  auto a = run(args + to + " --set train.checkpoint_dir=" + dir.path + "/a");
  auto c = run(args + to + " --set train.checkpoint_dir=" + dir.path + "/c --set train.resume=" + saved);
  INFO(c.output);
  REQUIRE(a.code == 0);
  REQUIRE(c.code == 0);
  auto la = lmt::test::progress_losses(a.output), lc = lmt::test::progress_losses(c.output);
  REQUIRE(lc.size() == 4);
  CHECK(std::vector<double>(la.end() - 4, la.end()) == lc);
  Safetensors sa = Safetensors::read(checkpoint_path(dir.path + "/a", stop + 4));
  Safetensors sc = Safetensors::read(checkpoint_path(dir.path + "/c", stop + 4));
  CHECK(sa.data == sc.data);
  CHECK(sa.metadata["rng.0"] == sc.metadata["rng.0"]);
  CHECK(sa.metadata["rng.1"] == sc.metadata["rng.1"]);
}

namespace {

// `from` with its JSON header passed through `edit` (the header length rewritten), saved as `to`.
void edit_header(const std::string& from, const std::string& to,
                 const std::function<void(std::string&)>& edit) {
  std::ifstream f(from, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(f)), {});
  uint64_t n;
  std::memcpy(&n, bytes.data(), 8);
  std::string header = bytes.substr(8, n);
  const std::string data = bytes.substr(8 + n);
  edit(header);
  n = header.size();
  std::ofstream out(to, std::ios::binary);
  out.write(reinterpret_cast<const char*>(&n), 8);
  out << header << data;
}

void replace(std::string& s, const std::string& from, const std::string& to) {
  const size_t at = s.find(from);
  REQUIRE(at != std::string::npos);
  s.replace(at, from.size(), to);
}

// The "[begin,end]" after a tensor's "data_offsets".
std::string offsets_of(const std::string& header, const std::string& name) {
  size_t at = header.find("\"" + name + "\"");
  at = header.find("\"data_offsets\":", at) + 15;
  return header.substr(at, header.find(']', at) + 1 - at);
}

}  // namespace

TEST_CASE("robust: checkpoint headers are sealed: edits that stay valid JSON are refused") {
  TempDir dir;
  auto a = run(std::string(lmt::test::lmtrain()) + kTiny + " --set model.precision=fp32"
               " --set train.steps=2 --set train.checkpoint_dir=" + dir.path + "/a");
  REQUIRE(a.code == 0);
  const std::string good = checkpoint_path(dir.path + "/a", 2);
  std::vector<std::pair<std::string, std::function<void(std::string&)>>> edits = {
      {"step", [](std::string& h) { replace(h, "\"step\":\"2\"", "\"step\":\"1\""); }},
      {"adam_t", [](std::string& h) { replace(h, "\"adam_t\":\"2\"", "\"adam_t\":\"7\""); }},
      {"seed", [](std::string& h) { replace(h, "\"seed\":\"0\"", "\"seed\":\"5\""); }},
      {"swapped offsets", [](std::string& h) {  // two tensors of one shape trade their data
         const std::string m = offsets_of(h, "optim.m.ln_final.weight");
         const std::string v = offsets_of(h, "optim.v.ln_final.weight");
         replace(h, m, "@"), replace(h, v, m), replace(h, "@", v);
       }},
      {"a dropped metadata entry", [](std::string& h) { replace(h, "\"data\":\"synthetic (4 successors)\",", ""); }},
  };
  for (auto& [what, edit] : edits) {
    INFO(what);
    const std::string path = dir.file("edited.safetensors");
    edit_header(good, path, edit);
    Safetensors::read(path);  // still a well-formed safetensors file
    auto r = run(std::string(lmt::test::lmtrain()) + kTiny + " --set model.precision=fp32"
                 " --set train.steps=4 --set train.resume=" + path);
    INFO(r.output);
    CHECK(r.code == kExitUsage);
    CHECK(r.output.find(path + ": corrupted: checksum of header and data") != std::string::npos);
    CHECK(r.output.find("step ") == std::string::npos);
  }
  // The unedited file through the same path loads.
  edit_header(good, dir.file("same.safetensors"), [](std::string&) {});
  CHECK(run(std::string(lmt::test::lmtrain()) + kTiny + " --set model.precision=fp32"
            " --set train.steps=4 --set train.resume=" + dir.file("same.safetensors")).code == 0);
}

TEST_CASE("robust: another run's checkpoint directory is refused unless train.overwrite = 1; a "
          "resume may write into its own") {
  TempDir dir;
  const std::string base = std::string(lmt::test::lmtrain()) + kTiny +
                           " --set train.steps=4 --set train.checkpoint_every=2";
  REQUIRE(run(base + " --set train.checkpoint_dir=" + dir.path).code == 0);
  auto again = run(base + " --set train.checkpoint_dir=" + dir.path);
  INFO(again.output);
  CHECK(again.code == kExitUsage);
  CHECK(again.output.find("holds " + checkpoint_path(dir.path, 2) + " of another run; set "
                          "train.overwrite = 1") != std::string::npos);
  // The run that wrote them continues there; another run's resume does not, nor does its own
  // from a checkpoint older than the last (it would write over the later ones).
  auto older = run(base + " --set train.steps=6 --set train.checkpoint_dir=" + dir.path +
                   " --set train.resume=" + checkpoint_path(dir.path, 2));
  INFO(older.output);
  CHECK(older.code == kExitUsage);
  CHECK(older.output.find("holds " + checkpoint_path(dir.path, 4) + ", later than the resumed "
                          "step 2: this run would write over it") != std::string::npos);
  CHECK(run(base + " --set train.steps=6 --set train.checkpoint_dir=" + dir.path +
            " --set train.resume=" + checkpoint_path(dir.path, 4)).code == 0);
  TempDir other;
  REQUIRE(run(base + " --set train.checkpoint_dir=" + other.path).code == 0);
  auto mixed = run(base + " --set train.steps=6 --set train.checkpoint_dir=" + dir.path +
                   " --set train.resume=" + checkpoint_path(other.path, 4));
  CHECK(mixed.code == kExitUsage);
  CHECK(mixed.output.find("of another run than the resumed one") != std::string::npos);
  auto forced = run(base + " --set train.checkpoint_dir=" + dir.path + " --set train.overwrite=1");
  INFO(forced.output);
  CHECK(forced.code == 0);
}

TEST_CASE("robust: resuming under another seed, data source, batch size or context length warns in one line and continues") {
  TempDir dir;
  const std::string base = std::string(lmt::test::lmtrain()) + kTiny + " --set train.steps=4";
  REQUIRE(run(base + " --set train.steps=2 --set train.checkpoint_dir=" + dir.path).code == 0);
  const std::string ckpt = checkpoint_path(dir.path, 2);
  auto same = run(base + " --set train.resume=" + ckpt);
  CHECK(same.code == 0);
  CHECK(same.output.find("warning") == std::string::npos);
  std::vector<uint16_t> tokens(1000);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = uint16_t(i % 32);
  const std::string file = dir.file("tokens.bin");
  std::ofstream(file, std::ios::binary).write(reinterpret_cast<const char*>(tokens.data()), 2000);
  auto r = run(base + " --set run.seed=3 --set data.source=file --set data.path=" + file +
               " --set train.resume=" + ckpt);
  INFO(r.output);
  CHECK(r.code == 0);
  CHECK(count(r.output, "warning") == 1);
  CHECK(r.output.find("lmtrain: warning: resuming " + ckpt + " with run.seed 3, data file " + file +
                      " (2000 bytes); its run had run.seed 0, data synthetic (4 successors): "
                      "continuing") != std::string::npos);
  // kTiny's batch of 2 as 2 micro-batches of 1 is the same stream; a batch of 1 is not.
  auto split = run(base + " --set train.batch_size=1 --set train.grad_accum=2 --set train.resume=" + ckpt);
  CHECK(split.code == 0);
  CHECK(split.output.find("warning") == std::string::npos);
  // Another context length or precision: the same parameters, other numerics.
  auto numerics = run(base + " --set model.context_length=8 --set train.resume=" + ckpt);
  INFO(numerics.output);
  CHECK(numerics.code == 0);
  CHECK(count(numerics.output, "warning") == 1);
  CHECK(numerics.output.find("lmtrain: warning: resuming " + ckpt + " with model.context_length "
                             "8; its run had model.context_length 16: continuing, not as the "
                             "interrupted run would have") != std::string::npos);
  auto smaller = run(base + " --set train.batch_size=1 --set train.resume=" + ckpt);
  INFO(smaller.output);
  CHECK(smaller.code == 0);
  CHECK(count(smaller.output, "warning") == 1);
  CHECK(smaller.output.find("lmtrain: warning: resuming " + ckpt + " with train.batch_size 1; its "
                            "run had train.batch_size 2: continuing") != std::string::npos);
}

TEST_CASE("robust: a stopped rank ends the job after run.comm_timeout_s, named, exit code 5") {
  TempDir dir;
  const std::string log = dir.file("log");
  // Rank 1 of 3 is SIGSTOPped mid-run: the others wait in a collective (they spun for ever).
  auto t0 = std::chrono::steady_clock::now();
  // A hang is ended after 90 s (mpirun, then the stopped rank, killed).
  auto r = run(lmt::test::mpirun(3) + lmt::test::lmtrain() + kTiny +
               " --set train.steps=1000000000 --set train.log_every=100 --set run.comm_timeout_s=2"
               " > " + log + " 2>&1 & mp=$!\n"
               "for i in $(seq 1200); do grep -q '| loss' " + log + " && break; sleep 0.05; done\n"
               "for p in $(pgrep -P $mp); do\n"
               "  tr '\\0' '\\n' < /proc/$p/environ | grep -qx OMPI_COMM_WORLD_RANK=1 && kill -STOP $p && s=$p\n"
               "done\n"
               "(sleep 90; kill -TERM $mp) >/dev/null 2>&1 & k=$!\n"
               "wait $mp; echo \"exit code $?\"; kill $k; kill -9 $s 2>/dev/null; cat " + log);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO(r.output);
  CHECK(r.output.find("exit code " + std::to_string(kExitCommTimeout)) != std::string::npos);
  CHECK(r.output.find("lmtrain: communication timeout: rank(s) 1 did not arrive within "
                      "run.comm_timeout_s = 2 s (rank 0 waited ") != std::string::npos);
  CHECK(r.output.find("rank(s) 0, 2 were waiting)") != std::string::npos);
  CHECK(count(r.output, "communication timeout") == 1);
  CHECK(s < 60);
}

TEST_CASE("robust: a directory as token file or checkpoint is named as such") {
  TempDir dir;
  auto data = run(std::string(lmt::test::lmtrain()) + kTiny + " --set data.source=file"
                  " --set data.path=" + dir.path);
  CHECK(data.code == kExitUsage);
  CHECK(data.output.find("data.path = \"" + dir.path + "\": a directory, not a token file") !=
        std::string::npos);
  auto resume = run(std::string(lmt::test::lmtrain()) + kTiny + " --set train.resume=" + dir.path);
  CHECK(resume.code == kExitUsage);
  CHECK(resume.output.find(dir.path + ": a directory, not a checkpoint file (it holds none)") !=
        std::string::npos);
  // One that holds checkpoints names the newest, with or without a checkpoint_dir of this run.
  REQUIRE(run(std::string(lmt::test::lmtrain()) + kTiny + " --set train.steps=4 --set "
              "train.checkpoint_every=2 --set train.checkpoint_dir=" + dir.path).code == 0);
  for (const std::string& more : {std::string(), " --set train.checkpoint_dir=" + dir.path}) {
    auto named = run(std::string(lmt::test::lmtrain()) + kTiny + " --set train.steps=6 --set "
                     "train.resume=" + dir.path + more);
    INFO(named.output);
    CHECK(named.code == kExitUsage);
    CHECK(named.output.find(dir.path + ": a directory, not a checkpoint file; its newest: --set "
                            "train.resume=" + dir.path + "/step_00000004.safetensors") !=
          std::string::npos);
  }
}

TEST_CASE("robust: under mpirun -q, a rank that dies leaves a line saying why the others end") {
  TempDir dir;
  const std::string log = dir.file("log");
  auto r = run(lmt::test::mpirun(2) + lmt::test::lmtrain() + kTiny +
               " --set train.steps=1000000000 --set train.log_every=100 > " + log + " 2>&1 & mp=$!\n"
               "for i in $(seq 1200); do grep -q '| loss' " + log + " && break; sleep 0.05; done\n"
               "for p in $(pgrep -P $mp); do\n"
               "  tr '\\0' '\\n' < /proc/$p/environ | grep -qx OMPI_COMM_WORLD_RANK=1 && kill -9 $p\n"
               "done\n"
               "wait $mp; echo \"exit code $?\"; cat " + log);
  INFO(r.output);
  CHECK(r.output.find("exit code 0") == std::string::npos);
  CHECK(r.output.find("lmtrain: rank 0: SIGTERM while waiting ") != std::string::npos);
  CHECK(r.output.find("because a rank died") != std::string::npos);
}

TEST_CASE("robust: a run of no steps reports no step times and leaves their CSV cells empty") {
  TempDir dir;
  const std::string csv = dir.file("runs.csv");
  auto r = run(std::string(lmt::test::lmtrain()) + kTiny + " --set train.steps=0 --csv " + csv);
  INFO(r.output);
  CHECK(r.code == 0);
  CHECK(r.output.find("no step ran") != std::string::npos);
  CHECK(r.output.find("nan") == std::string::npos);
  std::ifstream f(csv);
  const std::string text((std::istreambuf_iterator<char>(f)), {});
  CHECK(count(text, "\n") == 2);
  CHECK(text.find("nan") == std::string::npos);
}

TEST_CASE("robust: a checkpoint whose file cannot be written (written beside the steps) ends the "
          "run with its reason and exit code 1, the earlier checkpoint kept, no partial left") {
  TempDir dir;
  // A folder where step 4's file goes: its rename fails (train.overwrite lets the run start).
  REQUIRE(std::filesystem::create_directory(checkpoint_path(dir.path, 4)));
  auto r = run(std::string(lmt::test::lmtrain()) + kTiny + " --set train.steps=6 "
               "--set train.checkpoint_every=2 --set train.overwrite=1 --set train.checkpoint_dir=" +
               dir.path);
  INFO(r.output);
  CHECK(r.code == kExitFailure);
  CHECK(r.output.find("writing " + checkpoint_path(dir.path, 4) + " failed: Is a directory") !=
        std::string::npos);
  CHECK(r.output.find("== done ==") == std::string::npos);
  CHECK(std::filesystem::is_regular_file(checkpoint_path(dir.path, 2)));
  for (auto& e : std::filesystem::directory_iterator(dir.path))
    CHECK(e.path().string().find(".tmp.") == std::string::npos);
}

TEST_CASE("robust: the checkpoints' time is shown apart from the steps' in the closing table") {
  TempDir dir;
  auto r = run(std::string(lmt::test::lmtrain()) + kTiny + " --set train.steps=4 "
               "--set train.checkpoint_every=2 --set train.checkpoint_dir=" + dir.path);
  INFO(r.output);
  CHECK(r.code == 0);
  CHECK(count(r.output, "\ncheckpoint ") == 2);
  CHECK(r.output.find("  checkpoints   2 written, ") != std::string::npos);
  CHECK(r.output.find("s (not in the time below)\n  time ") != std::string::npos);
}
