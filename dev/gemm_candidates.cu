// Every algorithm cuBLASLt's heuristic offers for each matmul of a training step, timed: what the
// best the library has would make the step's matmuls cost (dev/gemm_candidates.sh builds and
// runs it). The shapes are the model's as src/model.cpp runs them (bf16 operands, fp32
// accumulation, D in bf16 where the model stores it so, the residual added in the epilogue of the
// output projection and W2, W3 and W1 as one matmul), row-major as cuda/matmul.cu lays them out.
//   gemm_candidates d_model d_ff vocab tokens layers
// Each candidate: 2 runs, then timed two ways: warm, the median of 5 batches of 20 back-to-back
// runs (the operands stay in L2), and cold, the median of 15 runs each timed alone after a pass
// that reads twice the L2's size (the operands come from memory). A step lies between: a matmul
// there reads what the kernel before it wrote, and weights and saved activations from memory;
// a configuration that wins warm can lose in the step (it did in xl's backward). Its D compared
// bit for bit with the heuristic's first choice's ('=' same, 'D' differs, 'x' it failed to run).
// With WIDE=1 in the environment the candidates also include configurations the heuristic does
// not offer: its first offer's algorithm id, stages and inner shape with every tile its
// capabilities list, each of six cluster shapes, custom option and swizzle (about 30 000), those
// that cublasLtMatmulAlgoCheck accepts and whose first run takes at most 1.15x the first offer's
// timed warm once (3 runs), the fastest kWide of them then as the others ('#w0', ...). The screen
// goes in a fixed random order; WIDE_SECONDS=60 stops it after 60 s (a sample of all of them).
// ONLY="fwd head,dgrad head" measures those matmuls alone. The committed table's configuration
// for a matmul (cuda/gemm_choices.inc, this GPU), where the heuristic does not offer it, is timed
// beside the offers as '#t'.
// With SUSTAIN=50 every candidate is also timed hot: as a training step runs its matmuls, with the
// GPU kept busy long enough to hold its power limit (it then lowers the clock, so that a kernel's
// energy, not only its cycles, sets its time). After a second of the first offer back to back,
// kHot rounds, each candidate in turn for about 50 ms back to back, the median of its rounds'
// times a call; the choice is then the best hot time against the first offer's.
// After the table, every candidate of every matmul on a line of its own: its times, the
// heuristic's waves count and its configuration attributes (cuBLASLt's CUBLASLT_ALGO_CONFIG_*);
// last, for each matmul the candidate that does not split K with the best worse-of-the-two ratio
// to the first's times (under SUSTAIN, of its hot time), as a line of cuda/gemm_choices.inc
// (dev/gemm_choices.py keeps those that beat the first), which cuda/matmul.cu takes over the first.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "../cuda/gemm_config.cuh"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

void check(bool ok, const char* what, int line) {
  if (ok) return;
  std::fprintf(stderr, "gemm_candidates: %s failed (line %d)\n", what, line);
  std::exit(1);
}
#define CHECK_CUDA(call) check((call) == cudaSuccess, #call, __LINE__)
#define CHECK_LT(call) check((call) == CUBLAS_STATUS_SUCCESS, #call, __LINE__)

struct Shape {
  const char* name;
  bool transA, transB;  // row-major D[M, N] = op(A) op(B)
  long M, N, K;
  bool d_bf16, residual;  // D stored in bf16; D = op(A) op(B) + C (C another buffer, typed as D)
  long per_step;          // calls in one forward + backward
};

// Reads x[0, n) (zeros): evicts what L2 held. Never writes sink; the test keeps the loads.
__global__ void evict(const float* x, long n, float* sink) {
  float acc = 0;
  for (long i = blockIdx.x * long(blockDim.x) + threadIdx.x; i < n;
       i += long(gridDim.x) * blockDim.x)
    acc += x[i];
  if (acc != 0) *sink = acc;
}

// Values in [-0.5, 0.5) from a hash of the index: operands that are not all alike.
__global__ void fill(__nv_bfloat16* p, long n, unsigned seed) {
  const long stride = long(gridDim.x) * blockDim.x;
  for (long i = blockIdx.x * long(blockDim.x) + threadIdx.x; i < n; i += stride) {
    unsigned h = unsigned(i) * 2654435761u ^ seed;
    h ^= h >> 13, h *= 0x5bd1e995u, h ^= h >> 15;
    p[i] = __float2bfloat16(float(h & 0xffff) / 65536.0f - 0.5f);
  }
}

