#include "checkpoint.hpp"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>

#include "check.hpp"
#include "hash.hpp"
#include "host_threads.hpp"
#include "safetensors.hpp"

namespace lmt {
namespace {

constexpr const char* kFormat = "lmtrain-checkpoint-3";
// Format 2 is format 3 with the data's checksum taken by hash64 over the data section, a byte at
// a time: its files still load.
constexpr const char* kFormat2 = "lmtrain-checkpoint-2";
// AdamW's moments are stored as these prefixes + each parameter's name.
constexpr const char* kMomentM = "optim.m.";
constexpr const char* kMomentV = "optim.v.";
template <typename T> const char* dtype_name() { return sizeof(T) == 8 ? "F64" : "F32"; }
template <typename T> const char* state_tensor_dtype(Stored s) {
  return s == Stored::bf16 ? "BF16" : dtype_name<T>();
}
// What a checkpoint's moments are stored as: its optim.state_dtype (absent from files written
// before the key existed, whose moments are all fp32).
Stored checkpoint_state_dtype(const Safetensors& st) {
  auto it = st.metadata.find("optim.state_dtype");
  return it == st.metadata.end() ? Stored::full : parse_state_dtype(it->second);
}
// Its optim.master_weights (absent from files written before the key existed, which have them).
bool checkpoint_master_weights(const Safetensors& st, const std::string& path) {
  auto it = st.metadata.find("optim.master_weights");
  if (it == st.metadata.end() || it->second == "true") return true;
  if (it->second == "false") return false;
  throw UsageError(strf("%s: optim.master_weights = '%s' in its metadata (true or false)",
                        path.c_str(), it->second.c_str()));
}
// Whether a parameter is stored as bf16: where it has no fp32 master (a matmul weight under
// optim.master_weights = false: its values are bf16 ones, so nothing is lost); else as T.
bool stored_bf16(const ParamView& p, bool master_weights) { return !master_weights && p.matmul; }

// Each piece's hash_wide, the pieces taken in turn by up to 8 threads: one thread hashes a few GB
// a second, and xl's checkpoint holds 24 GB.
std::vector<uint64_t> wide_hashes(const std::vector<Bytes>& data) {
  std::vector<uint64_t> out(data.size());
  on_host_threads(data.size(), 8, [&](size_t i) { out[i] = hash_wide(data[i].data, data[i].size); });
  return out;
}

// FNV-1a over each piece's length and bytes (so that no two headers hash the same text): every
// metadata entry but the checksum, every tensor's entry, then the data: format 3 (wide) each
// tensor's hash_wide, `data` holding the tensors in the data section's order; format 2 the bytes
// of `data`, pieces of the data section in order.
std::string seal(const std::map<std::string, std::string>& meta,
                 const std::map<std::string, TensorInfo>& tensors, const std::vector<Bytes>& data,
                 bool wide) {
  uint64_t h = hash64(nullptr, 0);
  auto add = [&](const std::string& s) {
    const uint64_t n = s.size();
    h = hash64(s.data(), s.size(), hash64(&n, sizeof n, h));
  };
  for (auto& [k, v] : meta)
    if (k != "checksum") add(k), add(v);
  for (auto& [name, t] : tensors) {
    std::string shape;
    for (int64_t d : t.shape) shape += std::to_string(d) + ",";
    add(name), add(t.dtype), add(shape), add(strf("%zu,%zu", t.begin, t.end));
  }
  if (wide)
    for (const uint64_t t : wide_hashes(data)) h = hash64(&t, sizeof t, h);
  else
    for (const Bytes& b : data) h = hash64(b.data, b.size, h);
  return strf("%016llx", (unsigned long long)h);
}

}  // namespace

std::string checkpoint_path(const std::string& dir, int64_t step) {
  return strf("%s/step_%08lld.safetensors", dir.c_str(), (long long)step);
}

bool is_checkpoint_name(const std::string& name) {
  return name.rfind("step_", 0) == 0 && name.size() > 12 &&
         name.compare(name.size() - 12, 12, ".safetensors") == 0;
}

std::vector<std::string> checkpoint_files(const std::string& dir) {
  std::vector<std::string> paths;
  DIR* d = opendir(dir.c_str());
  if (!d) return paths;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (is_checkpoint_name(name)) paths.push_back(dir + "/" + name);
  }
  closedir(d);
  // By step: step_%08lld names sort as text up to 10^8 steps, longer ones after.
  std::sort(paths.begin(), paths.end(), [](const std::string& a, const std::string& b) {
    return a.size() != b.size() ? a.size() < b.size() : a < b;
  });
  return paths;
}

