// Config: defaults, TOML files, --set overrides, validation with one-line errors.
#include "config.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include <toml++/toml.h>

#include "check.hpp"
#include "flash_head_dims.hpp"
#include "hash.hpp"

namespace lmt {
namespace {

constexpr double kBig = 1e18;

ConfigField int_field(const char* s, const char* k, int64_t* v, double min, const char* doc,
                      double max = kBig) {
  return ConfigField{s, k, v, min, max, false, {}, doc};
}
ConfigField real_field(const char* s, const char* k, double* v, double min, bool min_open,
                       double max, const char* doc) {
  return ConfigField{s, k, v, min, max, min_open, {}, doc};
}
ConfigField str_field(const char* s, const char* k, std::string* v,
                      std::vector<std::string> choices, const char* doc) {
  return ConfigField{s, k, v, 0, 0, false, std::move(choices), doc};
}
ConfigField bool_field(const char* s, const char* k, bool* v, const char* doc) {
  return ConfigField{s, k, v, 0, 0, false, {}, doc};
}
template <class E>
ConfigField enum_field(const char* s, const char* k, E* v, const char* doc) {
  ChoiceRef r{[v] { return size_t(*v); }, [v](size_t i) { *v = E(i); }};
  return ConfigField{s, k, std::move(r), 0, 0, false, choice_names<E>(), doc};
}
ConfigField ints_field(const char* s, const char* k, std::vector<int64_t>* v, double min,
                       double max, const char* doc, bool empty_ok = false) {
  return ConfigField{s, k, v, min, max, false, {}, doc, empty_ok};
}
ConfigField reals_field(const char* s, const char* k, std::vector<double>* v, double min,
                        bool min_open, const char* doc, bool empty_ok = false) {
  return ConfigField{s, k, v, min, kBig, min_open, {}, doc, empty_ok};
}
ConfigField strs_field(const char* s, const char* k, std::vector<std::string>* v,
                       std::vector<std::string> choices, const char* doc) {
  return ConfigField{s, k, v, 0, 0, false, std::move(choices), doc};
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + size_t(a[i - 1] != b[j - 1])});
      diag = up;
    }
  }
  return row[b.size()];
}

std::string where(const toml::source_region& src, const std::string& fallback) {
  if (!src.path) return fallback;
  return strf("%s:%u", src.path->c_str(), src.begin.line);
}

// A TOML basic string: quotes, backslashes and control characters escaped, so that printed
// configs reload to the same value and error messages stay on one line.
std::string toml_quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += std::string("\\") + c;
    else if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if ((unsigned char)c < 0x20 || c == 0x7f) out += strf("\\u%04x", (unsigned char)c);
    else out += c;
  }
  return out + "\"";
}

std::string describe(const toml::node& v) {
  std::ostringstream os;
  if (v.is_string()) os << toml_quoted(*v.value<std::string>());
  else if (v.is_table()) os << "a table";
  else if (v.is_array()) os << "an array";
  else v.visit([&](auto&& x) { os << x; });
  return os.str();
}

