// train mode: the training loop, its progress lines, checkpoints, closing table and CSV row.
#include <chrono>
#include <cmath>
#include <cstdio>

#include "checkpoint.hpp"
#include "comm.hpp"
#include "exit_codes.hpp"
#include "data.hpp"
#include "grad_sync.hpp"
#include "model.hpp"
#include "nvtx.hpp"
#include "modes.hpp"
#include "optimizer.hpp"
#include "preflight.hpp"
#include "report.hpp"
#include "stop.hpp"
#include "watchdog.hpp"
#include "zero1.hpp"

namespace lmt {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// One line on rank 0: every rank's bytes under `tag` (what it holds: `what`) at this point.
template <typename T>
void print_rank_memory(const Runtime& rt, const Backend<T>& be, MemTag tag, const char* what,
                       const char* when, const std::string& note) {
  unsigned long long mine = be.memory().current[size_t(tag)];
  std::vector<unsigned long long> all(size_t(rt.world));
  MPI_CHECK(MPI_Gather(&mine, 1, MPI_UNSIGNED_LONG_LONG, all.data(), 1, MPI_UNSIGNED_LONG_LONG, 0,
                       MPI_COMM_WORLD));
  if (!rt.is_root()) return;
  std::string list;
  for (size_t r = 0; r < all.size(); ++r)
    list += strf("%s%zu: %s", r ? ", " : "", r, human_bytes(double(all[r])).c_str());
  printf("%s per rank %s: %s%s%s\n", what, when, list.c_str(), note.empty() ? "" : " ",
         note.c_str());
  fflush(stdout);
}

// Rank 0's copy of the whole optimizer state (empty on the other ranks): zero1's shards are sent
// to rank 0.
template <typename T>
OptimizerState<T> whole_optimizer_state(const Runtime& rt, AdamW<T>* opt, Zero1<T>* zero) {
  if (!zero) return rt.is_root() ? opt->state() : OptimizerState<T>{};
  const OptimizerState<T> mine = zero->optimizer().state();
  return {gather_to_root(MPI_COMM_WORLD, mine.m, zero->counts),
          gather_to_root(MPI_COMM_WORLD, mine.v, zero->counts), mine.t};
}

// The exposed communication since the last call (the sync's mark pairs, then forgotten).
template <typename T> double take_exposed_ms(Backend<T>& be, GradSync& sync) {
  double ms = 0;
  for (auto [from, to] : sync.exposed) ms += be.elapsed_ms(from, to);
  sync.exposed.clear();
  be.clear_marks();
  return ms;
}

template <typename T> int train(const CommandLine& cl, const Runtime& rt, const std::string& device) {
  const Config& c = cl.config;
  const int64_t B = c.train.batch_size, T_ = c.model.context_length, steps = c.train.steps;
  std::unique_ptr<TokenSource> source;
  // What would fail late fails now, before anything is allocated (preflight.hpp).
  agree(rt, [&] {
    if (!c.train.checkpoint_dir.empty() && rt.is_root()) prepare_checkpoint_dir(c);
    check_host_memory(c, rt, device);
  });
  // Host scalars (the loss) go over MPI; gradients and parameters over the communicator of the
  // backend's memory (NCCL on the GPU).
  std::unique_ptr<Communicator> host = make_mpi_communicator(MPI_COMM_WORLD);
  std::unique_ptr<Backend<T>> backend = make_backend<T>(device, rt);
  agree(rt, [&] { check_device_memory(c, rt, device); });
  const bool zero1 = c.ddp.strategy == "zero1";
  std::unique_ptr<Communicator> comm;  // one rank has nothing to synchronise, unless zero1
  if (rt.world > 1 || zero1) comm = make_communicator(device, rt, *backend, c.ddp.comm_ctas);
  const bool bf16 = c.model.precision == "bf16";
  std::unique_ptr<Model<T>> model_ptr;
  agree(rt, [&] {
    // zero1 under bf16: this rank holds the fp32 masters of its shard only (zero1.hpp).
    const Ranges masters =
        zero1 ? zero1_masters(ParamLayout::build(c.model), rt.world, rt.rank, bf16) : Ranges{};
    model_ptr = std::make_unique<Model<T>>(*backend, c.model, B, T_, masters);
  });
  Model<T>& model = *model_ptr;
  std::unique_ptr<AdamW<T>> opt;  // the whole flat buffer's moments, unless zero1 shards them
  std::unique_ptr<GradSync> sync;
  Zero1<T>* zero = nullptr;       // sync, when it is zero1 (it runs the optimizer too)
  std::vector<RngState> rngs;
  int64_t first_step = 0;
  std::string run_id = new_run_id(), mismatch;  // a resume continues its checkpoint's run
  CsvRow row = config_columns(c);
  for (auto name : {"world_size", "device_used", "parameters", "steps_run", "final_loss",
                    "loss_floor", "ms_per_step", "tokens_per_s", "wall_s", "compute_ms_per_step",
                    "comm_ms_per_step", "exposed_ms_per_step", "optimizer_bytes_rank0"})
    row.add(name, "");
  // Everything that can refuse the run does so here, on every rank, before any work.
  agree(rt, [&] {
    source = make_token_source(c);
    if (zero1) {
      auto z = std::make_unique<Zero1<T>>(*backend, GradBuffer{*comm, model.grads(), dtype_of<T>()},
                                          model.layout, c.ddp.bucket_mb, bf16);
      zero = z.get();
      sync = std::move(z);
    } else {
      opt = std::make_unique<AdamW<T>>(*backend, model.layout.total);
      if (comm)
        sync = make_grad_sync(c.ddp.strategy, GradBuffer{*comm, model.grads(), dtype_of<T>()},
                              model.layout, c.ddp.bucket_mb);
    }
    if (!cl.csv_path.empty() && rt.is_root()) check_csv(cl.csv_path, row.header);
    if (!c.train.resume.empty()) {
      OptimizerState<T> state;
      const Resumed resumed = load_checkpoint(c.train.resume, model, state, rt.world, rngs);
      first_step = resumed.step, run_id = resumed.run_id;
      mismatch = resume_mismatch(c, resumed);
      if (zero) zero->optimizer().set_state(state, zero->begin);
      else opt->set_state(state);
      if (first_step > steps)
        throw UsageError(strf("train.resume = \"%s\" is at step %lld, past train.steps = %lld",
                              c.train.resume.c_str(), (long long)first_step, (long long)steps));
    }
  });
  Rng rng = data_rng(uint64_t(c.run.seed), rt.rank);
  if (c.train.resume.empty()) model.init_params(uint64_t(c.run.seed));
  else rng.set_state(rngs[size_t(rt.rank)]);
  if (comm) {
    // Every rank starts from rank 0's parameters, unless it holds only its own masters (zero1
    // under bf16; rank 0 has not the others'): then every rank drew, or read, the same values.
    if (!model.sharded()) {
      comm->broadcast(model.params(), model.layout.total, dtype_of<T>(), 0);
      backend->weights_written(model.params(), model.layout.total);
    }
    comm->take_comm_ms();  // the steps' communication is counted from here
  }

  const double floor = source->loss_floor().value_or(NAN);
  const double tokens_per_step = double(B * T_ * rt.world);
  if (rt.is_root()) {
    printf("== lmtrain train ==\n%s\n", config_to_toml(c).c_str());
    printf("device %s, %d rank(s), %s parameters, %s tokens per step%s\n", device.c_str(),
           rt.world, human_count(double(model.layout.total)).c_str(),
           human_count(tokens_per_step).c_str(),
           c.run.graphs ? "; forward and backward as CUDA graphs after the first step" : "");
    printf("data: %s\n", source->describe().c_str());
    if (first_step > 0) printf("resumed from %s at step %lld\n", c.train.resume.c_str(),
                               (long long)first_step);
    if (!mismatch.empty()) fprintf(stderr, "lmtrain: warning: %s\n", mismatch.c_str());
    fflush(stdout);
  }
  if (zero1) {
    const double whole = double(model.layout.total * sizeof(T));
    print_rank_memory(rt, *backend, MemTag::optimizer, "optimizer state", "after init",
                      strf("(AdamW moments of %zu..%zu elements of %s on rank 0; unsharded: %s)",
                           zero->begin, zero->end, human_count(double(model.layout.total)).c_str(),
                           human_bytes(2 * whole).c_str()));
    print_rank_memory(rt, *backend, MemTag::params, "parameters", "after init",
                      bf16 ? strf("(fp32 masters of its shard and of the parameters read in fp32, "
                                  "and the bf16 copy of every weight; all in fp32: %s)",
                                  human_bytes(whole).c_str())
                           : std::string("(every fp32 parameter: the matmuls read them)"));
  }

  // Every rank's data Rng and the exact masters and moments, written by rank 0. Collective.
  std::string last_checkpoint = c.train.resume;  // what a stopped run can be resumed from
  auto write_checkpoint = [&](int64_t done) {
    RngState mine = rng.state();
    std::vector<RngState> all(static_cast<size_t>(rt.world));
    MPI_Request req;
    MPI_CHECK(MPI_Igather(mine.data(), 4, MPI_UINT64_T, all.data(), 4, MPI_UINT64_T, 0,
                          MPI_COMM_WORLD, &req));
    wait_for_peers(&req, "the checkpoint's gather of Rng states");
    const std::vector<T> params = zero ? zero->gather_master(model.params(), MPI_COMM_WORLD)
                                  : rt.is_root() ? model.params_host() : std::vector<T>{};
    OptimizerState<T> state = whole_optimizer_state(rt, opt.get(), zero);
    last_checkpoint = checkpoint_path(c.train.checkpoint_dir, done);
    if (rt.is_root()) {
      save_checkpoint(last_checkpoint, c, model.layout, params, state, done, all, run_id);
      printf("checkpoint %s\n", last_checkpoint.c_str());
      fflush(stdout);
    }
  };

  std::vector<int32_t> inputs(static_cast<size_t>(B * T_)), targets(static_cast<size_t>(B * T_));
  double interval_loss = 0, last_loss = NAN;
  int64_t interval_steps = 0;
  double exposed_ms = 0, comm_ms = 0;  // summed over the run
  auto t0 = Clock::now(), t_interval = t0;
  for (int64_t step = first_step; step < steps; ++step) {
    source->sample(rng, B, T_, inputs.data(), targets.data());
    const double loss = model.forward(inputs.data(), targets.data(), rt.world);
    interval_loss += loss;
    model.backward(sync.get());
    if (c.run.graphs && !model.replays()) model.record(rt.world);  // after this process's first
    if (comm) comm->synchronize();  // clipping reads the gradients on the host: fail, never hang
    double gnorm, lr = learning_rate(c.optim, step, steps);
    StepVerdict verdict;
    {
      NvtxRange range("optimizer");
      const bool first = zero1 && step == first_step;
      if (first)
        print_rank_memory(rt, *backend, MemTag::optimizer, "optimizer state", "before step 1", "");
      const GradClip clip =
          zero ? zero->clip_grad_norm(c.optim.grad_clip)
               : clip_grad_norm(*backend, model.grads(), model.layout.total, c.optim.grad_clip);
      gnorm = clip.norm;
      // Every rank stops here, before the update, if any rank's loss or the norm is not finite.
      verdict = agree_on_step(rt, loss, gnorm);
      if (verdict.diverged()) {
        const bool by_loss = verdict.bad_loss >= 0;
        if (rt.rank == (by_loss ? verdict.bad_loss : 0)) {
          fprintf(stderr, "lmtrain: diverged at step %lld (rank %d): %s; stopped before its "
                  "update, no checkpoint of this state; last checkpoint: %s\n",
                  (long long)step + 1, rt.rank,
                  by_loss ? strf("loss = %g, grad norm = %g", loss, gnorm).c_str()
                          : strf("grad norm = %g (after the gradient sync; every rank's loss "
                                 "finite)", gnorm).c_str(),
                  last_checkpoint.empty() ? "none" : last_checkpoint.c_str());
          fflush(stderr);
        }
        return kExitDiverged;
      }
      if (zero) zero->step(model.params(), lr, c.optim, clip.scale);
      else opt->step(model.params(), model.grads(), lr, c.optim, clip.scale);
      if (first)
        print_rank_memory(rt, *backend, MemTag::optimizer, "optimizer state", "after step 1", "");
    }
    ++interval_steps;

    const bool last = step + 1 == steps;
    if ((step + 1) % c.train.log_every == 0 || last) {
      host->all_reduce(&interval_loss, 1, DType::f64);
      last_loss = interval_loss / double(interval_steps * rt.world);
      double ms = 1e3 * seconds_since(t_interval) / double(interval_steps);
      std::string timing;
      if (sync) {
        double exposed = take_exposed_ms(*backend, *sync), busy = comm->take_comm_ms();
        exposed_ms += exposed, comm_ms += busy;
        const double n = double(interval_steps);
        timing = strf(" | compute %.1f, comm %.1f, exposed %.1f ms/step (%s)", ms - exposed / n,
                      busy / n, exposed / n, c.ddp.strategy.c_str());
      }
      if (rt.is_root()) {
        printf("step %*lld/%lld | loss %.4f | lr %.2e | grad norm %.3f | %.1f ms/step | "
               "%s tok/s%s | ETA %s\n", int(std::to_string(steps).size()), (long long)step + 1,
               (long long)steps, last_loss, lr, gnorm, ms,
               human_count(tokens_per_step / ms * 1e3).c_str(), timing.c_str(),
               duration(double(steps - step - 1) * ms / 1e3).c_str());
        fflush(stdout);
      }
      interval_loss = 0, interval_steps = 0, t_interval = Clock::now();
    }
    const int64_t every = c.train.checkpoint_every;
    const bool due = last || (every > 0 && (step + 1) % every == 0);
    if (!c.train.checkpoint_dir.empty() && (due || verdict.signaled >= 0)) write_checkpoint(step + 1);
    if (verdict.signaled >= 0) {  // this step is done and saved: stop
      if (rt.is_root()) {
        fprintf(stderr, "lmtrain: %s (rank %d): stopped after step %lld of %lld; %s\n",
                signal_name(verdict.signal).c_str(), verdict.signaled, (long long)step + 1,
                (long long)steps,
                c.train.checkpoint_dir.empty()
                    ? "no train.checkpoint_dir, nothing saved"
                    : strf("resume with --set train.resume=%s", last_checkpoint.c_str()).c_str());
        fflush(stderr);
      }
      return kExitPreempted;
    }
  }

  const double wall = seconds_since(t0), run_steps = double(steps - first_step);
  const double ms_per_step = run_steps > 0 ? 1e3 * wall / run_steps : NAN;
  if (rt.is_root()) {
    printf("\n== done ==\n");
    printf("  steps         %lld (from %lld)\n", (long long)steps, (long long)first_step);
    printf("  final loss    %.4f (mean of the last interval, all ranks)\n", last_loss);
    if (!std::isnan(floor)) printf("  loss floor    %.4f (entropy rate of the source)\n", floor);
    printf("  time          %.1f s, %.1f ms/step\n", wall, ms_per_step);
    printf("  throughput    %s tokens/s\n", human_count(tokens_per_step * 1e3 / ms_per_step).c_str());
    if (sync && run_steps > 0) {
      printf("  compute       %.2f ms/step (step time less exposed communication)\n",
             ms_per_step - exposed_ms / run_steps);
      printf("  comm          %.2f ms/step (%s: %s, rank 0)\n", comm_ms / run_steps,
             c.ddp.strategy.c_str(), device == "cuda" ? "the NCCL stream's time in collectives"
                                                      : "host time in MPI calls");
      printf("  exposed comm  %.2f ms/step (%s: %s waited for gradient sync%s, rank 0)\n",
             exposed_ms / run_steps, c.ddp.strategy.c_str(),
             device == "cuda" ? "the compute stream" : "the host",
             zero1 ? " and the parameter all-gather" : "");
    }
    if (!cl.csv_path.empty()) {
      row.set("world_size", std::to_string(rt.world));
      row.set("device_used", device);
      row.set("parameters", std::to_string(model.layout.total));
      row.set("steps_run", std::to_string(steps - first_step));
      row.set("final_loss", strf("%.6f", last_loss));
      row.set("loss_floor", strf("%.6f", floor));
      row.set("ms_per_step", strf("%.3f", ms_per_step));
      row.set("tokens_per_s", strf("%.1f", tokens_per_step * 1e3 / ms_per_step));
      row.set("wall_s", strf("%.3f", wall));
      // No synchronisation (one rank): all compute, no communication.
      row.set("compute_ms_per_step", strf("%.3f", ms_per_step - exposed_ms / run_steps));
      row.set("comm_ms_per_step", strf("%.3f", comm_ms / run_steps));
      row.set("exposed_ms_per_step", strf("%.3f", exposed_ms / run_steps));
      row.set("optimizer_bytes_rank0",
              std::to_string(backend->memory().current[size_t(MemTag::optimizer)]));
      append_csv(cl.csv_path, row);
      printf("  csv row       appended to %s\n", cl.csv_path.c_str());
    }
  }
  return kExitOk;
}

}  // namespace

int run_train(const CommandLine& cl, const Runtime& rt, const std::string& device) {
  check_graphs(cl.config, rt, device);
  install_stop_handlers();  // from here a stop signal ends the run after a step, checkpointed
  if (cl.config.model.precision == "fp64") return train<double>(cl, rt, device);
  return train<float>(cl, rt, device);
}

}  // namespace lmt
