#include "checkpoint.hpp"

#include <cstring>

#include "check.hpp"
#include "hash.hpp"
#include "safetensors.hpp"

namespace lmt {
namespace {

constexpr const char* kFormat = "lmtrain-checkpoint-1";
template <typename T> const char* dtype_name() { return sizeof(T) == 8 ? "F64" : "F32"; }

}  // namespace

std::string checkpoint_path(const std::string& dir, int64_t step) {
  return strf("%s/step_%08lld.safetensors", dir.c_str(), (long long)step);
}

template <typename T>
void save_checkpoint(const std::string& path, const Config& c, const ParamLayout& layout,
                     const std::vector<T>& params, const OptimizerState<T>& opt, int64_t step,
                     const std::vector<RngState>& rngs) {
  SafetensorsWriter w;
  const char* dt = dtype_name<T>();
  for (auto [prefix, buf] : {std::pair{"", &params}, {"optim.m.", &opt.m}, {"optim.v.", &opt.v}})
    for (auto& p : layout.params)
      w.add(prefix + p.name, dt, p.shape, buf->data() + p.offset, p.numel * sizeof(T));
  w.set("format", kFormat);
  w.set("step", std::to_string(step));
  w.set("adam_t", std::to_string(opt.t));
  w.set("world_size", std::to_string(rngs.size()));
  for (size_t r = 0; r < rngs.size(); ++r)
    w.set("rng." + std::to_string(r), strf("%016llx %016llx %016llx %016llx",
                                          (unsigned long long)rngs[r][0], (unsigned long long)rngs[r][1],
                                          (unsigned long long)rngs[r][2], (unsigned long long)rngs[r][3]));
  w.set("checksum", strf("%016llx", (unsigned long long)hash64(w.data().data(), w.data().size())));
  w.set("config", config_to_toml(c));
  w.write(path);
}

template <typename T>
int64_t load_checkpoint(const std::string& path, Model<T>& model, OptimizerState<T>& opt,
                        int world, std::vector<RngState>& rngs) {
  Safetensors st = Safetensors::read(path);
  auto meta = [&](const std::string& key) {
    auto it = st.metadata.find(key);
    if (it == st.metadata.end())
      throw UsageError(strf("%s: not an lmtrain checkpoint (no metadata '%s')", path.c_str(),
                            key.c_str()));
    return it->second;
  };
  if (meta("format") != kFormat)
    throw UsageError(strf("%s: format '%s', expected '%s'", path.c_str(), meta("format").c_str(),
                          kFormat));
  std::string sum = strf("%016llx", (unsigned long long)hash64(st.data.data(), st.data.size()));
  if (meta("checksum") != sum)
    throw UsageError(strf("%s: corrupted: data checksum %s, expected %s", path.c_str(),
                          sum.c_str(), meta("checksum").c_str()));
  if (std::stoi(meta("world_size")) != world)
    throw UsageError(strf("%s: written by %s ranks, this run has %d (each rank's data stream "
                          "is in the checkpoint)", path.c_str(), meta("world_size").c_str(), world));
  const char* dt = dtype_name<T>();
  const size_t n = model.layout.total;
  std::vector<T> params(n);
  opt.m.assign(n, T(0)), opt.v.assign(n, T(0));
  for (auto [prefix, buf] : {std::pair{"", &params}, {"optim.m.", &opt.m}, {"optim.v.", &opt.v}})
    for (auto& p : model.layout.params) {
      auto it = st.tensors.find(prefix + p.name);
      if (it == st.tensors.end() || it->second.shape != p.shape || it->second.dtype != dt)
        throw UsageError(strf("%s: tensor %s%s is missing or has another shape or dtype than "
                              "this model (%s)", path.c_str(), prefix, p.name.c_str(), dt));
      std::memcpy(buf->data() + p.offset, st.data.data() + it->second.begin, p.numel * sizeof(T));
    }
  model.set_params(params);
  opt.t = std::stoll(meta("adam_t"));
  rngs.assign(size_t(world), RngState{});
  for (int r = 0; r < world; ++r) {
    unsigned long long w[4];
    if (sscanf(meta("rng." + std::to_string(r)).c_str(), "%llx %llx %llx %llx", &w[0], &w[1],
               &w[2], &w[3]) != 4)
      throw UsageError(strf("%s: malformed rng.%d", path.c_str(), r));
    for (int i = 0; i < 4; ++i) rngs[size_t(r)][size_t(i)] = w[i];
  }
  return std::stoll(meta("step"));
}

template void save_checkpoint(const std::string&, const Config&, const ParamLayout&,
                              const std::vector<float>&, const OptimizerState<float>&, int64_t,
                              const std::vector<RngState>&);
template void save_checkpoint(const std::string&, const Config&, const ParamLayout&,
                              const std::vector<double>&, const OptimizerState<double>&, int64_t,
                              const std::vector<RngState>&);
template int64_t load_checkpoint(const std::string&, Model<float>&, OptimizerState<float>&, int,
                                 std::vector<RngState>&);
template int64_t load_checkpoint(const std::string&, Model<double>&, OptimizerState<double>&, int,
                                 std::vector<RngState>&);

}  // namespace lmt