std::vector<std::string> remove_old_checkpoints(const std::string& dir, const std::string& run_id,
                                                int64_t keep) {
  std::vector<std::string> mine, removed;
  if (keep <= 0) return removed;
  for (const std::string& path : checkpoint_files(dir))
    if (checkpoint_id_or_none(path).run_id == run_id) mine.push_back(path);
  for (size_t i = 0; i + size_t(keep) < mine.size(); ++i) {
    const std::string name = mine[i].substr(dir.size() + 1);
    if (std::remove(mine[i].c_str()) == 0) removed.push_back(name);
    else fprintf(stderr, "lmtrain: warning: cannot remove the older checkpoint %s: %s\n",
                 mine[i].c_str(), strerror(errno));
  }
  return removed;
}

namespace {

// The model.* keys a resume must keep: they change the parameters or what they compute.
constexpr const char* kResumeModelKeys[] = {"d_model", "d_ff", "num_layers", "num_heads",
                                            "vocab_size", "tie_embeddings", "rope_theta",
                                            "norm_eps"};
// Those it may change, with a warning: the numerics and the windows (resume_mismatch).
constexpr const char* kResumeNumericsKeys[] = {"precision", "residual_dtype", "attention",
                                               "context_length"};

// Key `key` of section [model] in a config_to_toml text, as written there ("" where absent).
std::string model_key(const std::string& toml, const std::string& key) {
  std::string section;
  size_t at = 0;
  while (at < toml.size()) {
    size_t end = toml.find('\n', at);
    if (end == std::string::npos) end = toml.size();
    const std::string line = toml.substr(at, end - at);
    at = end + 1;
    if (!line.empty() && line[0] == '[') section = line;
    else if (section == "[model]" && line.rfind(key + " = ", 0) == 0) return line.substr(key.size() + 3);
  }
  return "";
}

std::string meta(const Safetensors& st, const std::string& path, const std::string& key) {
  auto it = st.metadata.find(key);
  if (it == st.metadata.end())
    throw UsageError(strf("%s: not an lmtrain checkpoint (no metadata '%s')", path.c_str(),
                          key.c_str()));
  return it->second;
}

// What the header alone refuses: another format, another world size.
void check_header(const Safetensors& st, const std::string& path, int world) {
  const std::string format = meta(st, path, "format");
  if (format != kFormat && format != kFormat2)
    throw UsageError(strf("%s: format '%s', expected '%s' or '%s'", path.c_str(), format.c_str(),
                          kFormat, kFormat2));
  if (std::stoi(meta(st, path, "world_size")) != world)
    throw UsageError(strf("%s: written by %s ranks, this run has %d (each rank's data stream "
                          "is in the checkpoint)", path.c_str(), meta(st, path, "world_size").c_str(),
                          world));
}

// A folder given as the checkpoint to resume is named, with the newest checkpoint in it.
void refuse_folder(const std::string& path) {
  if (!is_directory(path)) return;
  const std::vector<std::string> files = checkpoint_files(path);
  throw UsageError(files.empty()
                       ? strf("%s: a directory, not a checkpoint file (it holds none)", path.c_str())
                       : strf("%s: a directory, not a checkpoint file; its newest: "
                              "--set train.resume=%s", path.c_str(), files.back().c_str()));
}

}  // namespace

