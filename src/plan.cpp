// The memory planner's arithmetic (plan.hpp says what each degree shards and sends).
#include "plan.hpp"

#include <unistd.h>

#include <algorithm>

#include "flash_scratch.hpp"
#include "zero1.hpp"

namespace lmt {
namespace {

uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

// Model::carve starts every piece of its arenas 256-byte aligned: each is rounded up to a
// multiple of this many elements.
constexpr uint64_t kPieceAlign = 64;
uint64_t piece(uint64_t elems) { return ceil_div(elems, kPieceAlign) * kPieceAlign; }

// Ring collectives: each device sends (n-1)/n of the buffer per reduce-scatter or all-gather,
// twice that per all-reduce.
double ring_share(int64_t n) { return n > 1 ? double(n - 1) / double(n) : 0.0; }

// The busiest rank's fp32 master bytes (w each) under bf16, its masters sharded over `shards`
// ranks (ZeRO-1's dp; 1: not sharded) and without those of the matmul weights unless
// master_weights: what Model allocates of its zero1_masters, in whole granules
// (Backend::allocate_sparse), or all of them where they are all.
uint64_t master_bytes(const Config::Model& m, int64_t shards, bool master_weights,
                      uint64_t granule, uint64_t w) {
  const ParamLayout layout = ParamLayout::build(m);
  uint64_t most = 0;
  for (int r = 0; r < int(shards); ++r) {
    const Ranges held = zero1_masters(layout, int(shards), r, true, master_weights);
    most = std::max<uint64_t>(most, is_whole(held, layout.total)
                                        ? layout.total * w
                                        : covered(granules(in_bytes(held, w), granule)));
  }
  return most;
}

}  // namespace

Plan make_plan(const Config& c) {
  const auto& m = c.model;
  const auto& pc = c.plan;
  const bool ffn_only = pc.graph == "ffn_only";
  const uint64_t d = uint64_t(m.d_model), f = uint64_t(m.d_ff), L = uint64_t(m.num_layers);
  const uint64_t H = uint64_t(m.num_heads), T = uint64_t(m.context_length);
  const uint64_t B = uint64_t(c.train.batch_size), n = B * T;
  const uint64_t tp = uint64_t(pc.tp), fs = uint64_t(pc.fsdp);
  const uint64_t Vl = ceil_div(uint64_t(m.vocab_size), tp);  // vocabulary rows per tp rank
  const uint64_t dl = d / tp, fl = f / tp, Hl = H / tp;       // validate() made these exact

  Plan p;
  p.devices = pc.dp * pc.fsdp * pc.tp;
  p.global_batch = c.train.batch_size * pc.dp * pc.fsdp;
  // Master weights, gradients and moments are the model's storage type (fp64 runs all in
  // double), the moments 2 bytes under optim.state_dtype = "bf16"; lmtrain keeps activations in
  // it too and all-reduces gradients in it. ffn_only keeps the assignment's bf16 activations and
  // wire when the precision is bf16.
  p.elem_bytes = m.precision == Precision::fp64 ? 8 : 4;
  p.moment_bytes = c.optim.state_dtype == Dtype::bf16 ? 2 : p.elem_bytes;
  p.act_bytes = ffn_only && m.precision == Precision::bf16 ? 2 : p.elem_bytes;
  p.comm_bytes = p.act_bytes;
  const uint64_t w = uint64_t(p.elem_bytes), a = uint64_t(p.act_bytes);

  uint64_t params_tp, largest_group, acts, acts_cuda, scratch_elems;
  if (ffn_only) {
    p.param_count = L * 2 * d * f;
    params_tp = L * 2 * d * fl;
    largest_group = 2 * d * fl;
    acts = L * (n * d + n * fl) * a;  // the input of each linear
    scratch_elems = 0;                // the assignment counts state and saved activations only
    p.act_per_token = L * (d + fl) * a;
    acts_cuda = acts;
  } else {
    const uint64_t V = uint64_t(m.vocab_size);
    const uint64_t layer = 2 * d + 4 * d * d + 3 * d * f, layer_tp = 2 * d + 4 * d * dl + 3 * d * fl;
    const uint64_t tables = m.tie_embeddings ? 1 : 2;  // the embeddings and the LM head
    p.param_count = L * layer + tables * V * d + d;
    params_tp = L * layer_tp + tables * Vl * d + d;
    largest_group = std::max({layer_tp, Vl * d + (m.tie_embeddings ? 0 : d)});
    // As Model's constructor lays out its arenas, each piece rounded as carve() rounds it:
    // int32 inputs, targets and their sort order (allocations of their own); the residual
    // stream entering each layer and the final norm; per layer rstd1, h1, qkv, attention's saved
    // buffer, att, x_mid, rstd2, h2, u (SwiGLU's input: W3's and W1's outputs), g; then rstdf,
    // hf, logits (overwritten by their gradient in place), row_loss.
    // The CPU backend saves naive's probabilities for either model.attention.
    const uint64_t probs = piece(B * Hl * T * T), lse = piece(B * Hl * T);
    const uint64_t per_layer = 2 * piece(n) + 3 * piece(n * d) + piece(3 * n * dl) +
                               piece(n * dl) + piece(2 * n * fl) + piece(n * fl);
    const uint64_t rest = (L + 1) * piece(n * d) + 2 * piece(n) + piece(n * d) + piece(n * Vl);
    acts = 3 * n * 4 + (L * (per_layer + probs) + rest) * a;
    // Backward's scratch: dx, dh (residual width), under bf16 dx's rounded copy dx16 (none
    // where the residual stream, and so dx, is kept in bf16), datt, dqkv (attention), dg, du.
    const bool bf16 = m.precision == Precision::bf16;
    const bool copy16 = m.residual_grad_copy16();
    scratch_elems = (copy16 ? 3 : 2) * piece(n * d) + piece(n * dl) + piece(3 * n * dl) +
                    piece(n * fl) + piece(2 * n * fl);
    if (bf16 && !copy16) p.residual_grad_saved = piece(n * d) * w;
    p.attn_probs = L * probs * a;
    // The CUDA backend's flash saves each row's logsumexp, its naive the probabilities at key
    // <= query (T(T+1)/2 a head), in its fp32 storage.
    p.flash_lse = L * lse * 4;
    const uint64_t causal_probs = L * piece(B * Hl * T * (T + 1) / 2) * 4;
    acts_cuda = acts - p.attn_probs + (m.attention == "flash" ? p.flash_lse : causal_probs);
    // Under bf16 it also stores the activations only matmuls read (h1, h2, g per layer; hf),
    // SwiGLU's input u, attention's qkv and att, and the logits packed in bf16: half of each
    // piece.
    // Backward's dg, du (SwiGLU's output and input gradients), datt, dqkv, dh and dx16 (or,
    // with a bf16 residual stream, dx) likewise, in its workspace.
    // Its fp32 scratch, the largest request: RMSNorm backward's partial sums of dg
    // (kRmsnormDgChunks rows of d); flash backward's (D, and on a Hopper GPU under bf16 where the
    // fused backward runs, its sums of dQ: flash_scratch.hpp); naive's scores and, in backward,
    // one sequence's dS and P (in bf16 under bf16, below).
    const bool naive = m.attention == "naive";
    const uint64_t naive_fp32 = std::max(B * Hl * T * T, 2 * piece(Hl * T * T));
    const uint64_t flash = uint64_t(
        flash_bwd_scratch(int64_t(B), int64_t(Hl), int64_t(T), m.head_dim(),
                          bf16 && flash_fused_bwd(int64_t(T), m.head_dim(), true))
            .floats());
    // And cuBLASLt's workspace (cuda::Gemm::kWorkspaceBytes, 32 MiB).
    p.cuda_scratch = 4 * (T * uint64_t(m.head_dim()) +
                          std::max(kRmsnormDgChunks * d, !naive ? flash
                                           : bf16 ? 0
                                                  : naive_fp32)) +
                     (uint64_t(32) << 20);
    if (bf16) {
      // Slots 1-3: naive's scores, and P and dS of one sequence.
      if (naive) p.cuda_scratch += 2 * (B * Hl * T * T + 2 * Hl * T * T);
      auto saved = [](uint64_t e) { return piece(e) - piece(ceil_div(e, 2)); };
      const uint64_t attn = saved(3 * n * dl) + saved(n * dl);
      p.bf16_inputs_saved =
          (L * (2 * saved(n * d) + saved(2 * n * fl) + saved(n * fl) + attn) + saved(n * d) +
           saved(n * Vl)) * a;
      p.bf16_scratch_saved = (saved(2 * n * fl) + saved(n * fl) + attn + 2 * saved(n * d)) * w;
      acts_cuda -= p.bf16_inputs_saved;
      // model.residual_dtype = "bf16": the residual stream (x entering each layer and the
      // final norm, x_mid) in bf16 too.
      if (m.residual_dtype == Dtype::bf16) p.residual_saved = ((2 * L + 1) * saved(n * d)) * a;
      acts_cuda -= p.residual_saved;
    }
    p.logits_cuda = (bf16 ? piece(ceil_div(n * Vl, 2)) : piece(n * Vl)) * a;
    p.act_per_token = acts / n;
  }

  p.param_count_device = ceil_div(params_tp, fs);
  const uint64_t shard = ceil_div(p.param_count_device, pc.zero ? uint64_t(pc.dp) : 1);
  p.params = p.grads = p.param_count_device * w;
  p.optimizer = 2 * shard * uint64_t(p.moment_bytes);
  // FSDP shards the requested share of the saved activations (the assignment's "every second
  // layer"); the rest stays whole on every device.
  auto sharded = [&](uint64_t bytes) {
    const uint64_t shared = uint64_t(double(bytes) * pc.act_shard_fraction + 0.5);
    return bytes - shared + ceil_div(shared, fs);
  };
  p.activations = sharded(acts);
  p.activations_cuda = sharded(acts_cuda);
  p.fsdp_gather = fs > 1 ? 2 * largest_group * uint64_t(p.comm_bytes) : 0;
  // Under bf16 the parameters that are not matmul-only (the RMSNorm gains, the embedding) are
  // read in fp32: `exact` of them. ZeRO-1 (zero1.hpp) gathers them exact, all ranks' packed in
  // workspace, the rest as bf16. Without master weights (optim.master_weights = false) theirs
  // are the only fp32 masters.
  const bool bf16_graph = !ffn_only && m.precision == Precision::bf16;
  const bool zero_bf16 = pc.zero && bf16_graph, bare = bf16_graph && !c.optim.master_weights;
  const uint64_t exact = bf16_graph ? ceil_div((2 * L + 1) * d + Vl * d, fs) : 0;
  p.workspace = scratch_elems * w + p.fsdp_gather + (zero_bf16 ? exact * w : 0);
  // lmtrain's zero1 also holds the reduced gradients of its shard, and a double for the squared
  // norm's all-reduce.
  if (pc.zero && !ffn_only) p.grads += shard * w, p.workspace += 8;
  // Under ZeRO-1 and bf16 each rank holds the fp32 masters of its shard and of the exact
  // parameters only (lmtrain's own layout: without tp and fsdp; else all of them); without master
  // weights, of the exact ones only. Either way it holds the bf16 copy of every weight, which the
  // CPU backend too keeps then: the all-gather's source and, where not all the masters are held,
  // what its matmuls read, each matmul's weight widened into scratch of the largest's size (W3
  // and W1 are one matmul's, 2 d_ff x d).
  const uint64_t weights16 = m.precision == Precision::bf16 ? p.param_count_device * 2 : 0;
  uint64_t masters_cuda = p.params, widened = 0;
  if (zero_bf16 || bare) {
    const bool master_weights = !bare;
    if (tp == 1 && fs == 1) {
      const int64_t shards = pc.zero ? pc.dp : 1;
      p.params = master_bytes(m, shards, master_weights, uint64_t(sysconf(_SC_PAGESIZE)), w);
      masters_cuda = master_bytes(m, shards, master_weights, kCudaGranule, w);
      if (shards > 1 || bare) widened = std::max({Vl * d, 3 * d * d, 2 * f * d}) * w;
    } else if (bare) {
      p.params = masters_cuda = exact * w;
    }
    p.params += weights16;
    p.workspace += widened;
  }
  if (!ffn_only) {
    p.forward_cuda = masters_cuda + weights16 + p.activations_cuda;
    p.total_cuda = p.forward_cuda + p.grads + p.optimizer + p.workspace - widened -
                   p.bf16_scratch_saved + p.cuda_scratch;
  }

  const double wire = double(p.comm_bytes);
  const double gather_bytes = zero_bf16 ? 2.0 * double(p.param_count_device - exact) + 4.0 * double(exact)
                                       : double(p.param_count_device) * wire;
  p.comm_dp = ring_share(pc.dp) * (double(p.param_count_device) * wire + gather_bytes);
  p.comm_fsdp = 3 * ring_share(pc.fsdp) * double(params_tp) * wire;
  const double tp_values = ffn_only ? double(2 * L * n * d)
                                    : double((4 * L + 2) * n * d + 3 * n);
  p.comm_tp = 2 * ring_share(pc.tp) * tp_values * wire;
  return p;
}

int64_t min_fsdp_to_fit(const Config& c, double bytes, bool with_workspace) {
  Config k = c;
  auto fits = [&](int64_t s) {
    k.plan.fsdp = s;
    Plan p = make_plan(k);
    return double(p.total() - (with_workspace ? 0 : p.workspace)) <= bytes;
  };
  // Past one parameter per device nothing shards further. From fsdp = 2 on the bytes never grow
  // with the degree (the gather buffer is fixed, every shard shrinks), so bisect.
  const int64_t cap = int64_t(std::min<uint64_t>(make_plan(c).param_count, uint64_t(1) << 40));
  if (fits(1)) return 1;
  if (cap < 2 || !fits(cap)) return 0;
  int64_t lo = 1, hi = cap;  // lo does not fit, hi does
  while (hi - lo > 1) {
    int64_t mid = lo + (hi - lo) / 2;
    (fits(mid) ? hi : lo) = mid;
  }
  return hi;
}

}  // namespace lmt
