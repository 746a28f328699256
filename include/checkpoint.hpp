// Checkpoints: everything a run needs to continue bit for bit, in one safetensors file.
//
// Tensors (PyTorch-loadable): every parameter under its own name, its AdamW moments as
// "optim.m.<name>" and "optim.v.<name>" (F32, or F64 under precision = "fp64").
// Metadata: format, step, world_size, adam_t, rng.<rank> (each rank's data Rng, four hex words),
// checksum (FNV-1a 64 of the data section), and the resolved config as TOML.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "config.hpp"
#include "model.hpp"
#include "optimizer.hpp"

namespace lmt {

using RngState = std::array<uint64_t, 4>;

// params: every parameter of the model of `layout` (its masters, gathered where they are
// sharded: Zero1::gather_master).
template <typename T>
void save_checkpoint(const std::string& path, const Config& c, const ParamLayout& layout,
                     const std::vector<T>& params, const OptimizerState<T>& opt, int64_t step,
                     const std::vector<RngState>& rngs);

// Loads the parameters into model and the optimizer state into opt; returns the step to continue
// from and fills this world's Rng states. Throws UsageError (naming the file) for a torn,
// truncated or corrupted file, or one written for another model shape, precision or world size.
template <typename T>
int64_t load_checkpoint(const std::string& path, Model<T>& model, OptimizerState<T>& opt,
                        int world, std::vector<RngState>& rngs);

std::string checkpoint_path(const std::string& dir, int64_t step);

}  // namespace lmt
