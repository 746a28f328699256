// The exit codes of lmtrain (of every rank, so of mpirun): what a script can tell from them.
#pragma once

namespace lmt {

enum ExitCode : int {
  kExitOk = 0,
  kExitFailure = 1,      // a failed system call or a rank that died (fatal(): the job aborted)
  kExitUsage = 2,        // bad input: config, command line, data, checkpoint; nothing was run
  kExitDiverged = 3,     // a non-finite loss or gradient norm: stopped before that step's update
  kExitPreempted = 4,    // SIGTERM, SIGINT or SIGUSR1: the step in flight finished, checkpointed
  kExitCommTimeout = 5,  // a rank did not arrive at a collective within run.comm_timeout_s
};

}  // namespace lmt