// Sets one field from a TOML node, checking type and range. `at` is the origin for messages.
void set_field(Config& c, const ConfigField& f, const toml::node& v, const std::string& at) {
  std::string name = f.name();
  // `x`: the offending value (an array's element, or the value itself).
  auto bad = [&](const std::string& expected, const toml::node* x = nullptr) {
    std::string value = describe(x ? *x : v);
    if (x && x != &v) value = "an array holding " + value;
    throw UsageError(strf("%s: %s = %s: expected %s", at.c_str(), name.c_str(), value.c_str(),
                          expected.c_str()));
  };
  auto range = [&](double x, const toml::node& node) {
    bool low = f.min_open ? x <= f.min : x < f.min;
    if (low || x > f.max || std::isnan(x)) {
      std::string lo = strf("%s %g", f.min_open ? ">" : ">=", f.min);
      // The bound every field has (kBig) is named only to a value past it.
      bad(f.max < kBig || x > f.max ? strf("a number %s and <= %g", lo.c_str(), f.max)
                                    : strf("a number %s", lo.c_str()), &node);
    }
  };
  auto integer = [&](const toml::node& x) {
    if (!x.is_integer()) bad("an integer", &x);
    int64_t i = *x.value<int64_t>();
    range(double(i), x);
    return i;
  };
  auto real = [&](const toml::node& x) {
    if (!x.is_number()) bad("a number", &x);
    const double r = *x.value<double>();
    range(r, x);
    return r;
  };
  auto string = [&](const toml::node& x) {
    if (!x.is_string()) bad("a string", &x);
    std::string s = *x.value<std::string>();
    if (!f.choices.empty() && std::find(f.choices.begin(), f.choices.end(), s) == f.choices.end()) {
      std::string list;
      for (auto& ch : f.choices) list += (list.empty() ? "" : " | ") + ("\"" + ch + "\"");
      bad("one of " + list, &x);
    }
    return s;
  };
  auto list = [&](auto& out, auto&& element) {
    std::string one;  // a lone value where an array belongs: how to write it as one
    if (v.is_string() || v.is_number()) one = " (one value: [" + describe(v) + "])";
    if (!v.is_array()) bad((f.empty_ok ? "an array" : "a non-empty array") + one);
    if (v.as_array()->empty() && !f.empty_ok) bad("a non-empty array");
    out.clear();
    for (auto&& e : *v.as_array()) out.push_back(element(e));
  };
  if (auto* p = std::get_if<int64_t*>(&f.value)) {
    **p = integer(v);
  } else if (auto* p = std::get_if<double*>(&f.value)) {
    **p = real(v);
  } else if (auto* p = std::get_if<std::string*>(&f.value)) {
    **p = string(v);
  } else if (auto* p = std::get_if<ChoiceRef>(&f.value)) {
    const std::string s = string(v);
    p->set(size_t(std::find(f.choices.begin(), f.choices.end(), s) - f.choices.begin()));
  } else if (auto* p = std::get_if<bool*>(&f.value)) {
    if (!v.is_boolean()) bad("true or false");
    **p = *v.value<bool>();
  } else if (auto* p = std::get_if<std::vector<int64_t>*>(&f.value)) {
    list(**p, integer);
  } else if (auto* p = std::get_if<std::vector<double>*>(&f.value)) {
    list(**p, real);
  } else {
    list(*std::get<std::vector<std::string>*>(f.value), string);
  }
  c.origin[name] = at;
}

const ConfigField* find_field(const std::vector<ConfigField>& fields, const std::string& name) {
  for (auto& f : fields)
    if (f.name() == name) return &f;
  return nullptr;
}

[[noreturn]] void unknown_key(const std::vector<ConfigField>& fields, const std::string& name,
                              const std::string& at) {
  std::string best;
  size_t best_d = std::numeric_limits<size_t>::max();
  for (auto& f : fields) {
    size_t d = edit_distance(name, f.name());
    if (d < best_d) best_d = d, best = f.name();
  }
  throw UsageError(strf("%s: unknown key %s (did you mean %s?)", at.c_str(), name.c_str(),
                        best.c_str()));
}

}  // namespace

