// Feasibility test, kept in history only: gpt2-small's LM head matmul (16 384 x 768 by 768 x
// 50 304, bf16 logits; cuBLASLt's first heuristic choice) and the fused cross-entropy one after
// the other, against the rows in k chunks, each chunk's cross-entropy on a second stream beside
// the next chunk's matmul, the matmul held to fewer SMs (CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET) or
// not. Medians of 10 after 3, CUDA events.
//   nvcc -std=c++20 -O3 -Iinclude -Icuda -gencode arch=compute_90a,code=sm_90a \
//     -o lm_head_overlap dev/lm_head_overlap.cu cuda/cross_entropy.cu -lcublasLt
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>
#include <algorithm>
#include "check.hpp"
#include "cuda_kernels.hpp"
namespace lmt {
[[noreturn]] void fatal(const std::string& w, const char* f, int l) { fprintf(stderr, "%s %s:%d\n", w.c_str(), f, l); abort(); }
}
#define CK(x) do { auto r_ = (x); if (r_ != 0) { fprintf(stderr, "%s: %d line %d\n", #x, int(r_), __LINE__); abort(); } } while (0)
__global__ void fill(__nv_bfloat16* p, size_t n, float s) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    p[i] = __float2bfloat16(s * float((i * 2654435761u) % 2001) / 1000.0f - s);
}
int main() {
  const int M = 16384, V = 50304, d = 768;
  __nv_bfloat16 *X, *W, *L;
  int32_t* tg; float* rl; void* ws; size_t wsb = 32 << 20;
  CK(cudaMalloc(&X, size_t(M) * d * 2)); CK(cudaMalloc(&W, size_t(V) * d * 2));
  CK(cudaMalloc(&L, size_t(M) * V * 2)); CK(cudaMalloc(&tg, M * 4)); CK(cudaMalloc(&rl, M * 4));
  CK(cudaMalloc(&ws, wsb));
  fill<<<1024, 256>>>(X, size_t(M) * d, 1.0f); fill<<<1024, 256>>>(W, size_t(V) * d, 0.05f);
  std::vector<int32_t> t(M); for (int i = 0; i < M; ++i) t[i] = (i * 7919) % V;
  CK(cudaMemcpy(tg, t.data(), M * 4, cudaMemcpyHostToDevice));
  cublasLtHandle_t lt; CK(cublasLtCreate(&lt));
  cudaStream_t sa, sb; CK(cudaStreamCreateWithFlags(&sa, cudaStreamNonBlocking)); CK(cudaStreamCreateWithFlags(&sb, cudaStreamNonBlocking));
  struct G { cublasLtMatmulDesc_t op; cublasLtMatrixLayout_t a, b, c; cublasLtMatmulAlgo_t algo; };
  auto plan = [&](int n, int sms) {
    G g; CK(cublasLtMatmulDescCreate(&g.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    CK(cublasLtMatmulDescSetAttribute(g.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    CK(cublasLtMatmulDescSetAttribute(g.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    if (sms > 0) CK(cublasLtMatmulDescSetAttribute(g.op, CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, &sms, sizeof sms));
    CK(cublasLtMatrixLayoutCreate(&g.a, CUDA_R_16BF, d, V, d));
    CK(cublasLtMatrixLayoutCreate(&g.b, CUDA_R_16BF, d, n, d));
    CK(cublasLtMatrixLayoutCreate(&g.c, CUDA_R_16BF, V, n, V));
    cublasLtMatmulPreference_t pref; CK(cublasLtMatmulPreferenceCreate(&pref));
    CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof wsb));
    cublasLtMatmulHeuristicResult_t h[1]; int got = 0;
    CK(cublasLtMatmulAlgoGetHeuristic(lt, g.op, g.a, g.b, g.c, g.c, pref, 1, h, &got));
    if (!got) { fprintf(stderr, "no algo\n"); abort(); }
    g.algo = h[0].algo; return g;
  };
  const float one = 1, zero = 0;
  auto gemm = [&](G& g, int row0, int n, cudaStream_t s) {
    CK(cublasLtMatmul(lt, g.op, &one, W, g.a, X + size_t(row0) * d, g.b, &zero, L + size_t(row0) * V, g.c,
                      L + size_t(row0) * V, g.c, &g.algo, ws, wsb, s));
  };
  auto ce = [&](int row0, int n, cudaStream_t s) {
    lmt::cuda::cross_entropy(L + size_t(row0) * V, true, tg + row0, rl + row0, n, V, 1.0 / M, s);
  };
  cudaEvent_t e0, e1; CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
  std::vector<cudaEvent_t> ev(64); for (auto& e : ev) CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  auto timeit = [&](const char* name, auto body) {
    std::vector<float> ms;
    for (int r = 0; r < 13; ++r) {
      CK(cudaEventRecord(e0, sa));
      CK(cudaStreamWaitEvent(sb, e0));
      body();
      CK(cudaEventRecord(ev[63], sb)); CK(cudaStreamWaitEvent(sa, ev[63]));
      CK(cudaEventRecord(e1, sa)); CK(cudaEventSynchronize(e1));
      float m; CK(cudaEventElapsedTime(&m, e0, e1)); if (r >= 3) ms.push_back(m);
    }
    std::sort(ms.begin(), ms.end());
    printf("%-44s median %.3f ms (min %.3f)\n", name, ms[ms.size() / 2], ms[0]);
  };
  G full = plan(M, 0);
  timeit("gemm alone", [&] { gemm(full, 0, M, sa); });
  timeit("ce alone", [&] { ce(0, M, sa); });
  timeit("gemm then ce", [&] { gemm(full, 0, M, sa); ce(0, M, sa); });
  for (int sms : {0, 124, 116, 108, 100}) {
    G g132 = plan(M, sms);
    char nm[128]; snprintf(nm, sizeof nm, "gemm alone, sm target %d", sms);
    timeit(nm, [&] { gemm(g132, 0, M, sa); });
    for (int k : {2, 4, 8, 16}) {
      const int n = M / k; G g = plan(n, sms);
      snprintf(nm, sizeof nm, "chunks %d, sm target %d, ce beside", k, sms);
      timeit(nm, [&] {
        for (int c = 0; c < k; ++c) {
          gemm(g, c * n, n, sa); CK(cudaEventRecord(ev[c], sa));
          CK(cudaStreamWaitEvent(sb, ev[c])); ce(c * n, n, sb);
        }
      });
    }
  }
  printf("done\n");
}
