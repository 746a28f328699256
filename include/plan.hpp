// The memory planner: bytes per device by allocation tag, and bytes communicated per step per
// device, computed from the config alone (no backend, nothing allocated).
//
// graph = "lmtrain" counts exactly what src/model.cpp and AdamW allocate on the CPU backend (one
// device, dp = tp = fsdp = 1: a unit test holds the two equal, tag by tag); parallel degrees
// divide it as the strategies below would. graph = "ffn_only" is CS336's §2.4 accounting: L
// blocks of two linears (d -> d_ff -> d), no attention, embedding, norms or head, fp32 master
// weights, gradients and AdamW moments, bf16 saved activations and communication.
//
// Parallel layout (devices = dp x fsdp x tp; every dp and fsdp rank draws its own batch of
// train.batch_size sequences, the tp ranks of a group share one):
//   dp    replicas; gradients all-reduced (ring: 2(n-1)/n x gradient bytes sent per device).
//   zero  1: ZeRO-1 over the dp ranks: each keeps AdamW's m and v for its contiguous 1/dp of the
//         flat buffer, and its reduced gradients besides the full ones; gradients
//         reduce-scattered, updated parameters all-gathered (the same bytes as the all-reduce, in
//         two halves; under bf16 the all-gather moves the weights only matmuls read in bf16, and
//         stages the rest, the RMSNorm gains and the embedding, in workspace: zero1.hpp). Under
//         bf16 the fp32 masters are sharded too: a rank holds those of its shard and of the
//         parameters read in fp32, in whole granules (the CPU's pages, kCudaGranule on the GPU),
//         and the bf16 copy of every weight (on the CPU too: there its matmuls widen each weight
//         from it into workspace); the busiest rank's bytes are counted. That is lmtrain's own
//         layout (tp = fsdp = 1); with tp or fsdp every master is counted. fp32 and tf32: every
//         rank holds every master (its matmuls read them).
//   fsdp  ZeRO-3: parameters, gradients and moments sharded 1/fsdp; the parameters of one
//         backward group (a layer, or the head, or the embedding) are all-gathered before use in
//         forward and again in backward, its gradients reduce-scattered: 3(n-1)/n x parameter
//         bytes. Workspace holds the largest group gathered plus its gradients (no prefetch).
//   tp    Megatron: QKV, W1, W3 split by output columns, out-proj and W2 by input rows, heads
//         split evenly; RMSNorm gains and the activations outside attention/FFN (the residual
//         stream, norm outputs) replicated (no sequence parallelism); embedding and LM head split
//         over the vocabulary (ceil(V/tp) rows) with the cross-entropy reduced across tp.
//         Communication: per layer two all-reduces of B*T*d activations forward and two backward,
//         plus one each for the embedding's output and the head's input gradient, plus the
//         cross-entropy's row max, sum and target logit (3 x B*T values).
#pragma once
#include <cstdint>

#include "config.hpp"

namespace lmt {

// What the GPU maps sparse memory in (cuMemGetAllocationGranularity's minimum, 2 MiB on the
// A100, H100 and H200; the GPU tests check it): ZeRO-1's sharded masters are held in these.
inline constexpr uint64_t kCudaGranule = uint64_t(2) << 20;
// The CUDA RMSNorm backward's blocks at most (cuda/rmsnorm.cu): its scratch holds this many rows
// of d partial sums of dg.
inline constexpr int kRmsnormDgChunks = 1024;

struct Plan {
  int64_t devices = 1, global_batch = 0;  // sequences per step across all devices
  uint64_t param_count = 0;                // the whole model
  uint64_t param_count_device = 0;         // held by one device (after tp and fsdp)
  // Master weights and gradients, AdamW's m and v (optim.state_dtype), saved activations, wire.
  int elem_bytes = 4, moment_bytes = 4, act_bytes = 4, comm_bytes = 4;
  // Bytes per device by tag (the allocator's MemTag) on the CPU backend (under ZeRO-1 the
  // busiest rank's, once it has taken a step); activations include naive attention's saved
  // probabilities (attn_probs) when the graph has attention.
  uint64_t params = 0, grads = 0, optimizer = 0, activations = 0, workspace = 0;
  uint64_t attn_probs = 0;   // B x H/tp x T x T per layer, in activations
  uint64_t flash_lse = 0;    // what FlashAttention saves instead: B x H/tp x T fp32 per layer
  // The classifier's one [B*T, V] buffer on the CUDA backend (the logits, then their gradient in
  // place; bf16 under bf16), part of activations_cuda.
  uint64_t logits_cuda = 0;
  // What the CUDA backend saves under bf16 by storing the matmul-only activations, SwiGLU's
  // inputs, attention's qkv and output and the logits in bf16, in activations and in workspace
  // (backward's dg, du, datt, dqkv).
  uint64_t bf16_inputs_saved = 0, bf16_scratch_saved = 0;
  // And with model.residual_dtype = "bf16", by storing the residual stream in bf16 (in
  // activations), and its gradient (dx) in bf16 without a rounded copy (in workspace, on either
  // backend: the CPU's keeps dx in T, also without the copy).
  uint64_t residual_saved = 0, residual_grad_saved = 0;
  // The activations on the CUDA backend with c.model.attention: in place of attn_probs,
  // flash_lse under "flash" (the default) or, under "naive", the probabilities at key <= query
  // (B x H/tp x T(T+1)/2 fp32 per layer); less bf16_inputs_saved (and residual_saved) under bf16.
  uint64_t activations_cuda = 0;
  // The CUDA backend's own scratch in a step (src/gpu/backend.cpp): under bf16 naive
  // attention's bf16 scores, and in backward one sequence's P and dS, and in any precision the RoPE
  // table (T x dh fp32) and its fp32 buffer, the largest of RMSNorm backward's partial sums
  // (32 x d), flash backward's D (B x H x T) and, under fp32 and tf32, naive's scores
  // (B x H x T x T) or one sequence's dS and P; and cuBLASLt's workspace (32 MiB).
  uint64_t cuda_scratch = 0;
  // What the CUDA backend allocates (lmtrain graph): for forward alone, the parameters (ZeRO-1
  // under bf16: the masters held, in kCudaGranule), under bf16 their bf16 copy, and
  // activations_cuda; for a full step also gradients, moments, the workspace (less
  // bf16_scratch_saved and the CPU's widened weight) and cuda_scratch. Not predicted: the
  // reductions' partial sums (8 KiB), cuBLAS's own workspace and the CUDA context.
  uint64_t forward_cuda = 0, total_cuda = 0;
  uint64_t fsdp_gather = 0;  // part of workspace
  uint64_t act_per_token = 0;  // saved activations per token of one sequence position (1 device)
  // Bytes sent per device per optimizer step.
  double comm_dp = 0, comm_fsdp = 0, comm_tp = 0;
  uint64_t total() const { return params + grads + optimizer + activations + workspace; }
  double comm_total() const { return comm_dp + comm_fsdp + comm_tp; }
};

// The plan for c.model, c.train.batch_size and c.plan's degrees.
Plan make_plan(const Config& c);

// Smallest FSDP degree (other degrees as in c) at which one device needs at most `bytes`
// (with_workspace false: parameters, gradients, moments and saved activations only, as CS336
// §2.4 counts); 0 when none does (what FSDP cannot shard is already too big).
int64_t min_fsdp_to_fit(const Config& c, double bytes, bool with_workspace = true);

}  // namespace lmt