std::vector<ConfigField> config_fields(Config& c) {
  auto& r = c.run; auto& m = c.model; auto& t = c.train; auto& o = c.optim; auto& d = c.data;
  return {
      enum_field("run", "mode", &r.mode,
                "train; bench: time forward, forward+backward and the full step; attention: "
                "naive vs flash attention over the [attention] grid; plan: memory and "
                "communication per device, computed (no backend); allreduce: the all-reduce "
                "benchmark ([allreduce])"),
      str_field("run", "device", &r.device, {"auto", "cpu", "cuda"},
                "backend; auto: cuda when every rank has a GPU and precision is not fp64"),
      int_field("run", "seed", &r.seed, 0, "seed of parameter init and every data stream"),
      int_field("run", "graphs", &r.graphs, 0,
                "1: train and bench record forward and backward once each as a CUDA graph and "
                "replay them (one GPU, one rank)", 1),
      real_field("run", "comm_timeout_s", &r.comm_timeout_s, 0, false, kBig,
                 "seconds a rank waits for its peers in a collective before the job aborts "
                 "naming the ranks that did not arrive, exit code 5; 0: for ever"),
      int_field("model", "d_model", &m.d_model, 1, "width of the residual stream"),
      int_field("model", "d_ff", &m.d_ff, 1, "hidden width of the SwiGLU feed-forward"),
      int_field("model", "num_layers", &m.num_layers, 1, "transformer blocks"),
      int_field("model", "num_heads", &m.num_heads, 1, "attention heads (d_model / num_heads even)"),
      int_field("model", "vocab_size", &m.vocab_size, 2, "token ids are < vocab_size", 65536),
      int_field("model", "context_length", &m.context_length, 1, "tokens per sequence (T)"),
      real_field("model", "rope_theta", &m.rope_theta, 0, true, kBig, "RoPE base"),
      real_field("model", "norm_eps", &m.norm_eps, 0, true, 1, "RMSNorm epsilon"),
      enum_field("model", "precision", &m.precision,
                "matmul input rounding; master weights, grads and optimizer stay fp32 (fp64: all; "
                "optim.state_dtype and optim.master_weights may store less)"),
      enum_field("model", "residual_dtype", &m.residual_dtype,
                "the residual stream (what each block adds to) and its gradient: fp32 (fp64 "
                "under precision fp64), or bf16 (precision bf16 only; rounded at each add, as "
                "llm.c keeps them)"),
      str_field("model", "attention", &m.attention, {"flash", "naive"},
                "GPU attention kernel; the CPU backend has one reference for both"),
      bool_field("model", "tie_embeddings", &m.tie_embeddings,
                 "one [vocab_size, d_model] weight for the token embeddings and the LM head (as "
                 "GPT-2 ties them): its gradient sums both uses; initialised N(0, 1/d_model)"),
      int_field("train", "batch_size", &t.batch_size, 1,
                "sequences per rank per micro-batch (one forward and backward)"),
      int_field("train", "grad_accum", &t.grad_accum, 1,
                "micro-batches per optimizer step, their gradients summed: a step sees "
                "world x batch_size x grad_accum sequences"),
      int_field("train", "steps", &t.steps, 0, "optimizer steps in total (a resumed run included)"),
      int_field("train", "log_every", &t.log_every, 1, "steps between progress lines"),
      int_field("train", "checkpoint_every", &t.checkpoint_every, 0,
                "steps between checkpoints (0: only at the end, if checkpoint_dir is set)"),
      str_field("train", "checkpoint_dir", &t.checkpoint_dir, {}, "where checkpoints go; empty: none"),
      str_field("train", "resume", &t.resume, {}, "checkpoint file to resume from; empty: fresh start"),
      int_field("train", "overwrite", &t.overwrite, 0,
                "1: write checkpoints into a checkpoint_dir holding another run's (a run "
                "continues its own: the resumed file's); 0: refuse, naming the file", 1),
      int_field("train", "keep_checkpoints", &t.keep_checkpoints, 0,
                "this run's newest checkpoints kept in checkpoint_dir: each older one is removed "
                "once a newer is written (0: keep all)"),
      int_field("train", "eval_every", &t.eval_every, 0,
                "optimizer steps between validations; one follows the last step in any case "
                "(0: only that one)"),
      int_field("train", "eval_batches", &t.eval_batches, 0,
                "held-out batches of batch_size windows (one micro-batch each) per validation, "
                "the same ones every time, split over the ranks; 0: no validation"),
      real_field("optim", "lr", &o.lr, 0, false, kBig, "peak learning rate"),
      real_field("optim", "beta1", &o.beta1, 0, false, 0.999999, "AdamW first-moment decay"),
      real_field("optim", "beta2", &o.beta2, 0, false, 0.999999, "AdamW second-moment decay"),
      real_field("optim", "eps", &o.eps, 0, true, kBig, "AdamW denominator epsilon"),
      real_field("optim", "weight_decay", &o.weight_decay, 0, false, kBig, "decoupled weight decay"),
      real_field("optim", "grad_clip", &o.grad_clip, 0, false, kBig,
                 "max global gradient L2 norm; 0: no clipping"),
      int_field("optim", "warmup_steps", &o.warmup_steps, 0, "linear warm-up steps"),
      str_field("optim", "schedule", &o.schedule, {"constant", "cosine"},
                "learning rate after warm-up"),
      real_field("optim", "min_lr", &o.min_lr, 0, false, kBig, "cosine schedule's final lr"),
      enum_field("optim", "state_dtype", &o.state_dtype,
                "AdamW's m and v: fp32 (fp64 under precision fp64), or bf16 (2 bytes each, updated "
                "in fp32, stored with stochastic rounding)"),
      bool_field("optim", "master_weights", &o.master_weights,
                 "true: fp32 master weights; false (model.precision = \"bf16\" only): the matmul "
                 "weights are bf16 alone, updated in fp32 and stored with stochastic rounding"),
      str_field("data", "source", &d.source, {"synthetic", "file"}, "where tokens come from"),
      str_field("data", "path", &d.path, {},
                "token file (source = \"file\"; refused with synthetic): raw uint16, or NumPy .npy "
                "of uint16 or int32"),
      int_field("data", "synthetic_successors", &d.synthetic_successors, 1,
                "next-token choices per token in the synthetic Markov chain"),
      str_field("data", "val_path", &d.val_path, {},
                "held-out token file for validation (source = \"file\"; without it, no "
                "validation; synthetic holds out a stream of its own and refuses it)"),
      enum_field("ddp", "strategy", &c.ddp.strategy,
                "gradient synchronisation across ranks (grad_sync.hpp); zero1 also shards AdamW"),
      real_field("ddp", "bucket_mb", &c.ddp.bucket_mb, 0, true, kBig,
                 "smallest gradient bucket of bucketed and zero1, MiB (zero1.hpp: also its "
                 "parameter all-gather's piece)"),
      int_field("ddp", "comm_ctas", &c.ddp.comm_ctas, 0,
                "most thread blocks (SMs) an NCCL collective may use; 0: NCCL's choice", 64),
      int_field("bench", "warmup", &c.bench.warmup, 0,
                "untimed repetitions before timing (0 shows what warm-up hides)"),
      int_field("bench", "steps", &c.bench.steps, 1, "timed repetitions of each measurement"),
      int_field("bench", "kernels", &c.bench.kernels, 0,
                "top kernels by GPU time to list per phase (CUPTI; 0: none)"),
      real_field("bench", "peak_tflops", &c.bench.peak_tflops, 0, true, kBig,
                 "the GPU's peak at this precision, for MFU (989: H100/H200 dense bf16)"),
      int_field("attention", "batch", &c.attention.batch, 1, "attention mode: batch size"),
      int_field("attention", "heads", &c.attention.heads, 1, "attention mode: heads"),
      ints_field("attention", "seq_lens", &c.attention.seq_lens, 1, kBig,
                 "attention mode: sequence lengths"),
      ints_field("attention", "head_dims", &c.attention.head_dims, 16, 128,
                 "attention mode: head dims (those FlashAttention has kernels for)"),
      strs_field("attention", "dtypes", &c.attention.dtypes, {"bf16", "fp32"},
                 "attention mode: bf16 (tensor cores) and/or fp32"),
      strs_field("attention", "masks", &c.attention.masks, {"causal", "none"},
                 "attention mode: causal and/or none (naive is causal only)"),
      strs_field("attention", "impls", &c.attention.impls,
                 {"naive", "flash", "flash-split", "flash-fused", "flash-mma"},
                 "attention mode: implementations compared (flash-mma: our FlashAttention-2 "
                 "on mma.sync, what flash runs where wgmma kernels are missing; flash-split, "
                 "flash-fused: flash with the backward's dK/dV and dQ kernels, or its fused one "
                 "where it has one: Hopper, causal, head dims 64 and 128)"),
      int_field("attention", "warmup", &c.attention.warmup, 0, "attention mode: untimed runs first"),
      int_field("attention", "iters", &c.attention.iters, 1, "attention mode: timed runs (median)"),
      int_field("plan", "dp", &c.plan.dp, 1, "data-parallel ranks (replicas, or ZeRO-1 shards)"),
      int_field("plan", "zero", &c.plan.zero, 0,
                "1: ZeRO-1, AdamW moments (under bf16 the fp32 master weights too) sharded over "
                "the dp ranks; 0: replicated", 1),
      int_field("plan", "fsdp", &c.plan.fsdp, 1,
                "FSDP degree: params, grads and AdamW moments sharded (ZeRO-3)"),
      int_field("plan", "tp", &c.plan.tp, 1,
                "tensor-parallel degree (Megatron: QKV/W1/W3 by columns, out/W2 by rows)"),
      str_field("plan", "graph", &c.plan.graph, {"lmtrain", "ffn_only"},
                "lmtrain: this model as src/model.cpp allocates it; ffn_only: CS336 2.4's "
                "blocks of two linears, bf16 activations and communication"),
      real_field("plan", "device_gb", &c.plan.device_gb, 0, true, kBig,
                 "memory of one device, GB (1e9 bytes), for the fit and the smallest FSDP degree"),
      real_field("plan", "act_shard_fraction", &c.plan.act_shard_fraction, 0, false, 1,
                 "share of saved activations that FSDP shards too (CS336 2.4(b) assumes 0.5)"),
      reals_field("allreduce", "sizes_mb", &c.allreduce.sizes_mb, 0, true,
                 "all-reduce sizes, MiB, increasing; [] (default): the min_mb..max_mb range", true),
      real_field("allreduce", "min_mb", &c.allreduce.min_mb, 0, true, kBig,
                 "smallest all-reduce size, MiB"),
      real_field("allreduce", "max_mb", &c.allreduce.max_mb, 0, true, kBig,
                 "largest all-reduce size, MiB (sizes: min_mb times powers of factor up to it)"),
      real_field("allreduce", "factor", &c.allreduce.factor, 1, true, kBig,
                 "ratio of consecutive all-reduce sizes"),
      str_field("allreduce", "backend", &c.allreduce.backend, {"nccl", "mpi"},
                "nccl: device buffers (needs a GPU per rank); mpi: host buffers"),
      str_field("allreduce", "dtype", &c.allreduce.dtype, {"fp32", "bf16"},
                "element type summed (bf16 over MPI: a user-defined sum, fp32 partial sums)"),
      int_field("allreduce", "warmup", &c.allreduce.warmup, 0, "untimed all-reduces per size"),
      int_field("allreduce", "iters", &c.allreduce.iters, 1, "timed all-reduces per size"),
  };
}