template <typename T>
void save_checkpoint(const std::string& path, const Config& c, const ParamLayout& layout,
                     const std::vector<T>& params, const OptimizerState<T>& opt, int64_t step,
                     const std::vector<RngState>& rngs, const std::string& run_id) {
  SafetensorsWriter w;
  const bool masters = c.optim.master_weights;
  for (auto& p : layout.params) {
    const T* x = params.data() + p.offset;
    if (!stored_bf16(p, masters)) {
      w.add(p.name, dtype_name<T>(), p.shape, x, p.numel * sizeof(T));
      continue;
    }
    std::vector<char> b(p.numel * 2);
    for (size_t i = 0; i < p.numel; ++i) {  // exact: bf16 values
      const uint16_t v = to_bf16(float(x[i]));
      std::memcpy(b.data() + 2 * i, &v, 2);
    }
    w.add(p.name, "BF16", p.shape, std::move(b));
  }
  const size_t eb = state_elem_bytes<T>(opt.stored);
  for (auto [prefix, buf] : {std::pair{kMomentM, &opt.m}, {kMomentV, &opt.v}})
    for (auto& p : layout.params)
      w.add(prefix + p.name, state_tensor_dtype<T>(opt.stored), p.shape,
            buf->data() + p.offset * eb, p.numel * eb);
  w.set("format", kFormat);
  w.set("optim.state_dtype", state_dtype_name(opt.stored));
  w.set("optim.master_weights", masters ? "true" : "false");
  w.set("step", std::to_string(step));
  w.set("adam_t", std::to_string(opt.t));
  w.set("world_size", std::to_string(rngs.size()));
  for (size_t r = 0; r < rngs.size(); ++r)
    w.set("rng." + std::to_string(r), strf("%016llx %016llx %016llx %016llx",
                                          (unsigned long long)rngs[r][0], (unsigned long long)rngs[r][1],
                                          (unsigned long long)rngs[r][2], (unsigned long long)rngs[r][3]));
  w.set("run_id", run_id);
  w.set("seed", std::to_string(c.run.seed));
  w.set("batch_size", std::to_string(c.train.batch_size));
  w.set("grad_accum", std::to_string(c.train.grad_accum));
  w.set("data", data_identity(c));
  w.set("config", config_to_toml(c));
  std::map<std::string, TensorInfo> tensors(w.tensors().begin(), w.tensors().end());
  w.set("checksum", seal(w.metadata(), tensors, w.data(), true));
  w.write(path);
}

