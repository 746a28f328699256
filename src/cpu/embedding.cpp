// Token embedding: a row gather forward, a row scatter-add backward.
#include <algorithm>
#include <numeric>

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

void token_order(const int32_t* tokens, int64_t n, int32_t* order) {
  std::iota(order, order + n, 0);
  std::stable_sort(order, order + n, [&](int32_t a, int32_t b) { return tokens[a] < tokens[b]; });
}

template void embedding_fwd(const int32_t*, const float*, float*, int64_t, int64_t);

template void embedding_fwd(const int32_t*, const double*, double*, int64_t, int64_t);
template void embedding_bwd(const int32_t*, const float*, float*, int64_t, int64_t);
template void embedding_bwd(const int32_t*, const double*, double*, int64_t, int64_t);

}  // namespace lmt::cpu
