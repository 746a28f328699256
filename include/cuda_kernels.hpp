// Launchers of our CUDA kernels (cuda/*.cu): pointers, sizes and a stream, nothing else. Each
// computes what the op of the same name in cpu_ops.hpp computes, in fp32; each .cu file states
// its maths and layout. Only built with the CUDA toolkit (LMTRAIN_CUDA).
#pragma once
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "cpu_ops.hpp"
#include "plan.hpp"

namespace lmt::cuda {

// out is float*, or __nv_bfloat16* with out_bf16 (the table's values rounded).
void embedding_fwd(const int32_t* tokens, const float* table, void* out, bool out_bf16, int64_t n,
                   int64_t d, cudaStream_t s);
// dout is float*, or __nv_bfloat16* with dout_bf16.
void embedding_bwd(const int32_t* tokens, const int32_t* order, const void* dout, bool dout_bf16,
                   float* dtable, int64_t n, int64_t d, cudaStream_t s);
// x is float*, or __nv_bfloat16* with x_bf16; y likewise with y_bf16 (rounded to nearest even).
void rmsnorm_fwd(const void* x, bool x_bf16, const float* g, void* y, bool y_bf16, float* rstd,
                 int64_t rows, int64_t d, double eps, cudaStream_t s);
// x, dy and dx are float*, or __nv_bfloat16* with x_bf16, dy_bf16, dx_bf16 (dx updated in place,
// rounded). scratch: kRmsnormDgChunks (plan.hpp) * d floats (dg's partial sums). dx_copy16: null,
// or (dx fp32) __nv_bfloat16* that receives the updated dx rounded. add_dg: dg += the sum (else
// dg = it).
void rmsnorm_bwd(const void* x, bool x_bf16, const float* g, const float* rstd, const void* dy,
                 bool dy_bf16, void* dx, bool dx_bf16, void* dx_copy16, float* dg, float* scratch,
                 int64_t rows, int64_t d, bool add_dg, cudaStream_t s);
// x is float*, or __nv_bfloat16* with bf16. table: float2 (cos, sin) of angle
// t * theta^(-2i/dh) at [t * dh/2 + i], t < T: rope_table's values, on the device.
void rope(void* x, bool bf16, const void* table, int64_t B, int64_t T, int64_t H, int64_t dh,
          int64_t row_stride, bool inverse, cudaStream_t s);
// rope's table (T * dh floats), computed in fp64 on the host (an fp32 angle at t ~ 1e3 is off by
// ~1e-4 rad).
std::vector<float> rope_table(int64_t T, int64_t dh, double theta);
// u[rows, 2f] ([b | a] per row), g[rows, f] (backward: u, dg, du) are float*, or all
// __nv_bfloat16* with bf16.
void swiglu_fwd(const void* u, void* g, bool bf16, int64_t rows, int64_t f, cudaStream_t s);
void swiglu_bwd(const void* u, const void* dg, void* du, bool bf16, int64_t rows, int64_t f,
                cudaStream_t s);
// W2's backward into SwiGLU's in one kernel (swiglu_sm90.cu), all bf16: du = swiglu_bwd(u, dg)
// with dg = dy W2 rounded to bf16 as W2's matmul would store it, never stored itself; dy [M, d],
// W2 [d, f] (row-major, as a linear layer's weight from f to d), u and du [M, 2f] as swiglu_bwd's.
// Runs where swiglu_dgrad_supported holds (a Hopper GPU, d and f multiples of 8, the pointers
// 16-byte aligned).
bool swiglu_dgrad_supported(const void* dy, const void* w2, const void* u, const void* du,
                            int64_t M, int64_t d, int64_t f);
void swiglu_dgrad(const void* dy, const void* w2, const void* u, void* du, int64_t M, int64_t d,
                  int64_t f, cudaStream_t s);
// Causal softmax over rows of scores [rows, T] (row r is query r % T; fp32, or bf16), in place:
// P; and P in fp32 to probs, packed causal: for each T rows, T(T+1)/2 values, row q's q + 1
// (keys 0..q) after the rows before it.
void softmax_causal_fwd(void* scores, bool bf16, float* probs, int64_t rows, int64_t T,
                        cudaStream_t s);
// dS = P * (dP - rowsum(P * dP)) * scale, P packed as the forward wrote it, in place over dP
// (fp32, or bf16); and P whole [rows, T] in dP's type to P_out (read anyway: dV's matmul
// takes it).
void softmax_causal_bwd(const float* P, void* dP, void* P_out, bool bf16, int64_t rows,
                        int64_t T, float scale, cudaStream_t s);
// logits[n, V] are float*, or __nv_bfloat16* with bf16; overwritten in place by their gradient
// (in the same type) unless grad_scale is 0 (the loss only).
void cross_entropy(void* logits, bool bf16, const int32_t* targets, float* row_loss, int64_t n,
                   int64_t V, double grad_scale, cudaStream_t s);
// p_bf16: if not null, receives the updated p rounded to bf16.
void adamw(float* p, const float* g, float* m, float* v, void* p_bf16, size_t n,
           const AdamWStep& step, cudaStream_t s);
// AdamW with bf16 moments (adamw_bf16.hpp: cpu::adamw_bf16's bits); m, v: n bf16 values;
// index: element 0's place in the flat buffer.
void adamw_bf16(float* p, const float* g, uint16_t* m, uint16_t* v, void* p_bf16, size_t n,
                uint64_t index, const AdamWStep& step, cudaStream_t s);
// AdamW of weights held only as bf16 (w: n bf16 values of the weights' copy, no fp32 master;
// adamw_bf16.hpp: cpu::adamw_bf16_weights's bits), moments m, v in fp32 or bf16; index: element
// 0's place in the flat buffer.
void adamw_bf16_weights(uint16_t* w, const float* g, float* m, float* v, size_t n, uint64_t index,
                        const AdamWStep& step, cudaStream_t s);
void adamw_bf16_weights(uint16_t* w, const float* g, uint16_t* m, uint16_t* v, size_t n,
                        uint64_t index, const AdamWStep& step, cudaStream_t s);
// Deterministic sums (fixed partition, fixed order) of x or x^2 into *out (device, double).
void sum(const float* x, size_t n, bool squares, double* partials, double* out, cudaStream_t s);
constexpr int kSumPartials = 1024;  // blocks of the first pass: partials holds this many

// What matmul operands are: fp32 (fp32 arithmetic), fp32 read by TF32 tensor cores, or bf16.
enum class Operands { fp32, tf32, bf16 };

// Row-major D[M,N] = alpha op(A) op(B) (+ C), batched with strides, through cuBLASLt with fp32
// accumulation, on one stream with one workspace; each problem's algorithm, cuBLASLt's heuristic's
// first choice or the table's measured one (never a timing at run time: cuda/matmul.cu), is
// chosen on its first call and kept. A and B are
// float* or, for Operands::bf16, __nv_bfloat16*; D is float*, or __nv_bfloat16* (rounded from the
// fp32 result) with d_bf16, for bf16 operands only. C, if given, is a buffer laid out and typed
// as D (the epilogue adds it in fp32: D = alpha op(A) op(B) + C without a pass of its own), or D
// itself (D += alpha op(A) op(B)).
class Gemm {
 public:
  // workspace: kWorkspaceBytes, the algorithms' scratch.
  Gemm(cudaStream_t s, void* workspace, size_t workspace_bytes);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;
  void operator()(bool transA, bool transB, int64_t M, int64_t N, int64_t K, float alpha,
                  const void* A, int64_t lda, int64_t strideA, const void* B, int64_t ldb,
                  int64_t strideB, void* D, int64_t ldd, int64_t strideD,
                  int64_t batch, Operands ops, bool d_bf16 = false, const void* C = nullptr);
  // NVIDIA's advice for the cuBLASLt workspace on Hopper, 32 MiB.
  static constexpr size_t kWorkspaceBytes = size_t(32) << 20;

 private:
  struct Plan {
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, d;  // cuBLASLt's A (our B), its B (our A), and C = D
    cublasLtMatmulAlgo_t algo;
  };
  // transA, transB, M, N, K, lda, ldb, ldd, strides, batch, operands, d_bf16, the pointers'
  // alignments: what the plan depends on (whether C is added is beta, given at each call).
  using Key = std::array<int64_t, 18>;
  cublasLtHandle_t lt_ = nullptr;
  std::string gpu_;  // the device's name, as cuda/gemm_choices.inc names GPUs
  cudaStream_t stream_;
  void* workspace_;
  size_t workspace_bytes_;
  std::map<Key, Plan> plans_;
};
// y[0..n) = x rounded to bf16 (nearest even).
void to_bf16(const float* x, void* y, int64_t n, cudaStream_t s);

}  // namespace lmt::cuda
