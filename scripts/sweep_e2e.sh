#!/usr/bin/env bash
# CS336 §1.1.3 end-to-end benchmark (and §1.1.5(c), bf16 against fp32): bench mode over model
# sizes x context lengths x precisions x warm-up steps (0 and 5: what warm-up hides), one row per
# point in results/e2e.csv (a re-run skips the points already there), then PNGs drawn from it.
#   scripts/sweep_e2e.sh                 # on a GPU: small..2.7b x 128..1024 x fp32/bf16 x warm-up 0/5
#   SWEEP_QUICK=1 scripts/sweep_e2e.sh   # the tiny model on the CPU, in seconds (tests run this)
#   PLOT_ONLY=1 scripts/sweep_e2e.sh     # no runs: the PNGs from the CSV as it is
# Env: SIZES, CONTEXTS, PRECISIONS, WARMUPS, STEPS (timed steps), CSV, TIMEOUT (s per point),
#      PYTHON (/usr/bin/python3, the Debian one with matplotlib), LMTRAIN (build/lmtrain),
#      RETRY_FAILED (1: run again the points that failed before, e.g. out of memory, and are in
#      the .failed.csv; scripts/sweep.py reads it).
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-/usr/bin/python3}
if [ "${SWEEP_QUICK:-0}" = 1 ]; then
  sizes=${SIZES:-tiny} contexts=${CONTEXTS:-16 32} precs=${PRECISIONS:-fp32 bf16}
  warmups=${WARMUPS:-0 1} steps=${STEPS:-2} device=cpu csv=${CSV:-results/e2e_quick.csv}
else
  sizes=${SIZES:-small medium large xl 2.7b} contexts=${CONTEXTS:-128 256 512 1024}
  precs=${PRECISIONS:-fp32 bf16} warmups=${WARMUPS:-0 5} steps=${STEPS:-10} device=auto
  csv=${CSV:-results/e2e.csv}
fi
points=$(mktemp)
trap 'rm -f "$points"' EXIT
for s in $sizes; do for t in $contexts; do for p in $precs; do for w in $warmups; do
  echo "config=configs/models/$s.toml model.context_length=$t model.precision=$p bench.warmup=$w"
done; done; done; done >"$points"
# PNGs from a CSV, once it has rows (every point may have failed: see its .failed.csv).
plot() {
  if [ -s "$1" ]; then "$py" scripts/plot.py "$@"; else echo "no rows in $1: nothing to plot"; fi
}
if [ "${PLOT_ONLY:-0}" != 1 ]; then
  "$py" scripts/sweep.py --csv "$csv" --lmtrain "${LMTRAIN:-build/lmtrain}" --set run.mode=bench \
    --set run.device="$device" --set bench.steps="$steps" --set bench.kernels=0 \
    --timeout "${TIMEOUT:-0}" --points-file "$points"
fi
declare -A what=([fwd]="Forward pass" [fwd_bwd]="Forward + backward" [step]="Full training step (AdamW included)")
for w in $warmups; do
  for m in fwd fwd_bwd step; do
    plot "$csv" --x model.context_length --y "${m}_ms_mean" --logx --logy \
      --series model.d_model,model.precision --where bench.warmup="$w" \
      --xlabel "context length (tokens)" --ylabel "time, mean of the timed runs (ms)" \
      --title "${what[$m]}: batch {train_batch_size}, $w warm-up runs, {device_name}" \
      --out "${csv%.csv}_${m}_warmup$w.png"
  done
  plot "$csv" --x model.context_length --y step_ms_std --logx --logy \
    --series model.d_model,model.precision --where bench.warmup="$w" \
    --xlabel "context length (tokens)" --ylabel "standard deviation of the step time (ms)" \
    --title "Spread of the full step's time: batch {train_batch_size}, $w warm-up runs, {device_name}" \
    --out "${csv%.csv}_step_std_warmup$w.png"
done