std::string real_text(double x) {
  std::string s = strf("%.15g", x);
  if (std::strtod(s.c_str(), nullptr) != x) s = strf("%.17g", x);
  return s;
}

std::string ConfigField::to_string() const {
  if (auto* p = std::get_if<int64_t*>(&value)) return std::to_string(**p);
  if (auto* p = std::get_if<double*>(&value)) {
    std::string s = real_text(**p);
    if (s.find_first_of(".eEn") == std::string::npos) s += ".0";  // stays a TOML float
    return s;
  }
  if (auto* p = std::get_if<std::string*>(&value)) return toml_quoted(**p);
  if (auto* p = std::get_if<ChoiceRef>(&value)) return toml_quoted(choices[p->get()]);
  if (auto* p = std::get_if<bool*>(&value)) return **p ? "true" : "false";
  std::string out;
  if (auto* p = std::get_if<std::vector<int64_t>*>(&value))
    for (int64_t x : **p) out += (out.empty() ? "" : ", ") + std::to_string(x);
  else if (auto* p = std::get_if<std::vector<double>*>(&value))
    for (double x : **p) out += (out.empty() ? "" : ", ") + real_text(x);
  else
    for (auto& s : *std::get<std::vector<std::string>*>(value))
      out += (out.empty() ? "" : ", ") + toml_quoted(s);
  return "[" + out + "]";
}

