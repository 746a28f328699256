// Token embedding: a row gather forward, a row scatter-add backward.
#include <numeric>
#include <vector>

#include "check.hpp"
#include "cpu_ops.hpp"

namespace lmt::cpu {

template <typename T>
void embedding_fwd(const int32_t* tokens, const T* table, T* out, int64_t n, int64_t d) {
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < d; ++c) out[i * d + c] = table[int64_t(tokens[i]) * d + c];
}

template <typename T>
void embedding_bwd(const int32_t* tokens, const T* dout, T* dtable, int64_t n, int64_t d) {
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < d; ++c) dtable[int64_t(tokens[i]) * d + c] += dout[i * d + c];
}

// A counting sort, O(n + V), stable as it takes the positions in order: the host orders every
// step's tokens while the GPU works, and a comparison sort of gpt2-small's 16 x 1024 takes 1.3 ms.
void token_order(const int32_t* tokens, int64_t n, int64_t V, int32_t* order) {
  std::vector<int32_t> start(size_t(V) + 1, 0);  // start[t]: where token t's positions begin
  for (int64_t i = 0; i < n; ++i) {
    LMT_ASSERT(tokens[i] >= 0 && tokens[i] < V, strf("token %d at %lld outside the vocabulary "
                                                     "of %lld", tokens[i], (long long)i,
                                                     (long long)V));
    ++start[size_t(tokens[i]) + 1];
  }
  std::partial_sum(start.begin(), start.end(), start.begin());
  for (int64_t i = 0; i < n; ++i) order[start[size_t(tokens[i])]++] = int32_t(i);
}

template void embedding_fwd(const int32_t*, const float*, float*, int64_t, int64_t);

template void embedding_fwd(const int32_t*, const double*, double*, int64_t, int64_t);
template void embedding_bwd(const int32_t*, const float*, float*, int64_t, int64_t);
template void embedding_bwd(const int32_t*, const double*, double*, int64_t, int64_t);

}  // namespace lmt::cpu
