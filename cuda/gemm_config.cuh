// cuBLASLt's configuration of a matmul algorithm as one line of text, "id 66 tile 209 stages 35
// splitk 1 reduction 0 swizzle 0 custom 4 inner 0 cluster 3" (its CUBLASLT_ALGO_CONFIG_*
// attributes): what dev/gemm_candidates.cu lists for every candidate and cuda/gemm_choices.inc
// names for the problems it has measured (cuda/matmul.cu), and that table's lookup.
#pragma once
#include <cublasLt.h>

#include <array>
#include <cstdint>
#include <iterator>
#include <sstream>
#include <string>
#include <utility>

namespace lmt::cuda {

// The configuration attributes, in algo_config's order and with its names.
inline constexpr std::pair<cublasLtMatmulAlgoConfigAttributes_t, const char*> kConfigAttrs[] = {
    {CUBLASLT_ALGO_CONFIG_ID, "id"},
    {CUBLASLT_ALGO_CONFIG_TILE_ID, "tile"},
    {CUBLASLT_ALGO_CONFIG_STAGES_ID, "stages"},
    {CUBLASLT_ALGO_CONFIG_SPLITK_NUM, "splitk"},
    {CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, "reduction"},
    {CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, "swizzle"},
    {CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, "custom"},
    {CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID, "inner"},
    {CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, "cluster"}};

// A configuration's values, indexed as kConfigAttrs.
using ConfigValues = std::array<unsigned long long, std::size(kConfigAttrs)>;
enum ConfigField { kId, kTile, kStages, kSplitK, kReduction, kSwizzle, kCustom, kInner, kCluster };

// The line of text: each attribute's name, then its value.
inline std::string config_text(const ConfigValues& v) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i)
    out += std::string(i ? " " : "") + kConfigAttrs[i].second + " " + std::to_string(v[i]);
  return out;
}

// The values of config_text's line; false if the text is not such a line.
inline bool parse_config(const std::string& text, ConfigValues& v) {
  std::istringstream in(text);
  for (size_t i = 0; i < v.size(); ++i) {
    std::string name;
    if (!(in >> name >> v[i]) || name != kConfigAttrs[i].second) return false;
  }
  return true;
}

// Each attribute read at the size cuBLASLt reports for it; empty if one cannot be read.
inline std::string algo_config(const cublasLtMatmulAlgo_t& algo) {
  ConfigValues v{};  // little-endian: a 2- or 4-byte value fills the low bytes
  for (size_t i = 0; i < v.size(); ++i) {
    size_t bytes = 0;
    const auto attr = kConfigAttrs[i].first;
    if (cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, nullptr, 0, &bytes) !=
            CUBLAS_STATUS_SUCCESS ||
        bytes > sizeof v[i] ||
        cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, &v[i], bytes, &bytes) !=
            CUBLAS_STATUS_SUCCESS)
      return "";
  }
  return config_text(v);
}

// The algorithm that algo_config's text names, built rather than offered by the heuristic:
// cublasLtMatmulAlgoInit with the text's id and these types, then each other attribute set at
// the size cuBLASLt reports for it. False if the text is not such a line or an attribute is
// refused; the caller still asks cublasLtMatmulAlgoCheck whether the problem can run it.
inline bool algo_from_config(cublasLtHandle_t lt, const std::string& config,
                             cudaDataType_t operands, cudaDataType_t result,
                             cublasLtMatmulAlgo_t& algo) {
  ConfigValues v;
  if (!parse_config(config, v) ||
      cublasLtMatmulAlgoInit(lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, operands, operands, result,
                             result, int(v[kId]), &algo) != CUBLAS_STATUS_SUCCESS)
    return false;
  for (size_t i = kId + 1; i < v.size(); ++i) {
    size_t bytes = 0;
    const auto attr = kConfigAttrs[i].first;
    if (cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, nullptr, 0, &bytes) !=
            CUBLAS_STATUS_SUCCESS ||
        bytes > sizeof v[i] ||
        cublasLtMatmulAlgoConfigSetAttribute(&algo, attr, &v[i], bytes) != CUBLAS_STATUS_SUCCESS)
      return false;
  }
  return true;
}

// algo_from_config's algorithm where cublasLtMatmulAlgoCheck also accepts it for this problem
// (descriptor op, layouts a and b, c and d both laid out as d) within `workspace` bytes; `checked`
// is what the check reports (its waves count).
inline bool checked_algo_from_config(cublasLtHandle_t lt, const std::string& config,
                                     cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t a,
                                     cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t d,
                                     cudaDataType_t operands, cudaDataType_t result,
                                     size_t workspace, cublasLtMatmulAlgo_t& algo,
                                     cublasLtMatmulHeuristicResult_t& checked) {
  checked = {};
  return algo_from_config(lt, config, operands, result, algo) &&
         cublasLtMatmulAlgoCheck(lt, op, a, b, d, d, &algo, &checked) == CUBLAS_STATUS_SUCCESS &&
         checked.workspaceSize <= workspace;
}

// A measured choice (gemm_choices.inc): on GPU `gpu`, for row-major D[M, N] = op(A) op(B) with
// bf16 operands, one matrix, D in bf16 or not, the configuration to take. nullptr: none.
inline const char* table_choice(const std::string& gpu, bool transA, bool transB, int64_t M,
                                int64_t N, int64_t K, bool d_bf16) {
  struct Choice {
    const char* gpu;
    bool transA, transB;
    int64_t M, N, K;
    bool d_bf16;
    const char* config;
  };
  static const Choice kChoices[] = {
#include "gemm_choices.inc"
      {nullptr, false, false, 0, 0, 0, false, nullptr}};  // an empty table compiles too
  for (const Choice& c : kChoices)
    if (c.gpu && gpu == c.gpu && c.transA == transA && c.transB == transB && c.M == M && c.N == N &&
        c.K == K && c.d_bf16 == d_bf16)
      return c.config;
  return nullptr;
}

}  // namespace lmt::cuda