void load_config_file(Config& c, const std::string& path) {
  std::ifstream probe(path);
  if (!probe) throw UsageError(strf("cannot read config file '%s': %s", path.c_str(), strerror(errno)));
  if (!std::filesystem::is_regular_file(path))
    throw UsageError(strf("config file '%s' is not a regular file", path.c_str()));
  toml::table tbl;
  try {
    tbl = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    throw UsageError(strf("%s:%u:%u: TOML syntax error: %s", path.c_str(), e.source().begin.line,
                          e.source().begin.column, std::string(e.description()).c_str()));
  }
  auto fields = config_fields(c);
  for (auto&& [sec, node] : tbl) {
    std::string at = where(node.source(), path);
    if (!node.is_table())
      throw UsageError(strf("%s: %s is not a [section]: keys live in [run], [model], [train], "
                            "[optim], [data], [ddp], [bench], [attention], [plan], [allreduce]",
                            at.c_str(), std::string(sec.str()).c_str()));
    for (auto&& [key, v] : *node.as_table()) {
      std::string name = std::string(sec.str()) + "." + std::string(key.str());
      std::string vat = where(v.source(), path);
      const ConfigField* f = find_field(fields, name);
      if (!f) unknown_key(fields, name, vat);
      set_field(c, *f, v, vat);
    }
  }
}

