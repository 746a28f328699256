#include "params.hpp"

#include "check.hpp"

namespace lmt {

ParamLayout ParamLayout::build(const Config::Model& m) {
  ParamLayout out;
  auto add = [&](std::string name, std::vector<int64_t> shape) {
    size_t n = 1;
    for (auto s : shape) n *= size_t(s);
    out.params.push_back({std::move(name), std::move(shape), out.total, n});
    out.total += n;
  };
  auto group = [&](auto&& body) {
    size_t begin = out.total;
    body();
    out.groups.push_back({begin, out.total});
  };
  const int64_t d = m.d_model, f = m.d_ff, V = m.vocab_size;
  group([&] {
    add("lm_head.weight", {V, d});
    add("ln_final.weight", {d});
  });
  for (int64_t l = m.num_layers - 1; l >= 0; --l)
    group([&] {
      std::string p = "layers." + std::to_string(l) + ".";
      add(p + "ffn.w2.weight", {d, f});
      add(p + "ffn.w3.weight", {f, d});
      add(p + "ffn.w1.weight", {f, d});
      add(p + "ln2.weight", {d});
      add(p + "attn.output_proj.weight", {d, d});
      add(p + "attn.qkv_proj.weight", {3 * d, d});
      add(p + "ln1.weight", {d});
    });
  group([&] { add("token_embeddings.weight", {V, d}); });
  return out;
}

const ParamView& ParamLayout::get(const std::string& name) const {
  for (auto& p : params)
    if (p.name == name) return p;
  LMT_FATAL("no parameter named " + name);
}

}  // namespace lmt
