#!/usr/bin/env bash
# The default job as `make run` runs it (configs/train.toml on 2 MPI ranks), its output kept in
# results/make_run.log and its machine noted in results/provenance.csv: the README's sample of
# that output is filled from the log by scripts/report.py (its make_run block). The README shows
# the output on the CPU: run this on a machine without a GPU (configs/train.toml's device "auto"
# takes the CPU where the ranks have no GPU of their own).
#   scripts/make_run.sh && scripts/report.py
# Env: LMTRAIN (build/lmtrain), MPIRUN (mpirun -q --oversubscribe), PYTHON (python3).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
bin=${LMTRAIN:-build/lmtrain} py=${PYTHON:-python3}
read -r -a mpirun <<< "${MPIRUN:-mpirun -q --oversubscribe}"
[ -x "$bin" ] || { echo "make_run.sh: no executable $bin (run make first)" >&2; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
write_to results/make_run.log "${mpirun[@]}" -np 2 "$bin" --config configs/train.toml
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
"$py" scripts/report.py --record results/make_run.log --device "$(nproc) cores of $cpu" \
  --command "scripts/make_run.sh"
echo "make_run.sh: results/make_run.log; scripts/report.py puts it into the README"
