// The memory planner: on one device its bytes per tag are exactly what the CPU backend's tagged
// allocator holds once the model and AdamW are built; the parallel degrees divide and send what
// plan.hpp says; plan mode prints and writes its CSV row from the same numbers.
#include <doctest/doctest.h>

#include <fstream>

#include "backend.hpp"
#include "../helpers.hpp"
#include "model.hpp"
#include "optimizer.hpp"
#include "plan.hpp"
#include "zero1.hpp"

using namespace lmt;

namespace {

struct Shape {
  const char* name;
  int64_t d, heads, ff, layers, vocab, ctx, batch;
  Precision precision;
};

// The tiny model and odd shapes (prime vocabulary and context, one head, batch 1).
const Shape kShapes[] = {
    {"tiny", 64, 4, 176, 2, 256, 64, 8, Precision::bf16},
    {"odd", 24, 2, 40, 3, 37, 7, 3, Precision::fp32},
    {"one head, batch 1", 10, 1, 14, 1, 13, 11, 1, Precision::tf32},
    {"fp64", 12, 3, 20, 2, 11, 5, 2, Precision::fp64},
};

Config config_of(const Shape& s) {
  Config c;
  c.run.mode = Mode::plan;
  c.model.d_model = s.d, c.model.num_heads = s.heads, c.model.d_ff = s.ff;
  c.model.num_layers = s.layers, c.model.vocab_size = s.vocab, c.model.context_length = s.ctx;
  c.model.precision = s.precision;
  c.train.batch_size = s.batch;
  return c;
}

// After a forward and backward: the CPU backend's scratch, where it widens the weights' bf16 copy
// for the matmuls (no master weights), is allocated then.
template <typename T> void check_against_allocator(const Config& c) {
  auto be = make_cpu_backend<T>();
  const Ranges masters = zero1_masters(ParamLayout::build(c.model), 1, 0,
                                       c.model.precision == Precision::bf16, c.optim.master_weights);
  Model<T> model(*be, c.model, c.train.batch_size, c.model.context_length, masters);
  AdamW<T> opt(*be, model.layout.total, moments_stored(c.optim.state_dtype), 0, 0, masters);
  model.init_params(1);
  const auto tokens = lmt::test::rand_tokens(size_t(c.train.batch_size * c.model.context_length),
                                             int32_t(c.model.vocab_size));
  model.forward(tokens.data(), tokens.data());
  model.backward();
  const Plan p = make_plan(c);
  const MemoryStats& mem = be->memory();
  auto at = [&](MemTag t) { return uint64_t(mem.current[size_t(t)]); };
  CHECK(p.param_count == model.layout.total);
  CHECK(p.params == at(MemTag::params));
  CHECK(p.grads == at(MemTag::grads));
  CHECK(p.optimizer == at(MemTag::optimizer));
  CHECK(p.activations == at(MemTag::activations));
  CHECK(p.workspace == at(MemTag::workspace));
  CHECK(p.total() == mem.total);
  CHECK(p.attn_probs < p.activations);
}

}  // namespace

TEST_CASE("plan: bytes per tag equal what the CPU backend allocates for the model and AdamW") {
  for (const Shape& s : kShapes) {
    SUBCASE(s.name) {
      Config c = config_of(s);
      validate(c);
      if (s.precision == Precision::fp64) check_against_allocator<double>(c);
      else check_against_allocator<float>(c);
    }
  }
}

TEST_CASE("plan: tied embeddings hold one [vocab, d_model] table fewer, as the allocator holds "
          "them") {
  for (const Shape& s : kShapes) {
    SUBCASE(s.name) {
      Config c = config_of(s);
      const Plan untied = make_plan(c);
      c.model.tie_embeddings = true;
      validate(c);
      if (s.precision == Precision::fp64) check_against_allocator<double>(c);
      else check_against_allocator<float>(c);
      CHECK(make_plan(c).param_count == untied.param_count - uint64_t(s.vocab * s.d));
    }
  }
}

