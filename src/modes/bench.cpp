// bench mode: times forward, forward+backward (of one micro-batch) and the full training step
// (train.grad_accum micro-batches, then AdamW) of one model size, after `warmup` untimed
// repetitions, with the backend's timers (CUDA events on the GPU); prints mean/std/median/min/
// max, the step's phases, tokens/s, MFU and memory by tag. The micro-batches of a step reuse one
// batch of tokens (the timing does not depend on the values).
// run.graphs = 1: forward and backward are recorded once each as a CUDA graph (after one pass as
// usual, which makes the first-call choices and scratch) and replayed, the optimizer launched as
// usual; what the GPU's kernel-by-kernel launching costs is the difference.
//
// FLOPs counted (matmuls only, attention over the full T x T it materialises):
//   forward = 2 B T (L (4 d^2 + 3 d d_ff) + d V) + 4 L B T^2 d,   forward+backward = 3 x forward.
#include <array>
#include <cmath>
#include <cstdio>
#include <map>
#include <utility>

#include "backend.hpp"
#include "data.hpp"
#include "gpu.hpp"
#include "kernel_profile.hpp"
#include "model.hpp"
#include "nvtx.hpp"
#include "modes.hpp"
#include "report.hpp"
#include "timing.hpp"
#include "trace.hpp"
#include "training.hpp"

