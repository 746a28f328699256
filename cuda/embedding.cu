// Token embedding. Forward: out[i, :] = table[tokens[i], :] (a row gather; out in fp32, or bf16
// where the residual stream is kept so).
// Backward: dtable[v, :] += sum over i with tokens[i] == v of dout[i, :] (dout in fp32, or bf16
// where the residual stream's gradient is kept so). `order` lists the positions sorted by token
// (ties by position); the block that starts each run of one token sums the run's rows in that
// order and adds once: deterministic, no atomics, O(n d) work.
#include "common.cuh"
#include "cuda_kernels.hpp"

namespace lmt::cuda {
namespace {

template <typename Out>
__global__ void embedding_fwd_kernel(const int32_t* tokens, const float* table, Out* out,
                                     int64_t d) {
  const float* row = table + int64_t(tokens[blockIdx.x]) * d;
  for (int64_t c = threadIdx.x; c < d; c += blockDim.x)
    out[blockIdx.x * d + c] = stored<Out>(row[c]);
}

template <typename In>
__global__ void embedding_bwd_kernel(const int32_t* tokens, const int32_t* order, const In* dout,
                                     float* dtable, int64_t n, int64_t d) {
  const int64_t j = blockIdx.x;
  const int32_t v = tokens[order[j]];
  if (j > 0 && tokens[order[j - 1]] == v) return;  // not the start of v's run
  int64_t end = j + 1;
  while (end < n && tokens[order[end]] == v) ++end;
  for (int64_t c = threadIdx.x; c < d; c += blockDim.x) {
    float acc = 0;
    for (int64_t k = j; k < end; ++k) acc += float(dout[int64_t(order[k]) * d + c]);
    dtable[int64_t(v) * d + c] += acc;
  }
}

}  // namespace

void embedding_fwd(const int32_t* tokens, const float* table, void* out, bool out_bf16, int64_t n,
                   int64_t d, cudaStream_t s) {
  typed(out, out_bf16, [&](auto* o) {
    embedding_fwd_kernel<<<unsigned(n), 256, 0, s>>>(tokens, table, o, d);
  });
  CUDA_LAUNCH_CHECK();
}

void embedding_bwd(const int32_t* tokens, const int32_t* order, const void* dout, bool dout_bf16,
                   float* dtable, int64_t n, int64_t d, cudaStream_t s) {
  typed(dout, dout_bf16, [&](auto* in) {
    embedding_bwd_kernel<<<unsigned(n), 256, 0, s>>>(tokens, order, in, dtable, n, d);
  });
  CUDA_LAUNCH_CHECK();
}

}  // namespace lmt::cuda
