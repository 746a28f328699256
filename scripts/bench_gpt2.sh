#!/usr/bin/env bash
# gpt2-small (configs/models/gpt2-small.toml: GPT-2 124M's matmul FLOPs per token on a 50 304-token
# vocabulary, its embeddings tied to the LM head) on one GPU at batch x context 16 x 1024, 8 x 1024
# and 4 x 512, side by side in one call: lmtrain's bench mode without and with run.graphs, and with
# its residual stream in bf16 (model.residual_dtype, graphs), its train mode (graphs; the synthetic
# source, the loss and the gradient norm read back every step), then PyTorch's model with
# scaled_dot_product_attention, eager and torch.compile (tests/reference/torch_reference.py bench).
# Rows go to results/gpt2_lmtrain.csv, results/gpt2_train.csv and results/gpt2_torch.csv (with
# device and date); scripts/gpt2_table.py then writes results/gpt2.md from them alone.
#   scripts/bench_gpt2.sh
# Env: SHAPES ("16x1024 8x1024 4x512"), WARMUP (5), STEPS (20), TRAIN_STEPS (50),
#      PYTHON (python3), TORCH_MODES ("eager compile"; empty: lmtrain only),
#      LMTRAIN (build/lmtrain).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
cfg=configs/models/gpt2-small.toml
warm=${WARMUP:-5} steps=${STEPS:-20} train_steps=${TRAIN_STEPS:-50} py=${PYTHON:-python3}
bin=${LMTRAIN:-build/lmtrain}
mkdir -p results
for shape in ${SHAPES:-16x1024 8x1024 4x512}; do
  batch=${shape%x*} ctx=${shape#*x}
  for run in "0 fp32" "1 fp32" "1 bf16"; do
    set -- $run
    "$bin" --config "$cfg" --set run.mode=bench --set run.graphs="$1" \
      --set model.residual_dtype="$2" \
      --set model.context_length="$ctx" --set train.batch_size="$batch" \
      --set bench.warmup="$warm" --set bench.steps="$steps" --set bench.kernels=0 \
      --csv results/gpt2_lmtrain.csv | grep -E "^== |^step"
  done
  "$bin" --config "$cfg" --set run.mode=train --set run.graphs=1 \
    --set model.context_length="$ctx" --set train.batch_size="$batch" \
    --set train.steps="$train_steps" --set train.log_every="$train_steps" \
    --set train.eval_every=0 --set train.eval_batches=0 --csv results/gpt2_train.csv |
    grep -E "^  time"
  for mode in ${TORCH_MODES-eager compile}; do
    extra=()
    [ "$mode" = compile ] && extra=(--compile)
    "$py" tests/reference/torch_reference.py bench --config "$cfg" --attention sdpa \
      --context-length "$ctx" --batch-size "$batch" --precision bf16 --warmup "$warm" \
      --steps "$steps" --label "gpt2-small-$mode" --csv results/gpt2_torch.csv "${extra[@]}" ||
      echo "torch $mode failed at $shape"
  done
done
write_to results/gpt2.md "$py" scripts/gpt2_table.py results/gpt2_lmtrain.csv \
  results/gpt2_torch.csv results/gpt2_train.csv
cat results/gpt2.md