TEST_CASE("plan: bf16 moments are 2 bytes each, as the allocator holds them") {
  for (Precision precision : {Precision::bf16, Precision::fp64}) {
    Config c = config_of(kShapes[1]);
    c.model.precision = precision;
    const uint64_t full = make_plan(c).optimizer;
    c.optim.state_dtype = Dtype::bf16;
    validate(c);
    const Plan p = make_plan(c);
    CHECK(p.optimizer == 2 * 2 * p.param_count);
    CHECK(p.optimizer * (precision == Precision::fp64 ? 4 : 2) == full);
    if (precision == Precision::fp64) check_against_allocator<double>(c);
    else check_against_allocator<float>(c);
  }
}

TEST_CASE("plan: without master weights a device holds fp32 masters of the parameters read in "
          "fp32 only, and the bf16 copy of every weight, as the allocator holds them") {
  Config c = config_of(kShapes[0]);  // tiny, bf16
  const Plan with = make_plan(c);
  c.optim.master_weights = false;
  validate(c);
  check_against_allocator<float>(c);
  const Plan p = make_plan(c);
  const uint64_t P = p.param_count;
  uint64_t E = 0;  // the parameters read in fp32: RMSNorm gains and the embedding
  for (const ParamView& v : ParamLayout::build(c.model).params) E += v.matmul ? 0 : v.numel;
  // Their fp32 masters in whole pages (each run of them from its first page to its last), and
  // the copy: about a third of the 6 bytes a parameter with masters takes (the copy is made on
  // the GPU from the masters there; the CPU makes one then only for ZeRO-1).
  CHECK(p.params >= 4 * E + 2 * P);
  CHECK(p.params < 4 * P);
  CHECK(with.params == 4 * P);
  CHECK(p.grads == with.grads);
  CHECK(p.optimizer == with.optimizer);
  // The CPU widens each matmul's weight from the copy into scratch of the largest's size (W3 and
  // W1's, 2 d_ff x d).
  CHECK(p.workspace == with.workspace + 2 * 176 * 64 * 4);
  // On the GPU the masters in 2 MiB granules (one, for a model this small), and the copy.
  CHECK(p.forward_cuda == kCudaGranule + 2 * P + p.activations_cuda);
  CHECK(with.forward_cuda == 4 * P + 2 * P + with.activations_cuda);
  // With tp (not lmtrain's layout) every parameter read in fp32, exact, and the copy.
  c.plan.tp = 2;
  validate(c);
  const Plan t = make_plan(c);
  const uint64_t d = 64, L = 2, V = 256;
  CHECK(t.params == ((2 * L + 1) * d + V / 2 * d) * 4 + t.param_count_device * 2);
  // Under ZeRO-1 the same masters on every rank; the exact ones travel as before.
  c.plan.tp = 1, c.plan.dp = 4, c.plan.zero = 1;
  validate(c);
  const Plan z = make_plan(c);
  CHECK(z.params == p.params);
  c.optim.master_weights = true;
  CHECK(z.params < make_plan(c).params);
  CHECK(z.comm_dp == make_plan(c).comm_dp);
}

TEST_CASE("plan: on the GPU flash saves B x H x T fp32 per layer, naive B x H x T(T+1)/2") {
  Config c = config_of(kShapes[1]);  // B 3, H 2, T 7: both pieces round up to 64 elements
  const uint64_t L = 3;
  Plan p = make_plan(c);
  CHECK(c.model.attention == "flash");
  CHECK(p.attn_probs == L * 320 * 4);  // B*H*T*T = 294 elements, carved as 320
  CHECK(p.flash_lse == L * 64 * 4);    // B*H*T = 42 elements, carved as 64
  CHECK(p.activations_cuda == p.activations - p.attn_probs + p.flash_lse);
  c.model.attention = "naive";
  p = make_plan(c);
  CHECK(p.activations_cuda == p.activations - p.attn_probs + L * 192 * 4);  // 168 -> 192
}

