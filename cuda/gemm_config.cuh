// cuBLASLt's configuration of a matmul algorithm as one line of text, "id 66 tile 209 stages 35
// splitk 1 reduction 0 swizzle 0 custom 4 inner 0 cluster 3" (its CUBLASLT_ALGO_CONFIG_*
// attributes): what dev/gemm_candidates.cu lists for every candidate and cuda/gemm_choices.inc
// names for the problems it has measured (cuda/matmul.cu).
#pragma once
#include <cublasLt.h>

#include <string>
#include <utility>

namespace lmt::cuda {

// Each attribute read at the size cuBLASLt reports for it; empty if one cannot be read.
inline std::string algo_config(const cublasLtMatmulAlgo_t& algo) {
  const std::pair<cublasLtMatmulAlgoConfigAttributes_t, const char*> attrs[] = {
      {CUBLASLT_ALGO_CONFIG_ID, "id"},
      {CUBLASLT_ALGO_CONFIG_TILE_ID, "tile"},
      {CUBLASLT_ALGO_CONFIG_STAGES_ID, "stages"},
      {CUBLASLT_ALGO_CONFIG_SPLITK_NUM, "splitk"},
      {CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, "reduction"},
      {CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, "swizzle"},
      {CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, "custom"},
      {CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID, "inner"},
      {CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, "cluster"}};
  std::string out;
  for (auto [attr, name] : attrs) {
    size_t bytes = 0;
    unsigned long long v = 0;  // little-endian: a 2- or 4-byte value fills the low bytes
    if (cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, nullptr, 0, &bytes) !=
            CUBLAS_STATUS_SUCCESS ||
        bytes > sizeof v ||
        cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, &v, bytes, &bytes) != CUBLAS_STATUS_SUCCESS)
      return "";
    out += std::string(out.empty() ? "" : " ") + name + " " + std::to_string(v);
  }
  return out;
}

}  // namespace lmt::cuda
