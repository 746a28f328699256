#!/usr/bin/env bash
# Attention side by side in one call on one GPU: lmtrain's attention mode (naive, our flash) and
# tests/reference/torch_reference.py attention (naive, SDPA with the flash and cuDNN backends)
# over the same grid. Rows go to results/attention_lmtrain.csv and results/attention_torch.csv
# (device and date in each); scripts/attention_table.py then writes results/attention.md from
# them alone, and plot.py draws lmtrain's time and peak memory against sequence length (log-log)
# from its CSV.
#   scripts/attention_vs_torch.sh
# The default grid is the study's: head dims 16..128 x T 256..32768 (naive runs out of memory at
# the longest: such points are rows marked OOM, and the sweep goes on).
# Env: SEQ_LENS ("256 1024 4096 8192 16384 32768"), HEAD_DIMS ("16 32 64 128"), MASKS (causal),
#      DTYPES (bf16), BATCH (1), HEADS (16), WARMUP (5), ITERS (20), PYTHON (python3),
#      TORCH_IMPLS (torch_reference's --impls: naive sdpa-flash sdpa-cudnn; naive-compiled and
#      torch-flash, FlashAttention-2 in plain PyTorch, on request; their columns join
#      results/attention.md), IMPLS (lmtrain's: "naive flash"), TORCH (1; 0: lmtrain only, e.g.
#      to re-measure our naive after a change to it: the table keeps the latest row of each).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
seq=${SEQ_LENS:-256 1024 4096 8192 16384 32768} dims=${HEAD_DIMS:-16 32 64 128} masks=${MASKS:-causal}
dtypes=${DTYPES:-bf16} batch=${BATCH:-1} heads=${HEADS:-16} warm=${WARMUP:-5} iters=${ITERS:-20}
impls=${IMPLS:-naive flash}
py=${PYTHON:-python3}
toml_list() {  # "a b" -> [a, b]; quote=1 -> ["a", "b"]
  local out="" x
  for x in $2; do
    [ "$1" = 1 ] && x="\"$x\""
    out="${out:+$out, }$x"
  done
  echo "[$out]"
}
mkdir -p results
build/lmtrain --set run.mode=attention --set attention.batch="$batch" --set attention.heads="$heads" \
  --set "attention.seq_lens=$(toml_list 0 "$seq")" --set "attention.head_dims=$(toml_list 0 "$dims")" \
  --set "attention.masks=$(toml_list 1 "$masks")" --set "attention.dtypes=$(toml_list 1 "$dtypes")" \
  --set "attention.impls=$(toml_list 1 "$impls")" \
  --set attention.warmup="$warm" --set attention.iters="$iters" --csv results/attention_lmtrain.csv
# shellcheck disable=SC2086
[ "${TORCH:-1}" = 0 ] || "$py" tests/reference/torch_reference.py attention --batch "$batch" --heads "$heads" --seq-lens $seq \
  --head-dims $dims --masks $masks --dtypes $dtypes --warmup "$warm" --iters "$iters" \
  ${TORCH_IMPLS:+--impls $TORCH_IMPLS} --csv results/attention_torch.csv
write_to results/attention.md "$py" scripts/attention_table.py results/attention_lmtrain.csv \
  results/attention_torch.csv
cat results/attention.md
# The plots of this batch and head count only (the study's B 1 x H 16 unsuffixed), where the grid
# has more than one length (a model's shape alone, e.g. BATCH=4 HEADS=25 SEQ_LENS=512, is rows of
# the table only).
[ "$(wc -w <<< "$seq")" -gt 1 ] || exit 0
tag=""
[ "$batch,$heads" = "1,16" ] || tag="_b${batch}_h${heads}"
"$py" scripts/plot.py results/attention_lmtrain.csv --x seq_len --y fwd_bwd_ms --logx --logy \
  --series impl,head_dim,mask,dtype --where status=ok --where batch="$batch" --where heads="$heads" \
  --xlabel "sequence length (tokens)" --ylabel "forward + backward, median (ms)" \
  --title "lmtrain's attention: batch {batch} x {heads} heads, {device_name}" \
  --out "results/attention_fwd_bwd$tag.png"
"$py" scripts/plot.py results/attention_lmtrain.csv --x seq_len --y peak_bytes --logx --logy \
  --series impl,head_dim,mask,dtype --where status=ok --where batch="$batch" --where heads="$heads" \
  --scale-y 9.5367431640625e-07 \
  --xlabel "sequence length (tokens)" --ylabel "peak memory held (MiB)" \
  --title "lmtrain's attention, peak memory: batch {batch} x {heads} heads, {device_name}" \
  --out "results/attention_peak$tag.png"
