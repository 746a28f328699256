// A rank that dies in the middle of a run takes the whole job down, with a non-zero exit code and
// a message naming the rank, instead of leaving the others waiting in a collective. Rank 1 is
// killed from outside (no test hook in lmtrain): by SIGKILL (a crash), or its launcher exits
// with status 1 after killing it (an early exit). Each run is bounded by `timeout`: a hang fails
// the test with code 124 instead of hanging the suite.
#include <doctest/doctest.h>

#include "gpu.hpp"
#include "../helpers.hpp"

using lmt::test::run;

namespace {

// Never finishes by itself; rank 1's fate is decided by `rank1`, a shell snippet run in place of
// rank 1's lmtrain (it gets the arguments as "$@").
lmt::test::Result run_with_failing_rank(const std::string& rank1, const std::string& args) {
  std::string mpirun = lmt::test::mpirun(2);
  // mpirun's -q would hide its report of which rank failed: the report is what we check.
  for (size_t at; (at = mpirun.find(" -q")) != std::string::npos;) mpirun.erase(at, 3);
  const std::string script = "if [ \"$OMPI_COMM_WORLD_RANK\" = 1 ]; then\n" + rank1 +
                             "\nfi\nexec build/lmtrain \"$@\"";
  return run("timeout 120 " + mpirun + "sh -c '" + script + "' lmtrain" +
             " --set train.batch_size=2 --set model.context_length=16 --set model.num_layers=1"
             " --set model.d_model=16 --set model.num_heads=2 --set model.d_ff=24"
             " --set model.vocab_size=32 --set model.precision=fp32 --set model.attention=naive"
             " --set train.steps=1000000000"
             " --set train.log_every=100 " + args);
}

void check_job_fails(const std::string& args) {
  SUBCASE("rank 1 crashes (SIGKILL) mid-run") {
    auto r = run_with_failing_rank("(sleep 3; kill -9 $$) &", args);
    INFO(r.output);
    CHECK(r.output.find("step ") != std::string::npos);  // training was under way
    CHECK(r.code != 0);
    CHECK(r.code != 124);  // not a hang ended by the timeout
    CHECK(r.output.find("process rank 1") != std::string::npos);
  }
  SUBCASE("rank 1 exits with status 1 mid-run") {
    auto r = run_with_failing_rank("build/lmtrain \"$@\" & sleep 3; kill -9 $!; exit 1", args);
    INFO(r.output);
    CHECK(r.output.find("step ") != std::string::npos);
    CHECK(r.code == 1);  // the first failure's status, not the timeout's 124
    // Open MPI names the process [[job,1],rank] and its exit code.
    CHECK(r.output.find(",1],1]") != std::string::npos);
    CHECK(r.output.find("Exit code:    1") != std::string::npos);
  }
}

}  // namespace

TEST_CASE("failure: a rank dying mid-run on the CPU fails the whole job, naming the rank") {
  check_job_fails("--set run.device=cpu --set ddp.strategy=bucketed --set ddp.bucket_mb=0.001");
}

TEST_CASE("failure: a rank dying mid-run on 2 GPUs (NCCL) fails the whole job, naming the rank" *
          doctest::skip(lmt::gpu_count() < 2)) {
  check_job_fails("--set run.device=cuda --set ddp.strategy=overlap");
}