TEST_CASE("plan: under bf16 the GPU stores h1, qkv, att, u, g, h2, hf and the logits packed, "
          "half their pieces") {
  Config c = config_of(kShapes[0]);  // tiny, bf16: n = 8 x 64, d 64, d_ff 176, 2 layers
  c.model.attention = "naive";
  const Plan p = make_plan(c);
  const uint64_t n = 512, d = 64, f = 176, L = 2, B = 8, T = 64, H = 4, V = 256, dh = d / H;
  // Every piece here is a multiple of 64 elements whole and halved: exactly half of each.
  CHECK(p.bf16_inputs_saved == (L * (2 * n * d + 4 * n * d + 3 * n * f) + n * d + n * V) / 2 * 4);
  CHECK(p.logits_cuda == n * V * 2);  // one buffer, the gradient written over the logits
  CHECK(p.activations_cuda ==
        p.activations - p.attn_probs + L * B * H * T * (T + 1) / 2 * 4 - p.bf16_inputs_saved);
  // dg, du (2f wide); datt, dqkv; dh (an RMSNorm output's gradient, as the matmuls write it);
  // dx16 (the residual gradient that matmuls read)
  CHECK(p.bf16_scratch_saved == (3 * n * f + 6 * n * d) / 2 * 4);
  // On the GPU: the weights' bf16 copy besides; the step adds state and workspace.
  CHECK(p.forward_cuda == p.params + p.param_count * 2 + p.activations_cuda);
  // The backend's scratch: the scores of the batch, P and dS of one sequence in bf16 (the
  // logits' gradient needs no bf16 copy: cross-entropy writes it so); the RoPE table (T x dh)
  // and RMSNorm backward's partial sums (kRmsnormDgChunks x d) in fp32; cuBLASLt's workspace, 32 MiB.
  CHECK(p.cuda_scratch ==
        2 * (B * H * T * T + 2 * H * T * T) + 4 * (T * dh + kRmsnormDgChunks * d) + (32 << 20));
  CHECK(p.total_cuda == p.forward_cuda + p.grads + p.optimizer + p.workspace -
                            p.bf16_scratch_saved + p.cuda_scratch);
  CHECK(p.residual_saved == 0);
  // The residual stream in bf16 as well: x entering each layer and the final norm, x_mid.
  c.model.residual_dtype = Dtype::bf16;
  const Plan r = make_plan(c);
  CHECK(r.residual_saved == (2 * L + 1) * n * d / 2 * 4);
  CHECK(r.activations_cuda == p.activations_cuda - r.residual_saved);
  CHECK(r.activations == p.activations);  // the CPU keeps them in T
  // Its gradient dx in bf16, read by the matmuls as it is: no rounded copy dx16 (on the CPU, dx
  // in T, no copy either; on the GPU dx packed as dx16 was).
  CHECK(p.residual_grad_saved == 0);
  CHECK(r.residual_grad_saved == n * d * 4);
  CHECK(r.workspace == p.workspace - r.residual_grad_saved);
  CHECK(r.bf16_scratch_saved == p.bf16_scratch_saved);
  CHECK(r.total_cuda == p.total_cuda - r.residual_saved - r.residual_grad_saved);
  c.model.residual_dtype = Dtype::fp32;
  c.model.precision = Precision::fp32;
  CHECK(make_plan(c).bf16_inputs_saved == 0);
  CHECK(make_plan(c).logits_cuda == n * V * 4);
}