namespace lmt {
namespace {

double forward_flops(const Config::Model& m, int64_t B, int64_t T) {
  const double d = double(m.d_model), f = double(m.d_ff), L = double(m.num_layers);
  return 2.0 * double(B * T) * (L * (4 * d * d + 3 * d * f) + d * double(m.vocab_size)) +
         4.0 * L * double(B) * double(T) * double(T) * d;
}

// The CSV row of a bench run: every config field and the build, then the metrics (filled at the
// end).
CsvRow bench_columns(const Config& c) {
  CsvRow row = run_columns(c);
  for (auto name : {"date_utc", "device_used", "device_name"}) row.add(name, "");
  for (auto m : {"fwd", "fwd_bwd", "step"})
    for (auto stat : {"mean", "std", "median", "min", "max"}) row.add(strf("%s_ms_%s", m, stat), "");
  for (auto name : {"tokens_per_s", "tflops", "mfu", "mem_total_bytes", "mem_forward_bytes",
                    "world_size", "comm_ms", "exposed_ms", "compute_ms", "optimizer_bytes",
                    "optimizer_ms_median"})
    row.add(name, "");
  return row;
}

// The allocator's bytes by tag, as the host saw them when it issued a phase boundary.
using HeldBytes = std::array<size_t, size_t(MemTag::count)>;

// A span in ms from the first timed step's start.
struct Span {
  std::string what;
  double begin_ms, end_ms;
};

// This rank's timed steps as a trace (process `rank`): the phases on track 0, the allocated
// memory by tag as a counter sampled at every phase boundary (`held` has phases + 1 samples per
// step, warm-up steps first), the collectives on track 1 and the waits for them on track 2. The
// phases: forward and backward of each micro-batch, then the optimizer.
ChromeTrace rank_trace(int rank, const std::vector<double>& starts,
                       const std::vector<std::vector<double>>& phases,
                       const std::vector<HeldBytes>& held, const std::vector<Span>& comm,
                       const std::vector<Span>& waits) {
  ChromeTrace trace;
  auto name = [&](size_t p) {
    return p + 1 == phases.size() ? "optimizer" : p % 2 ? "backward" : "forward";
  };
  trace.name_process(rank, strf("rank %d", rank));
  trace.name_track(0, "step", rank);
  trace.name_track(1, "communication", rank);
  trace.name_track(2, "waiting for communication", rank);
  for (auto& s : comm) trace.span(s.what, s.begin_ms * 1e3, (s.end_ms - s.begin_ms) * 1e3, 1, rank);
  for (auto& s : waits) trace.span(s.what, s.begin_ms * 1e3, (s.end_ms - s.begin_ms) * 1e3, 2, rank);
  const size_t per_step = phases.size() + 1, first = held.size() - starts.size() * per_step;
  for (size_t i = 0; i < starts.size(); ++i) {
    double t = starts[i] * 1e3;
    for (size_t p = 0; p < per_step; ++p) {
      std::map<std::string, double> mib;
      for (size_t tag = 0; tag < size_t(MemTag::count); ++tag)
        mib[mem_tag_name(MemTag(tag))] = double(held[first + i * per_step + p][tag]) / double(1 << 20);
      trace.counter("allocated MiB", t, mib, rank);
      if (p == phases.size()) break;
      trace.span(name(p), t, phases[p][i] * 1e3, 0, rank);
      t += phases[p][i] * 1e3;
    }
  }
  return trace;
}

// Every rank's trace into one file, written by rank 0 (collective where world > 1).
void write_trace(const std::string& path, const Runtime& rt, const ChromeTrace& mine) {
  if (rt.world == 1) return mine.write(path);
  const std::string lines = mine.lines();
  std::vector<unsigned long long> sizes(size_t(rt.world));
  const unsigned long long size = lines.size();
  MPI_CHECK(MPI_Allgather(&size, 1, MPI_UNSIGNED_LONG_LONG, sizes.data(), 1,
                          MPI_UNSIGNED_LONG_LONG, MPI_COMM_WORLD));
  const Counts counts(sizes.begin(), sizes.end());
  std::string all(rt.is_root() ? displacement(counts, rt.world) : 0, '\0');
  gather_to_root(MPI_COMM_WORLD, lines.data(), all.data(), counts, 1);
  if (!rt.is_root()) return;
  ChromeTrace merged;
  merged.add_lines(all);
  merged.write(path);
}

template <typename T>
int bench(const CommandLine& cl, const Runtime& rt, std::unique_ptr<Backend<T>> backend) {
  const Config& c = cl.config;
  const int64_t B = c.train.batch_size, T_ = c.model.context_length, accum = c.train.grad_accum;
  Backend<T>& be = *backend;
  std::unique_ptr<TokenSource> source;
  agree(rt, [&] {
    if (!cl.csv_path.empty() && rt.is_root()) check_csv(cl.csv_path, bench_columns(c).header);
    if (!cl.trace_path.empty() && rt.is_root()) check_output_dir("--trace", cl.trace_path);
    source = make_token_source(c);
  });
  // The model and its optimizer as train sets them up: on several ranks (or under zero1) the
  // step synchronises gradients with ddp.strategy.
  Training<T> training = set_up_training(c, rt, be);
  Model<T>& model = *training.model;
  Communicator* comm = training.comm.get();
  GradSync* sync = training.optimizer->sync();
  auto optimizer_step = [&] { training.optimizer->step(model.params(), c.optim.lr, c.optim); };
  model.init_params(uint64_t(c.run.seed));
  Rng rng = data_rng(uint64_t(c.run.seed), rt.rank);
  std::vector<int32_t> in(static_cast<size_t>(B * T_)), tg(static_cast<size_t>(B * T_));
  source->sample(rng, B, T_, in.data(), tg.data());
  const int64_t W = c.bench.warmup, S = c.bench.steps;
  const double divisor = double(rt.world * accum);  // as train's (Trainer::step)
  if (c.run.graphs) {  // one rank (check_graphs); a backward of each GradWrite the step runs
    model.forward(in.data(), tg.data(), divisor);
    model.backward();
    if (accum > 1) model.backward(nullptr, GradWrite::add);
    model.record(divisor);
  }

  auto fwd = time_reps<T>(be, W, S, [&](std::vector<int>&) {
    model.forward(in.data(), tg.data(), divisor);
  });
  auto fwd_bwd = time_reps<T>(be, W, S, [&](std::vector<int>&) {
    model.forward(in.data(), tg.data(), divisor);
    model.backward();
  });
  std::vector<std::vector<double>> phases;
  std::vector<double> starts;  // of each timed step, ms after the first
  std::vector<std::vector<std::pair<int, int>>> exposed;  // each step's waits for communication
  std::vector<HeldBytes> held;  // at each phase boundary of each step, for the trace
  int64_t reps = 0;
  const bool tracing = !cl.trace_path.empty();
  int origin = -1;  // tracing: a mark at the first timed step's start
  if (comm) comm->take_comm_ms();
  auto step = time_reps<T>(be, W, S, [&](std::vector<int>& marks) {
    if (tracing && reps == W) {
      origin = be.mark();
      if (comm) comm->trace_from_here();
    }
    for (int64_t micro = 0; micro < accum; ++micro) {  // the last backward synchronises
      held.push_back(be.memory().current);
      model.forward(in.data(), tg.data(), divisor);
      marks.push_back(be.mark());
      held.push_back(be.memory().current);
      model.backward(micro + 1 == accum ? sync : nullptr,
                     micro == 0 ? GradWrite::set : GradWrite::add);
      marks.push_back(be.mark());
    }
    held.push_back(be.memory().current);
    NvtxRange r("optimizer");
    optimizer_step();
    held.push_back(be.memory().current);
    if (sync) exposed.push_back(std::exchange(sync->exposed, {}));
    if (++reps == W && comm) comm->take_comm_ms();  // count the timed steps only
  }, &phases, &starts, [&] { if (comm) comm->synchronize(); });
  std::vector<double> exposed_ms;
  std::vector<Span> waits, comm_spans;  // tracing
  for (size_t i = size_t(W); i < exposed.size(); ++i) {
    exposed_ms.push_back(0);
    for (auto [from, to] : exposed[i]) {
      exposed_ms.back() += be.elapsed_ms(from, to);
      if (tracing) waits.push_back({"wait", be.elapsed_ms(origin, from), be.elapsed_ms(origin, to)});
    }
  }
  const double comm_ms = comm ? comm->take_comm_ms() / double(S) : 0;
  if (comm && tracing)
    for (auto& s : comm->take_comm_spans()) comm_spans.push_back({s.what, s.begin_ms, s.end_ms});
  const double loss = model.loss();
  const bool finite = std::isfinite(loss);  // else the run diverged: no CSV row, exit 1
  if (tracing)
    write_trace(cl.trace_path, rt, rank_trace(rt.rank, starts, phases, held, comm_spans, waits));

  // Kernel summary per phase, in untimed repetitions (CUPTI adds overhead).
  std::vector<std::pair<const char*, KernelSummary>> kernels;
  const bool want_kernels = c.bench.kernels > 0 && std::string(be.name()) == "cuda";
  if (want_kernels && KernelProfile::available()) {
    KernelProfile prof;
    prof.start();
    model.forward(in.data(), tg.data(), divisor);
    kernels.push_back({"forward", prof.stop()});
    prof.start();
    model.backward();
    kernels.push_back({"backward", prof.stop()});
    prof.start();
    optimizer_step();
    kernels.push_back({"optimizer", prof.stop()});
  }

  Stats sf = summarize(fwd), sfb = summarize(fwd_bwd), ss = summarize(step);
  // What a step computes: every micro-batch.
  const double flops = forward_flops(c.model, B * accum, T_), tokens = double(B * accum * T_);
  const double step_tflops = 3 * flops / (ss.median * 1e-3) / 1e12;
  const double mfu = step_tflops / c.bench.peak_tflops;
  const MemoryStats& mem = be.memory();
  auto tag = [&](MemTag t) { return double(mem.current[size_t(t)]); };
  if (rt.is_root()) {
    printf("== lmtrain bench: %s on %s, %s, batch %lld x context %lld%s, warm-up %lld, %lld "
           "timed%s ==\n", human_count(double(model.layout.total)).c_str(),
           be.device_name().c_str(), name_of(c.model.precision), (long long)B, (long long)T_,
           accum > 1 ? strf(", %lld micro-batches a step", (long long)accum).c_str() : "",
           (long long)W, (long long)S, model.replays() ? ", forward and backward as CUDA graphs" : "");
    printf("%-22s %9s %9s %9s %9s %9s\n", "ms", "mean", "std", "median", "min", "max");
    for (auto [name, st] : {std::pair{"forward", sf}, {"forward+backward", sfb}, {"step (with AdamW)", ss}})
      printf("%-22s %9.3f %9.3f %9.3f %9.3f %9.3f\n", name, st.mean, st.std, st.median, st.min, st.max);
    // Each micro-batch's forward and backward, then the optimizer: summed by kind, step by step.
    std::vector<double> fwd_ms(static_cast<size_t>(S)), bwd_ms(static_cast<size_t>(S));
    for (size_t p = 0; p + 1 < phases.size(); ++p)
      for (size_t i = 0; i < size_t(S); ++i) (p % 2 ? bwd_ms : fwd_ms)[i] += phases[p][i];
    printf("step phases (median ms): forward %.3f, backward %.3f, optimizer %.3f%s\n",
           summarize(fwd_ms).median, summarize(bwd_ms).median, summarize(phases.back()).median,
           accum > 1 ? strf(" (forward and backward: all %lld micro-batches)", (long long)accum).c_str()
                     : "");
    if (sync)
      printf("communication (%s, %d ranks): comm %.3f ms/step (mean; %s), "
             "exposed %.3f ms/step (median: %s waited for it), compute %.3f ms/step\n",
             name_of(c.ddp.strategy), rt.world, comm_ms,
             std::string(be.name()) == "cuda" ? "the NCCL stream's time in collectives"
                                              : "host time in MPI calls",
             summarize(exposed_ms).median,
             std::string(be.name()) == "cuda" ? "the compute stream" : "the host",
             ss.median - summarize(exposed_ms).median);
    printf("step: %s tokens/s, %.1f TFLOP/s of model matmuls, MFU %.1f%% of %.0f TFLOP/s\n",
           human_count(tokens / (ss.median * 1e-3)).c_str(), step_tflops, 100 * mfu,
           c.bench.peak_tflops);
    printf("memory allocated: params %s, grads %s, optimizer %s, activations %s, workspace %s; "
           "total %s (forward alone needs params + activations = %s)\n",
           human_bytes(tag(MemTag::params)).c_str(), human_bytes(tag(MemTag::grads)).c_str(),
           human_bytes(tag(MemTag::optimizer)).c_str(), human_bytes(tag(MemTag::activations)).c_str(),
           human_bytes(tag(MemTag::workspace)).c_str(), human_bytes(double(mem.peak)).c_str(),
           human_bytes(tag(MemTag::params) + tag(MemTag::activations)).c_str());
    printf("loss after the timed steps %.4f (%s)\n", loss,
           finite ? "finite: the steps computed something"
                  : "not finite: the steps diverged, so their times are not written to a CSV");
    if (want_kernels && !KernelProfile::available())
      printf("no kernel summary: another tool (compute-sanitizer, Nsight) holds CUPTI\n");
    for (auto& [phase, summary] : kernels) {
      const std::vector<KernelStat>& list = summary.kernels;
      double total = 0;
      for (auto& k : list) total += k.total_ms;
      printf("\ntop kernels, %s (one pass, %.3f ms of kernels in all)\n", phase, total);
      printf("  %8s %6s %6s  %s\n", "ms", "%", "calls", "kernel");
      for (size_t i = 0; i < list.size() && i < size_t(c.bench.kernels); ++i)
        printf("  %8.3f %5.1f%% %6lld  %s\n", list[i].total_ms, 100 * list[i].total_ms / total,
               (long long)list[i].calls, list[i].name.c_str());
      // Between the kernels: what graphs (run.graphs) and fewer, fused kernels would recover.
      printf("  first kernel's start to last one's end %.3f ms, the GPU idle between kernels "
             "for %.3f ms of it (under CUPTI's tracing)\n",
             summary.span_ms, summary.span_ms - summary.busy_ms);
      // Kernels on two streams at once (the attention backward's dQ beside dK/dV) each count
      // their own time above: say so where the column adds up to more than the busy time.
      if (total > summary.busy_ms + 1e-3)
        printf("  kernels ran side by side: their times add to %.3f ms, the GPU busy for %.3f ms\n",
               total, summary.busy_ms);
      for (const KernelGroup& g : summary.groups)
        printf("  %s:: kernels: their times add to %.3f ms, the GPU busy with them for %.3f ms\n",
               g.name.c_str(), g.total_ms, g.busy_ms);
    }
    if (!cl.csv_path.empty() && finite) {
      CsvRow row = bench_columns(c);
      row.set("date_utc", utc_now());
      row.set("device_used", be.name());
      row.set("device_name", be.device_name());
      for (auto [name, st] : {std::pair{"fwd", sf}, {"fwd_bwd", sfb}, {"step", ss}})
        for (auto [stat, v] : {std::pair{"mean", st.mean}, {"std", st.std}, {"median", st.median},
                               {"min", st.min}, {"max", st.max}})
          row.set(strf("%s_ms_%s", name, stat), strf("%.4f", v));
      row.set("tokens_per_s", strf("%.1f", tokens / (ss.median * 1e-3)));
      row.set("tflops", strf("%.2f", step_tflops));
      row.set("mfu", strf("%.4f", mfu));
      row.set("mem_total_bytes", std::to_string(mem.peak));
      row.set("mem_forward_bytes", strf("%.0f", tag(MemTag::params) + tag(MemTag::activations)));
      // Rank 0's: communication per timed step (mean), the step's wait for it (median), the rest.
      const double exposed_median = sync ? summarize(exposed_ms).median : 0;
      row.set("world_size", std::to_string(rt.world));
      row.set("comm_ms", strf("%.4f", comm_ms));
      row.set("exposed_ms", strf("%.4f", exposed_median));
      row.set("compute_ms", strf("%.4f", ss.median - exposed_median));
      row.set("optimizer_bytes", strf("%.0f", tag(MemTag::optimizer)));
      row.set("optimizer_ms_median", strf("%.4f", summarize(phases.back()).median));
      append_csv(cl.csv_path, row);
    }
  }
  return finite ? 0 : 1;
}

}  // namespace

int run_bench(const CommandLine& cl, const Runtime& rt, const std::string& device) {
  check_graphs(cl.config, rt, device);
  if (cl.config.model.precision == Precision::fp64)
    return bench<double>(cl, rt, make_backend<double>(device, rt));
  return bench<float>(cl, rt, make_backend<float>(device, rt));
}

}  // namespace lmt
