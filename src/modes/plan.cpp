// plan mode: memory per device by tag and communication per step per device for a model,
// precision, batch and parallel layout, computed (plan.hpp) on rank 0 with no backend.
#include <cstdio>

#include "modes.hpp"
#include "plan.hpp"
#include "report.hpp"

namespace lmt {
namespace {

CsvRow plan_columns(const Config& c) {
  CsvRow row = run_columns(c);
  for (auto name : {"date_utc", "devices", "global_batch", "param_count", "param_count_device",
                    "params_bytes", "grads_bytes", "optimizer_bytes", "activations_bytes",
                    "workspace_bytes", "total_bytes", "attn_probs_bytes", "flash_lse_bytes",
                    "activations_cuda_bytes", "forward_cuda_bytes", "total_cuda_bytes",
                    "comm_dp_bytes", "comm_fsdp_bytes", "comm_tp_bytes", "comm_total_bytes",
                    "fits", "min_fsdp"})
    row.add(name, "");
  return row;
}

const char* dtype(int bytes) { return bytes == 8 ? "fp64" : bytes == 4 ? "fp32" : "bf16"; }

void line(const char* name, double bytes, const char* note = "") {
  printf("  %-13s %20.0f %12.3f GB  %s\n", name, bytes, bytes / 1e9, note);
}

}  // namespace

int run_plan(const CommandLine& cl, const Runtime& rt) {
  const Config& c = cl.config;
  const auto& pc = c.plan;
  agree(rt, [&] {
    if (!cl.csv_path.empty() && rt.is_root()) check_csv(cl.csv_path, plan_columns(c).header);
  });
  if (!rt.is_root()) return 0;
  const Plan p = make_plan(c);
  const double budget = pc.device_gb * 1e9;
  const int64_t min_fsdp = min_fsdp_to_fit(c, budget);
  const int64_t min_fsdp_state = min_fsdp_to_fit(c, budget, false);
  const bool ffn = pc.graph == "ffn_only";

  printf("== lmtrain plan: %s graph, %s parameters, precision %s, batch %lld x context %lld per "
         "rank ==\n", pc.graph.c_str(), human_count(double(p.param_count)).c_str(),
         name_of(c.model.precision), (long long)c.train.batch_size,
         (long long)c.model.context_length);
  printf("layout: dp %lld (zero %lld) x fsdp %lld x tp %lld = %lld device(s); global batch %lld "
         "sequences; %s parameters on each device\n", (long long)pc.dp, (long long)pc.zero,
         (long long)pc.fsdp, (long long)pc.tp, (long long)p.devices, (long long)p.global_batch,
         human_count(double(p.param_count_device)).c_str());
  const bool bf16 = !ffn && c.model.precision == Precision::bf16;
  const bool bare = bf16 && !c.optim.master_weights;  // no fp32 masters of the matmul weights
  printf("dtypes: parameters%s, gradients %s; AdamW m and v %s; saved activations %s; "
         "communication %s\n\n", bare ? " bf16 (those read in fp32: fp32)" : "",
         dtype(p.elem_bytes), dtype(p.moment_bytes), dtype(p.act_bytes), dtype(p.comm_bytes));
  printf("  %-13s %20s %15s\n", "per device", "bytes", "GB");
  line("params", double(p.params),
       bare ? "(bf16 weights: fp32 masters only of the parameters read in fp32, and the bf16 copy "
              "of every weight)"
       : pc.zero && bf16
           ? "(ZeRO-1, bf16: the busiest rank's fp32 masters, and the bf16 copy of every weight)"
           : "");
  line("grads", double(p.grads));
  line("optimizer", double(p.optimizer), pc.zero ? "(AdamW m, v; ZeRO-1: 1/dp of them)" : "(AdamW m, v)");
  line("activations", double(p.activations),
       pc.act_shard_fraction > 0 ? "(saved for backward; part sharded by FSDP)" : "(saved for backward)");
  line("workspace", double(p.workspace),
       p.fsdp_gather ? "(backward scratch + FSDP's gathered group and its gradients)" : "(backward scratch)");
  line("total", double(p.total()));
  line("state+acts", double(p.total() - p.workspace), "(what CS336 2.4 counts)");
  printf("  saved activations per token: %.0f bytes on one device\n", double(p.act_per_token));
  if (!ffn) {
    printf("\nattention: naive's saved probabilities (B x H x T x T per layer), in activations "
           "above (the CPU backend saves them for either model.attention): %s;\n  FlashAttention "
           "on the CUDA backend saves its logsumexp instead (B x H x T fp32 per layer): %s, %s "
           "less\n",
           human_bytes(double(p.attn_probs)).c_str(), human_bytes(double(p.flash_lse)).c_str(),
           human_bytes(double(p.attn_probs - p.flash_lse)).c_str());
    printf("  activations on the CUDA backend with model.attention = \"%s\": %s\n",
           c.model.attention.c_str(), human_bytes(double(p.activations_cuda)).c_str());
    if (p.bf16_inputs_saved)
      printf("  (under bf16 it stores the tensors only matmuls read, SwiGLU's inputs, "
             "attention's q, k, v and output, the logits, and their gradients, in bf16: %s less in "
             "activations, included, and %s less in workspace)\n",
             human_bytes(double(p.bf16_inputs_saved)).c_str(),
             human_bytes(double(p.bf16_scratch_saved)).c_str());
    if (p.residual_saved)
      printf("  (model.residual_dtype = \"bf16\": the residual stream in bf16, %s less in "
             "activations, included, and its gradient, %s less in workspace)\n",
             human_bytes(double(p.residual_saved)).c_str(),
             human_bytes(double(p.residual_grad_saved)).c_str());
    if (p.logits_cuda)
      printf("  of which the logits, overwritten in place by their gradient (B x T x V, one "
             "buffer%s): %s\n", c.model.precision == Precision::bf16 ? ", bf16" : "",
             human_bytes(double(p.logits_cuda)).c_str());
  }
  printf("\ncommunication per step per device (bytes sent, ring collectives)\n");
  if (pc.zero)
    line("dp (zero1)", p.comm_dp,
         c.model.precision == Precision::bf16 && !ffn
             ? "(reduce-scatter of gradients + all-gather of parameters, matmul-only ones in bf16)"
             : "(reduce-scatter of gradients + all-gather of parameters, half each)");
  else
    line("dp", p.comm_dp, "(all-reduce of gradients: 2(n-1)/n x gradient bytes)");
  line("fsdp", p.comm_fsdp, "(all-gather forward + all-gather backward + reduce-scatter: 3(n-1)/n)");
  line("tp", p.comm_tp, ffn ? "(2 all-reduces of B*T*d per block)"
                            : "(4 all-reduces of B*T*d per layer, embedding, head, cross-entropy)");
  line("total", p.comm_total());

  printf("\nfit in plan.device_gb = %g GB: %s (this layout's device needs %.2f devices' worth)\n",
         pc.device_gb, double(p.total()) <= budget ? "yes" : "no", double(p.total()) / budget);
  auto smallest = [](int64_t k) { return k ? strf("fsdp = %lld", (long long)k) : std::string("none"); };
  printf("smallest FSDP degree to fit (other degrees as set): %s; counting state and saved "
         "activations only: %s\n", smallest(min_fsdp).c_str(), smallest(min_fsdp_state).c_str());
  if (!ffn)
    printf("\non the CUDA backend: forward alone %s, a full step %s (the state and workspace above "
           "with its activations%s, and the backend's own scratch, %s: %sthe RoPE table, "
           "attention's fp32 buffer and cuBLASLt's workspace); not predicted: the reductions' partial sums (8 KiB), "
           "cuBLAS's own workspace and the CUDA context\n",
           human_bytes(double(p.forward_cuda)).c_str(), human_bytes(double(p.total_cuda)).c_str(),
           c.model.precision == Precision::bf16 ? ", the weights' bf16 copy (tagged params)" : "",
           human_bytes(double(p.cuda_scratch)).c_str(),
           c.model.precision == Precision::bf16 && c.model.attention == "naive"
               ? "naive attention's bf16 scores, P and dS, "
               : "");

  if (!cl.csv_path.empty()) {
    CsvRow row = plan_columns(c);
    row.set("date_utc", utc_now());
    auto u = [](double x) { return strf("%.0f", x); };
    for (auto [name, v] : {std::pair{"devices", double(p.devices)}, {"global_batch", double(p.global_batch)},
                           {"param_count", double(p.param_count)},
                           {"param_count_device", double(p.param_count_device)},
                           {"params_bytes", double(p.params)}, {"grads_bytes", double(p.grads)},
                           {"optimizer_bytes", double(p.optimizer)},
                           {"activations_bytes", double(p.activations)},
                           {"workspace_bytes", double(p.workspace)}, {"total_bytes", double(p.total())},
                           {"attn_probs_bytes", double(p.attn_probs)},
                           {"flash_lse_bytes", double(p.flash_lse)},
                           {"activations_cuda_bytes", double(p.activations_cuda)},
                           {"forward_cuda_bytes", double(p.forward_cuda)},
                           {"total_cuda_bytes", double(p.total_cuda)}, {"comm_dp_bytes", p.comm_dp},
                           {"comm_fsdp_bytes", p.comm_fsdp}, {"comm_tp_bytes", p.comm_tp},
                           {"comm_total_bytes", p.comm_total()}, {"min_fsdp", double(min_fsdp)}})
      row.set(name, u(v));
    row.set("fits", double(p.total()) <= budget ? "1" : "0");
    append_csv(cl.csv_path, row);
  }
  return 0;
}

}  // namespace lmt