TEST_CASE("plan: fsdp shards params, grads and moments; zero1 the moments, and under bf16 the "
          "masters") {
  Config c = config_of(kShapes[1]);
  const Plan one = make_plan(c);
  const uint64_t P = one.param_count;
  for (int64_t s : {2, 3, 7}) {
    c.plan.fsdp = s;
    Plan p = make_plan(c);
    CHECK(p.param_count_device == (P + uint64_t(s) - 1) / uint64_t(s));
    CHECK(p.params == p.param_count_device * 4);
    CHECK(p.grads == p.params);
    CHECK(p.optimizer == 2 * p.params);
    CHECK(p.activations == one.activations);  // act_shard_fraction 0: activations stay whole
    CHECK(p.workspace > one.workspace);       // the gathered group and its gradients
    CHECK(p.comm_fsdp == doctest::Approx(3.0 * double(s - 1) / double(s) * double(P) * 4));
    CHECK(p.devices == s);
    CHECK(p.global_batch == s * c.train.batch_size);
  }
  c.plan.fsdp = 1, c.plan.dp = 4, c.plan.zero = 1;
  Plan z = make_plan(c);
  CHECK(z.params == one.params);  // fp32: every master on every rank, the matmuls read them
  CHECK(z.grads == one.grads + (P + 3) / 4 * 4);  // and the reduced gradients of its shard
  CHECK(z.optimizer == 2 * ((P + 3) / 4) * 4);
  CHECK(z.workspace == one.workspace + 8);  // the squared norm's all-reduce
  // Reduce-scatter plus all-gather send what the all-reduce sends.
  c.plan.zero = 0;
  Plan d = make_plan(c);
  CHECK(d.optimizer == one.optimizer);
  CHECK(d.comm_dp == doctest::Approx(2.0 * 3.0 / 4.0 * double(P) * 4));
  CHECK(z.comm_dp == doctest::Approx(d.comm_dp));
  CHECK(one.comm_total() == 0);  // one device sends nothing
  // Under bf16 zero1's all-gather sends the matmul-only weights in bf16 and stages the others
  // (exact, fp32) in workspace: E of them, counted from the model's own layout. The CPU widens
  // each matmul's weight from the bf16 copy into scratch of the largest's size (W3 and W1's,
  // 2 d_ff x d here).
  // (bf16 adds backward's rounded copy of the residual gradient to the workspace too: n x d, a
  // piece of the arena, rounded up to 64 elements.)
  c.plan.zero = 1, c.model.precision = Precision::bf16;
  const Plan zb = make_plan(c);
  uint64_t E = 0;
  for (const ParamView& v : ParamLayout::build(c.model).params) E += v.matmul ? 0 : v.numel;
  CHECK(E > 0);
  CHECK(zb.comm_dp == doctest::Approx(3.0 / 4.0 * (4.0 * double(P) + 2.0 * double(P - E) + 4.0 * double(E))));
  const uint64_t widened = 2 * 40 * 24 * 4;
  const uint64_t nd = uint64_t(c.train.batch_size * c.model.context_length * c.model.d_model);
  const uint64_t dx16 = 4 * ((nd + 63) / 64 * 64);
  CHECK(zb.workspace == z.workspace + 4 * E + widened + dx16);
  // Each rank holds the bf16 copy of every weight and, in fp32, its shard and the E exact ones,
  // in whole pages: less than all of them (tests/mpi checks these bytes against the allocator).
  CHECK(zb.params > 2 * P);
  CHECK(zb.params - 2 * P < one.params);
  // On the GPU in whole 2 MiB granules: one, for a model this small (68 KiB in fp32).
  CHECK(zb.forward_cuda == kCudaGranule + 2 * P + zb.activations_cuda);
  CHECK(zb.total_cuda == zb.forward_cuda + zb.grads + zb.optimizer + zb.workspace - widened -
                             zb.bf16_scratch_saved + zb.cuda_scratch);
  // With tp (not lmtrain's layout) every master is counted, and the copy.
  c.plan.tp = 2, c.plan.dp = 2;
  validate(c);
  const Plan zt = make_plan(c);
  CHECK(zt.params == zt.param_count_device * 6);
}

TEST_CASE("plan: tp splits the attention and FFN weights and activations, not the rest") {
  Config c = config_of(kShapes[0]);  // 4 heads, d_ff 176: tp 2 and 4 divide both
  const Plan one = make_plan(c);
  const uint64_t d = 64, f = 176, L = 2, V = 256, n = 8 * 64;
  for (uint64_t t : {2, 4}) {
    c.plan.tp = int64_t(t);
    validate(c);
    Plan p = make_plan(c);
    CHECK(p.param_count_device == L * (2 * d + 4 * d * d / t + 3 * d * f / t) + 2 * (V / t) * d + d);
    CHECK(p.attn_probs * t == one.attn_probs);
    CHECK(p.activations < one.activations);
    CHECK(p.comm_tp == doctest::Approx(2.0 * double(t - 1) / double(t) *
                                       double((4 * L + 2) * n * d + 3 * n) * 4));
  }
}

