#include "params.hpp"

#include "check.hpp"

namespace lmt {

ParamLayout ParamLayout::build(const Config::Model& m) {
  ParamLayout out;
  auto add = [&](std::string name, std::vector<int64_t> shape, bool matmul) {
    size_t n = 1;
    for (auto s : shape) n *= size_t(s);
    out.index.emplace(name, out.params.size());
    out.params.push_back({std::move(name), std::move(shape), out.total, n, matmul});
    out.total += n;
  };
  auto group = [&](auto&& body) {
    size_t begin = out.total;
    body();
    out.groups.push_back({begin, out.total});
  };
  const int64_t d = m.d_model, f = m.d_ff, V = m.vocab_size;
  group([&] {
    if (!m.tie_embeddings) add("lm_head.weight", {V, d}, true);
    add("ln_final.weight", {d}, false);
  });
  for (int64_t l = m.num_layers - 1; l >= 0; --l)
    group([&] {
      std::string p = "layers." + std::to_string(l) + ".";
      add(p + "ffn.w2.weight", {d, f}, true);
      add(p + "ffn.w3.weight", {f, d}, true);  // W3 right before W1: one [2f, d] matmul (Model)
      add(p + "ffn.w1.weight", {f, d}, true);
      add(p + "ln2.weight", {d}, false);
      add(p + "attn.output_proj.weight", {d, d}, true);
      add(p + "attn.qkv_proj.weight", {3 * d, d}, true);
      add(p + "ln1.weight", {d}, false);
    });
  group([&] { add("token_embeddings.weight", {V, d}, false); });
  return out;
}

const ParamView& ParamLayout::lm_head() const {
  return get(index.count("lm_head.weight") ? "lm_head.weight" : "token_embeddings.weight");
}

const ParamView& ParamLayout::get(const std::string& name) const {
  auto it = index.find(name);
  if (it == index.end()) LMT_FATAL("no parameter named " + name);
  return params[it->second];
}

}  // namespace lmt
