#!/usr/bin/env bash
# CS336 §1.1.6: peak memory per model size x context length x precision, measured (bench mode's
# memory columns: mem_total_bytes for a full training step, mem_forward_bytes for forward alone,
# from the tagged allocator) into results/memory.csv, and predicted by plan mode for the same
# points into results/memory_plan.csv, then PNGs of both from the CSVs, and
# results/memory_vs_plan.md: each measured point against plan mode's prediction, with the error.
#   scripts/sweep_memory.sh                 # on a GPU: small..2.7b x 128..1024 x fp32/bf16
#   SWEEP_QUICK=1 scripts/sweep_memory.sh   # the tiny model on the CPU (tests run this)
#   PLOT_ONLY=1 CSV=results/e2e.csv scripts/sweep_memory.sh
#        # no bench runs: plots and the plan comparison from bench rows already measured (the
#        # e2e sweep's rows carry the same memory columns)
# Env: SIZES, CONTEXTS, PRECISIONS, CSV, PLAN_CSV, TIMEOUT, PYTHON, LMTRAIN, RETRY_FAILED (1:
#      points that failed before run again; scripts/sweep.py reads it).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
py=${PYTHON:-/usr/bin/python3}
if [ "${SWEEP_QUICK:-0}" = 1 ]; then
  sizes=${SIZES:-tiny} contexts=${CONTEXTS:-16 32} precs=${PRECISIONS:-fp32 bf16} device=cpu
  csv=${CSV:-results/memory_quick.csv} plan_csv=${PLAN_CSV:-results/memory_plan_quick.csv}
else
  sizes=${SIZES:-small medium large xl 2.7b} contexts=${CONTEXTS:-128 256 512 1024}
  precs=${PRECISIONS:-fp32 bf16} device=auto
  csv=${CSV:-results/memory.csv} plan_csv=${PLAN_CSV:-results/memory_plan.csv}
fi
points=$(mktemp)
trap 'rm -f "$points"' EXIT
for s in $sizes; do for t in $contexts; do for p in $precs; do
  echo "config=configs/models/$s.toml model.context_length=$t model.precision=$p"
done; done; done >"$points"
bin=${LMTRAIN:-build/lmtrain}
# PNGs from a CSV, once it has rows (every point may have failed: see its .failed.csv).
plot() {
  if [ -s "$1" ]; then "$py" scripts/plot.py "$@"; else echo "no rows in $1: nothing to plot"; fi
}
# One step, no warm-up: nothing is allocated after the first.
if [ "${PLOT_ONLY:-0}" != 1 ]; then
  "$py" scripts/sweep.py --csv "$csv" --lmtrain "$bin" --set run.mode=bench --set run.device="$device" \
    --set bench.warmup=0 --set bench.steps=1 --set bench.kernels=0 --timeout "${TIMEOUT:-0}" \
    --points-file "$points"
fi
"$py" scripts/sweep.py --csv "$plan_csv" --lmtrain "$bin" --set run.mode=plan --points-file "$points"
declare -A what=([mem_total_bytes]="a full training step" [mem_forward_bytes]="the forward pass alone")
for col in mem_total_bytes mem_forward_bytes; do
  plot "$csv" --x model.context_length --y "$col" --scale-y 9.313225746154785e-10 --logx --logy \
    --series model.d_model,model.precision --xlabel "context length (tokens)" \
    --ylabel "memory held, measured (GiB)" \
    --title "Memory lmtrain's allocator holds for ${what[$col]}: batch {train_batch_size}, {device_name}" \
    --out "${csv%.csv}_${col%_bytes}.png"
done
if [ -s "$csv" ]; then
  LMTRAIN="$bin" write_to "${csv%.csv}_vs_plan.md" "$py" scripts/memory_vs_plan.py "$csv"
fi
plot "$plan_csv" --x model.context_length --y total_bytes --scale-y 9.313225746154785e-10 --logx \
  --logy --series model.d_model,model.precision --xlabel "context length (tokens)" \
  --ylabel "memory for a full step, predicted (GiB)" \
  --title "Plan mode's prediction of a full training step's memory: batch {train_batch_size}" \
  --out "${plan_csv%.csv}_total.png"
