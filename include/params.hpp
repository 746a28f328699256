// Where every parameter lives in the flat buffers.
//
// Parameters, gradients and optimizer moments are each one contiguous buffer with identical
// offsets. Offsets follow the order in which backward finishes gradients (LM head first,
// embedding last), so each backward group below is one contiguous range: a bucket is a slice,
// "flat" needs no copy, a ZeRO-1 shard is a range.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "config.hpp"

namespace lmt {

struct ParamView {
  std::string name;  // PyTorch-style, e.g. "layers.3.ffn.w1.weight"
  std::vector<int64_t> shape;
  size_t offset = 0, numel = 0;
  bool matmul = false;  // read only by matmuls (so, under bf16, only as its bf16 rounding)
};

// Gradients that become final at the same point of backward: group 0 is the LM head and final
// norm, group 1 + (L-1-l) is layer l, the last group is the embedding. Tied embeddings
// (model.tie_embeddings): no "lm_head.weight", group 0 is the final norm alone, and the head's
// gradient is part of the embedding's, final in the last group.
struct ParamGroup {
  size_t begin = 0, end = 0;
};

struct ParamLayout {
  std::vector<ParamView> params;  // in flat-buffer order
  std::vector<ParamGroup> groups; // in backward order
  size_t total = 0;
  std::unordered_map<std::string, size_t> index;  // name -> position in params

  // Linear in the number of parameters, and get() is a hash lookup: a model of 100k layers is
  // laid out in well under a second.
  static ParamLayout build(const Config::Model& m);
  const ParamView& get(const std::string& name) const;
  const ParamView& lm_head() const;  // "lm_head.weight", or the embeddings' where tied
  static int layer_group(int64_t num_layers, int64_t layer) { return int(num_layers - layer); }
};

}  // namespace lmt
