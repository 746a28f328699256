#!/usr/bin/env bash
# Slurm, for real: installs Debian's munge and Slurm where missing, starts a private munged,
# slurmctld and slurmd for this one machine (loopback, its own ports, state in a temporary
# directory), submits scripts/slurm/train.sbatch with 2 ranks of the tiny model on the CPU, waits
# (bounded) for the job, and checks its final state, exit code, completion line and CSV row. Then
# preemption: a second job gets the early-warning signal (SIGUSR1) mid-run, checkpoints, requeues
# itself and resumes to completion. The daemons it started are stopped and its directory removed
# whatever happens.
# One test case; prints a doctest-style summary line that tests/run_all.sh counts (arguments,
# such as run_all's --no-colors=true, are ignored).
#   Env: SLURM_TEST_TIMEOUT (seconds the job may take, 240), SLURM_TEST_PORT (first of two tried,
#        16817; the next free pair is taken)
set -uo pipefail
cd "$(dirname "$0")/../.."
repo=$(pwd)
timeout_s=${SLURM_TEST_TIMEOUT:-240}
port=${SLURM_TEST_PORT:-16817}
dir=$(mktemp -d /tmp/lmtrain-slurm-XXXXXX)
chmod 0755 "$dir"  # munged wants its socket reachable by every user
pids=()
job=""

summary() {  # the line run_all.sh reads
  echo "[doctest] test cases: 1 | $1 passed | $2 failed | 0 skipped"
}
fail() {
  echo "slurm test FAILED: $*"
  for f in "$dir"/job.out "$dir"/slurmctld.log "$dir"/slurmd.log "$dir"/munged.log; do
    [ -f "$f" ] && { echo "---- tail of $f"; tail -n 30 "$f"; }
  done
  summary 0 1
  exit 1
}
cleanup() {
  [ -n "$job" ] && scancel "$job" >/dev/null 2>&1
  local i
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do  # slurmd, slurmctld, then munged
    kill "${pids[i]}" 2>/dev/null
  done
  for pid in "${pids[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
  done
  rm -rf "$dir"
}
trap cleanup EXIT
trap 'fail "interrupted"' INT TERM

# wait_for SECONDS DESCRIPTION COMMAND...: polls COMMAND every half second.
wait_for() {
  local limit=$1 what=$2
  shift 2
  local end=$((SECONDS + limit))
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $end ] || fail "$what: not within ${limit}s"
    sleep 0.5
  done
}

# wait_done JOB: polls until the job has left the queue (bounded); sets info and state.
wait_done() {
  local end=$((SECONDS + timeout_s))
  while :; do
    info=$(scontrol show job "$1" 2>&1)
    state=$(sed -nE 's/.*JobState=([A-Z_]+).*/\1/p' <<<"$info" | head -1)
    case "$state" in
      PENDING | CONFIGURING | RUNNING | COMPLETING | REQUEUED | "") ;;
      *) return ;;
    esac
    [ $SECONDS -lt $end ] || fail "job $1 still $state after ${timeout_s}s"
    sleep 1
  done
}

scripts/install_deps.sh munge slurmctld slurmd slurm-client || fail "cannot install munge and Slurm with apt-get"
[ -x build/lmtrain ] || fail "build/lmtrain is missing (make all first)"

# munge: our own key, socket and files, so that a system munged (if any) is left alone.
dd if=/dev/urandom of="$dir/munge.key" bs=1024 count=1 status=none
chmod 0400 "$dir/munge.key"
mkdir -m 0755 "$dir/munge"
munged --foreground --force --key-file="$dir/munge.key" --socket="$dir/munge/socket" \
  --pid-file="$dir/munged.pid" --log-file="$dir/munged.log" --seed-file="$dir/munged.seed" \
  >>"$dir/munged.log" 2>&1 &
pids+=($!)
wait_for 20 "munged's socket" test -S "$dir/munge/socket"

# Two free ports from SLURM_TEST_PORT on (a daemon left by a killed run must not break this one).
busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
for _ in $(seq 50); do
  busy "$port" || busy $((port + 1)) || break
  port=$((port + 2))
done
host=$(hostname -s)
user=$(id -un)
mkdir -p "$dir/state" "$dir/spool"
cat >"$dir/slurm.conf" <<EOF
ClusterName=lmtrain-test
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=$user
SlurmdUser=$user
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/socket
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
MpiDefault=none
ReturnToService=2
JobCompType=jobcomp/none
MailProg=/bin/true
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
MinJobAge=600
NodeName=$host NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=test Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE
EOF
export SLURM_CONF=$dir/slurm.conf
slurmctld -D -c -f "$SLURM_CONF" >>"$dir/slurmctld.log" 2>&1 &
pids+=($!)
wait_for 30 "slurmctld answering" scontrol ping
slurmd -D -f "$SLURM_CONF" >>"$dir/slurmd.log" 2>&1 &
pids+=($!)
node_idle() { sinfo -h -n "$host" -o %T | grep -qx idle; }
wait_for 60 "node $host idle" node_idle