template <typename T>
Resumed load_checkpoint(const std::string& path, Model<T>& model, Optimizer<T>& opt,
                        Stored stored, bool master_weights, int world,
                        std::vector<RngState>& rngs) {
  refuse_folder(path);
  Safetensors st = Safetensors::read(path);
  auto meta = [&](const std::string& key) { return lmt::meta(st, path, key); };
  check_header(st, path, world);
  const bool wide = meta("format") == kFormat;
  std::vector<Bytes> data{{st.data.data(), st.data.size()}};  // format 2: the data section
  if (wide) {  // format 3: each tensor, in the data section's order
    data.clear();
    for (const auto& [name, t] : st.tensors)
      data.push_back({st.data.data() + t.begin, t.end - t.begin});
    std::sort(data.begin(), data.end(), [](Bytes a, Bytes b) { return a.data < b.data; });
  }
  const std::string sum = seal(st.metadata, st.tensors, data, wide);
  if (meta("checksum") != sum)
    throw UsageError(strf("%s: corrupted: checksum of header and data %s, expected %s (the "
                          "file was changed after it was written)", path.c_str(), sum.c_str(),
                          meta("checksum").c_str()));
  const Stored written = checkpoint_state_dtype(st);
  if (written != stored)
    throw UsageError(strf("%s: AdamW's moments are stored in %s, this run has optim.state_dtype "
                          "= \"%s\" (resume with the checkpoint's)", path.c_str(),
                          state_dtype_name(written), state_dtype_name(stored)));
  const bool masters = checkpoint_master_weights(st, path);
  if (masters != master_weights)
    throw UsageError(strf("%s: written with optim.master_weights = %s, this run has %s (resume "
                          "with the checkpoint's)", path.c_str(), masters ? "true" : "false",
                          master_weights ? "true" : "false"));
  const size_t n = model.layout.total, eb = state_elem_bytes<T>(stored);
  std::vector<T> params(n);
  // A tensor of the layout, with the dtype this run stores it in: where its bytes are.
  auto tensor = [&](const std::string& name, const ParamView& p, const char* dt) {
    auto it = st.tensors.find(name);
    if (it == st.tensors.end() || it->second.shape != p.shape || it->second.dtype != dt)
      throw UsageError(strf("%s: tensor %s is missing or has another shape or dtype than this "
                            "model (%s)", path.c_str(), name.c_str(), dt));
    return st.data.data() + it->second.begin;
  };
  // A tensor this model lacks is refused, not dropped (check_resume_header has compared the
  // model.* keys; these are the bytes themselves).
  for (const auto& [name, info] : st.tensors) {
    std::string param = name;
    for (const char* prefix : {kMomentM, kMomentV})
      if (param.rfind(prefix, 0) == 0) param = param.substr(std::strlen(prefix));
    if (!model.layout.index.count(param))
      throw UsageError(strf("%s: tensor %s is not a parameter of this model", path.c_str(),
                            name.c_str()));
  }
  for (auto& p : model.layout.params) {
    const bool b16 = stored_bf16(p, masters);
    const char* x = tensor(p.name, p, b16 ? "BF16" : dtype_name<T>());
    if (!b16) {
      std::memcpy(params.data() + p.offset, x, p.numel * sizeof(T));
      continue;
    }
    for (size_t i = 0; i < p.numel; ++i) {
      uint16_t b;
      std::memcpy(&b, x + 2 * i, 2);
      params[p.offset + i] = T(from_bf16(b));
    }
  }
  // Each moment's tensors lie end to end in the layout's order, as save_checkpoint wrote them
  // (the checksum has shown it did): the whole moment, where it is in the mapped file.
  auto moment = [&](const std::string& prefix) {
    const ParamView& first = model.layout.params.front();
    const char* whole = tensor(prefix + first.name, first, state_tensor_dtype<T>(stored)) -
                        first.offset * eb;
    for (auto& p : model.layout.params)
      if (tensor(prefix + p.name, p, state_tensor_dtype<T>(stored)) != whole + p.offset * eb)
        throw UsageError(strf("%s: tensor %s%s is not where lmtrain writes it", path.c_str(),
                              prefix.c_str(), p.name.c_str()));
    return whole;
  };
  model.set_params(params);
  opt.set_state({stored, moment(kMomentM), moment(kMomentV), std::stoll(meta("adam_t"))});
  rngs.assign(size_t(world), RngState{});
  for (int r = 0; r < world; ++r) {
    unsigned long long w[4];
    if (sscanf(meta("rng." + std::to_string(r)).c_str(), "%llx %llx %llx %llx", &w[0], &w[1],
               &w[2], &w[3]) != 4)
      throw UsageError(strf("%s: malformed rng.%d", path.c_str(), r));
    for (int i = 0; i < 4; ++i) rngs[size_t(r)][size_t(i)] = w[i];
  }
  // Checkpoints written before gradient accumulation record neither: one micro-batch a step.
  auto meta_or = [&](const char* key, int64_t absent) {
    auto it = st.metadata.find(key);
    return it == st.metadata.end() ? absent : std::stoll(it->second);
  };
  auto config = st.metadata.find("config");
  return {std::stoll(meta("step")), meta("run_id"), meta("seed"), meta("data"),
          meta_or("batch_size", 0), meta_or("grad_accum", 1),
          config == st.metadata.end() ? "" : config->second};
}

CheckpointId checkpoint_id(const std::string& path) {
  refuse_folder(path);
  Safetensors st = Safetensors::read_header(path);
  auto run = st.metadata.find("run_id"), step = st.metadata.find("step");
  return {run == st.metadata.end() ? "" : run->second,
          step == st.metadata.end() ? -1 : std::stoll(step->second)};
}

CheckpointId checkpoint_id_or_none(const std::string& path) {
  try {
    return checkpoint_id(path);
  } catch (const UsageError&) {
    return {};
  }
}

