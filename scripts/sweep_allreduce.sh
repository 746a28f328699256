#!/usr/bin/env bash
# CS336 §2.1: the all-reduce benchmark over message sizes for each number of ranks and backend
# (NCCL on GPU buffers, MPI on host buffers): rows in results/allreduce.csv, one per size (a
# re-run skips the ranks x backend points already there), then results/allreduce.md (bus
# bandwidth and time per size) and a PNG of bus bandwidth against size.
#   scripts/sweep_allreduce.sh               # GPUs: 2, 4, 8 ranks (as many as there are GPUs), nccl and mpi, 1 MiB..1 GiB
#   SWEEP_QUICK=1 scripts/sweep_allreduce.sh # 2 ranks, mpi, 1..4 MiB on the CPU (tests run this)
# Env: NPS, BACKENDS, MIN_MB, MAX_MB, FACTOR, DTYPE, CSV, TIMEOUT (s per point), PYTHON, LMTRAIN,
#      MPIRUN (multi-GPU machines: add -x NCCL_NVLS_ENABLE=0 where NVLink multicast must stay off).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
py=${PYTHON:-/usr/bin/python3}
if [ "${SWEEP_QUICK:-0}" = 1 ]; then
  nps=${NPS:-2} backends=${BACKENDS:-mpi} min=${MIN_MB:-1} max=${MAX_MB:-4} factor=${FACTOR:-2}
  csv=${CSV:-results/allreduce_quick.csv}
else
  gpus=$(nvidia-smi -L 2>/dev/null | wc -l || true)
  nps=${NPS:-$(for n in 2 4 8; do if [ "$n" -le "$gpus" ]; then echo "$n"; fi; done)}
  backends=${BACKENDS:-nccl mpi} min=${MIN_MB:-1} max=${MAX_MB:-1024} factor=${FACTOR:-4}
  csv=${CSV:-results/allreduce.csv}
fi
if [ -z "$nps" ]; then
  echo "sweep_allreduce.sh: fewer than 2 GPUs here; NPS=\"2 4\" chooses rank counts" >&2
  exit 2
fi
points=()
for b in $backends; do points+=("allreduce.backend=$b"); done
for np in $nps; do
  "$py" scripts/sweep.py --csv "$csv" --np "$np" --lmtrain "${LMTRAIN:-build/lmtrain}" \
    --config configs/allreduce.toml --set allreduce.min_mb="$min" --set allreduce.max_mb="$max" \
    --set allreduce.factor="$factor" --set allreduce.dtype="${DTYPE:-fp32}" \
    --timeout "${TIMEOUT:-0}" -- "${points[@]}"
done
write_to "${csv%.csv}.md" "$py" scripts/allreduce_table.py "$csv"
cat "${csv%.csv}.md"
"$py" scripts/plot.py "$csv" --x size_bytes --y busbw_gbs --logx --logy --series world_size,allreduce.backend \
  --scale-x 9.5367431640625e-07 --xlabel "message size (MiB)" --ylabel "bus bandwidth (GB/s)" \
  --title "All-reduce bus bandwidth, {allreduce_dtype}, in place" --out "${csv%.csv}_busbw.png"
