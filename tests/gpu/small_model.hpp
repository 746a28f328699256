// The whole-model GPU tests' model: two layers at sizes that are multiples of nothing useful
// (vocabulary 97, context 29, d_ff 136), three heads of 16 (flash has a kernel for 16).
#pragma once
#include "config.hpp"

namespace lmt::test {

inline Config::Model small_gpu_model() {
  Config::Model m;
  m.d_model = 48, m.num_heads = 3, m.d_ff = 136, m.num_layers = 2, m.vocab_size = 97;
  m.context_length = 29;
  return m;
}

}  // namespace lmt::test
