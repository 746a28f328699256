// Feasibility test, kept in history only: does AdamW, which DRAM bounds, hide beside the forward's
// matmuls, which the tensor cores bound? gpt2-small's four matmul shapes of a layer at 16 x 1024
// tokens, 12 times over, on one stream; AdamW over half the model's parameters on another.
//   nvcc -std=c++20 -O3 -Iinclude -Icuda -gencode arch=compute_90a,code=sm_90a \
//     -o adamw_beside_matmuls dev/adamw_beside_matmuls.cu cuda/adamw.cu -lcublasLt
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>
#include <algorithm>
#include "check.hpp"
#include "cpu_ops.hpp"
#include "cuda_kernels.hpp"
namespace lmt {
[[noreturn]] void fatal(const std::string& w, const char* f, int l) { fprintf(stderr, "%s %s:%d\n", w.c_str(), f, l); abort(); }
}
#define CK(x) do { auto r_ = (x); if (r_ != 0) { fprintf(stderr, "%s: %d line %d\n", #x, int(r_), __LINE__); abort(); } } while (0)
__global__ void fill(__nv_bfloat16* p, size_t n, float s) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    p[i] = __float2bfloat16(s * float((i * 2654435761u) % 2001) / 1000.0f - s);
}
__global__ void fillf(float* p, size_t n, float s) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    p[i] = s * float((i * 2654435761u) % 2001) / 1000.0f;
}
int main() {
  const int M = 16384;
  const int shapes[4][2] = {{2304, 768}, {768, 768}, {4096, 768}, {768, 2048}};  // N, K per matmul
  __nv_bfloat16 *X, *W, *Y; void* ws; size_t wsb = 32 << 20;
  CK(cudaMalloc(&X, size_t(M) * 4096 * 2)); CK(cudaMalloc(&W, size_t(4096) * 2048 * 2));
  CK(cudaMalloc(&Y, size_t(M) * 4096 * 2)); CK(cudaMalloc(&ws, wsb));
  fill<<<1024, 256>>>(X, size_t(M) * 4096, 1.0f); fill<<<1024, 256>>>(W, size_t(4096) * 2048, 0.05f);
  const size_t P = 162220000 / 2;  // AdamW over half the model's parameters
  float *p, *g, *m, *v; __nv_bfloat16* p16;
  CK(cudaMalloc(&p, P * 4)); CK(cudaMalloc(&g, P * 4)); CK(cudaMalloc(&m, P * 4)); CK(cudaMalloc(&v, P * 4)); CK(cudaMalloc(&p16, P * 2));
  fillf<<<1024, 256>>>(p, P, 1); fillf<<<1024, 256>>>(g, P, 0.01f); fillf<<<1024, 256>>>(m, P, 0.001f); fillf<<<1024, 256>>>(v, P, 0.0001f);
  cublasLtHandle_t lt; CK(cublasLtCreate(&lt));
  cudaStream_t sa, sb; CK(cudaStreamCreateWithFlags(&sa, cudaStreamNonBlocking)); CK(cudaStreamCreateWithFlags(&sb, cudaStreamNonBlocking));
  struct G { cublasLtMatmulDesc_t op; cublasLtMatrixLayout_t a, b, c; cublasLtMatmulAlgo_t algo; };
  auto plan = [&](int N, int K) {
    G gg; CK(cublasLtMatmulDescCreate(&gg.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    CK(cublasLtMatmulDescSetAttribute(gg.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    CK(cublasLtMatmulDescSetAttribute(gg.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    CK(cublasLtMatrixLayoutCreate(&gg.a, CUDA_R_16BF, K, N, K));
    CK(cublasLtMatrixLayoutCreate(&gg.b, CUDA_R_16BF, K, M, K));
    CK(cublasLtMatrixLayoutCreate(&gg.c, CUDA_R_16BF, N, M, N));
    cublasLtMatmulPreference_t pref; CK(cublasLtMatmulPreferenceCreate(&pref));
    CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof wsb));
    cublasLtMatmulHeuristicResult_t h[1]; int got = 0;
    CK(cublasLtMatmulAlgoGetHeuristic(lt, gg.op, gg.a, gg.b, gg.c, gg.c, pref, 1, h, &got));
    gg.algo = h[0].algo; return gg;
  };
  std::vector<G> gs; for (auto& s : shapes) gs.push_back(plan(s[0], s[1]));
  const float one = 1, zero = 0;
  auto layers = [&](int n) {
    for (int l = 0; l < n; ++l) for (auto& gg : gs)
      CK(cublasLtMatmul(lt, gg.op, &one, W, gg.a, X, gg.b, &zero, Y, gg.c, Y, gg.c, &gg.algo, ws, wsb, sa));
  };
  lmt::AdamWStep st{1e-3, 0.9, 0.95, 1e-8, 0.1, 3, 1.0, 0};
  auto adam = [&](int chunks) {
    const size_t c = P / chunks;
    for (int i = 0; i < chunks; ++i) lmt::cuda::adamw(p + i * c, g + i * c, m + i * c, v + i * c, p16 + i * c, c, st, sb);
  };
  cudaEvent_t e0, e1, eb; CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1)); CK(cudaEventCreateWithFlags(&eb, cudaEventDisableTiming));
  auto timeit = [&](const char* name, auto body) {
    std::vector<float> ms;
    for (int r = 0; r < 13; ++r) {
      CK(cudaEventRecord(e0, sa)); CK(cudaStreamWaitEvent(sb, e0));
      body();
      CK(cudaEventRecord(eb, sb)); CK(cudaStreamWaitEvent(sa, eb));
      CK(cudaEventRecord(e1, sa)); CK(cudaEventSynchronize(e1));
      float t; CK(cudaEventElapsedTime(&t, e0, e1)); if (r >= 3) ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    printf("%-52s median %.3f ms (min %.3f)\n", name, ms[ms.size() / 2], ms[0]);
  };
  timeit("12 layers' forward matmuls alone", [&] { layers(12); });
  timeit("adamw over 81M parameters alone (1 launch)", [&] { adam(1); });
  timeit("adamw, 12 launches, alone", [&] { adam(12); });
  timeit("one after the other", [&] { layers(12); CK(cudaEventRecord(eb, sa)); CK(cudaStreamWaitEvent(sb, eb)); adam(1); });
  timeit("side by side (adamw 1 launch)", [&] { layers(12); adam(1); });
  timeit("side by side (adamw 12 launches)", [&] { layers(12); adam(12); });
  printf("done\n");
}
