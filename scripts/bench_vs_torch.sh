#!/usr/bin/env bash
# Ours vs PyTorch, side by side in one call on one GPU: for each model size, lmtrain's bench mode
# and tests/reference/torch_reference.py bench (eager and torch.compile) on the same shape,
# precision, warm-up and step count. Rows go to results/bench_lmtrain.csv and results/bench_torch.csv (with
# device and date); scripts/bench_table.py then writes results/bench.md from them alone.
#   scripts/bench_vs_torch.sh [sizes...]      (default: small medium large xl)
# Env: PRECISION (bf16), CONTEXT (512), BATCH (4), WARMUP (5), STEPS (20), PYTHON (python3),
#      ATTENTION (lmtrain's model.attention: flash; PyTorch's reference model always materialises
#      the scores, as our naive does), TORCH_MODES ("eager compile"; empty: lmtrain only).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(small medium large xl)
attn=${ATTENTION:-flash} prec=${PRECISION:-bf16} ctx=${CONTEXT:-512} batch=${BATCH:-4} warm=${WARMUP:-5} steps=${STEPS:-20}
py=${PYTHON:-python3}
mkdir -p results
for size in "${sizes[@]}"; do
  cfg=configs/models/$size.toml
  [ -f "$cfg" ] || { echo "no config $cfg" >&2; exit 2; }
  build/lmtrain --config "$cfg" --set run.mode=bench --set model.precision="$prec" \
    --set model.attention="$attn" \
    --set model.context_length="$ctx" --set train.batch_size="$batch" \
    --set bench.warmup="$warm" --set bench.steps="$steps" --set bench.kernels=0 \
    --csv results/bench_lmtrain.csv | grep -E "^== |^step"
  for mode in ${TORCH_MODES-eager compile}; do
    extra=()
    [ "$mode" = compile ] && extra=(--compile)
    "$py" tests/reference/torch_reference.py bench --config "$cfg" --context-length "$ctx" \
      --batch-size "$batch" --precision "$prec" --warmup "$warm" --steps "$steps" \
      --label "$size-$mode" --csv results/bench_torch.csv "${extra[@]}" || echo "torch $mode failed for $size (OOM?)"
  done
done
write_to results/bench.md "$py" scripts/bench_table.py results/bench_lmtrain.csv \
  results/bench_torch.csv
cat results/bench.md
