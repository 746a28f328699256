// Config: every malformed input stops the binary with exit code 2 and one line naming the key
// (and file:line); sources layer in order; the printed TOML reloads to the same hash, and the
// hash sees every key.
#include <doctest/doctest.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include "config.hpp"
#include "../helpers.hpp"

using namespace lmt;
using lmt::test::TempDir;

namespace {

// Runs build/lmtrain [--config FILE] --print-config ARGS.
test::Result lmtrain(const std::string& file, const std::string& args) {
  std::string config = file.empty() ? "" : " --config " + file;
  return test::run(test::lmtrain() + config + " --print-config " + args);
}

Config loaded(const std::string& path) {
  Config c;
  load_config_file(c, path);
  return c;
}

struct BadInput {
  const char* what;
  const char* toml;    // config file contents; "": no file
  const char* args;    // further command-line arguments
  int line;            // line of the file the error must name (0: no file)
  const char* expect;  // part of the error: the key, the value, what was expected
  const char* also = "";  // a second part, where the first cannot hold both
};

const BadInput kBadInputs[] = {
    {"unknown key", "[model]\nd_modle = 64\n", "", 2,
     "unknown key model.d_modle (did you mean model.d_model?)"},
    {"unknown section", "[optimizer]\nlr = 0.1\n", "", 2,
     "unknown key optimizer.lr (did you mean optim.lr?)"},
    {"key outside a section", "# top\nseed = 3\n", "", 2, "seed is not a [section]"},
    {"string for an integer", "[model]\nd_model = \"64\"\n", "", 2,
     "model.d_model = \"64\": expected an integer"},
    {"float for an integer", "[train]\n\nsteps = 10.5\n", "", 3,
     "train.steps = 10.5: expected an integer"},
    {"integer for a string choice", "[model]\nprecision = 16\n", "", 2,
     "model.precision = 16: expected a string"},
    {"negative", "[run]\nseed = -1\n", "", 2, "run.seed = -1: expected a number >= 0"},
    {"zero integer where >= 1", "[model]\nnum_layers = 0\n", "", 2,
     "model.num_layers = 0: expected a number >= 1"},
    {"zero float where > 0", "[model]\nnorm_eps = 0.0\n", "", 2,
     "model.norm_eps = 0.0: expected a number > 0 and <= 1"},
    {"beta1 = 1", "[optim]\nbeta1 = 1.0\n", "", 2,
     "optim.beta1 = 1.0: expected a number >= 0 and <= 0.999999"},
    {"vocab_size > 65536", "[model]\nvocab_size = 65537\n", "", 2,
     "model.vocab_size = 65537: expected a number >= 2 and <= 65536"},
    {"precision fp8", "[model]\nprecision = \"fp8\"\n", "", 2,
     "model.precision = \"fp8\": expected one of \"fp64\" | \"fp32\" | \"tf32\" | \"bf16\""},
    {"unknown ddp strategy", "[ddp]\nstrategy = \"bogus\"\n", "", 2,
     "ddp.strategy = \"bogus\": expected one of \"naive\" | \"flat\" | \"overlap\" | \"bucketed\""},
    {"device tpu", "[run]\ndevice = \"tpu\"\n", "", 2,
     "run.device = \"tpu\": expected one of \"auto\" | \"cpu\" | \"cuda\""},
    {"d_model not divisible by num_heads", "[model]\nd_model = 66\n", "", 2,
     "model.d_model = 66 is not divisible by model.num_heads = 4"},
    {"odd head dim", "[model]\nd_model = 24\nnum_heads = 8\n", "", 2,
     "model.num_heads = 8 (", "gives head dim 3: RoPE needs an even head dim"},
    {"file source without a path", "[data]\nsource = \"file\"\n", "", 2,
     "data.source = \"file\" needs data.path"},
    {"a path the synthetic source would ignore", "[data]\npath = \"t.bin\"\n", "", 2,
     "data.path = \"t.bin\" is set but data.source = \"synthetic\" (default) ignores it"},
    {"checkpoint_every without a dir", "[train]\ncheckpoint_every = 50\n", "", 2,
     "train.checkpoint_every = 50 needs train.checkpoint_dir"},
    {"negative eval_every", "[train]\neval_every = -1\n", "", 2,
     "train.eval_every = -1: expected a number >= 0"},
    {"eval_every with nothing to evaluate", "[train]\neval_every = 10\neval_batches = 0\n", "", 2,
     "train.eval_every = 10 evaluates nothing: train.eval_batches = 0 ("},
    {"eval_every on a token file without a val_path",
     "[data]\nsource = \"file\"\npath = \"t.bin\"\n[train]\neval_every = 10\n", "", 5,
     "train.eval_every = 10 needs data.val_path (a held-out token file)"},
    {"a val_path the synthetic source would ignore", "", "--set data.val_path=v.bin", 0,
     "--set: data.val_path = \"v.bin\" is set but data.source = \"synthetic\" (default) "
     "validates on a held-out stream of its own"},
    {"min_lr > lr", "[optim]\nlr = 1e-4\nmin_lr = 1e-3\n", "", 3,
     "optim.min_lr = 0.001: expected at most optim.lr = 0.0001"},
    {"plan.tp not dividing the heads", "[run]\nmode = \"plan\"\n[plan]\ntp = 3\n", "", 4,
     "plan.tp = 3 does not divide model.num_heads = 4"},
    {"plan.tp not dividing d_ff", "[run]\nmode = \"plan\"\n[plan]\ntp = 4\n[model]\nd_ff = 90\n",
     "", 4, "plan.tp = 4 does not divide model.d_ff = 90"},
    {"plan.zero = 2", "[plan]\nzero = 2\n", "", 2,
     "plan.zero = 2: expected a number >= 0 and <= 1"},
    {"optim.state_dtype unknown", "[optim]\nstate_dtype = \"fp16\"\n", "", 2,
     "optim.state_dtype = \"fp16\": expected one of \"fp32\" | \"bf16\""},
    {"optim.master_weights not a boolean", "[optim]\nmaster_weights = 0\n", "", 2,
     "optim.master_weights = 0: expected true or false"},
    {"no master weights outside bf16", "[model]\nprecision = \"fp32\"\n[optim]\n"
     "master_weights = false\n", "", 4,
     "optim.master_weights = false needs model.precision = \"bf16\" (the weights are then bf16 "
     "alone), not \"fp32\" (", "bad.toml:2)"},
    {"--set no master weights outside bf16", "", "--set optim.master_weights=false --set "
     "model.precision=tf32", 0, "--set: optim.master_weights = false needs model.precision = "
     "\"bf16\""},
    {"bf16 residual outside bf16", "", "--set model.residual_dtype=bf16 --set "
     "model.precision=fp32", 0, "--set: model.residual_dtype = \"bf16\" needs model.precision = "
     "\"bf16\", not \"fp32\" (--set)"},
    {"residual dtype unknown", "[model]\nresidual_dtype = \"fp16\"\n", "", 2,
     "model.residual_dtype = \"fp16\": expected one of \"fp32\" | \"bf16\""},
    {"plan.graph unknown", "[plan]\ngraph = \"moe\"\n", "", 2,
     "plan.graph = \"moe\": expected one of \"lmtrain\" | \"ffn_only\""},
    {"TOML syntax error", "[model]\nd_model = = 3\n", "", 2, "TOML syntax error"},
    {"missing config file", "", "--config /nonexistent/lmtrain.toml", 0,
     "cannot read config file '/nonexistent/lmtrain.toml'"},
    {"--set without =", "", "--set model.d_model", 0,
     "--set model.d_model: expected section.key=value"},
    {"--set of an unknown key", "", "--set optim.betal=0.9", 0,
     "--set: unknown key optim.betal (did you mean optim.beta1?)"},
    {"--set of a bare word for an integer", "", "--set model.d_model=abc", 0,
     "--set: model.d_model = \"abc\": expected an integer"},
    {"--set out of range", "", "--set optim.lr=-1", 0,
     "--set: optim.lr = -1: expected a number >= 0"},
    {"--set past every field's bound", "", "--set optim.lr=1e300", 0,
     "--set: optim.lr = 1.0000000000000001e+300: expected a number >= 0 and <= 1e+18"},
    {"unknown argument", "", "--verbose", 0, "unknown argument '--verbose'"},
    {"a directory as the config", "", "--config /tmp", 0, "config file '/tmp' is not a regular file"},
    {"no value after --config", "", "--config", 0, "--config: expected a value after it"},
    {"--csv twice", "", "--csv a.csv --csv b.csv", 0, "--csv b.csv: given twice (first a.csv)"},
    {"a flag where --set's value goes", "", "--set --csv x.csv", 0,
     "--set: expected a value after it"},
    {"empty list", "[attention]\nseq_lens = []\n", "", 2,
     "attention.seq_lens = an array: expected a non-empty array"},
    {"list element not a choice", "[attention]\n\ndtypes = [\"bf16\", \"fp16\"]\n", "", 3,
     "attention.dtypes = an array holding \"fp16\": expected one of \"bf16\" | \"fp32\""},
    {"a lone value for a list", "", "--set attention.impls=naive", 0,
     "--set: attention.impls = \"naive\": expected a non-empty array (one value: [\"naive\"])"},
    {"list element out of range", "", "--set 'attention.seq_lens=[128,0]'", 0,
     "--set: attention.seq_lens = an array holding 0: expected a number >= 1"},
    {"head dim flash has no kernel for", "[attention]\nhead_dims = [64, 48]\n", "", 2,
     "attention.head_dims has 48: expected 16, 32, 64, 80 or 128"},
};

}  // namespace

