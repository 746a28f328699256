// Checks a training run makes before it allocates or computes anything, so that what would fail
// late (after hours, at the first checkpoint) fails in seconds with one line and exit code 2:
// the checkpoint directory is created and takes a file, its disk has room for a checkpoint, and
// the memory the run will allocate (plan mode's arithmetic, plan.hpp: exact for the CPU backend
// and within a few MiB for the CUDA backend) fits in what the host and the GPU have free.
#pragma once
#include <cstdint>
#include <string>

#include "config.hpp"
#include "runtime.hpp"

namespace lmt {

// Rank 0: (unless train.overwrite = 1) refuses a directory holding a checkpoint of another run
// than the one train.resume continues, or one of that run past the resumed step; then creates
// train.checkpoint_dir (and its parents), proves it writable with a probe file, checks its free
// space against the checkpoints the run adds to it at once (checkpoints_added), and removes
// partial checkpoints ("step_N.safetensors.tmp.PID") whose writer is no longer alive, saying so.
// UsageError naming the directory (and the file) otherwise. The caller runs it after every other
// check that can refuse the run.
void prepare_checkpoint_dir(const Config& c);

// The checkpoints a run from step `first` to `steps` writes: one every `every` steps (0: none
// on the way), and one after the last step unless that is one of them. A stop by a signal
// writes one more, which nothing counts.
int64_t checkpoints_written(int64_t first, int64_t steps, int64_t every);
// The most checkpoints of the run in the directory at once beyond its `existing` ones (a resumed
// run's), as it writes `written` more: all of them under train.keep_checkpoints = 0; else
// `keep` + 1 at most (each older one is removed once a newer is written), and at least the one
// being written.
int64_t checkpoints_added(int64_t written, int64_t existing, int64_t keep);

// Host memory of this node: its ranks' share of the plan (on the CPU backend, the whole model;
// on the GPU nothing of it) and the checkpoints' host memory (the copies written from; the mapped
// file a resume reads and the parameters each rank unpacks from it) against
// MemAvailable (and the cgroup's limit, where one is set). UsageError with both numbers.
void check_host_memory(const Config& c, const Runtime& rt, const std::string& device);

// This rank's GPU (selected): the plan's total_cuda against the free memory. UsageError with
// both numbers. Nothing on "cpu".
void check_device_memory(const Config& c, const Runtime& rt, const std::string& device);

}  // namespace lmt
