#!/usr/bin/env bash
# What cuBLASLt's best would make a training step's matmuls cost: every algorithm its heuristic
# offers for each matmul of a model size's forward + backward, timed on this GPU
# (dev/gemm_candidates.cu, built here with nvcc), saved as
# results/gemm_candidates_<size><SUFFIX>.txt; dev/gemm_choices.py then gathers every file's
# choices into cuda/gemm_choices.inc.
#   dev/gemm_candidates.sh [size]        (default: xl)
#   BATCH=8 CONTEXT=1024 SUFFIX=_8x1024 dev/gemm_candidates.sh gpt2-small
#   WIDE=1 WIDE_SECONDS=60 ONLY="fwd qkv" BATCH=16 CONTEXT=1024 SUFFIX=_wide dev/gemm_candidates.sh gpt2-small
#   SUSTAIN=50 BATCH=16 CONTEXT=1024 SUFFIX=_hot dev/gemm_candidates.sh gpt2-small
# Env: BATCH (4), CONTEXT (512), SUFFIX (none), CUDA_HOME (/usr/local/cuda); WIDE, WIDE_SECONDS,
# ONLY and SUSTAIN as dev/gemm_candidates.cu describes them (WIDE searches configurations the
# heuristic does not offer: about a minute a matmul; SUSTAIN also times each candidate at the
# GPU's power limit, as a step runs it: about five seconds a matmul).
set -euo pipefail
cd "$(dirname "$0")/.."
size=${1:-xl}
cfg=configs/models/$size.toml
[ -f "$cfg" ] || { echo "no config $cfg" >&2; exit 2; }
key() { sed -n "s/^$1 *= *\([0-9]*\).*/\1/p" "$cfg"; }
mkdir -p build results
"${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" -std=c++17 -O2 -arch=native -o build/gemm_candidates \
  dev/gemm_candidates.cu -lcublasLt
out=results/gemm_candidates_$size${SUFFIX:-}.txt
build/gemm_candidates "$(key d_model)" "$(key d_ff)" "$(key vocab_size)" \
  $(( ${BATCH:-4} * ${CONTEXT:-512} )) "$(key num_layers)" > "$out.tmp"
mv "$out.tmp" "$out"
cat "$out"
