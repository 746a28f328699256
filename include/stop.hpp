// Stopping a training run early, on every rank at the same step: a signal (SIGTERM, SIGINT,
// SIGUSR1: what Slurm and a user send to end a job) or a non-finite loss or gradient norm.
//
// The signal handler only records the signal (async-signal-safe); the training loop asks, once a
// step, whether any rank has one (agree_on_step), so every rank finishes the same step and stops
// after it. A second signal while the first is pending ends the process as the default would.
#pragma once
#include <string>

#include "runtime.hpp"

namespace lmt {

void install_stop_handlers();
int pending_signal();  // the first signal caught, 0 if none
std::string signal_name(int sig);  // "SIGTERM"

// What the ranks agree on once a step, after its gradients and before its update. A rank field
// is the lowest rank where it holds, or -1 where it holds on none.
struct StepVerdict {
  int bad_loss = -1;   // this rank's loss is not finite
  int bad_norm = -1;   // the gradient norm is not finite
  int signaled = -1;   // a stop signal was caught
  int signal = 0;      // the lowest such signal's number
  bool diverged() const { return bad_loss >= 0 || bad_norm >= 0; }
};
// Collective (one small all-reduce over the host's MPI; nothing with one rank).
StepVerdict agree_on_step(const Runtime& rt, double loss, double grad_norm);

}  // namespace lmt
