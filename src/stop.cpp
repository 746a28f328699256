#include "stop.hpp"

#include "watchdog.hpp"

#include <climits>
#include <csignal>
#include <cmath>
#include <cstring>

namespace lmt {
namespace {

volatile sig_atomic_t g_signal = 0;

void on_signal(int sig) {
  if (g_signal) {  // asked twice: stop now, as without this handler
    std::signal(sig, SIG_DFL);
    std::raise(sig);
    return;
  }
  g_signal = sig;
}

}  // namespace

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // reads, writes and waits carry on; the loop looks at the flag
  for (int sig : {SIGTERM, SIGINT, SIGUSR1}) sigaction(sig, &sa, nullptr);
}

int pending_signal() { return g_signal; }

std::string signal_name(int sig) {
  return sig == SIGTERM ? "SIGTERM" : sig == SIGINT ? "SIGINT" : sig == SIGUSR1 ? "SIGUSR1"
                                                                                : strf("signal %d", sig);
}

StepVerdict agree_on_step(const Runtime& rt, double loss, double grad_norm) {
  auto mine = [&](bool holds) { return holds ? rt.rank : rt.world; };
  const int sig = g_signal;
  int v[4] = {mine(!std::isfinite(loss)), mine(!std::isfinite(grad_norm)), mine(sig != 0),
              sig ? sig : INT_MAX};
  if (rt.world > 1) {
    MPI_Request req;
    MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, v, 4, MPI_INT, MPI_MIN, MPI_COMM_WORLD, &req));
    wait_for_peers(&req, "the step's stop/divergence all-reduce");
  }
  auto rank = [&](int r) { return r < rt.world ? r : -1; };
  return {rank(v[0]), rank(v[1]), rank(v[2]), v[3] == INT_MAX ? 0 : v[3]};
}

}  // namespace lmt