TEST_CASE("config: malformed input exits 2 with one line naming the key and file:line") {
  TempDir dir;
  for (const BadInput& bad : kBadInputs) {
    SUBCASE(bad.what) {
      std::string file = *bad.toml ? dir.file("bad.toml", bad.toml) : "";
      auto r = lmtrain(file, bad.args);
      INFO(bad.what, "\n", r.output);
      CHECK(r.code == 2);
      CHECK(r.output.rfind("lmtrain: error: ", 0) == 0);
      CHECK(std::count(r.output.begin(), r.output.end(), '\n') == 1);
      CHECK(r.output.find(bad.expect) != std::string::npos);
      CHECK(r.output.find(bad.also) != std::string::npos);
      if (bad.line > 0)
        CHECK(r.output.find(file + ":" + std::to_string(bad.line) + ":") != std::string::npos);
    }
  }
}

TEST_CASE("attention mode refuses the CPU with one line and exit code 2") {
  auto r = test::run(std::string(test::lmtrain()) + " --set run.mode=attention --set run.device=cpu");
  INFO(r.output);
  CHECK(r.code == 2);
#ifdef LMTRAIN_CUDA
  const std::string why = "it needs run.device = cuda (a visible GPU, one rank)";
#else
  const std::string why = "this build has no CUDA";  // a CPU-only build says so first
#endif
  CHECK(r.output == "lmtrain: error: run.mode = \"attention\" times GPU kernels: " + why + "\n");
}

