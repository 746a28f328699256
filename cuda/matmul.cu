// Matmuls through cuBLAS, row-major. cuBLAS is column-major, and a row-major X[r, c] with
// leading dimension ld is the column-major X^T: so row-major C = op(A) op(B) is computed as the
// column-major C^T = op(B)^T op(A)^T, i.e. cublasGemm(opB, opA, N, M, K, B, A, C).
// Accumulation is fp32; the precision policy picks what tensor cores round the fp32 operands to:
// fp32 -> none (CUBLAS_COMPUTE_32F), tf32 -> TF32, bf16 -> BF16.
#include <cublas_v2.h>

#include <string>

#include "common.cuh"
#include "cuda_kernels.hpp"

namespace lmt::cuda {

void gemm(cublasHandle_t h, bool transA, bool transB, int64_t M, int64_t N, int64_t K,
          float alpha, const float* A, int64_t lda, int64_t strideA, const float* B, int64_t ldb,
          int64_t strideB, float beta, float* C, int64_t ldc, int64_t strideC, int64_t batch,
          Precision p) {
  cublasComputeType_t compute = p == Precision::bf16   ? CUBLAS_COMPUTE_32F_FAST_16BF
                                : p == Precision::tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                       : CUBLAS_COMPUTE_32F;
  cublasStatus_t st = cublasGemmStridedBatchedEx(
      h, transB ? CUBLAS_OP_T : CUBLAS_OP_N, transA ? CUBLAS_OP_T : CUBLAS_OP_N, int(N), int(M),
      int(K), &alpha, B, CUDA_R_32F, int(ldb), strideB, A, CUDA_R_32F, int(lda), strideA, &beta, C,
      CUDA_R_32F, int(ldc), strideC, int(batch), compute, CUBLAS_GEMM_DEFAULT);
  if (st != CUBLAS_STATUS_SUCCESS)
    LMT_FATAL(std::string("cublasGemmStridedBatchedEx failed: ") + cublasGetStatusString(st));
}

}  // namespace lmt::cuda
