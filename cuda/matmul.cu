// Matmuls through cuBLAS, row-major. cuBLAS is column-major, and a row-major X[r, c] with
// leading dimension ld is the column-major X^T: so row-major C = op(A) op(B) is computed as the
// column-major C^T = op(B)^T op(A)^T, i.e. cublasGemm(opB, opA, N, M, K, B, A, C).
// Accumulation is fp32, and so is C unless asked for in bf16. Operands are fp32 (compute fp32,
// or TF32 tensor cores under the tf32 policy) or bf16 (bf16 tensor cores; to_bf16 rounds fp32 to
// nearest even first, and from_bf16 widens bf16 back to fp32, exactly).
#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <string>

#include "common.cuh"
#include "cuda_kernels.hpp"

namespace lmt::cuda {
namespace {

// Four elements a thread (the copy is memory-bound).
__global__ void to_bf16_x4_kernel(const float* x, __nv_bfloat16* y, int64_t n4) {
  int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < n4) store4(y + 4 * i, load4(x + 4 * i));
}

__global__ void to_bf16_kernel(const float* x, __nv_bfloat16* y, int64_t n) {
  int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < n) y[i] = __float2bfloat16_rn(x[i]);
}

__global__ void from_bf16_kernel(const __nv_bfloat16* x, float* y, int64_t n) {
  int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < n) y[i] = __bfloat162float(x[i]);
}

}  // namespace

void to_bf16(const float* x, void* y, int64_t n, cudaStream_t s) {
  auto* out = static_cast<__nv_bfloat16*>(y);
  int64_t head = 0;
  if (aligned_for(x, 16) && aligned_for(y, 8)) {
    head = n / 4 * 4;
    if (head > 0) to_bf16_x4_kernel<<<blocks_for(head / 4, 256), 256, 0, s>>>(x, out, head / 4);
  }
  if (n > head) to_bf16_kernel<<<blocks_for(n - head, 256), 256, 0, s>>>(x + head, out + head, n - head);
  CUDA_LAUNCH_CHECK();
}

void from_bf16(const void* x, float* y, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  from_bf16_kernel<<<blocks_for(n, 256), 256, 0, s>>>(static_cast<const __nv_bfloat16*>(x), y, n);
  CUDA_LAUNCH_CHECK();
}

void gemm(cublasHandle_t h, bool transA, bool transB, int64_t M, int64_t N, int64_t K,
          float alpha, const void* A, int64_t lda, int64_t strideA, const void* B, int64_t ldb,
          int64_t strideB, float beta, void* C, int64_t ldc, int64_t strideC, int64_t batch,
          Operands ops, bool c_bf16) {
  const cudaDataType in = ops == Operands::bf16 ? CUDA_R_16BF : CUDA_R_32F;
  const cudaDataType out = c_bf16 ? CUDA_R_16BF : CUDA_R_32F;
  LMT_ASSERT(!c_bf16 || ops == Operands::bf16, "a bf16 C takes bf16 operands");
  const cublasComputeType_t compute =
      ops == Operands::tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  cublasStatus_t st = cublasGemmStridedBatchedEx(
      h, transB ? CUBLAS_OP_T : CUBLAS_OP_N, transA ? CUBLAS_OP_T : CUBLAS_OP_N, int(N), int(M),
      int(K), &alpha, B, in, int(ldb), strideB, A, in, int(lda), strideA, &beta, C, out, int(ldc),
      strideC, int(batch), compute, CUBLAS_GEMM_DEFAULT);
  if (st != CUBLAS_STATUS_SUCCESS)
    LMT_FATAL(std::string("cublasGemmStridedBatchedEx failed: ") + cublasGetStatusString(st));
}

}  // namespace lmt::cuda