TEST_CASE("config: the defaults validate") {
  CHECK_NOTHROW(validate(Config{}));
  CHECK(config_hash(parse_command_line({}).config) == config_hash(Config{}));
}

TEST_CASE("config: later --config files win over earlier ones, --set wins over files") {
  TempDir dir;
  std::string a = dir.file("a.toml", "[optim]\nlr = 0.01\n[train]\nsteps = 300\n");
  std::string b = dir.file("b.toml", "[optim]\nlr = 0.02\n");
  Config ab = parse_command_line({"--config", a, "--config", b}).config;
  CHECK(ab.optim.lr == 0.02);
  CHECK(ab.train.steps == 300);
  CHECK(ab.origin.at("optim.lr") == b + ":2");
  CHECK(parse_command_line({"--config", b, "--config", a}).config.optim.lr == 0.01);
  Config set = parse_command_line({"--config", a, "--config", b, "--set", "optim.lr=0.05"}).config;
  CHECK(set.optim.lr == 0.05);
  CHECK(set.origin.at("optim.lr") == "--set");
  Config before = parse_command_line({"--set", "optim.lr=0.05", "--config", a}).config;
  CHECK(before.optim.lr == 0.05);  // --set wins wherever it stands
}

TEST_CASE("config: strings with quotes, backslashes and newlines print as TOML that reloads exactly") {
  TempDir dir;
  Config c;
  c.data.path = "C:\\new \"q\"\nx\ty";
  Config back;
  load_config_file(back, dir.file("c.toml", config_to_toml(c)));
  CHECK(back.data.path == c.data.path);
  CHECK(config_hash(back) == config_hash(c));
}

TEST_CASE("config: --set takes a bare word as a string and an integer for a float") {
  Config c = parse_command_line({"--set", "data.source=file", "--set", "data.path=/tmp/x.bin",
                                 "--set", "optim.lr=1"}).config;
  CHECK(c.data.path == "/tmp/x.bin");
  CHECK(c.optim.lr == 1.0);
}

