#include "watchdog.hpp"

#include <algorithm>
#include <csignal>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "exit_codes.hpp"
#include "runtime.hpp"
#include "stop.hpp"

namespace lmt {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kReportTag = 7;

MPI_Comm g_reports = MPI_COMM_NULL;
double g_timeout_s = 600;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Takes every report that has arrived into `from` (by rank); true if there was any.
bool take_reports(std::vector<char>& from) {
  bool any = false;
  for (;;) {
    int flag = 0;
    MPI_Status st;
    MPI_Iprobe(MPI_ANY_SOURCE, kReportTag, g_reports, &flag, &st);
    if (!flag) return any;
    int rank = -1;
    MPI_Recv(&rank, 1, MPI_INT, st.MPI_SOURCE, kReportTag, g_reports, MPI_STATUS_IGNORE);
    from[size_t(st.MPI_SOURCE)] = 1;
    any = true;
  }
}

std::string list(const std::vector<char>& ranks, char want) {
  std::string out;
  for (size_t r = 0; r < ranks.size(); ++r)
    if (ranks[r] == want) out += (out.empty() ? "" : ", ") + std::to_string(r);
  return out;
}

// Reports, gathers the others' reports for the grace period, names the missing and aborts.
[[noreturn]] void report_and_abort(double waited, const char* what, std::vector<char> here) {
  int rank = 0, world = 1;
  MPI_Comm_rank(g_reports, &rank);
  MPI_Comm_size(g_reports, &world);
  here[size_t(rank)] = 1;
  for (int r = 0; r < world; ++r) {
    if (r == rank) continue;
    MPI_Request req;  // small: sent eagerly, even to a stopped rank; never waited on
    MPI_Isend(&rank, 1, MPI_INT, r, kReportTag, g_reports, &req);
    MPI_Request_free(&req);
  }
  const double grace = std::min(g_timeout_s, 5.0);
  const auto t0 = Clock::now();
  // The lowest reporting rank speaks after the grace period and aborts the job; the others speak
  // only if that abort has not reached them kAbortSlackS later (that rank itself stuck), a slack
  // that a loaded machine's MPI_Abort, taking seconds to end the ranks, stays well inside.
  constexpr double kAbortSlackS = 30;
  for (;;) {
    take_reports(here);
    const bool lowest = std::find(here.begin(), here.end(), 1) - here.begin() == rank;
    const double t = seconds_since(t0);
    if ((lowest && t > grace) || t > grace + kAbortSlackS) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const std::string missing = list(here, 0);
  fprintf(stderr, "lmtrain: communication timeout: rank(s) %s did not arrive within "
          "run.comm_timeout_s = %g s (rank %d waited %.1f s in %s; rank(s) %s were waiting)\n",
          missing.empty() ? "none (all waiting)" : missing.c_str(), g_timeout_s, rank, waited, what,
          list(here, 1).c_str());
  fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, kExitCommTimeout);
  std::exit(kExitCommTimeout);
}

// mpirun ends a job whose rank died by SIGTERM to the others, then SIGKILL: under mpirun -q
// nothing else says why. A rank stuck in a collective with SIGTERM pending says it, once.
void explain_sigterm(double waited, const char* what) {
  static bool said = false;
  if (said || pending_signal() != SIGTERM || waited < 0.25) return;
  said = true;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  fprintf(stderr, "lmtrain: rank %d: SIGTERM while waiting %.1f s for its peers in %s: if the job "
          "ends now, the launcher is ending it, on request or because a rank died (mpirun "
          "without -q names it)\n", rank, waited, what);
  fflush(stderr);
}

}  // namespace

void watchdog_init() {
  if (g_reports == MPI_COMM_NULL) MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &g_reports));
}

void set_comm_timeout(double seconds) { g_timeout_s = seconds; }

void peers_overdue(double waited, const char* what) {
  if (g_reports == MPI_COMM_NULL) return;
  int world = 1;
  MPI_Comm_size(g_reports, &world);
  std::vector<char> here(size_t(world), 0);
  const bool heard = take_reports(here);
  if (heard || (g_timeout_s > 0 && waited > g_timeout_s)) report_and_abort(waited, what, here);
  explain_sigterm(waited, what);
}

void wait_for_peers(MPI_Request* req, const char* what) {
  if (g_reports == MPI_COMM_NULL) {
    MPI_CHECK(MPI_Wait(req, MPI_STATUS_IGNORE));
    return;
  }
  const auto t0 = Clock::now();
  auto last_look = t0;
  for (;;) {
    int done = 0;
    MPI_CHECK(MPI_Test(req, &done, MPI_STATUS_IGNORE));
    if (done) return;
    const auto now = Clock::now();
    const double waited = std::chrono::duration<double>(now - t0).count();
    if (now - last_look > std::chrono::milliseconds(10)) {  // reports, now and then
      last_look = now;
      peers_overdue(waited, what);
    }
    // A long wait (a peer writing a checkpoint, or stuck) need not spin a core.
    if (waited > 1) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

}  // namespace lmt
