// Matmuls through cuBLASLt, row-major. cuBLASLt is column-major, and a row-major X[r, c] with
// leading dimension ld is the column-major X^T: so row-major D = op(A) op(B) is computed as the
// column-major D^T = op(B)^T op(A)^T, i.e. cuBLASLt's A is our B and its B our A, m = N, n = M.
// Accumulation is fp32, and so is D unless asked for in bf16. Operands are fp32 (compute fp32,
// or TF32 tensor cores under the tf32 policy) or bf16 (bf16 tensor cores; to_bf16 rounds fp32 to
// nearest even first).
// D = alpha op(A) op(B) + beta C, beta 1 where C is given (laid out and typed as D: the epilogue
// adds it in fp32, so the residual adds of the model cost no pass of their own; or D itself,
// D += op(A) op(B): the weight gradients of gradient accumulation's later micro-batches), else 0.
// Each problem's plan (descriptors and algorithm) is made on its first call and kept, so a later
// call costs one map lookup on the host. The algorithm is cuBLASLt's heuristic's first choice,
// unless cuda/gemm_choices.inc names for this GPU and problem a configuration that the heuristic
// also offers, or that cublasLtMatmulAlgoCheck accepts when built from the table's text (where
// every pointer is 16-byte aligned): the fastest that does not split K, measured offline
// (dev/gemm_candidates.sh, dev/gemm_choices.py). Either way it depends only on the problem, the
// pointers' alignments, the workspace, the GPU and that committed table, never on a timing at run
// time, so two backends, two runs, or a run and its resumption compute the same bits. (Timing
// candidates at run time and keeping the fastest would not: on a tiny model's shapes two backends
// in one process, tuned apart, computed different bits although each choice had matched the
// first's bits on its first call's operands.)
#include <cublasLt.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <string>

#include "common.cuh"
#include "cuda_kernels.hpp"
#include "gemm_config.cuh"

#define LT_CHECK(call)                                                                       \
  do {                                                                                       \
    cublasStatus_t lt_rc_ = (call);                                                          \
    if (lt_rc_ != CUBLAS_STATUS_SUCCESS)                                                     \
      LMT_FATAL(std::string(#call " failed: ") + cublasLtGetStatusString(lt_rc_));           \
  } while (0)

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

// The heuristic's candidates searched for a measured choice (as many as dev/gemm_candidates.cu
// times).
constexpr int kOffered = 16;

// The largest power of two, up to 256, that divides the address: what cuBLASLt's heuristic is
// told of each pointer (an algorithm it picks may need that much).
int64_t alignment(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  int64_t align = 256;
  while (align > 1 && a % uintptr_t(align) != 0) align /= 2;
  return align;
}

cublasLtMatrixLayout_t layout(cudaDataType t, int64_t rows, int64_t cols, int64_t ld,
                              int64_t batch, int64_t stride) {
  cublasLtMatrixLayout_t l;
  LT_CHECK(cublasLtMatrixLayoutCreate(&l, t, uint64_t(rows), uint64_t(cols), ld));
  if (batch > 1) {
    const int32_t count = int32_t(batch);
    LT_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                              sizeof count));
    LT_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                              &stride, sizeof stride));
  }
  return l;
}

}  // namespace

void to_bf16(const float* x, void* y, int64_t n, cudaStream_t s) {
  auto* out = static_cast<__nv_bfloat16*>(y);
  int64_t head = 0;
  if (aligned_for(x, 16) && aligned_for(y, 8)) {
    head = n / 4 * 4;
    if (head > 0) to_bf16_x4_kernel<<<blocks_for(head / 4, 256), 256, 0, s>>>(x, out, head / 4);
  }
  if (n > head)
    to_bf16_kernel<<<blocks_for(n - head, 256), 256, 0, s>>>(x + head, out + head, n - head);
  CUDA_LAUNCH_CHECK();
}

Gemm::Gemm(cudaStream_t s, void* workspace, size_t workspace_bytes)
    : stream_(s), workspace_(workspace), workspace_bytes_(workspace_bytes) {
  LT_CHECK(cublasLtCreate(&lt_));
  int dev = 0;
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
  gpu_ = prop.name;
}