TEST_CASE("config: the origin map records file:line for keys set in a file") {
  TempDir dir;
  std::string path = dir.file("c.toml", "# comment\n[optim]\n\nlr = 0.01\n[model]\nd_model = 128\n");
  Config c = loaded(path);
  CHECK(c.origin.at("optim.lr") == path + ":4");
  CHECK(c.origin.at("model.d_model") == path + ":6");
  CHECK(c.origin.count("optim.beta1") == 0);  // untouched keys keep no origin
}

TEST_CASE("config: config_to_toml reloads to the same config and hash") {
  TempDir dir;
  Config c;
  for (const char* set : {"run.device=cpu", "run.seed=7", "model.precision=fp64", "optim.lr=0.1",
                          "optim.eps=1e-12", "optim.weight_decay=0.30000000000000004",
                          "train.checkpoint_dir=/tmp/ckpt", "ddp.bucket_mb=2.5"})
    apply_override(c, set);
  std::string text = config_to_toml(c);
  Config back = loaded(dir.file("round.toml", text));
  CHECK(config_to_toml(back) == text);
  CHECK(config_hash(back) == config_hash(c));
  CHECK(config_hash(loaded(dir.file("defaults.toml", config_to_toml(Config{})))) ==
        config_hash(Config{}));
}

TEST_CASE("config: changing any single key changes the hash") {
  const Config base;
  const uint64_t h = config_hash(base);
  Config probe;
  size_t n = config_fields(probe).size();
  for (size_t i = 0; i < n; ++i) {
    Config changed = base;
    ConfigField f = config_fields(changed)[i];
    INFO(f.name());
    if (auto* p = std::get_if<int64_t*>(&f.value)) **p += 1;
    else if (auto* p = std::get_if<double*>(&f.value)) **p = **p * 2 + 1;
    else if (auto* p = std::get_if<std::string*>(&f.value)) **p += "x";
    else if (auto* p = std::get_if<std::vector<int64_t>*>(&f.value)) (*p)->push_back(1);
    else if (auto* p = std::get_if<std::vector<double>*>(&f.value)) (*p)->push_back(0.5);
    else if (auto* p = std::get_if<ChoiceRef>(&f.value)) p->set((p->get() + 1) % f.choices.size());
    else if (auto* p = std::get_if<bool*>(&f.value)) **p = !**p;
    else std::get<std::vector<std::string>*>(f.value)->back() += "x";
    CHECK(config_hash(changed) != h);
  }
}

TEST_CASE("config: --print-config of a valid file exits 0 and prints the overridden values") {
  TempDir dir;
  std::string file = dir.file("ok.toml", "[model]\nd_model = 128\nnum_heads = 8\n");
  auto r = lmtrain(file, "--set train.steps=7");
  INFO(r.output);
  REQUIRE(r.code == 0);
  CHECK(r.output.find("\nd_model = 128\n") != std::string::npos);
  CHECK(r.output.find("\nsteps = 7\n") != std::string::npos);
  Config expected = parse_command_line({"--config", file, "--set", "train.steps=7"}).config;
  CHECK(config_hash(loaded(dir.file("printed.toml", r.output))) == config_hash(expected));
}

TEST_CASE("config: --version prints the commit the binary was built from, and exits 0") {
  auto r = test::run(std::string(test::lmtrain()) + " --version");
  INFO(r.output);
  REQUIRE(r.code == 0);
  // What the Makefile recorded (git describe) when it built the binary.
  std::ifstream f("build/version");
  std::string recorded;
  REQUIRE(std::getline(f, recorded));
  CHECK(r.output == "lmtrain " + recorded + "\n");
  if (test::run("git rev-parse --git-dir").code == 0)  // built in a checkout: a commit, not "unknown"
    CHECK(recorded != "unknown");
}

TEST_CASE("config: --help names every value a key of a few words accepts, on that key's line") {
  Config c;
  const std::string help = usage_text();
  int keys = 0;
  for (auto& f : config_fields(c)) {
    if (f.choices.empty()) continue;
    ++keys;
    const size_t at = help.find("\n  " + f.name() + " ");
    REQUIRE_MESSAGE(at != std::string::npos, f.name());
    const std::string line = help.substr(at + 1, help.find('\n', at + 1) - at - 1);
    std::string values;
    for (auto& ch : f.choices) values += (values.empty() ? "(values: " : " | ") + ch;
    CHECK_MESSAGE(line.find(values + ")") != std::string::npos, line);
  }
  CHECK(keys >= 5);  // run.mode, model.precision, optim.schedule, ddp.strategy, ... have choices
}
