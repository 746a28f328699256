// The head dims FlashAttention has kernels for (80: the 2.7b model's). CUDA-free, so that the
// config checks attention.head_dims in any build; cuda/attention/flash.cuh instantiates its
// kernels for exactly these.
#pragma once
#include <cstdint>
#include <iterator>
#include <string>

namespace lmt {

inline constexpr int64_t kFlashHeadDims[] = {16, 32, 64, 80, 128};

constexpr bool is_flash_head_dim(int64_t dh) {
  for (int64_t d : kFlashHeadDims)
    if (d == dh) return true;
  return false;
}

// "16, 32, 64, 80 or 128", for messages.
inline std::string flash_head_dims_text() {
  std::string s;
  for (size_t i = 0; i < std::size(kFlashHeadDims); ++i)
    s += (i == 0 ? "" : i + 1 == std::size(kFlashHeadDims) ? " or " : ", ") +
         std::to_string(kFlashHeadDims[i]);
  return s;
}

}  // namespace lmt