Gemm::~Gemm() {
  for (auto& [key, p] : plans_) {
    cublasLtMatrixLayoutDestroy(p.a);
    cublasLtMatrixLayoutDestroy(p.b);
    cublasLtMatrixLayoutDestroy(p.d);
    cublasLtMatmulDescDestroy(p.op);
  }
  cublasLtDestroy(lt_);
}

void Gemm::operator()(bool transA, bool transB, int64_t M, int64_t N, int64_t K, float alpha,
                      const void* A, int64_t lda, int64_t strideA, const void* B, int64_t ldb,
                      int64_t strideB, void* D, int64_t ldd, int64_t strideD, int64_t batch,
                      Operands ops, bool d_bf16, const void* C) {
  LMT_ASSERT(!d_bf16 || ops == Operands::bf16, "a bf16 D takes bf16 operands");
  const void* addend = C ? C : D;
  const int64_t align_a = alignment(A), align_b = alignment(B), align_c = alignment(addend),
                align_d = alignment(D);
  const Key key{transA,  transB,  M,     N,     K,      lda,    ldb,     ldd,     strideA,
                strideB, strideD, batch, int64_t(ops), d_bf16, align_a, align_b, align_c, align_d};
  auto it = plans_.find(key);
  if (it == plans_.end()) {
    const cudaDataType in = ops == Operands::bf16 ? CUDA_R_16BF : CUDA_R_32F;
    const cudaDataType out = d_bf16 ? CUDA_R_16BF : CUDA_R_32F;
    Plan p;
    LT_CHECK(cublasLtMatmulDescCreate(
        &p.op, ops == Operands::tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F,
        CUDA_R_32F));
    const cublasOperation_t opa = transB ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t opb = transA ? CUBLAS_OP_T : CUBLAS_OP_N;
    LT_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
    LT_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
    p.a = transB ? layout(in, K, N, ldb, batch, strideB) : layout(in, N, K, ldb, batch, strideB);
    p.b = transA ? layout(in, M, K, lda, batch, strideA) : layout(in, K, M, lda, batch, strideA);
    p.d = layout(out, N, M, ldd, batch, strideD);
    cublasLtMatmulPreference_t pref;
    LT_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                  &workspace_bytes_, sizeof workspace_bytes_));
    const std::pair<cublasLtMatmulPreferenceAttributes_t, int64_t> aligned[] = {
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align_b},  // cuBLASLt's A is our B
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align_a},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align_c},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align_d}};
    for (auto [attr, bytes] : aligned) {
      const uint32_t b = uint32_t(bytes);
      LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &b, sizeof b));
    }
    // This problem's measured choice, if any.
    const char* want = ops == Operands::bf16 && batch == 1
                           ? table_choice(gpu_, transA, transB, M, N, K, d_bf16)
                           : nullptr;
    cublasLtMatmulHeuristicResult_t offered[kOffered] = {};
    int found = 0;
    LT_CHECK(cublasLtMatmulAlgoGetHeuristic(lt_, p.op, p.a, p.b, p.d, p.d, pref,
                                            want ? kOffered : 1, offered, &found));
    cublasLtMatmulPreferenceDestroy(pref);
    if (found == 0)
      LMT_FATAL(strf("cuBLASLt has no algorithm for a %lld x %lld x %lld matmul",
                     (long long)M, (long long)N, (long long)K));
    p.algo = offered[0].algo;
    bool taken = !want || algo_config(offered[0].algo) == want;
    for (int i = 1; !taken && i < found; ++i)
      if (algo_config(offered[i].algo) == want) p.algo = offered[i].algo, taken = true;
    if (!taken && std::min({align_a, align_b, align_c, align_d}) >= 16) {
      // Not among the offers: built from the text (the heuristic's offers were checked against
      // these pointers' alignments; a built one is taken only where all are 16-byte aligned).
      cublasLtMatmulAlgo_t built;
      cublasLtMatmulHeuristicResult_t checked;
      if (checked_algo_from_config(lt_, want, p.op, p.a, p.b, p.d, in, out, workspace_bytes_, built,
                                   checked))
        p.algo = built;
    }
    it = plans_.emplace(key, p).first;
  }
  const Plan& p = it->second;
  const float beta = C ? 1.0f : 0.0f;
  LT_CHECK(cublasLtMatmul(lt_, p.op, &alpha, B, p.a, A, p.b, &beta, addend, p.d, D, p.d, &p.algo,
                          workspace_, workspace_bytes_, stream_));
}

}  // namespace lmt::cuda
