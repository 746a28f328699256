// cuda/gemm_config.cuh: a configuration's text (algo_config) builds back the same algorithm
// (algo_from_config), which computes the same bits as the one the heuristic offered (bad text:
// tests/unit/test_gemm_config.cpp). Skipped where no GPU is visible.
#include <doctest/doctest.h>

#include "comm.hpp"
#include "gpu.hpp"

#ifdef LMTRAIN_CUDA
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <random>
#include <vector>

#include "../../cuda/gemm_config.cuh"
#include "../helpers.hpp"

namespace {

struct Problem {
  int m, n, k;  // cuBLASLt's column-major D[m, n] = A[m, k] B[k, n], no transposes
  bool d_bf16;  // D in bf16, else fp32
};

}  // namespace

TEST_CASE("gpu gemm config: every offered algorithm's text builds it back, same bits" *
          doctest::skip(lmt::gpu_count() == 0)) {
  cublasLtHandle_t lt;
  REQUIRE(cublasLtCreate(&lt) == CUBLAS_STATUS_SUCCESS);
  const size_t ws_bytes = size_t(32) << 20;
  void* ws = nullptr;
  REQUIRE(cudaMalloc(&ws, ws_bytes) == cudaSuccess);
  std::normal_distribution<float> normal;
  for (const Problem pr : {Problem{131, 97, 77, false}, Problem{1000, 520, 264, true},
                           Problem{2304, 1024, 768, true}}) {
    CAPTURE(pr.m);
    CAPTURE(pr.n);
    CAPTURE(pr.k);
    CAPTURE(pr.d_bf16);
    const cudaDataType_t out_t = pr.d_bf16 ? CUDA_R_16BF : CUDA_R_32F;
    const size_t d_bytes = size_t(pr.m) * pr.n * (pr.d_bf16 ? 2 : 4);
    std::vector<uint16_t> a(size_t(pr.m) * pr.k), b(size_t(pr.k) * pr.n);
    for (auto& x : a) x = lmt::to_bf16(normal(lmt::test::rng()));
    for (auto& x : b) x = lmt::to_bf16(normal(lmt::test::rng()));
    void *A, *B, *D;
    REQUIRE(cudaMalloc(&A, a.size() * 2) == cudaSuccess);
    REQUIRE(cudaMalloc(&B, b.size() * 2) == cudaSuccess);
    REQUIRE(cudaMalloc(&D, d_bytes) == cudaSuccess);
    REQUIRE(cudaMemcpy(A, a.data(), a.size() * 2, cudaMemcpyHostToDevice) == cudaSuccess);
    REQUIRE(cudaMemcpy(B, b.data(), b.size() * 2, cudaMemcpyHostToDevice) == cudaSuccess);
    cublasLtMatmulDesc_t op;
    REQUIRE(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS);
    cublasLtMatrixLayout_t la, lb, ld;
    REQUIRE(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, pr.m, pr.k, pr.m) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, pr.k, pr.n, pr.k) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(cublasLtMatrixLayoutCreate(&ld, out_t, pr.m, pr.n, pr.m) == CUBLAS_STATUS_SUCCESS);
    cublasLtMatmulPreference_t pref;
    REQUIRE(cublasLtMatmulPreferenceCreate(&pref) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                 &ws_bytes, sizeof ws_bytes) == CUBLAS_STATUS_SUCCESS);
    cublasLtMatmulHeuristicResult_t offered[8];
    int found = 0;
    REQUIRE(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, ld, ld, pref, 8, offered, &found) ==
            CUBLAS_STATUS_SUCCESS);
    REQUIRE(found > 0);
    const float alpha = 1, beta = 0;
    auto run = [&](const cublasLtMatmulAlgo_t& algo) {
      REQUIRE(cudaMemset(D, 0xff, d_bytes) == cudaSuccess);  // NaN: an unwritten element differs
      REQUIRE(cublasLtMatmul(lt, op, &alpha, A, la, B, lb, &beta, D, ld, D, ld, &algo, ws, ws_bytes,
                             nullptr) == CUBLAS_STATUS_SUCCESS);
      std::vector<char> host(d_bytes);
      REQUIRE(cudaMemcpy(host.data(), D, d_bytes, cudaMemcpyDeviceToHost) == cudaSuccess);
      return host;
    };
    for (int i = 0; i < found; ++i) {
      CAPTURE(i);
      const std::string text = lmt::cuda::algo_config(offered[i].algo);
      CAPTURE(text);
      REQUIRE(!text.empty());
      cublasLtMatmulAlgo_t built;
      REQUIRE(lmt::cuda::algo_from_config(lt, text, CUDA_R_16BF, out_t, built));
      CHECK(lmt::cuda::algo_config(built) == text);
      cublasLtMatmulHeuristicResult_t checked = {};
      REQUIRE(cublasLtMatmulAlgoCheck(lt, op, la, lb, ld, ld, &built, &checked) ==
              CUBLAS_STATUS_SUCCESS);
      CHECK(run(built) == run(offered[i].algo));
    }
    cublasLtMatmulPreferenceDestroy(pref);
    for (auto l : {la, lb, ld}) cublasLtMatrixLayoutDestroy(l);
    cublasLtMatmulDescDestroy(op);
    for (void* p : {A, B, D}) cudaFree(p);
  }
  cudaFree(ws);
  cublasLtDestroy(lt);
}
#endif
