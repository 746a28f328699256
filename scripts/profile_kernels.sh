#!/usr/bin/env bash
# CS336 §1.1.4 without Nsight Systems: bench mode's CUPTI kernel summary (the top kernels by GPU
# time in one forward, one backward and one AdamW step, with call counts) for one model size,
# saved as results/kernels_<size>_<precision>_<attention>.txt.
#   scripts/profile_kernels.sh [size]        (default: xl)
# Env: PRECISION (bf16), ATTENTION (flash), KERNELS (14: rows per phase), GRAPHS (1: forward and
#      backward replayed as CUDA graphs, as a run takes them, so that each phase's idle time is the
#      GPU's between kernels, not the host's launches; 0: launched one by one).
set -euo pipefail
cd "$(dirname "$0")/.."
size=${1:-xl} prec=${PRECISION:-bf16} attn=${ATTENTION:-flash}
cfg=configs/models/$size.toml
[ -f "$cfg" ] || { echo "no config $cfg" >&2; exit 2; }
mkdir -p results
out=results/kernels_${size}_${prec}_${attn}.txt
trap 'rm -f "$out.tmp"' EXIT  # a failed run leaves the earlier file, and no .tmp
build/lmtrain --config "$cfg" --set run.mode=bench --set model.precision="$prec" \
  --set model.attention="$attn" --set run.graphs="${GRAPHS:-1}" --set bench.warmup=3 \
  --set bench.steps=10 --set bench.kernels="${KERNELS:-14}" | sed -n '/^== lmtrain/,$p' > "$out.tmp"
mv "$out.tmp" "$out"
"${PYTHON:-/usr/bin/python3}" scripts/report.py --record "$out" \
  --device "one $(sed -n 's/^== lmtrain bench: [^ ]* on \(.*\), [a-z0-9]*, batch.*/\1/p' "$out")" \
  --command "$(env | grep -E '^(PRECISION|ATTENTION|KERNELS|GRAPHS)=' | tr '\n' ' ')scripts/profile_kernels.sh $size"
cat "$out"
