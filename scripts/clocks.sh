#!/usr/bin/env bash
# The clock the GPU's SMs ran at while bench mode timed one model's full step, or while attention
# mode timed one point's forward, backward and both (`attention`: FlashAttention, bf16, causal).
# nvidia-smi samples the SM clock, power draw, utilisation and the active clock-event reasons
# every INTERVAL_MS while lmtrain runs (results/clocks_<model>.csv, the run's output in
# results/clocks_<model>.log); scripts/clocks_table.py summarises the busy samples
# (results/clocks_<model>.md) and plots the run (results/clocks_<model>.png). A GPU at its power
# limit lowers its SM clock under a long run of matmuls (the software power cap): kernels timed
# then run slower than in one pass from idle, as bench's kernel summary times them after the
# timed steps.
#   scripts/clocks.sh [model | attention]        (default: gpt2-small)
# Env: LMTRAIN (build/lmtrain), GRAPHS (1), STEPS (30: timed steps), INTERVAL_MS (20),
#      GPU (0: nvidia-smi's index of the GPU lmtrain runs on); attention: ATT ("1 16 16384 64":
#      batch, heads, T, head dim), ITERS (600: timed runs of each phase).
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-gpt2-small} bin=${LMTRAIN:-build/lmtrain}
cfg=configs/models/$model.toml
if [ "$model" = attention ]; then
  [[ "${ATT:-1 16 16384 64}" =~ ^\ *[1-9][0-9]*(\ +[1-9][0-9]*){3}\ *$ ]] ||
    { echo "clocks.sh: ATT=\"$ATT\": expected four positive integers (batch, heads, T, head dim)" >&2; exit 2; }
  read -r b h t d <<< "${ATT:-1 16 16384 64}"
  run=(--set run.mode=attention --set attention.batch="$b" --set attention.heads="$h"
       --set "attention.seq_lens=[$t]" --set "attention.head_dims=[$d]"
       --set 'attention.impls=["flash"]' --set 'attention.dtypes=["bf16"]'
       --set 'attention.masks=["causal"]' --set attention.iters="${ITERS:-600}")
  on='s/^== lmtrain attention: .* on \(.*\); median.*/\1/p' vars='ATT|ITERS|INTERVAL_MS'
else
  [ -f "$cfg" ] || { echo "clocks.sh: no config $cfg" >&2; exit 2; }
  run=(--config "$cfg" --set run.mode=bench --set run.graphs="${GRAPHS:-1}"
       --set bench.steps="${STEPS:-30}" --set bench.kernels=0)
  on='s/^== lmtrain bench: [^ ]* on \(.*\), [a-z0-9]*, batch.*/\1/p' vars='GRAPHS|STEPS|INTERVAL_MS'
fi
command -v nvidia-smi > /dev/null || { echo "clocks.sh: nvidia-smi not found" >&2; exit 2; }
mkdir -p results
out=results/clocks_$model
# The four files are made in a temporary folder and moved into results/ only once the table is
# written: a failed run leaves the earlier ones as they were.
tmp=$(mktemp -d "results/.clocks_$model.XXXXXX")
new=$tmp/clocks_$model  # the names clocks_table.py reads the model and the plot's link from
query=timestamp,name,clocks.sm,clocks.max.sm,power.draw,power.limit,utilization.gpu
query+=,clocks_event_reasons.active  # clocks_table.py's FIELDS, in this order
nvidia-smi -i "${GPU:-0}" --format=csv,nounits -lms "${INTERVAL_MS:-20}" --query-gpu="$query" \
  > "$new.csv" &
smi=$!
trap 'kill $smi 2> /dev/null || true; rm -rf "$tmp"' EXIT
sleep 1  # idle samples before the run
"$bin" "${run[@]}" > "$new.log"
sleep 1
kill $smi
wait $smi 2> /dev/null || true
"${PYTHON:-/usr/bin/python3}" scripts/clocks_table.py "$new.csv" "$new.log" "$new.png" > "$new.md"
for ext in csv log png md; do  # no png without matplotlib
  if [ -e "$new.$ext" ]; then mv "$new.$ext" "$out.$ext"; fi
done
"${PYTHON:-/usr/bin/python3}" scripts/report.py --record "$out.md" \
  --device "one $(sed -n "$on" "$out.log")" \
  --command "$(env | grep -E "^($vars)=" | sed 's/=\(.* .*\)/="\1"/' | tr '\n' ' ')scripts/clocks.sh $model"
cat "$out.md"
