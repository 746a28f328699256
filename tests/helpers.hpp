// Shared test helpers: fresh random inputs, relative errors, running the binary, temp files.
#pragma once
#include <unistd.h>

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <vector>

namespace lmt::test {

// A new seed every run (tests draw fresh inputs), or LMT_TEST_SEED's; tests/main.cpp prints it when
// a test fails, so that the failing draw can be run again.
inline uint64_t seed() {
  static const uint64_t s = [] {
    const char* e = getenv("LMT_TEST_SEED");
    return e ? std::strtoull(e, nullptr, 10) : uint64_t(std::random_device{}());
  }();
  return s;
}
inline std::mt19937_64& rng() {
  static std::mt19937_64 g(seed());
  return g;
}

// The mean loss of a forward of `model` (Model::forward, then Model::loss).
template <typename M>
double loss_of(M& model, const int32_t* inputs, const int32_t* targets, double grad_divisor = 1) {
  model.forward(inputs, targets, grad_divisor);
  return model.loss();
}

template <typename T> std::vector<T> randn(size_t n, double scale = 1.0) {
  std::normal_distribution<double> d(0.0, scale);
  std::vector<T> v(n);
  for (auto& x : v) x = T(d(rng()));
  return v;
}

// model.tie_embeddings for the calling test case, which doctest runs twice (once per subcase):
// untied, then tied.
inline bool tied_or_not() {
  bool tie = false;
  SUBCASE("embeddings untied") {}
  SUBCASE("embeddings tied") { tie = true; }
  return tie;
}

inline std::vector<int32_t> rand_tokens(size_t n, int32_t vocab) {
  std::uniform_int_distribution<int32_t> d(0, vocab - 1);
  std::vector<int32_t> v(n);
  for (auto& x : v) x = d(rng());
  return v;
}

// ||a - b|| / max(||b||, floor), with NaN anywhere giving infinity.
template <typename A, typename B> double rel_err(const A& a, const B& b, double floor = 0) {
  double num = 0, den = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    double x = double(a[i]), y = double(b[i]);
    if (std::isnan(x) || std::isnan(y)) return INFINITY;
    num += (x - y) * (x - y);
    den += y * y;
  }
  return std::sqrt(num / std::max({den, floor * floor, 1e-300}));
}

struct Result {
  int code = -1;
  std::string output;  // stdout and stderr together
};

// Runs a shell command and returns its exit code and output.
inline Result run(const std::string& cmd) {
  Result r;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// A fresh temporary directory, removed when the object dies.
struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/lmtrain-test-XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string file(const std::string& name, const std::string& contents = "") const {
    std::string p = path + "/" + name;
    if (!contents.empty()) std::ofstream(p) << contents;
    return p;
  }
};

// The binary under test; tests run from the repository root (make test does).
inline const char* lmtrain() { return "build/lmtrain"; }

// A model of a few thousand parameters for whole runs of lmtrain. Head dim 8: flash has no kernel
// for it, so on a machine with a GPU these runs use naive.
inline const std::string kTiny =
    " --set train.batch_size=2 --set model.context_length=16 --set model.num_layers=1"
    " --set model.d_model=16 --set model.num_heads=2 --set model.d_ff=24 --set model.vocab_size=32"
    " --set model.attention=naive";

// The losses of a run's progress lines, in order.
inline std::vector<double> progress_losses(const std::string& out) {
  std::vector<double> v;
  for (size_t at = 0; (at = out.find("| loss ", at)) != std::string::npos; at += 7)
    v.push_back(std::stod(out.substr(at + 7)));
  return v;
}

// The cells of one line of a CSV, by its rules: a cell in quotes may hold commas, and a quote
// there is doubled.
inline std::vector<std::string> csv_cells(const std::string& line) {
  std::vector<std::string> cells(1);
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted && c == '"' && i + 1 < line.size() && line[i + 1] == '"') cells.back() += line[++i];
    else if (c == '"') quoted = !quoted;
    else if (c == ',' && !quoted) cells.emplace_back();
    else cells.back() += c;
  }
  return cells;
}

}  // namespace lmt::test

namespace lmt::test {

// `mpirun -np N` as the Makefile runs it (MPIRUN carries --oversubscribe and friends).
inline std::string mpirun(int np) {
  const char* m = getenv("MPIRUN");
  return std::string(m ? m : "mpirun -q --oversubscribe") + " -np " + std::to_string(np) + " ";
}

}  // namespace lmt::test
