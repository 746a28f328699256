// The resolved configuration of one run: every key users type, its default and its meaning.
//
// Sources are applied in order (defaults, each --config file, each --set), later wins. Every key
// remembers where its value came from (file:line or --set) so that an error can point at it.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "choices.hpp"

namespace lmt {

struct Config {
  struct Run {
    Mode mode = Mode::train;      // train | bench | attention | plan | allreduce
    std::string device = "auto";  // auto | cpu | cuda
    int64_t seed = 0;
    int64_t graphs = 0;  // 1: forward and backward replayed as CUDA graphs (one GPU, one rank)
    double comm_timeout_s = 600;  // watchdog.hpp; 0: wait for ever
  } run;
  struct Model {  // defaults are the tiny model (configs/models/tiny.toml)
    int64_t d_model = 64, d_ff = 176, num_layers = 2, num_heads = 4, vocab_size = 256,
            context_length = 64;
    double rope_theta = 10000.0, norm_eps = 1e-5;
    Precision precision = Precision::bf16;  // fp64 | fp32 | tf32 | bf16
    Dtype residual_dtype = Dtype::fp32;  // how the residual stream and its gradient are stored
    std::string attention = "flash"; // flash | naive
    bool tie_embeddings = false;  // the LM head reads the token embeddings' [V, d] weight
    int64_t head_dim() const { return d_model / num_heads; }
    // Whether the backward keeps a bf16 copy of the residual stream's gradient for the matmuls:
    // under bf16 with an fp32 stream (a bf16 stream's gradient they read as it is).
    bool residual_grad_copy16() const {
      return precision == Precision::bf16 && residual_dtype != Dtype::bf16;
    }
  } model;
  struct Train {
    int64_t batch_size = 8, grad_accum = 1, steps = 200, log_every = 20, checkpoint_every = 0;
    std::string checkpoint_dir = "", resume = "";
    int64_t overwrite = 0;  // 1: checkpoints may go where another run's are
    int64_t keep_checkpoints = 0;  // this run's newest kept in checkpoint_dir (0: all)
    // Validation: every eval_every steps (0: only after the last) the mean loss of eval_batches
    // held-out batches (0: no validation).
    int64_t eval_every = 0, eval_batches = 8;
  } train;
  struct Optim {
    double lr = 3e-3, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.0, grad_clip = 1.0;
    int64_t warmup_steps = 10;
    std::string schedule = "cosine";  // constant | cosine
    double min_lr = 3e-4;
    Dtype state_dtype = Dtype::fp32;  // how AdamW's m and v are stored
    bool master_weights = true;  // fp32 masters of the weights (false: bf16 weights, bf16 only)
  } optim;
  struct Data {
    std::string source = "synthetic";  // synthetic | file
    std::string path = "";
    int64_t synthetic_successors = 4;  // next-token choices per token in the Markov chain
    std::string val_path = "";  // held-out token file (source = "file")
  } data;
  struct Bench {
    int64_t warmup = 5, steps = 20, kernels = 8;
    double peak_tflops = 989.0;  // for MFU: H100/H200 dense bf16
  } bench;
  struct Attention {  // the attention mode's grid: every combination is one row
    int64_t batch = 1, heads = 16, warmup = 5, iters = 20;
    std::vector<int64_t> seq_lens{256, 1024, 4096, 16384}, head_dims{64, 128};
    std::vector<std::string> dtypes{"bf16"}, masks{"causal"}, impls{"naive", "flash"};
  } attention;
  struct Ddp {
    Strategy strategy = Strategy::flat;  // naive | flat | overlap | bucketed | zero1
    double bucket_mb = 25.0;
    int64_t comm_ctas = 0;  // NCCL's maxCTAs; 0: NCCL's choice
  } ddp;
  struct Plan {  // plan mode: the parallel layout whose memory and communication it computes
    int64_t dp = 1, zero = 0, fsdp = 1, tp = 1;
    std::string graph = "lmtrain";  // lmtrain | ffn_only
    double device_gb = 80.0, act_shard_fraction = 0.0;
  } plan;
  struct Allreduce {  // sizes (MiB): sizes_mb, or if it is empty min_mb, min_mb * factor, ... max_mb
    std::vector<double> sizes_mb;
    double min_mb = 1.0, max_mb = 1000.0, factor = 10.0;
    std::string backend = "nccl";  // nccl (device buffers) | mpi (host buffers)
    std::string dtype = "fp32";    // fp32 | bf16
    int64_t warmup = 5, iters = 20;
  } allreduce;

  std::map<std::string, std::string> origin;  // "section.key" -> "file:line" or "--set"
};

// A key held as an enum (choices.hpp): its value is the index of its word in `choices`.
struct ChoiceRef {
  std::function<size_t()> get;
  std::function<void(size_t)> set;
};

// One key of the config: a typed pointer into a Config plus what it means and allows.
struct ConfigField {
  std::string section, key;
  // A list (TOML array) holds at least one element unless empty_ok; each is checked as the scalar
  // would be.
  std::variant<int64_t*, double*, std::string*, std::vector<int64_t>*, std::vector<double>*,
               std::vector<std::string>*, ChoiceRef, bool*>
      value;
  double min = 0, max = 0;               // numbers (and their lists): allowed range [min, max]
  bool min_open = false;                 // numbers: min itself excluded
  std::vector<std::string> choices;      // strings (and their lists): allowed values (empty: any);
                                         // enums: their words in enum order
  std::string doc;
  bool empty_ok = false;                 // lists: [] allowed (it means what `doc` says)
  std::string name() const { return section + "." + key; }
  std::string to_string() const;  // the value as TOML would write it
};

// The shortest decimal of %.15g and %.17g that reads back as x exactly ("1", "0.5", "1e+18").
std::string real_text(double x);

// Every key of `c`, in the documented order (the order of --print-config and of CSV columns).
std::vector<ConfigField> config_fields(Config& c);

// Parses command-line style arguments into a resolved, validated config. Throws UsageError with
// one line naming file:line, key, value and what was expected.
struct CommandLine {
  Config config;
  std::string csv_path, trace_path;
  bool print_config = false, help = false, version = false;
};
CommandLine parse_command_line(const std::vector<std::string>& args);

void load_config_file(Config& c, const std::string& path);
void apply_override(Config& c, const std::string& assignment);  // "section.key=value"
void validate(const Config& c);

// TOML text of the resolved config (stable order), and its 64-bit hash (ranks compare it).
std::string config_to_toml(const Config& c);
uint64_t config_hash(const Config& c);
std::string usage_text();

}  // namespace lmt
