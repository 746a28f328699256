// The communication watchdog: no rank waits for ever for a peer that is stopped, hung or gone
// without a trace (a dead peer already ends the job through Open MPI; a stopped one did not).
//
// Every host-blocking MPI wait of a run goes through wait_for_peers(), which polls its request.
// A rank that has waited run.comm_timeout_s, or that hears another rank's report while it waits,
// reports to every rank over a communicator of its own ("I am here, waiting"), listens for the
// others' reports for a grace period (the timeout, at most 5 s), and then the lowest reporting
// rank prints one line naming the ranks that did not report (did not arrive) and aborts the job
// with kExitCommTimeout (the others print theirs only if that abort has not ended them 30 s
// on). The NCCL path calls peers_overdue() from its own polling loop. A rank that gets SIGTERM
// while it waits (mpirun ending the job: a rank died) says so, once.
#pragma once
#include <mpi.h>

namespace lmt {

// Collective, once per process (runtime_init calls it): the reports' communicator.
void watchdog_init();
// 0: wait for ever. Every rank sets the same value (run.comm_timeout_s; 600 until it is known).
void set_comm_timeout(double seconds);

// MPI_Wait, bounded as above. `what` names the collective in the timeout's line.
void wait_for_peers(MPI_Request* req, const char* what);

// For a wait that polls something else (a GPU stream): call while waiting, with the seconds
// waited so far; past the timeout, or once another rank has reported, it does not return; with
// SIGTERM pending, it says why the rank may be about to end (as wait_for_peers does).
void peers_overdue(double waited, const char* what);

}  // namespace lmt