std::string config_of(const cublasLtMatmulAlgo_t& algo) {
  std::string c = lmt::cuda::algo_config(algo);
  check(!c.empty(), "reading an algorithm's configuration", __LINE__);
  return c;
}

// A capability of an algorithm: a scalar, or (TILE_IDS) an array of uint32.
std::vector<uint32_t> cap(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoCapAttributes_t a) {
  size_t bytes = 0;
  if (cublasLtMatmulAlgoCapGetAttribute(&algo, a, nullptr, 0, &bytes) != CUBLAS_STATUS_SUCCESS ||
      bytes == 0)
    return {};
  std::vector<uint32_t> v((bytes + 3) / 4);
  CHECK_LT(cublasLtMatmulAlgoCapGetAttribute(&algo, a, v.data(), v.size() * 4, &bytes));
  return v;
}

// The configurations WIDE searches around the heuristic's first offer (its text `first`).
std::vector<std::string> wide_configs(const cublasLtMatmulAlgo_t& first_algo,
                                      const std::string& first) {
  using namespace lmt::cuda;
  ConfigValues v;
  check(parse_config(first, v), "reading the first offer's configuration", __LINE__);
  const std::vector<uint32_t> tiles = cap(first_algo, CUBLASLT_ALGO_CAP_TILE_IDS);
  const std::vector<uint32_t> custom_max = cap(first_algo, CUBLASLT_ALGO_CAP_CUSTOM_OPTION_MAX);
  const std::vector<uint32_t> swizzles = cap(first_algo, CUBLASLT_ALGO_CAP_CTA_SWIZZLING_SUPPORT);
  const int clusters[] = {CUBLASLT_CLUSTER_SHAPE_1x1x1, CUBLASLT_CLUSTER_SHAPE_2x1x1,
                          CUBLASLT_CLUSTER_SHAPE_1x2x1, CUBLASLT_CLUSTER_SHAPE_2x2x1,
                          CUBLASLT_CLUSTER_SHAPE_4x1x1, CUBLASLT_CLUSTER_SHAPE_1x4x1};
  v[kSplitK] = 1, v[kReduction] = 0;  // the first offer's id, stages and inner shape kept
  std::vector<std::string> out;
  for (uint32_t t : tiles)
    for (int c : clusters)
      for (uint32_t o = 0; o <= (custom_max.empty() ? 0 : custom_max[0]); ++o)
        for (uint32_t w = 0; w <= (swizzles.empty() || swizzles[0] == 0 ? 0u : 1u); ++w) {
          v[kTile] = t, v[kCluster] = (unsigned long long)c, v[kCustom] = o, v[kSwizzle] = w;
          out.push_back(config_text(v));
        }
  return out;
}