void apply_override(Config& c, const std::string& assignment) {
  size_t eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0)
    throw UsageError(strf("--set %s: expected section.key=value", assignment.c_str()));
  std::string name = assignment.substr(0, eq), text = assignment.substr(eq + 1);
  auto fields = config_fields(c);
  const ConfigField* f = find_field(fields, name);
  if (!f) unknown_key(fields, name, "--set");
  // The value is TOML (3, 1e-3, "x", true); a bare word is taken as a string, so that
  // --set data.path=/tmp/tokens.bin needs no quotes.
  toml::table tbl;
  try {
    tbl = toml::parse("v = " + text);
  } catch (const toml::parse_error&) {
    tbl = toml::table{{"v", text}};
  }
  set_field(c, *f, *tbl.get("v"), "--set");
}

void validate(const Config& c) {
  auto at = [&](const char* key) {
    auto it = c.origin.find(key);
    return it == c.origin.end() ? std::string("default") : it->second;
  };
  auto& m = c.model;
  const std::string dm = at("model.d_model"), nh = at("model.num_heads");
  if (m.d_model % m.num_heads != 0)
    throw UsageError(strf("%s: model.d_model = %lld is not divisible by model.num_heads = %lld "
                          "(%s)", dm.c_str(), (long long)m.d_model, (long long)m.num_heads, nh.c_str()));
  if (m.head_dim() % 2 != 0)
    throw UsageError(strf("%s: model.d_model = %lld / model.num_heads = %lld (%s) gives head dim "
                          "%lld: RoPE needs an even head dim", dm.c_str(), (long long)m.d_model,
                          (long long)m.num_heads, nh.c_str(), (long long)m.head_dim()));
  if (c.data.source == "file" && c.data.path.empty())
    throw UsageError(strf("%s: data.source = \"file\" needs data.path (a token file)",
                          at("data.source").c_str()));
  if (c.data.source == "synthetic" && !c.data.path.empty())
    throw UsageError(strf("%s: data.path = \"%s\" is set but data.source = \"synthetic\" (%s) "
                          "ignores it: set data.source = \"file\" to train on the file",
                          at("data.path").c_str(), c.data.path.c_str(), at("data.source").c_str()));
  if (c.data.source == "synthetic" && c.data.synthetic_successors > m.vocab_size)
    throw UsageError(strf("%s: data.synthetic_successors = %lld: expected at most "
                          "model.vocab_size = %lld", at("data.synthetic_successors").c_str(),
                          (long long)c.data.synthetic_successors, (long long)m.vocab_size));
  if (c.data.source == "synthetic" && !c.data.val_path.empty())
    throw UsageError(strf("%s: data.val_path = \"%s\" is set but data.source = \"synthetic\" "
                          "(%s) validates on a held-out stream of its own: set data.source = "
                          "\"file\"", at("data.val_path").c_str(), c.data.val_path.c_str(),
                          at("data.source").c_str()));
  if (c.train.eval_every > 0 && c.train.eval_batches == 0)
    throw UsageError(strf("%s: train.eval_every = %lld evaluates nothing: train.eval_batches = 0 "
                          "(%s)", at("train.eval_every").c_str(), (long long)c.train.eval_every,
                          at("train.eval_batches").c_str()));
  if (c.train.eval_every > 0 && c.data.source == "file" && c.data.val_path.empty())
    throw UsageError(strf("%s: train.eval_every = %lld needs data.val_path (a held-out token "
                          "file) with data.source = \"file\"", at("train.eval_every").c_str(),
                          (long long)c.train.eval_every));
  if (c.train.checkpoint_every > 0 && c.train.checkpoint_dir.empty())
    throw UsageError(strf("%s: train.checkpoint_every = %lld needs train.checkpoint_dir",
                          at("train.checkpoint_every").c_str(),
                          (long long)c.train.checkpoint_every));
  // Tensor parallelism splits heads and the FFN's hidden width evenly (Megatron's layout).
  if (c.run.mode == Mode::plan && c.plan.tp > 1) {
    const std::string tp = at("plan.tp");
    if (c.plan.graph == "lmtrain" && m.num_heads % c.plan.tp != 0)
      throw UsageError(strf("%s: plan.tp = %lld does not divide model.num_heads = %lld (%s)",
                            tp.c_str(), (long long)c.plan.tp, (long long)m.num_heads, nh.c_str()));
    if (m.d_ff % c.plan.tp != 0)
      throw UsageError(strf("%s: plan.tp = %lld does not divide model.d_ff = %lld (%s)", tp.c_str(),
                            (long long)c.plan.tp, (long long)m.d_ff, at("model.d_ff").c_str()));
  }
  for (int64_t dh : c.attention.head_dims)
    if (!is_flash_head_dim(dh))
      throw UsageError(strf("%s: attention.head_dims has %lld: expected %s",
                            at("attention.head_dims").c_str(), (long long)dh,
                            flash_head_dims_text().c_str()));
  const size_t elem = c.allreduce.dtype == "bf16" ? 2 : 4;
  if (c.allreduce.min_mb * double(1 << 20) < double(elem))
    throw UsageError(strf("%s: allreduce.min_mb = %g is less than one %s element",
                          at("allreduce.min_mb").c_str(), c.allreduce.min_mb,
                          c.allreduce.dtype.c_str()));
  if (c.allreduce.max_mb < c.allreduce.min_mb)
    throw UsageError(strf("%s: allreduce.max_mb = %g: expected at least allreduce.min_mb = %g",
                          at("allreduce.max_mb").c_str(), c.allreduce.max_mb, c.allreduce.min_mb));
  const auto& sizes = c.allreduce.sizes_mb;
  if (!sizes.empty() && sizes[0] * double(1 << 20) < double(elem))
    throw UsageError(strf("%s: allreduce.sizes_mb has %g, less than one %s element",
                          at("allreduce.sizes_mb").c_str(), sizes[0], c.allreduce.dtype.c_str()));
  for (size_t i = 1; i < sizes.size(); ++i)
    if (sizes[i] <= sizes[i - 1])
      throw UsageError(strf("%s: allreduce.sizes_mb has %g after %g: expected increasing sizes",
                            at("allreduce.sizes_mb").c_str(), sizes[i], sizes[i - 1]));
  if (m.residual_dtype == Dtype::bf16 && m.precision != Precision::bf16)
    throw UsageError(strf("%s: model.residual_dtype = \"bf16\" needs model.precision = \"bf16\", "
                          "not \"%s\" (%s)",
                          at("model.residual_dtype").c_str(), name_of(m.precision),
                          at("model.precision").c_str()));
  if (!c.optim.master_weights && m.precision != Precision::bf16)
    throw UsageError(strf("%s: optim.master_weights = false needs model.precision = \"bf16\" "
                          "(the weights are then bf16 alone), not \"%s\" (%s)",
                          at("optim.master_weights").c_str(), name_of(m.precision),
                          at("model.precision").c_str()));
  if (c.optim.schedule == "cosine" && c.optim.min_lr > c.optim.lr)
    throw UsageError(strf("%s: optim.min_lr = %g: expected at most optim.lr = %g",
                          at("optim.min_lr").c_str(), c.optim.min_lr, c.optim.lr));
}

