// Token embedding. Forward: out[i, :] = table[tokens[i], :] (a row gather).
// Backward: dtable[v, :] += sum over i with tokens[i] == v of dout[i, :], summed in position
// order by one block per vocabulary row, so the result is deterministic (no atomics).
#include "common.cuh"
#include "cuda_kernels.hpp"

namespace lmt::cuda {
namespace {

__global__ void embedding_fwd_kernel(const int32_t* tokens, const float* table, float* out,
                                     int64_t d) {
  const float* row = table + int64_t(tokens[blockIdx.x]) * d;
  for (int64_t c = threadIdx.x; c < d; c += blockDim.x) out[blockIdx.x * d + c] = row[c];
}

__global__ void embedding_bwd_kernel(const int32_t* tokens, const float* dout, float* dtable,
                                     int64_t n, int64_t d) {
  const int32_t v = int32_t(blockIdx.x);
  for (int64_t c = threadIdx.x; c < d; c += blockDim.x) {
    float acc = 0;
    bool hit = false;
    for (int64_t i = 0; i < n; ++i)
      if (tokens[i] == v) acc += dout[i * d + c], hit = true;
    if (hit) dtable[v * d + c] += acc;
  }
}

}  // namespace

void embedding_fwd(const int32_t* tokens, const float* table, float* out, int64_t n, int64_t d,
                   cudaStream_t s) {
  embedding_fwd_kernel<<<unsigned(n), 256, 0, s>>>(tokens, table, out, d);
  CUDA_LAUNCH_CHECK();
}

void embedding_bwd(const int32_t* tokens, const float* dout, float* dtable, int64_t n, int64_t d,
                   int64_t vocab, cudaStream_t s) {
  embedding_bwd_kernel<<<unsigned(vocab), 256, 0, s>>>(tokens, dout, dtable, n, d);
  CUDA_LAUNCH_CHECK();
}

}  // namespace lmt::cuda