# The job: 2 ranks of the tiny model on the CPU, a few steps, its row into our CSV.
export CSV=$dir/train.csv OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_rmaps_base_oversubscribe=1
job=$(sbatch --parsable --ntasks=2 --time=5 --output="$dir/job.out" --chdir="$repo" \
  scripts/slurm/train.sbatch configs/models/tiny.toml --set run.device=cpu \
  --set model.precision=fp32 --set train.steps=4 --set train.log_every=2) || fail "sbatch refused the job"
job=${job%%;*}
echo "submitted job $job"
wait_done "$job"
code=$(sed -nE 's/.* ExitCode=([0-9]+:[0-9]+).*/\1/p' <<<"$info" | head -1)
echo "job $job: $state, exit code $code"
[ "$state" = COMPLETED ] || fail "job $job ended $state"
[ "$code" = 0:0 ] || fail "job $job exit code $code"
grep -qx "lmtrain exit code 0" "$dir/job.out" || fail "no completion line in the job's output"
[ -f "$CSV" ] || fail "no CSV row at $CSV"
header=$(head -1 "$CSV")
row=$(sed -n 2p "$CSV")
[ "$(wc -l <"$CSV")" -eq 2 ] || fail "expected a header and one row in $CSV"
col() {  # the value of column $1 in the row
  awk -F, -v name="$1" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == name) c = i }
                        NR == 2 && c { print $c }' "$CSV"
}
for name in run.mode model.d_model world_size device_used steps_run final_loss; do
  grep -q "\(^\|,\)$name\(,\|$\)" <<<"$header" || fail "CSV header lacks $name: $header"
done
[ "$(col world_size)" = 2 ] || fail "world_size $(col world_size), expected 2: $row"
[ "$(col device_used)" = cpu ] || fail "device_used $(col device_used), expected cpu: $row"
[ "$(col steps_run)" = 4 ] || fail "steps_run $(col steps_run), expected 4: $row"
echo "slurm: job $job COMPLETED, 2 ranks, CSV row: world_size=2 device_used=cpu steps_run=4 final_loss=$(col final_loss)"

# Preemption: the signal Slurm sends before a time limit (--signal=B:USR1, to the batch shell),
# sent now; lmtrain checkpoints and exits 4, the job requeues itself and resumes from CKPT_DIR.
out2=$dir/job2.out
job=$(CKPT_DIR=$dir/ckpt CSV=$dir/train2.csv sbatch --parsable --ntasks=2 --time=5 --output="$out2" \
  --chdir="$repo" scripts/slurm/train.sbatch configs/models/tiny.toml --set run.device=cpu \
  --set model.precision=fp32 --set model.d_model=16 --set model.num_heads=2 --set model.d_ff=24 \
  --set model.num_layers=1 --set train.batch_size=2 --set model.context_length=16 \
  --set train.steps=20000 --set train.log_every=100) || fail "sbatch refused the preemption job"
job=${job%%;*}
has_loss() { grep -q '| loss' "$out2"; }
wait_for "$timeout_s" "job $job training" has_loss
scancel --batch --signal=USR1 "$job" || fail "scancel --signal=USR1 $job"
# Slurm holds a requeued job for a few minutes (Reason=BeginTime): release it, but not within the
# second of the requeue. slurmd revokes the first run's credential as it ends it, in whole seconds,
# and a credential made in that same second counts as revoked: the relaunch is refused ("Job
# credential revoked") and the job ends (seen once here, the release 30 ms after the requeue).
requeued() { grep -q "restart 1" "$out2"; }
held() { requeued || scontrol show job "$job" | grep -q "JobState=PENDING.*Reason=BeginTime"; }
wait_for "$timeout_s" "job $job requeued" held
sleep 2
requeued || scontrol update JobId="$job" StartTime=now || fail "scontrol update JobId=$job StartTime=now"
wait_for "$timeout_s" "job $job requeued and restarted" requeued
wait_done "$job"
[ "$state" = COMPLETED ] || fail "preempted job $job ended $state"
for line in "lmtrain exit code 4" "requeueing job $job" "resumed from $dir/ckpt/step_" "lmtrain exit code 0"; do
  grep -qF "$line" "$out2" || fail "no '$line' in the preempted job's output"
done
stop=$(sed -nE 's/.*stopped after step ([0-9]+) of.*/\1/p' "$out2" | head -1)
CSV=$dir/train2.csv
[ "$(col steps_run)" = $((20000 - stop)) ] || fail "steps_run $(col steps_run) after a stop at $stop"
echo "slurm: job $job preempted after step $stop (SIGUSR1), requeued, resumed and COMPLETED"
summary 1 0