std::string config_to_toml(const Config& c) {
  Config copy = c;
  std::string out, section;
  for (auto& f : config_fields(copy)) {
    if (f.section != section) {
      out += (section.empty() ? "[" : "\n[") + f.section + "]\n";
      section = f.section;
    }
    out += f.key + " = " + f.to_string() + "\n";
  }
  return out;
}

uint64_t config_hash(const Config& c) {
  std::string text = config_to_toml(c);
  return hash64(text.data(), text.size());
}

std::string usage_text() {
  Config c;
  std::string out =
      "usage: mpirun -np N build/lmtrain [--config FILE]... [--set section.key=value]...\n"
      "                                  [--csv FILE] [--trace FILE] [--print-config] [--help]\n"
      "                                  [--version]\n\n"
      "  --config FILE   TOML config; several allowed, later files win\n"
      "  --set K=V       override one key (V is TOML; a bare word is a string)\n"
      "  --csv FILE      append one row (every config field and metric) to FILE\n"
      "  --trace FILE    bench mode: write a Chrome-trace JSON (Perfetto) of the timed steps: each\n"
      "                  rank's phases, memory, collectives and waits for them (one file)\n"
      "  --print-config  print the resolved config and exit\n"
      "  --version       print the build's version (the git commit it was built from) and exit\n\n"
      "keys (default, meaning):\n";
  for (auto& f : config_fields(c)) {
    std::string values;  // what a key of a few words accepts, from the table the parser checks
    for (auto& ch : f.choices) values += (values.empty() ? " (values: " : " | ") + ch;
    if (!values.empty()) values += ")";
    out += strf("  %-28s %-12s %s%s\n", f.name().c_str(), f.to_string().c_str(), f.doc.c_str(),
                values.c_str());
  }
  return out;
}

