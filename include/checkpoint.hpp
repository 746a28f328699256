// Checkpoints: everything a run needs to continue bit for bit, in one safetensors file.
//
// Tensors (PyTorch-loadable): every parameter under its own name (F32, or F64 under precision =
// "fp64"; BF16 for the matmul weights under optim.master_weights = false, which have no other
// values), its AdamW moments as "optim.m.<name>" and "optim.v.<name>" (F32 or F64 likewise; BF16
// under optim.state_dtype = "bf16").
// Metadata: format, step, world_size, adam_t, optim.state_dtype ("fp32" or "bf16"; a file
// without it is fp32), optim.master_weights ("true" or "false"; a file without it is true),
// rng.<rank> (each rank's data Rng, four hex words),
// run_id (drawn when a run starts fresh, kept by its resumes), seed and data (what the data
// streams came from: data_identity), batch_size and grad_accum, the resolved config as TOML, and
// checksum: FNV-1a 64 of
// every other metadata entry, every tensor's name, dtype, shape and offsets, and the data
// section, so that no edit of the header (valid JSON or not) or of the data loads.
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
// sharded, or its bf16 values where it has none: Optimizer::gather_params).
template <typename T>
void save_checkpoint(const std::string& path, const Config& c, const ParamLayout& layout,
                     const std::vector<T>& params, const OptimizerState<T>& opt, int64_t step,
                     const std::vector<RngState>& rngs, const std::string& run_id);

// What a loaded checkpoint says of its run besides the tensors.
struct Resumed {
  int64_t step = 0;          // the step to continue from
  std::string run_id;
  std::string seed, data;    // run.seed and data_identity() of the run that wrote it
  int64_t batch_size = 0;    // its train.batch_size (0: not recorded) and train.grad_accum
  int64_t grad_accum = 1;
  std::string config;        // its resolved config (config_to_toml; empty: not recorded)
};

// Loads the parameters into model and the optimizer state into opt (each rank its part of the
// moments, straight from the mapped file: Safetensors::read); fills this world's Rng states.
// stored and master_weights say how this run stores the moments and the weights: a checkpoint
// of another optim.state_dtype or optim.master_weights is refused (no conversion). Throws
// UsageError (naming the file) for a torn, truncated or corrupted file (its header included),
// or one written for another model shape, precision, optimizer state dtype, master weights or
// world size.
template <typename T>
Resumed load_checkpoint(const std::string& path, Model<T>& model, Optimizer<T>& opt,
                        Stored stored, bool master_weights, int world,
                        std::vector<RngState>& rngs);

// The run a checkpoint belongs to (its header's run_id; empty for a file of another format) and
// its step (-1 where it has none). Reads the header only. UsageError for a file that is not a
// safetensors file.
struct CheckpointId {
  std::string run_id;
  int64_t step = -1;
};
CheckpointId checkpoint_id(const std::string& path);
// The same, or nothing (no run_id, step -1) for a file that cannot be read as one.
CheckpointId checkpoint_id_or_none(const std::string& path);

// train.resume's header, read before anything is allocated: refuses (UsageError) a file that is
// not an lmtrain checkpoint, one written by another number of ranks, or one of another model
// (model.* keys that change the parameters or what they compute: kResumeModelKeys).
void check_resume_header(const Config& c, int world);

// A fresh run's id: 16 hex digits from the system's entropy source.
std::string new_run_id();

// Where c's tokens come from: "synthetic (N successors)", or "file PATH (N bytes)".
std::string data_identity(const Config& c);

// One line when resuming under another run.seed, data, batch or model numerics (model.precision,
// residual_dtype, attention, context_length) than the checkpoint's run used (the run continues,
// but not as the interrupted run would have); empty when they are the same.
std::string resume_mismatch(const Config& c, const Resumed& r);

// Resuming under another train.grad_accum is refused (UsageError) unless batch_size x grad_accum,
// the sequences a rank contributes to an optimizer step, is unchanged: the data streams then
// continue as they were (micro-batches draw their sequences in order) and the steps see the
// same batch.
void check_resume_batch(const Config& c, const Resumed& r);

std::string checkpoint_path(const std::string& dir, int64_t step);
// Whether a file name is a checkpoint's, as checkpoint_path names them (step_*.safetensors).
bool is_checkpoint_name(const std::string& name);
// The checkpoints in folder `dir`: its step_*.safetensors files as paths, oldest step first; none
// if it cannot be read.
std::vector<std::string> checkpoint_files(const std::string& dir);
// Removes run `run_id`'s checkpoints in `dir` but its newest `keep` (train.keep_checkpoints; 0
// removes none); another run's, and a file whose header cannot be read, are left alone. Returns
// the names removed; one that cannot be removed is named in a warning on stderr.
std::vector<std::string> remove_old_checkpoints(const std::string& dir, const std::string& run_id,
                                                int64_t keep);

}  // namespace lmt
