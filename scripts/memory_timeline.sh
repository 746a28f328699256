#!/usr/bin/env bash
# CS336 §1.1.6(a): the memory timeline of one training step as a picture, on one GPU: lmtrain's
# bench mode with --trace (phase spans of the timed steps and the allocated-memory counter) into
# results/memory_timeline_lmtrain.json, tests/reference/torch_reference.py bench --mem-timeline
# (the caching allocator's history over one more full step: forward, backward, AdamW) into
# results/memory_timeline_torch.csv, both on the shape scripts/bench_vs_torch.sh gives that size
# (bf16, batch 4 x context 512), then scripts/memory_timeline.py -> results/memory_timeline.png.
#   scripts/memory_timeline.sh
#   SIZE=large scripts/memory_timeline.sh
# Env: SIZE (xl), PYTHON (python3), ATTENTION (lmtrain's model.attention: flash).
set -euo pipefail
cd "$(dirname "$0")/.."
size=${SIZE:-xl} attn=${ATTENTION:-flash} prec=bf16 ctx=512 batch=4
py=${PYTHON:-python3}
cfg=configs/models/$size.toml
[ -f "$cfg" ] || { echo "no config $cfg" >&2; exit 2; }
mkdir -p results
# Everything is made in a temporary folder and moved into results/ (its provenance recorded) only
# once all three files are there: a failure leaves the earlier ones as they were.
tmp=$(mktemp -d results/.memory_timeline.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
# One timed step after one warm-up: the trace holds its three phase spans and the memory counter
# at each phase boundary.
log=$(build/lmtrain --config "$cfg" --set run.mode=bench --set model.precision="$prec" \
  --set model.attention="$attn" \
  --set model.context_length="$ctx" --set train.batch_size="$batch" \
  --set bench.warmup=1 --set bench.steps=1 --set bench.kernels=0 \
  --trace "$tmp/memory_timeline_lmtrain.json")
grep -E "^== |^step|^memory" <<<"$log"
device="one $(sed -n 's/^== lmtrain bench: [^ ]* on \(.*\), [a-z0-9]*, batch.*/\1/p' <<<"$log")"
command="$(env | grep -E '^(SIZE|ATTENTION)=' | tr '\n' ' ')scripts/memory_timeline.sh"
"$py" tests/reference/torch_reference.py bench --config "$cfg" --context-length "$ctx" \
  --batch-size "$batch" --precision "$prec" --warmup 1 --steps 1 --label "$size-eager" \
  --mem-timeline "$tmp/memory_timeline_torch.csv"
"$py" scripts/memory_timeline.py --lmtrain-trace "$tmp/memory_timeline_lmtrain.json" \
  --torch-csv "$tmp/memory_timeline_torch.csv" --out "$tmp/memory_timeline.png" \
  --title "Allocated device memory over one training step: $size, $prec, batch $batch x context $ctx"
for f in memory_timeline_lmtrain.json memory_timeline_torch.csv memory_timeline.png; do
  mv "$tmp/$f" "results/$f"
  "$py" scripts/report.py --record "results/$f" --device "$device" --command "$command"
done