CommandLine parse_command_line(const std::vector<std::string>& args) {
  CommandLine cl;
  // A flag's value; the next flag in its place means it has none (a file named so: ./--name).
  auto next = [&](size_t& i) -> const std::string& {
    if (i + 1 >= args.size() || args[i + 1].rfind("--", 0) == 0)
      throw UsageError(args[i] + ": expected a value after it");
    return args[++i];
  };
  std::vector<std::string> overrides;  // applied after every file, wherever they stand
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--config") load_config_file(cl.config, next(i));
    else if (a == "--set") overrides.push_back(next(i));
    else if (a == "--csv" || a == "--trace") {
      std::string& path = a == "--csv" ? cl.csv_path : cl.trace_path;  // one file each
      const std::string& value = next(i);
      if (!path.empty())
        throw UsageError(strf("%s %s: given twice (first %s)", a.c_str(), value.c_str(), path.c_str()));
      path = value;
    }
    else if (a == "--print-config") cl.print_config = true;
    else if (a == "--help" || a == "-h") cl.help = true;
    else if (a == "--version") cl.version = true;
    else throw UsageError(strf("unknown argument '%s' (see --help)", a.c_str()));
  }
  for (auto& o : overrides) apply_override(cl.config, o);
  validate(cl.config);
  if (!cl.trace_path.empty() && cl.config.run.mode != Mode::bench)
    throw UsageError(strf("--trace %s: only run.mode = \"bench\" writes a trace in this release",
                          cl.trace_path.c_str()));
  return cl;
}

}  // namespace lmt
