// train mode: the training loop, its progress lines, checkpoints, closing table and CSV row.
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <future>

#include "checkpoint.hpp"
#include "comm.hpp"
#include "exit_codes.hpp"
#include "data.hpp"
#include "model.hpp"
#include "nvtx.hpp"
#include "modes.hpp"
#include "preflight.hpp"
#include "report.hpp"
#include "stop.hpp"
#include "training.hpp"
#include "validation.hpp"
#include "watchdog.hpp"

namespace lmt {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// The exposed communication since the last call (the sync's mark pairs, then forgotten).
template <typename T> double take_exposed_ms(Backend<T>& be, GradSync& sync) {
  double ms = 0;
  for (auto [from, to] : sync.exposed) ms += be.elapsed_ms(from, to);
  sync.exposed.clear();
  be.clear_marks();
  return ms;
}

// A training run in its pieces: the set-up (the constructor: everything that can refuse the run
// does so there, on every rank, before any work), a step, the progress line, a checkpoint, and
// the closing report.
template <typename T> class Trainer {
 public:
  Trainer(const CommandLine& cl, const Runtime& rt, const std::string& device);
  int run();  // the steps from first_step_ on; the exit code

 private:
  // An optimizer step: forward and backward of each of train.grad_accum micro-batches (their
  // gradients summed; synchronised with the last one's backward), clipping and (unless a rank
  // diverged or the job is stopping with a collective failure) the update; the verdict that
  // every rank agreed on.
  StepVerdict step(int64_t step, double lr, double& gnorm);
  void log(int64_t step, double lr, double gnorm);  // the progress line (collective)
  void evaluate(int64_t done);  // validation after `done` steps (collective; held_out_ set)
  // Keeps the time since `since` out of the steps' clocks; returns it in seconds.
  double leave_out(Clock::time_point since);
  void checkpoint(int64_t done);                   // every rank's state, written by rank 0
  // Waits for the checkpoint being written, if any (the wait kept out of the steps' time), and
  // ends the run with its failure; with `poll`, only if it has finished (a failure ends the run
  // at the next step).
  void finish_writing(bool poll = false);
  void report();                                   // closing table and CSV row, rank 0
  // One line on rank 0: every rank's bytes under `tag` (what it holds: `what`) at this point.
  void print_rank_memory(MemTag tag, const char* what, const char* when, const std::string& note);

  const CommandLine& cl_;
  const Config& c_;
  const Runtime& rt_;
  const std::string device_;
  const int64_t B_, T_, accum_, steps_;
  std::unique_ptr<Communicator> host_;  // host scalars (the loss) over MPI
  std::unique_ptr<Backend<T>> backend_;
  Training<T> training_;  // the model, its optimizer and the backend memory's communicator
  Model<T>* model_ = nullptr;
  Optimizer<T>* optimizer_ = nullptr;
  GradSync* sync_ = nullptr;  // null: nothing to synchronise
  std::unique_ptr<TokenSource> source_;
  // Validation's windows: data.val_path's, or the synthetic source's own held-out stream; null
  // where there is no validation. val_loss_: the last one's, after val_step_ steps, fresh_val_
  // until a progress line has shown it; eval_s_: the time spent validating, not the steps'.
  std::unique_ptr<TokenSource> val_file_;
  const TokenSource* held_out_ = nullptr;
  double val_loss_ = NAN, eval_s_ = 0;
  // The checkpoints written and the time the steps waited for them, kept out of the steps' time
  // as validation's: the copy of the state to the host, and a wait for the previous file where a
  // checkpoint comes before it is written. Rank 0 writes each file (the hash, the write and its
  // fsync) on a thread of its own beside the steps (writing_), from its host copy of the state,
  // kept from one checkpoint to the next and pinned (saved_*: HostPin). Its pages are faulted in
  // on the writer's thread as the steps begin (hold_saved(false)); the first checkpoint pins them.
  // Under ZeRO-1 each other rank faults in its part's host buffer the same way, on a thread of its
  // own (writing_ there too: Optimizer::size_host_copies).
  int64_t checkpoints_ = 0;
  double checkpoint_s_ = 0;
  std::vector<T> saved_params_;
  OptimizerState<T> saved_state_;
  std::array<HostPin<T>, 3> saved_pins_;  // params, m, v
  void hold_saved(bool pin);
  std::future<void> writing_;
  int64_t val_step_ = -1;
  bool fresh_val_ = false;
  Rng rng_;
  int64_t first_step_ = 0;
  std::string run_id_ = new_run_id(), mismatch_;  // a resume continues its checkpoint's run
  std::string last_checkpoint_;                   // what a stopped run can be resumed from
  CsvRow row_;
  // The micro-batch the next forward reads. It is drawn while the GPU runs the one before it
  // (drawn_), and a checkpoint then saves drawn_from_, the data Rng's state before it. Pageable
  // memory: its upload has copied it by the time forward returns, so the draw may overwrite it
  // (pinned, the copy would run later, on the stream).
  std::vector<int32_t> inputs_, targets_;
  bool drawn_ = false;
  RngState drawn_from_{};
  double tokens_per_step_ = 0;
  // The progress interval's and the run's sums.
  double interval_loss_ = 0, last_loss_ = NAN;
  int64_t interval_steps_ = 0;
  double exposed_ms_ = 0, comm_ms_ = 0;
  // t_first_: when this run's first step finished on the device (it also records the CUDA graphs
  // and makes every first-call choice), the start of the steady steps' time.
  Clock::time_point t0_, t_interval_, t_first_;
};

template <typename T>
Trainer<T>::Trainer(const CommandLine& cl, const Runtime& rt, const std::string& device)
    : cl_(cl), c_(cl.config), rt_(rt), device_(device), B_(c_.train.batch_size),
      T_(c_.model.context_length), accum_(c_.train.grad_accum), steps_(c_.train.steps),
      rng_(data_rng(uint64_t(c_.run.seed), rt.rank)), last_checkpoint_(c_.train.resume),
      row_(run_columns(c_)) {
  for (auto name : {"date_utc", "world_size", "device_used", "device_name", "parameters",
                    "steps_run", "final_loss", "loss_floor", "ms_per_step",
                    "ms_per_step_after_first", "tokens_per_s", "wall_s", "compute_ms_per_step",
                    "comm_ms_per_step", "exposed_ms_per_step", "optimizer_bytes_rank0"})
    row_.add(name, "");
  row_.add("val_loss", "");  // empty: no validation
  // What would fail late fails now, before anything is allocated (preflight.hpp); the checkpoint
  // directory is made ready after every other check, so that a refused run creates or removes
  // nothing there.
  agree(rt_, [&] {
    source_ = make_token_source(c_);
    if (!c_.data.val_path.empty())
      val_file_ = open_token_file(c_.data.val_path, c_.model.vocab_size, T_, "data.val_path");
    if (!cl_.csv_path.empty() && rt_.is_root()) check_csv(cl_.csv_path, row_.header);
    if (!c_.train.resume.empty()) check_resume_header(c_, rt_.world);
    check_host_memory(c_, rt_, device_);
  });
  host_ = make_mpi_communicator(MPI_COMM_WORLD);
  backend_ = make_backend<T>(device_, rt_);
  agree(rt_, [&] { check_device_memory(c_, rt_, device_); });
  inputs_.resize(static_cast<size_t>(B_ * T_)), targets_.resize(static_cast<size_t>(B_ * T_));
  training_ = set_up_training(c_, rt_, *backend_);  // as bench's
  model_ = training_.model.get(), optimizer_ = training_.optimizer.get();
  sync_ = optimizer_->sync();
  std::vector<RngState> rngs;
  agree(rt_, [&] {
    if (!c_.train.resume.empty()) {
      const Resumed resumed = load_checkpoint(c_.train.resume, *model_, *optimizer_,
                                              moments_stored(c_.optim.state_dtype),
                                              c_.optim.master_weights, rt_.world, rngs);
      first_step_ = resumed.step, run_id_ = resumed.run_id;
      mismatch_ = resume_mismatch(c_, resumed);
      check_resume_batch(c_, resumed);
      if (first_step_ > steps_)
        throw UsageError(strf("train.resume = \"%s\" is at step %lld, past train.steps = %lld",
                              c_.train.resume.c_str(), (long long)first_step_, (long long)steps_));
    }
    if (!c_.train.checkpoint_dir.empty() && rt_.is_root()) prepare_checkpoint_dir(c_);
  });
  if (c_.train.eval_batches > 0)
    held_out_ = c_.data.source == "synthetic" ? source_.get() : val_file_.get();
  if (c_.train.resume.empty()) model_->init_params(uint64_t(c_.run.seed));
  else rng_.set_state(rngs[size_t(rt_.rank)]);
  if (Communicator* comm = training_.comm.get()) {
    // Every rank starts from rank 0's parameters, unless it holds only some masters (zero1 under
    // bf16, or no master weights; rank 0 has not the others'): then every rank drew, or read,
    // the same values.
    if (!model_->sharded()) {
      comm->broadcast(model_->params(), model_->layout.total, dtype_of<T>(), 0);
      backend_->weights_written(model_->params(), model_->layout.total);
    }
    comm->take_comm_ms();  // the steps' communication is counted from here
  }
  tokens_per_step_ = double(B_ * T_ * accum_ * rt_.world);
  if (rt_.is_root()) {
    printf("== lmtrain train ==\n%s\n", config_to_toml(c_).c_str());
    printf("device %s, %d rank(s), %s parameters, %s tokens per step%s%s\n", device_.c_str(),
           rt_.world, human_count(double(model_->layout.total)).c_str(),
           human_count(tokens_per_step_).c_str(),
           accum_ > 1 ? strf(" (%lld micro-batches of %lld x %lld a rank)", (long long)accum_,
                             (long long)B_, (long long)T_).c_str() : "",
           c_.run.graphs ? "; forward and backward as CUDA graphs after the first step" : "");
    printf("data: %s\n", source_->describe().c_str());
    if (held_out_)
      printf("validation: %lld held-out batches of %lld windows (%s tokens) of %s, %s\n",
             (long long)c_.train.eval_batches, (long long)B_,
             human_count(double(c_.train.eval_batches * B_ * T_)).c_str(),
             val_file_ ? val_file_->describe().c_str() : "its own stream",
             c_.train.eval_every == 0 ? "after the last step"
             : strf("every %lld steps and after the last", (long long)c_.train.eval_every).c_str());
    if (first_step_ > 0) printf("resumed from %s at step %lld\n", c_.train.resume.c_str(),
                                (long long)first_step_);
    if (!mismatch_.empty()) fprintf(stderr, "lmtrain: warning: %s\n", mismatch_.c_str());
    fflush(stdout);
  }
  if (c_.ddp.strategy == Strategy::zero1) {
    const double whole = double(model_->layout.total * sizeof(T));
    const double moments = 2.0 * double(model_->layout.total *
                                        state_elem_bytes<T>(moments_stored(c_.optim.state_dtype)));
    const ParamGroup shard = optimizer_->shard();
    print_rank_memory(MemTag::optimizer, "optimizer state", "after init",
                      strf("(AdamW moments of %zu..%zu elements of %s on rank 0; unsharded: %s)",
                           shard.begin, shard.end,
                           human_count(double(model_->layout.total)).c_str(),
                           human_bytes(moments).c_str()));
    print_rank_memory(MemTag::params, "parameters", "after init",
                      c_.model.precision != Precision::bf16
                          ? std::string("(every fp32 parameter: the matmuls read them)")
                          : strf("(fp32 masters of %sthe parameters read in fp32, and the bf16 "
                                 "copy of every weight; all in fp32: %s)",
                                 c_.optim.master_weights ? "its shard and of " : "",
                                 human_bytes(whole).c_str()));
  }
}

template <typename T>
void Trainer<T>::print_rank_memory(MemTag tag, const char* what, const char* when,
                                   const std::string& note) {
  unsigned long long mine = backend_->memory().current[size_t(tag)];
  std::vector<unsigned long long> all(size_t(rt_.world));
  MPI_CHECK(MPI_Gather(&mine, 1, MPI_UNSIGNED_LONG_LONG, all.data(), 1, MPI_UNSIGNED_LONG_LONG, 0,
                       MPI_COMM_WORLD));
  if (!rt_.is_root()) return;
  std::string list;
  for (size_t r = 0; r < all.size(); ++r)
    list += strf("%s%zu: %s", r ? ", " : "", r, human_bytes(double(all[r])).c_str());
  printf("%s per rank %s: %s%s%s\n", what, when, list.c_str(), note.empty() ? "" : " ",
         note.c_str());
  fflush(stdout);
}

template <typename T> StepVerdict Trainer<T>::step(int64_t step, double lr, double& gnorm) {
  Model<T>& model = *model_;
  // Each micro-batch's loss gradient is divided by world x grad_accum: the summed gradients are
  // those of the global batch's mean loss. Only the last backward synchronises them (as
  // PyTorch's no_sync), so the overlapping strategies overlap it.
  const double divisor = double(rt_.world * accum_);
  // Each micro-batch's forward and backward are queued before the host draws the next one
  // (this step's, or the next step's first) and reads this one's loss, the last one's after the
  // gradient norm, which it waits for anyway: the next step's batch is ready before the update
  // ends. Between the micro-batches of one step the GPU waits while the host reads the loss,
  // which the next forward overwrites.
  auto draw = [&] {
    drawn_from_ = rng_.state();
    source_->sample(rng_, B_, T_, inputs_.data(), targets_.data());
    drawn_ = true;
  };
  double loss = 0;
  for (int64_t micro = 0; micro < accum_; ++micro) {
    if (!drawn_) draw();
    model.forward(inputs_.data(), targets_.data(), divisor);
    drawn_ = false;
    model.backward(micro + 1 == accum_ ? sync_ : nullptr,
                   micro == 0 ? GradWrite::set : GradWrite::add);
    if (micro + 1 < accum_ || step + 1 < steps_) draw();
    if (micro + 1 < accum_) loss += model.loss() / double(accum_);
  }
  if (c_.run.graphs && !model.replays()) model.record(divisor);  // after this process's first
  // Clipping reads the gradients on the host: fail, never hang.
  if (training_.comm) training_.comm->synchronize();
  NvtxRange range("optimizer");
  const bool first = c_.ddp.strategy == Strategy::zero1 && step == first_step_;
  if (first) print_rank_memory(MemTag::optimizer, "optimizer state", "before step 1", "");
  const GradClip clip = optimizer_->clip(c_.optim.grad_clip);
  gnorm = clip.norm;
  loss += model.loss() / double(accum_);
  interval_loss_ += loss;
  // Every rank stops here, before the update, if any rank's loss or the norm is not finite.
  const StepVerdict verdict = agree_on_step(rt_, loss, gnorm);
  if (verdict.diverged()) {
    const bool by_loss = verdict.bad_loss >= 0;
    if (rt_.rank == (by_loss ? verdict.bad_loss : 0)) {
      fprintf(stderr, "lmtrain: diverged at step %lld (rank %d): %s; stopped before its "
              "update, no checkpoint of this state; last checkpoint: %s\n",
              (long long)step + 1, rt_.rank,
              by_loss ? strf("loss = %g, grad norm = %g", loss, gnorm).c_str()
                      : strf("grad norm = %g (after the gradient sync; every rank's loss "
                             "finite)", gnorm).c_str(),
              last_checkpoint_.empty() ? "none" : last_checkpoint_.c_str());
      fflush(stderr);
    }
    return verdict;
  }
  optimizer_->step(model.params(), lr, c_.optim, clip.scale);
  if (first) print_rank_memory(MemTag::optimizer, "optimizer state", "after step 1", "");
  ++interval_steps_;
  return verdict;
}

template <typename T> void Trainer<T>::log(int64_t step, double lr, double gnorm) {
  host_->all_reduce(&interval_loss_, 1, DType::f64);
  last_loss_ = interval_loss_ / double(interval_steps_ * rt_.world);
  double ms = 1e3 * seconds_since(t_interval_) / double(interval_steps_);
  const std::string val = fresh_val_ ? strf(" | val %.4f", val_loss_) : "";
  fresh_val_ = false;
  std::string timing;
  if (sync_) {
    double exposed = take_exposed_ms(*backend_, *sync_), busy = training_.comm->take_comm_ms();
    exposed_ms_ += exposed, comm_ms_ += busy;
    const double n = double(interval_steps_);
    timing = strf(" | compute %.1f, comm %.1f, exposed %.1f ms/step (%s)", ms - exposed / n,
                  busy / n, exposed / n, name_of(c_.ddp.strategy));
  }
  if (rt_.is_root()) {
    // ms/step with two decimals below 100 (a GPU's 30.02 ms, where one decimal would step by
    // 0.3 %), one from there.
    printf("step %*lld/%lld | loss %.4f%s | lr %.2e | grad norm %.3f | %.*f ms/step | "
           "%s tok/s%s | ETA %s\n", int(std::to_string(steps_).size()), (long long)step + 1,
           (long long)steps_, last_loss_, val.c_str(), lr, gnorm, ms < 100 ? 2 : 1, ms,
           human_count(tokens_per_step_ / ms * 1e3).c_str(), timing.c_str(),
           duration(double(steps_ - step - 1) * ms / 1e3).c_str());
    fflush(stdout);
  }
  interval_loss_ = 0, interval_steps_ = 0, t_interval_ = Clock::now();
}

// The steps' clocks (the progress line's and the run's) leave the evaluation's time out; the
// closing table shows it apart.
template <typename T> void Trainer<T>::evaluate(int64_t done) {
  const int steps_done = backend_->mark();  // the steps' work finishes first, on its clock
  backend_->elapsed_ms(steps_done, steps_done);
  const Clock::time_point t = Clock::now();
  {
    NvtxRange range("validation");
    val_loss_ = validation_loss(*model_, *held_out_, c_.train.eval_batches, *host_);
  }
  val_step_ = done, fresh_val_ = true;
  eval_s_ += leave_out(t);
}

template <typename T> double Trainer<T>::leave_out(Clock::time_point since) {
  const Clock::duration took = Clock::now() - since;
  t0_ += took, t_interval_ += took, t_first_ += took;
  return std::chrono::duration<double>(took).count();
}

// Every rank's data Rng and the exact masters and moments, copied to the host (collective), then
// written by rank 0 beside the next steps. The copy's time is kept out of the steps' clocks.
template <typename T> void Trainer<T>::checkpoint(int64_t done) {
  finish_writing();  // one file at a time, and each state's host copy only while it is written
  const Clock::time_point t = Clock::now();
  RngState mine = drawn_ ? drawn_from_ : rng_.state();  // before the batch not yet trained on
  std::vector<RngState> all(static_cast<size_t>(rt_.world));
  MPI_Request req;
  MPI_CHECK(MPI_Igather(mine.data(), 4, MPI_UINT64_T, all.data(), 4, MPI_UINT64_T, 0,
                        MPI_COMM_WORLD, &req));
  wait_for_peers(&req, "the checkpoint's gather of Rng states");
  if (rt_.is_root()) hold_saved(true);
  optimizer_->gather_params(*model_, MPI_COMM_WORLD, saved_params_);
  optimizer_->gather_state(MPI_COMM_WORLD, saved_state_);
  last_checkpoint_ = checkpoint_path(c_.train.checkpoint_dir, done);
  const double copied = leave_out(t);
  ++checkpoints_, checkpoint_s_ += copied;
  if (rt_.is_root())
    writing_ = std::async(std::launch::async, [this, path = last_checkpoint_, done,
                                               all = std::move(all), copied] {
      const Clock::time_point w = Clock::now();
      save_checkpoint(path, c_, model_->layout, saved_params_, saved_state_, done, all, run_id_);
      const double wrote = seconds_since(w);
      std::string removed;
      for (const std::string& name : remove_old_checkpoints(c_.train.checkpoint_dir, run_id_,
                                                            c_.train.keep_checkpoints))
        removed += (removed.empty() ? "; removed " : ", ") + name;
      printf("checkpoint %s (copied to the host in %.2f s, written in %.1f s beside the steps%s)\n",
             path.c_str(), copied, wrote, removed.c_str());
      fflush(stdout);
    });
}

template <typename T> void Trainer<T>::hold_saved(bool pin) {
  const size_t n = model_->layout.total;
  const size_t moments = n * state_elem_bytes<T>(moments_stored(c_.optim.state_dtype));
  if (!pin) {
    HostPin<T>::size(saved_params_, n);
    HostPin<T>::size(saved_state_.m, moments);
    HostPin<T>::size(saved_state_.v, moments);
    return;
  }
  saved_pins_[0].hold(*backend_, saved_params_, n);
  saved_pins_[1].hold(*backend_, saved_state_.m, moments);
  saved_pins_[2].hold(*backend_, saved_state_.v, moments);
}

template <typename T> void Trainer<T>::finish_writing(bool poll) {
  using namespace std::chrono_literals;
  if (!writing_.valid() || (poll && writing_.wait_for(0s) != std::future_status::ready)) return;
  const Clock::time_point t = Clock::now();
  try {
    writing_.get();
  } catch (const std::exception& e) {
    LMT_FATAL(e.what());
  }
  checkpoint_s_ += leave_out(t);
}

template <typename T> int Trainer<T>::run() {
  t0_ = t_interval_ = Clock::now();
  if (!c_.train.checkpoint_dir.empty() && first_step_ < steps_)
    writing_ = std::async(std::launch::async, [this] {
      if (rt_.is_root()) hold_saved(false);
      else optimizer_->size_host_copies(rt_.rank);
    });
  for (int64_t step = first_step_; step < steps_; ++step) {
    finish_writing(true);
    double gnorm;
    const double lr = learning_rate(c_.optim, step, steps_);
    const StepVerdict verdict = this->step(step, lr, gnorm);
    if (step == first_step_) {  // its update done, not merely queued: it is not the next step's
      backend_->synchronize();
      if (training_.comm) training_.comm->synchronize();
      t_first_ = Clock::now();
    }
    if (verdict.diverged()) return finish_writing(), kExitDiverged;
    const bool last = step + 1 == steps_;
    const int64_t eval_every = c_.train.eval_every;
    const bool eval = held_out_ && (last || (eval_every > 0 && (step + 1) % eval_every == 0));
    if (eval) evaluate(step + 1);
    if ((step + 1) % c_.train.log_every == 0 || last || eval) log(step, lr, gnorm);
    const int64_t every = c_.train.checkpoint_every;
    const bool due = last || (every > 0 && (step + 1) % every == 0);
    if (!c_.train.checkpoint_dir.empty() && (due || verdict.signaled >= 0)) checkpoint(step + 1);
    if (verdict.signaled >= 0) {  // this step is done and saved: stop
      finish_writing();
      if (rt_.is_root()) {
        fprintf(stderr, "lmtrain: %s (rank %d): stopped after step %lld of %lld; %s\n",
                signal_name(verdict.signal).c_str(), verdict.signaled, (long long)step + 1,
                (long long)steps_,
                c_.train.checkpoint_dir.empty()
                    ? "no train.checkpoint_dir, nothing saved"
                    : strf("resume with --set train.resume=%s", last_checkpoint_.c_str()).c_str());
        fflush(stderr);
      }
      return kExitPreempted;
    }
  }
  if (held_out_ && val_step_ != steps_) evaluate(steps_);  // no step ran: as loaded
  finish_writing();
  report();
  return kExitOk;
}

template <typename T> void Trainer<T>::report() {
  const double wall = seconds_since(t0_), run_steps = double(steps_ - first_step_);
  // Per step: undefined (NaN) where no step ran (train.steps at the resumed step, or 0).
  const double per = run_steps > 0 ? 1.0 / run_steps : NAN;
  const double ms_per_step = 1e3 * wall * per;
  const double after_first = run_steps > 1 ? 1e3 * seconds_since(t_first_) / (run_steps - 1) : NAN;
  if (!rt_.is_root()) return;
  const double floor = source_->loss_floor().value_or(NAN);
  printf("\n== done ==\n");
  printf("  steps         %lld (from %lld)\n", (long long)steps_, (long long)first_step_);
  printf("  batch         %s tokens per step (%d rank(s) x %lld micro-batch(es) x %lld x %lld)\n",
         human_count(tokens_per_step_).c_str(), rt_.world, (long long)accum_, (long long)B_,
         (long long)T_);
  if (run_steps > 0) printf("  final loss    %.4f (mean of the last interval, all ranks)\n", last_loss_);
  if (!std::isnan(floor)) printf("  loss floor    %.4f (entropy rate of the source)\n", floor);
  if (val_step_ >= 0)
    printf("  val loss      %.4f (after step %lld: %lld held-out windows, all ranks; %.1f s, not "
           "in the time below)\n", val_loss_, (long long)val_step_,
           (long long)(c_.train.eval_batches * B_), eval_s_);
  if (checkpoints_ > 0)
    printf("  checkpoints   %lld written, %.1f s (not in the time below)\n",
           (long long)checkpoints_, checkpoint_s_);
  if (run_steps == 0) {
    printf("  time          %.1f s: no step ran\n", wall);
  } else {
    printf("  time          %.1f s, %.1f ms/step%s\n", wall, ms_per_step,
           run_steps > 1 ? strf(" (%.1f after the first)", after_first).c_str() : "");
    printf("  throughput    %s tokens/s\n",
           human_count(tokens_per_step_ * 1e3 / ms_per_step).c_str());
  }
  if (sync_ && run_steps > 0) {
    printf("  compute       %.2f ms/step (step time less exposed communication)\n",
           ms_per_step - exposed_ms_ * per);
    printf("  comm          %.2f ms/step (%s: %s, rank 0)\n", comm_ms_ * per,
           name_of(c_.ddp.strategy), device_ == "cuda" ? "the NCCL stream's time in collectives"
                                                      : "host time in MPI calls");
    printf("  exposed comm  %.2f ms/step (%s: %s waited for gradient sync%s, rank 0)\n",
           exposed_ms_ * per, name_of(c_.ddp.strategy),
           device_ == "cuda" ? "the compute stream" : "the host",
           c_.ddp.strategy == Strategy::zero1 ? " and the parameter all-gather" : "");
  }
  if (cl_.csv_path.empty()) return;
  // A number, or an empty cell where it is undefined (NaN: no step ran, one step has no time
  // after the first, a token file no loss floor), as val_loss without validation.
  auto cell = [](const char* fmt, double v) { return std::isnan(v) ? std::string() : strf(fmt, v); };
  row_.set("date_utc", utc_now());
  row_.set("world_size", std::to_string(rt_.world));
  row_.set("device_used", device_);
  row_.set("device_name", backend_->device_name());
  row_.set("parameters", std::to_string(model_->layout.total));
  row_.set("steps_run", std::to_string(steps_ - first_step_));
  row_.set("final_loss", cell("%.6f", last_loss_));
  row_.set("loss_floor", cell("%.6f", floor));
  row_.set("ms_per_step", cell("%.3f", ms_per_step));
  row_.set("ms_per_step_after_first", cell("%.3f", after_first));
  row_.set("tokens_per_s", cell("%.1f", tokens_per_step_ * 1e3 / ms_per_step));
  row_.set("wall_s", strf("%.3f", wall));
  // No synchronisation (one rank): all compute, no communication.
  row_.set("compute_ms_per_step", cell("%.3f", ms_per_step - exposed_ms_ * per));
  row_.set("comm_ms_per_step", cell("%.3f", comm_ms_ * per));
  row_.set("exposed_ms_per_step", cell("%.3f", exposed_ms_ * per));
  row_.set("optimizer_bytes_rank0",
           std::to_string(backend_->memory().current[size_t(MemTag::optimizer)]));
  if (val_step_ >= 0) row_.set("val_loss", strf("%.17g", val_loss_));  // exact
  append_csv(cl_.csv_path, row_);
  printf("  csv row       appended to %s\n", cl_.csv_path.c_str());
}

template <typename T>
int train(const CommandLine& cl, const Runtime& rt, const std::string& device) {
  Trainer<T> trainer(cl, rt, device);
  return trainer.run();
}

}  // namespace

int run_train(const CommandLine& cl, const Runtime& rt, const std::string& device) {
  check_graphs(cl.config, rt, device);
  install_stop_handlers();  // from here a stop signal ends the run after a step, checkpointed
  if (cl.config.model.precision == Precision::fp64) return train<double>(cl, rt, device);
  return train<float>(cl, rt, device);
}

}  // namespace lmt
