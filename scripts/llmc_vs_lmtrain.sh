#!/usr/bin/env bash
# llm.c's train_gpt2cu (a C/CUDA trainer of GPT-2 124M, github.com/karpathy/llm.c) beside lmtrain's
# gpt2-small (configs/models/gpt2-small.toml: GPT-2 124M's matmul FLOPs per token on its
# 50 304-token vocabulary) at batch x context 16 x 1024, 8 x 1024 and 4 x 512, in one call on one
# GPU, the two taking turns. Each trains from scratch, bf16 with fp32 master weights, for STEPS
# steps: llm.c on a token file of random GPT-2 tokens (made here, in a temporary folder), its
# options as llm.c's GPT-2 runs (-e d12: a 12-layer model from scratch, -r 0: nothing recomputed,
# -w 1: master weights, -z 0: no ZeRO) with its validation and sampling put off; lmtrain's train
# mode with run.graphs on its synthetic source. Both step times are the host's full step (forward,
# backward, the gradient norm read back, clipping, AdamW): llm.c's from its per-step lines,
# lmtrain's from its progress line at train.log_every = 1 (with its default fp32 residual stream,
# and again in bf16, model.residual_dtype, as llm.c keeps it); lmtrain's bench mode (the GPU's work
# alone, its own medians of STEPS - WARMUP timed steps after WARMUP) is added. Each run's median
# over its steps after the first WARMUP goes to results/llmc.csv (with device, date and both
# commands); scripts/llmc_table.py then writes results/llmc.md from it.
#   LLMC=path/to/llm.c scripts/llmc_vs_lmtrain.sh
# llm.c is not part of lmtrain; LLMC names a directory holding its train_gpt2cu, built with cuDNN's
# attention (as the numbers it is usually quoted with): in a clone of llm.c, clone
# github.com/NVIDIA/cudnn-frontend into it and `make train_gpt2cu USE_CUDNN=1 NO_MULTI_GPU=1`.
# Under CUDA 13, llmc/cuda_utils.cuh's cudaMemAdvise takes cudaMemLocation{cudaMemLocationTypeHost,
# 0} where it passes cudaCpuDeviceId, and a recent cudnn-frontend also links NVRTC and the driver:
# NVCC_LDFLAGS="-lcublas -lcublasLt -lcudnn -lnvrtc -lcuda" (plus -lnvidia-ml where nvml.h is
# installed). The results here used llm.c at commit f1e2ace and cudnn-frontend at 3929da2 (for
# the H200's call built on a machine without a GPU, with GPU_COMPUTE_CAPABILITY=90, and run with
# the cuDNN 9 of PyTorch's wheel).
# Env: LLMC (required), SHAPES ("16x1024 8x1024 4x512"), STEPS (60), WARMUP (10), RUNS (2),
#      LMTRAIN (build/lmtrain), PYTHON (python3).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
[ -n "${LLMC:-}" ] || {
  echo "llmc_vs_lmtrain.sh: set LLMC to a directory holding llm.c's train_gpt2cu (this script's" \
    "header says how to build it)" >&2
  exit 2
}
llmc=$LLMC/train_gpt2cu
[ -x "$llmc" ] || { echo "llmc_vs_lmtrain.sh: no executable $llmc" >&2; exit 2; }
bin=${LMTRAIN:-build/lmtrain} steps=${STEPS:-60} warm=${WARMUP:-10} runs=${RUNS:-2}
py=${PYTHON:-python3} cfg=configs/models/gpt2-small.toml
[ "$warm" -lt "$steps" ] || { echo "llmc_vs_lmtrain.sh: WARMUP must be below STEPS" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# llm.c's token files: a header of 256 int32 (magic 20240520, version 1, the token count), then
# uint16 tokens.
"$py" - "$tmp" <<'EOF'
import os, struct, sys, numpy as np
rng = np.random.default_rng(0)
for name, n in (("train.bin", 40_000_000), ("val.bin", 1_000_000)):
    with open(os.path.join(sys.argv[1], name), "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
        f.write(rng.integers(0, 50257, n, dtype=np.uint16).tobytes())
EOF
device=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
mkdir -p results
out=results/llmc.csv
[ -s "$out" ] ||
  echo "date_utc,device,tool,batch,context,run,steps,warmup,ms_median,ms_mean,command" > "$out"
# The median and mean of the step times on stdin after the first $warm; one CSV row.
row() {
  "$py" -c '
import statistics, sys
tool, b, t, run, steps, warm, cmd = sys.argv[1:8]
ms = [float(x) for x in sys.stdin.read().split()][int(warm):]
if not ms:
    sys.exit(f"llmc_vs_lmtrain.sh: {tool} printed no step times at {b} x {t}")
print(f"{tool},{b},{t},{run},{len(ms)},{warm},{statistics.median(ms):.3f},"
      f"{statistics.fmean(ms):.3f},\"{cmd}\"")' "$@"
}
for shape in ${SHAPES:-16x1024 8x1024 4x512}; do
  b=${shape%x*} t=${shape#*x}
  lc=(-i "$tmp/train.bin" -j "$tmp/val.bin" -e d12 -r 0 -w 1 -z 0 -b "$b" -t "$t" -x "$steps"
      -v 1000000 -m 1 -s 0 -n 0)
  lt=(--config "$cfg" --set train.batch_size="$b" --set model.context_length="$t")
  for run in $(seq "$runs"); do
    "$llmc" "${lc[@]}" > "$tmp/llmc.log" 2>&1 || { tail -5 "$tmp/llmc.log"; exit 1; }
    sed -n 's/^step .*| \([0-9.]*\) ms |.*/\1/p' "$tmp/llmc.log" |
      row llm.c "$b" "$t" "$run" "$steps" "$warm" "train_gpt2cu ${lc[*]/#$tmp\//}" |
      sed "s/^/$date,$device,/" >> "$out"
    for res in fp32 bf16; do  # lmtrain's residual stream: its default, and llm.c's dtype
      tool="lmtrain train" args=(--set model.residual_dtype=$res --set run.mode=train
                                 --set run.graphs=1 --set train.log_every=1)
      [ "$res" = fp32 ] || tool="lmtrain train bf16 residual"
      "$bin" "${lt[@]}" "${args[@]}" --set train.steps="$steps" --set train.eval_every=0 \
        --set train.eval_batches=0 > "$tmp/lt.log"
      sed -n 's/^step .*| \([0-9.]*\) ms\/step |.*/\1/p' "$tmp/lt.log" |
        row "$tool" "$b" "$t" "$run" "$steps" "$warm" "lmtrain ${lt[*]} ${args[*]}" |
        sed "s/^/$date,$device,/" >> "$out"
    done
    "$bin" "${lt[@]}" --set run.mode=bench --set run.graphs=1 --set bench.warmup="$warm" \
      --set bench.steps="$((steps - warm))" --set bench.kernels=0 > "$tmp/lb.log"
    # bench's "step (with AdamW)" line: mean, std, median, min, max over its timed steps
    awk -v pre="$date,$device,lmtrain bench,$b,$t,$run,$((steps - warm)),$warm" \
      -v cmd="lmtrain ${lt[*]} --set run.mode=bench --set run.graphs=1" \
      '/^step \(with AdamW\)/ {printf "%s,%.3f,%.3f,\"%s\"\n", pre, $6, $4, cmd}' \
      "$tmp/lb.log" >> "$out"
    tail -4 "$out"
  done
done
write_to results/llmc.md "$py" scripts/llmc_table.py "$out"
cat results/llmc.md