void check_resume_header(const Config& c, int world) {
  const std::string& path = c.train.resume;
  refuse_folder(path);
  const Safetensors st = Safetensors::read_header(path);
  check_header(st, path, world);
  auto config = st.metadata.find("config");
  if (config == st.metadata.end()) return;  // not recorded: the tensors' shapes are checked
  const std::string mine = config_to_toml(c);
  for (const char* key : kResumeModelKeys) {
    const std::string theirs = model_key(config->second, key), now = model_key(mine, key);
    if (theirs != now)
      throw UsageError(strf("%s: written for model.%s = %s, this run has %s (another model: "
                            "resume with the checkpoint's)", path.c_str(), key, theirs.c_str(),
                            now.c_str()));
  }
}

std::string new_run_id() {
  std::random_device rd;
  return strf("%08x%08x", unsigned(rd()), unsigned(rd()));
}

std::string data_identity(const Config& c) {
  if (c.data.source != "file")
    return strf("synthetic (%lld successors)", (long long)c.data.synthetic_successors);
  struct stat st {};
  const long long bytes = stat(c.data.path.c_str(), &st) == 0 ? (long long)st.st_size : -1;
  return strf("file %s (%lld bytes)", c.data.path.c_str(), bytes);
}

std::string resume_mismatch(const Config& c, const Resumed& r) {
  std::string now, then;
  auto differ = [&](const char* what, const std::string& mine, const std::string& theirs) {
    if (mine == theirs) return;
    now += strf("%s%s %s", now.empty() ? "" : ", ", what, mine.c_str());
    then += strf("%s%s %s", then.empty() ? "" : ", ", what, theirs.c_str());
  };
  differ("run.seed", std::to_string(c.run.seed), r.seed);
  differ("data", data_identity(c), r.data);
  // Another batch size under the same accumulation: other tokens per optimizer step (another
  // accumulation that keeps them is the same stream, and one that does not check_resume_batch
  // refuses).
  if (r.batch_size && r.batch_size * r.grad_accum != c.train.batch_size * c.train.grad_accum)
    differ("train.batch_size", std::to_string(c.train.batch_size), std::to_string(r.batch_size));
  if (!r.config.empty()) {
    const std::string mine = config_to_toml(c);
    for (const char* key : kResumeNumericsKeys)
      differ(("model." + std::string(key)).c_str(), model_key(mine, key), model_key(r.config, key));
  }
  if (now.empty()) return "";
  return strf("resuming %s with %s; its run had %s: continuing, not as the interrupted run "
              "would have", c.train.resume.c_str(), now.c_str(), then.c_str());
}

void check_resume_batch(const Config& c, const Resumed& r) {
  const Config::Train& t = c.train;
  if (r.grad_accum == t.grad_accum || r.batch_size * r.grad_accum == t.batch_size * t.grad_accum)
    return;
  throw UsageError(strf(
      "train.grad_accum = %lld with train.batch_size = %lld: %s was written by a run of "
      "train.grad_accum = %lld%s; resuming changes the tokens per optimizer step (set the two so "
      "that batch_size x grad_accum stays %s)",
      (long long)t.grad_accum, (long long)t.batch_size, t.resume.c_str(), (long long)r.grad_accum,
      r.batch_size ? strf(" and batch_size = %lld", (long long)r.batch_size).c_str()
                   : " (its batch_size not recorded)",
      r.batch_size ? std::to_string(r.batch_size * r.grad_accum).c_str() : "its run's"));
}

template void save_checkpoint(const std::string&, const Config&, const ParamLayout&,
                              const std::vector<float>&, const OptimizerState<float>&, int64_t,
                              const std::vector<RngState>&, const std::string&);
template void save_checkpoint(const std::string&, const Config&, const ParamLayout&,
                              const std::vector<double>&, const OptimizerState<double>&, int64_t,
                              const std::vector<RngState>&, const std::string&);
template Resumed load_checkpoint(const std::string&, Model<float>&, Optimizer<float>&, Stored,
                                 bool, int, std::vector<RngState>&);
template Resumed load_checkpoint(const std::string&, Model<double>&, Optimizer<double>&, Stored,
                                 bool, int, std::vector<RngState>&);

}  // namespace lmt
