#!/usr/bin/env bash
# Runs every suite and ends with one line "N passed, N failed, N skipped" (test cases, all suites
# summed; GPU tests are skipped where no GPU is visible).
#   unit: build/tests, tests/unit/ (in-process, CPU; a few start build/lmtrain)
#   gpu:  build/tests_gpu, tests/gpu/ (the CUDA backend and FlashAttention against the CPU
#         references; skipped without a GPU)
#   e2e:  build/tests_e2e, tests/e2e/ (whole runs of build/lmtrain, under mpirun too)
#   mpi:  build/tests_mpi under mpirun -np 2 and -np 4 (CPU backend)
#   sweep: tests/sweep/test_sweep.py (scripts/sweep.py, plot.py and the quick sweeps, CPU)
#   slurm: tests/slurm/run.sh (installs munge and Slurm, runs train.sbatch on a private one-node
#          cluster; one test case)
# A suite that dies before its summary counts as one failed test case.
set -u
cd "$(dirname "$0")/.."
MPIRUN=${MPIRUN:-mpirun -q --oversubscribe}
passed=0 failed=0 skipped=0 status=0

run_suite() {
  local name=$1; shift
  echo "== $name: $*"
  local log
  log=$(mktemp)
  "$@" --no-colors=true 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  local line
  line=$(grep -a "test cases:" "$log" | tail -1)
  if [ -z "$line" ]; then
    echo "== $name: no summary (exit code $rc): counted as 1 failed"
    failed=$((failed + 1)); status=1
  else
    local p f s
    p=$(sed -E 's/.*\| *([0-9]+) passed.*/\1/' <<<"$line")
    f=$(sed -E 's/.*\| *([0-9]+) failed.*/\1/' <<<"$line")
    s=$(sed -E 's/.*\| *([0-9]+) skipped.*/\1/' <<<"$line")
    passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then failed=$((failed + 1)); fi
    [ "$rc" -eq 0 ] || status=1
  fi
  rm -f "$log"
}

run_suite unit build/tests
run_suite gpu build/tests_gpu
run_suite e2e build/tests_e2e
run_suite "mpi np=2" $MPIRUN -np 2 build/tests_mpi
run_suite "mpi np=4" $MPIRUN -np 4 build/tests_mpi
run_suite sweep "${PYTHON:-python3}" tests/sweep/test_sweep.py
run_suite slurm tests/slurm/run.sh
echo "$passed passed, $failed failed, $skipped skipped"
exit $status