cublasLtMatrixLayout_t layout(cudaDataType t, long rows, long cols, long ld) {
  cublasLtMatrixLayout_t l;
  CHECK_LT(cublasLtMatrixLayoutCreate(&l, t, uint64_t(rows), uint64_t(cols), ld));
  return l;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: gemm_candidates d_model d_ff vocab tokens layers\n");
    return 2;
  }
  const long d = std::atol(argv[1]), f = std::atol(argv[2]), V = std::atol(argv[3]);
  const long n = std::atol(argv[4]), L = std::atol(argv[5]);
  const bool wide = std::getenv("WIDE") && std::string(std::getenv("WIDE")) == "1";
  const double sustain_ms = std::getenv("SUSTAIN") ? std::atof(std::getenv("SUSTAIN")) : 0;
  constexpr int kHot = 5;  // hot rounds
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // each matmul's row as it is measured
  constexpr size_t kWide = 8;  // WIDE's configurations timed as the offers are
  const Shape shapes[] = {
      {"fwd qkv", false, true, n, 3 * d, d, true, false, L},
      {"fwd wo +res", false, true, n, d, d, false, true, L},
      {"fwd w3,w1", false, true, n, 2 * f, d, true, false, L},
      {"fwd w2 +res", false, true, n, d, f, false, true, L},
      // model.residual_dtype = "bf16": the residual stream, C and D, in bf16 (a step runs these
      // or the two above: per_step 0 keeps them out of the step's sum)
      {"fwd wo +res16", false, true, n, d, d, true, true, 0},
      {"fwd w2 +res16", false, true, n, d, f, true, true, 0},
      {"fwd head", false, true, n, V, d, true, false, 1},  // bf16 logits
      {"dgrad head", false, false, n, d, V, false, false, 1},
      {"dgrad w2", false, false, n, f, d, true, false, L},
      {"dgrad w3,w1", false, false, n, d, 2 * f, false, false, L},
      {"dgrad wo", false, false, n, d, d, true, false, L},
      {"dgrad qkv", false, false, n, d, 3 * d, false, false, L},
      {"wgrad head", true, false, V, d, n, false, false, 1},
      {"wgrad w2", true, false, d, f, n, false, false, L},
      {"wgrad w3,w1", true, false, 2 * f, d, n, false, false, L},
      {"wgrad wo", true, false, d, d, n, false, false, L},
      {"wgrad qkv", true, false, 3 * d, d, n, false, false, L},
  };
  size_t largest = 0;  // elements of the largest operand or result
  for (const Shape& s : shapes)
    largest = std::max({largest, size_t(s.M * s.K), size_t(s.K * s.N), size_t(s.M * s.N)});
  const size_t ws_bytes = size_t(32) << 20;  // cuda::Gemm::kWorkspaceBytes
  void *ws, *A, *B, *C, *D;
  CHECK_CUDA(cudaMalloc(&ws, ws_bytes));
  for (void** p : {&A, &B, &C, &D}) CHECK_CUDA(cudaMalloc(p, largest * 4));
  for (auto [p, seed] : {std::pair{A, 1u}, {B, 2u}, {C, 3u}})
    fill<<<1024, 256>>>(static_cast<__nv_bfloat16*>(p), long(largest * 2), seed);
  CHECK_CUDA(cudaDeviceSynchronize());
  cublasLtHandle_t lt;
  CHECK_LT(cublasLtCreate(&lt));
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreate(&stream));
  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  constexpr int kCold = 15;  // cold runs, each between its own events
  cudaEvent_t starts[kCold], stops[kCold];
  for (int r = 0; r < kCold; ++r) {
    CHECK_CUDA(cudaEventCreate(&starts[r]));
    CHECK_CUDA(cudaEventCreate(&stops[r]));
  }

  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  const long evict_n = 2L * prop.l2CacheSize / 4;  // floats
  float* evict_buf;
  CHECK_CUDA(cudaMalloc(&evict_buf, size_t(evict_n + 1) * 4));
  CHECK_CUDA(cudaMemset(evict_buf, 0, size_t(evict_n + 1) * 4));
  std::printf("# %s; d_model %ld, d_ff %ld, vocab %ld, %ld tokens, %ld layers\n", prop.name, d, f,
              V, n, L);
  std::printf("%-12s %6s %6s %6s %9s %9s %7s %10s %10s %9s  %s\n", "matmul", "M", "N", "K",
              "first us", "best us", "TFLOP/s", "cold first", "cold best", "per step",
              "candidates");
  double step_first = 0, step_best = 0, cold_first = 0, cold_best = 0, hot_first = 0, hot_best = 0;
  std::string listing;  // every candidate, printed after the table
  std::string choices;  // cuda/gemm_choices.inc's lines, printed last
  const char* only = std::getenv("ONLY");  // a comma-separated list of matmul names, or all
  for (const Shape& s : shapes) {
    if (only && ("," + std::string(only) + ",").find("," + std::string(s.name) + ",") ==
                    std::string::npos)
      continue;
    // cuBLASLt is column-major: row-major D = op(A) op(B) is its D^T = op(B)^T op(A)^T.
    cublasLtMatmulDesc_t op;
    CHECK_LT(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t opa = s.transB ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t opb = s.transA ? CUBLAS_OP_T : CUBLAS_OP_N;
    CHECK_LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
    CHECK_LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
    const long lda = s.transA ? s.M : s.K, ldb = s.transB ? s.K : s.N;
    cublasLtMatrixLayout_t la = s.transB ? layout(CUDA_R_16BF, s.K, s.N, ldb)
                                         : layout(CUDA_R_16BF, s.N, s.K, ldb);
    cublasLtMatrixLayout_t lb = s.transA ? layout(CUDA_R_16BF, s.M, s.K, lda)
                                         : layout(CUDA_R_16BF, s.K, s.M, lda);
    cublasLtMatrixLayout_t ld = layout(s.d_bf16 ? CUDA_R_16BF : CUDA_R_32F, s.N, s.M, s.N);
    cublasLtMatmulPreference_t pref;
    CHECK_LT(cublasLtMatmulPreferenceCreate(&pref));
    CHECK_LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                  &ws_bytes, sizeof ws_bytes));
    cublasLtMatmulHeuristicResult_t cand[16];
    int found = 0;
    CHECK_LT(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, ld, ld, pref, 16, cand, &found));
    const float alpha = 1, beta = s.residual ? 1 : 0;
    const size_t d_bytes = size_t(s.M * s.N) * (s.d_bf16 ? 2 : 4);
    // One run of an algorithm (false: it failed to run); `runs` back to back, timed, ms
    // (negative: one failed).
    auto run = [&](const cublasLtMatmulAlgo_t& algo) {
      return cublasLtMatmul(lt, op, &alpha, B, la, A, lb, &beta, s.residual ? C : D, ld, D, ld,
                            &algo, ws, ws_bytes, stream) == CUBLAS_STATUS_SUCCESS;
    };
    auto timed = [&](const cublasLtMatmulAlgo_t& algo, int runs) {
      CHECK_CUDA(cudaEventRecord(start, stream));
      bool ok = true;
      for (int k = 0; k < runs; ++k) ok = ok && run(algo);
      CHECK_CUDA(cudaEventRecord(stop, stream));
      CHECK_CUDA(cudaEventSynchronize(stop));
      float ms = 0;
      CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
      return ok ? ms : -1.0f;
    };
    // A configuration's text built into an algorithm this problem can run (WIDE's and '#t').
    auto built = [&](const std::string& config, cublasLtMatmulAlgo_t& algo,
                     cublasLtMatmulHeuristicResult_t& checked) {
      return lmt::cuda::checked_algo_from_config(lt, config, op, la, lb, ld, CUDA_R_16BF,
                                                 s.d_bf16 ? CUDA_R_16BF : CUDA_R_32F, ws_bytes,
                                                 algo, checked);
    };
    struct Candidate {
      cublasLtMatmulAlgo_t algo;
      std::string label;
      float waves;
    };
    std::vector<Candidate> cands;
    for (int i = 0; i < found; ++i)
      cands.push_back({cand[i].algo, "#" + std::to_string(i), cand[i].wavesCount});
    size_t wide_checked = 0, wide_valid = 0;
    if (wide && found > 0) {
      std::vector<std::string> offered;
      for (int i = 0; i < found; ++i) offered.push_back(config_of(cand[i].algo));
      std::vector<std::pair<float, Candidate>> screened;
      timed(cand[0].algo, 1);
      // A configuration 1.15x slower than this is not timed on.
      const float first_ms = timed(cand[0].algo, 1);
      const char* budget = std::getenv("WIDE_SECONDS");  // screening stops after this long
      const auto t0 = std::chrono::steady_clock::now();
      // In a fixed random order: a screening cut short by WIDE_SECONDS has sampled all of them.
      std::vector<std::string> configs = wide_configs(cand[0].algo, offered[0]);
      std::shuffle(configs.begin(), configs.end(), std::mt19937(12345));
      for (const std::string& config : configs) {
        if (std::find(offered.begin(), offered.end(), config) != offered.end()) continue;
        if (budget && std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() >
                          std::atof(budget)) {
          std::fprintf(stderr, "%s: WIDE screening stopped at %s s\n", s.name, budget);
          break;
        }
        ++wide_checked;
        cublasLtMatmulAlgo_t algo;
        cublasLtMatmulHeuristicResult_t checked;
        if (!built(config, algo, checked)) continue;
        if (!run(algo)) continue;
        const float single = timed(algo, 1);
        if (single < 0 || single > 1.15f * first_ms) continue;
        const float ms = timed(algo, 3);
        if (ms < 0) continue;
        ++wide_valid;
        screened.push_back({ms, {algo, "", checked.wavesCount}});
      }
      std::fprintf(stderr, "%s: WIDE checked %zu, %zu ran\n", s.name, wide_checked, wide_valid);
      std::sort(screened.begin(), screened.end(),
                [](const auto& a, const auto& b) { return a.first < b.first; });
      for (size_t k = 0; k < std::min(kWide, screened.size()); ++k) {
        screened[k].second.label = "#w" + std::to_string(k);
        cands.push_back(screened[k].second);
      }
    }
    if (const char* table = lmt::cuda::table_choice(prop.name, s.transA, s.transB, s.M, s.N, s.K,
                                                    s.d_bf16);
        table && found > 0) {
      bool listed = false;
      for (const Candidate& c : cands) listed = listed || config_of(c.algo) == table;
      cublasLtMatmulAlgo_t algo;
      cublasLtMatmulHeuristicResult_t checked;
      if (!listed && built(table, algo, checked)) cands.push_back({algo, "#t", checked.wavesCount});
    }
    std::vector<char> first_d(d_bytes), this_d(d_bytes);
    std::string marks;
    struct Times {
      double warm = 0, cold = 0, hot = 0;  // us; warm 0: it failed to run
    };
    std::vector<Times> times(cands.size());
    for (size_t i = 0; i < cands.size(); ++i) {
      const cublasLtMatmulAlgo_t& algo = cands[i].algo;
      bool ok = run(algo) && run(algo);
      std::vector<float> us;
      for (int batch = 0; ok && batch < 5; ++batch) {
        const float ms = timed(algo, 20);
        ok = ms >= 0;
        us.push_back(ms * 1e3f / 20);
      }
      std::vector<float> cold(kCold);
      for (int r = 0; ok && r < kCold; ++r) {
        evict<<<4 * prop.multiProcessorCount, 512, 0, stream>>>(evict_buf, evict_n,
                                                                evict_buf + evict_n);
        CHECK_CUDA(cudaEventRecord(starts[r], stream));
        ok = ok && run(algo);
        CHECK_CUDA(cudaEventRecord(stops[r], stream));
      }
      CHECK_CUDA(cudaStreamSynchronize(stream));
      for (int r = 0; ok && r < kCold; ++r) {
        float ms = 0;
        CHECK_CUDA(cudaEventElapsedTime(&ms, starts[r], stops[r]));
        cold[r] = ms * 1e3f;
      }
      if (!ok) {
        marks += 'x';
        continue;
      }
      CHECK_CUDA(cudaMemcpy(i == 0 ? first_d.data() : this_d.data(), D, d_bytes,
                            cudaMemcpyDeviceToHost));
      marks += i == 0 || std::memcmp(first_d.data(), this_d.data(), d_bytes) == 0 ? '=' : 'D';
      std::nth_element(us.begin(), us.begin() + 2, us.end());
      std::nth_element(cold.begin(), cold.begin() + kCold / 2, cold.end());
      times[i].warm = us[2], times[i].cold = cold[kCold / 2];
    }
    if (sustain_ms > 0 && times[0].warm > 0) {
      const auto calls = [&](size_t i, double ms) {  // candidate i's runs in about ms
        return std::max(1, int(ms * 1e3 / times[i].warm));
      };
      timed(cands[0].algo, calls(0, 1000));  // the GPU at its power limit
      std::vector<std::vector<float>> hot(cands.size());
      for (int r = 0; r < kHot; ++r)
        for (size_t i = 0; i < cands.size(); ++i)
          if (times[i].warm > 0) {
            const int k = calls(i, sustain_ms);
            hot[i].push_back(timed(cands[i].algo, k) * 1e3f / float(k));
          }
      for (size_t i = 0; i < cands.size(); ++i)
        if (!hot[i].empty()) {
          std::nth_element(hot[i].begin(), hot[i].begin() + kHot / 2, hot[i].end());
          times[i].hot = hot[i][kHot / 2];
        }
    }
    const Times first = times[0];  // warm 0: the first choice did not run
    double best_us = first.warm, best_cold = first.cold, best_hot = first.hot;
    // The choice: not splitting K, the best max(warm / first's warm, cold / first's cold), or
    // under SUSTAIN the best hot / first's hot.
    double choice_ratio = 0;
    Times chosen;
    std::string choice;
    for (size_t i = 0; i < cands.size(); ++i) {
      const Times& t = times[i];
      const std::string config = config_of(cands[i].algo);
      if (t.warm <= 0) {
        listing += std::string(s.name) + " " + cands[i].label + " x " + config + "\n";
        continue;
      }
      char hot[32] = "", line[160];
      if (t.hot > 0) std::snprintf(hot, sizeof hot, " hot %.1f", t.hot);
      std::snprintf(line, sizeof line, " %s %c %.1f us cold %.1f%s waves %.2f ",
                    cands[i].label.c_str(), marks[i], t.warm, t.cold, hot, cands[i].waves);
      listing += s.name + std::string(line) + config + "\n";
      if (first.warm <= 0) continue;
      best_us = std::min(best_us, t.warm), best_cold = std::min(best_cold, t.cold);
      if (t.hot > 0) best_hot = std::min(best_hot, t.hot);
      const double ratio = sustain_ms > 0 ? t.hot / first.hot
                                          : std::max(t.warm / first.warm, t.cold / first.cold);
      if (config.find(" splitk 1 ") != std::string::npos &&
          (choice.empty() || ratio < choice_ratio))
        choice = config, choice_ratio = ratio, chosen = t;
    }
    step_first += first.warm * double(s.per_step), step_best += best_us * double(s.per_step);
    cold_first += first.cold * double(s.per_step), cold_best += best_cold * double(s.per_step);
    hot_first += first.hot * double(s.per_step), hot_best += best_hot * double(s.per_step);
    if (!choice.empty() && first.warm > 0) {
      char line[320];
      std::snprintf(line, sizeof line, "{\"%s\", %s, %s, %ld, %ld, %ld, %s, \"", prop.name,
                    s.transA ? "true" : "false", s.transB ? "true" : "false", s.M, s.N, s.K,
                    s.d_bf16 ? "true" : "false");
      char note[160], hot[48] = "";
      if (sustain_ms > 0)
        std::snprintf(hot, sizeof hot, "; hot %.1f, first %.1f", chosen.hot, first.hot);
      std::snprintf(note, sizeof note,
                    "\"},  // %s: %.1f us, first %.1f; cold %.1f, first %.1f%s\n", s.name,
                    chosen.warm, first.warm, chosen.cold, first.cold, hot);
      choices += line + choice + note;
    }
    std::printf("%-12s %6ld %6ld %6ld %9.1f %9.1f %7.0f %10.1f %10.1f %9ld  %s\n", s.name, s.M,
                s.N, s.K, first.warm, best_us,
                2.0 * double(s.M) * double(s.N) * double(s.K) / best_us / 1e6, first.cold,
                best_cold, s.per_step, marks.c_str());
    if (wide)
      listing += std::string(s.name) + ": WIDE checked " + std::to_string(wide_checked) +
                 " configurations the heuristic did not offer, " + std::to_string(wide_valid) +
                 " ran\n";
    cublasLtMatmulPreferenceDestroy(pref);
    for (auto l : {la, lb, ld}) cublasLtMatrixLayoutDestroy(l);
    cublasLtMatmulDescDestroy(op);
  }
  std::printf("a step's matmuls (forward + backward): %.2f ms with the heuristic's first choices, "
              "%.2f ms with the fastest candidates (cold: %.2f, %.2f)\n", step_first / 1e3,
              step_best / 1e3, cold_first / 1e3, cold_best / 1e3);
  if (sustain_ms > 0)
    std::printf("hot: %.2f ms with the first choices, %.2f ms with the fastest\n", hot_first / 1e3,
                hot_best / 1e3);
  std::printf("\n# every candidate: matmul #index, bits against #0, median times warm and cold "
              "(and hot), the heuristic's waves count, configuration\n%s", listing.c_str());
  std::printf("\n# choices: per matmul, the candidate that does not split K with the best "
              "worse-of-the-two ratio to the first's times (under SUSTAIN: its hot time's ratio) "
              "(dev/gemm_choices.py gathers those that beat it into cuda/gemm_choices.inc)\n%s",
              choices.c_str());
  return 0;
}