TEST_CASE("plan: ffn_only is CS336 2.4's accounting (fp32 state, bf16 activations)") {
  Config c;
  c.run.mode = Mode::plan, c.plan.graph = "ffn_only", c.model.precision = Precision::bf16;
  c.model.d_model = 16384, c.model.d_ff = 53248, c.model.num_layers = 126, c.model.num_heads = 128;
  c.model.context_length = 512, c.train.batch_size = 4;
  const uint64_t d = 16384, f = 53248, L = 126, tokens = 4 * 512;
  Plan p = make_plan(c);
  CHECK(p.param_count == L * 2 * d * f);
  CHECK(p.params + p.grads + p.optimizer == 16 * p.param_count);  // 4 + 4 + 8 bytes a parameter
  CHECK(p.activations == tokens * L * (d + f) * 2);
  CHECK(p.workspace == 0);
  // Half the activations sharded: (state + A/2)/N + A/2 per device, the assignment's expression.
  c.plan.act_shard_fraction = 0.5, c.plan.fsdp = 64;
  Plan s = make_plan(c);
  CHECK(s.params + s.grads + s.optimizer == 16 * ((p.param_count + 63) / 64));
  CHECK(s.activations == p.activations / 2 + p.activations / 2 / 64);
  // The smallest degree that fits does, and one less does not.
  const double budget = 95e9;
  int64_t k = min_fsdp_to_fit(c, budget, false);
  REQUIRE(k > 1);
  c.plan.fsdp = k;
  Plan fit = make_plan(c);
  CHECK(double(fit.total() - fit.workspace) <= budget);
  c.plan.fsdp = k - 1;
  Plan miss = make_plan(c);
  CHECK(double(miss.total() - miss.workspace) > budget);
  CHECK(min_fsdp_to_fit(c, budget, true) >= k);  // the gather buffer only adds
  CHECK(min_fsdp_to_fit(c, double(p.activations) / 4, false) == 0);  // the unsharded half never fits
}

TEST_CASE("plan mode: prints the tags and appends a CSV row with the planner's numbers") {
  test::TempDir dir;
  std::string csv = dir.path + "/plan.csv";
  std::string cmd = std::string(test::lmtrain()) +
                    " --config configs/models/tiny.toml --set run.mode=plan --set plan.dp=2"
                    " --set plan.zero=1 --csv " + csv;
  auto r = test::run(cmd);
  INFO(r.output);
  REQUIRE(r.code == 0);
  for (auto word : {"params", "grads", "optimizer", "activations", "workspace", "FlashAttention",
                    "dp (zero1)", "smallest FSDP degree"})
    CHECK(r.output.find(word) != std::string::npos);
  REQUIRE(test::run(cmd).code == 0);  // a second row under the same header
  std::ifstream f(csv);
  std::string header, row, row2, extra;
  std::getline(f, header), std::getline(f, row), std::getline(f, row2);
  CHECK(!std::getline(f, extra));
  auto h = test::csv_cells(header), v = test::csv_cells(row);
  REQUIRE(h.size() == v.size());
  auto col = [&](const std::string& name) {
    for (size_t i = 0; i < h.size(); ++i)
      if (h[i] == name) return v[i];
    FAIL("no column " << name);
    return std::string();
  };
  Config c = parse_command_line({"--config", "configs/models/tiny.toml", "--set", "run.mode=plan",
                                 "--set", "plan.dp=2", "--set", "plan.zero=1"}).config;
  Plan p = make_plan(c);
  CHECK(col("plan.dp") == "2");
  CHECK(col("total_bytes") == std::to_string(p.total()));
  CHECK(col("optimizer_bytes") == std::to_string(p.optimizer));
  CHECK(col("activations_bytes") == std::to_string(p.activations));
  CHECK(col("devices") == "2");
  CHECK(col("fits") == "1");
}
