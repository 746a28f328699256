#!/usr/bin/env bash
# One model's full training step (bench mode) at a fixed number of sequences per optimizer step,
# cut into micro-batches in several ways (train.batch_size x train.grad_accum), with each AdamW
# state dtype (optim.state_dtype) and, on request, without fp32 master weights
# (optim.master_weights) and, on request, with the residual stream in bf16
# (model.residual_dtype), side by side in one call on one GPU: which micro-batch is
# fastest, what accumulation spreads AdamW over, and the MFU at a realistic batch. Rows go to
# results/batch_<model>.csv; scripts/batch_table.py writes results/batch_<model>.md from them.
#   scripts/bench_batch.sh            # xl, bf16, 16 x 512 tokens a step
# Env: MODEL (xl), SPLITS ("4x1 4x4 8x2 16x1": batch x grad_accum; 4x1 is the one-micro-batch
#      step the others are measured beside), STATES ("fp32 bf16"), MASTERS ("true"; "true false"
#      adds the runs without master weights), RESIDUALS ("fp32"; "fp32 bf16" adds the runs with
#      a bf16 residual stream), GRAPHS (1: forward and backward as CUDA graphs, as
#      a run would take them; 0: launched one by one), WARMUP (3), STEPS (10), LMTRAIN
#      (build/lmtrain).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
model=${MODEL:-xl} bin=${LMTRAIN:-build/lmtrain}
csv=results/batch_$model.csv
mkdir -p results
failed=0
for residual in ${RESIDUALS:-fp32}; do
  for masters in ${MASTERS:-true}; do
    for state in ${STATES:-fp32 bf16}; do
      for split in ${SPLITS:-4x1 4x4 8x2 16x1}; do
        "$bin" --config "configs/models/$model.toml" --set run.mode=bench --set model.precision=bf16 \
          --set run.graphs="${GRAPHS:-1}" --set train.batch_size="${split%x*}" --set train.grad_accum="${split#*x}" \
          --set optim.state_dtype="$state" --set optim.master_weights="$masters" \
          --set model.residual_dtype="$residual" \
          --set bench.warmup="${WARMUP:-3}" --set bench.steps="${STEPS:-10}" --set bench.kernels=0 \
          --csv "$csv" | grep -E "^== |^step|^memory" ||
          { echo "failed: $model $split $state $masters $residual"; failed=$((failed + 1)); }
      done
    done
  done
done
write_to "results/batch_$model.md" python3 scripts/batch_table.py "$csv"
cat "results/batch_$model.md"
if [ "$failed" -gt 0 ]; then
  echo "bench_batch.sh: $failed runs failed (above); the table's rows for them are earlier calls'" >&2
  exit 1
fi
