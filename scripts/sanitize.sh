#!/usr/bin/env bash
# compute-sanitizer's four tools over lmtrain's own GPU kernels, on one GPU: memcheck (out-of-range
# and misaligned accesses), racecheck (shared-memory hazards between threads of a block),
# synccheck (barriers misused) and initcheck (reads of device memory nothing wrote). Each runs
#   - attention mode at odd sequence lengths, every FlashAttention head dim, flash and flash-mma
#     (the mma.sync kernels) and naive, causal and not, bf16 and fp32: every attention kernel;
#   - attention mode with more query tiles than the GPU has SMs (4 x 50 heads at T 255, 1023 and
#     1100, head dim 64): the persistent forward's blocks (items of 64 queries, three blocks an SM,
#     up to T 1024; of 128 past it) taking several items in turn, longest first and in pairs,
#     reusing their Q buffers;
#   - attention mode's fused backward (flash-fused: causal, head dims 64 and 128, bf16) at odd
#     lengths up to 16 query tiles a head: its blocks' ordered adds of dQ, their shared tiles of dS
#     and dQ's pass;
#   - a few training steps of the tiny model with a 1001-token vocabulary (an odd one, for the
#     classifier's unaligned rows): embedding, RMSNorm, RoPE, SwiGLU, cross-entropy, AdamW, the
#     reductions and the matmuls; and again with AdamW's leaner state (bf16 moments, with fp32
#     master weights and without): its four-elements-a-thread kernels; and with the residual
#     stream in bf16 (model.residual_dtype): RMSNorm reading bf16 rows, the embedding and the
#     residual adds writing them, and their gradient in bf16 (RMSNorm's backward, the
#     embedding's); and with 8192 rows a micro-batch under bf16 (128 sequences of 64): W2's
#     backward fused into SwiGLU's (swiglu_sm90.cu), which the GPU takes from that many rows;
#   - a few steps of the tiny model with one head of 64 under bf16, at T 300 (96 sequences) and
#     T 1100 (32): the Hopper forward's persistent kernels (three blocks an SM of one consumer, and
#     a block an SM of two) rotating each item's q by RoPE in shared memory and storing it back,
#     blocks taking several items.
# cuBLASLt's own nvjet_* kernels report shared-memory WAR hazards under racecheck that are the
# library's (its kernels order those accesses by means racecheck does not follow): racecheck
# checks them, but only hazards reported in kernels other than nvjet_* count, and the line says
# how many of the library's it left out. (Leaving them uninstrumented, --kernel-name-exclude,
# made racecheck fail on an H100 with "The Sanitizer failed to handle a hardware exception" in
# cuBLASLt's first calls, which memcheck, with every kernel instrumented, ran clean.)
# racecheck is by far the slowest tool (the whole attention grid took over 4 minutes on an H100
# before reaching its last rows), so it takes one odd length and our own attention kernels
# (flash, flash-mma), which are the ones with shared memory to race on.
# Prints one line per tool (each run's verdict and seconds) and exits 1 if any tool found an error,
# or a run's log lacks the tool's closing summary (it did not run under the tool); racecheck's
# hazards that its summary counts beyond the pairs read here count as ours. Full logs in $LOGS.
#   scripts/sanitize.sh
#   RUNS="fused_swiglu train" scripts/sanitize.sh     (the runs that reach a kernel just changed)
# Env: LMTRAIN (build/lmtrain), LOGS (a new temporary folder), SANITIZER (compute-sanitizer),
#      RUNS (all ten: attention persistent fused_attention train bf16_moments no_masters
#      bf16_residual fused_swiglu rope_shortest rope_short).
set -uo pipefail
cd "$(dirname "$0")/.."
bin=${LMTRAIN:-build/lmtrain} san=${SANITIZER:-compute-sanitizer}
logs=${LOGS:-$(mktemp -d)}
mkdir -p "$logs"
command -v "$san" > /dev/null || { echo "sanitize.sh: $san not found (CUDA toolkit)" >&2; exit 2; }
attention=(--set run.mode=attention --set attention.batch=1 --set attention.heads=2
           --set "attention.seq_lens=[77, 130]" --set "attention.head_dims=[16, 32, 64, 80, 128]"
           --set 'attention.impls=["naive", "flash", "flash-mma"]' --set 'attention.masks=["causal", "none"]'
           --set 'attention.dtypes=["bf16", "fp32"]' --set attention.warmup=0 --set attention.iters=1)
attention_racecheck=("${attention[@]}" --set "attention.seq_lens=[77]"
                    --set 'attention.impls=["flash", "flash-mma"]')
persistent=(--set run.mode=attention --set attention.batch=4 --set attention.heads=50
            --set "attention.seq_lens=[255, 1023, 1100]" --set "attention.head_dims=[64]"
            --set 'attention.impls=["flash"]' --set 'attention.masks=["causal", "none"]'
            --set 'attention.dtypes=["bf16"]' --set attention.warmup=0 --set attention.iters=1)
fused_attention=(--set run.mode=attention --set attention.batch=2 --set attention.heads=3
                 --set "attention.seq_lens=[77, 300, 1000]" --set "attention.head_dims=[64, 128]"
                 --set 'attention.impls=["flash-fused"]' --set 'attention.masks=["causal"]'
                 --set 'attention.dtypes=["bf16"]' --set attention.warmup=0 --set attention.iters=1)
train=(--config configs/models/tiny.toml --set run.device=cuda --set model.vocab_size=1001
       --set train.steps=3 --set train.log_every=1)
bf16_moments=("${train[@]}" --set model.precision=bf16 --set optim.state_dtype=bf16)
no_masters=("${bf16_moments[@]}" --set optim.master_weights=false)
bf16_residual=("${bf16_moments[@]}" --set model.residual_dtype=bf16)
fused_swiglu=("${train[@]}" --set model.precision=bf16 --set train.batch_size=128)
rope_shortest=("${train[@]}" --set model.precision=bf16 --set model.num_heads=1
               --set model.context_length=300 --set train.batch_size=96)
rope_short=("${rope_shortest[@]}" --set model.context_length=1100 --set train.batch_size=32)
all_runs="attention persistent fused_attention train bf16_moments no_masters bf16_residual"
all_runs+=" fused_swiglu rope_shortest rope_short"
runs=${RUNS:-$all_runs}
for run in $runs; do
  [[ " $all_runs " == *" $run "* ]] || { echo "sanitize.sh: no run '$run' (RUNS: $all_runs)" >&2; exit 2; }
done
status=0
for tool in memcheck racecheck synccheck initcheck; do
  line="" errors=0
  for run in $runs; do
    declare -n args=$run
    [ "$tool" = racecheck ] && [ "$run" = attention ] && declare -n args=attention_racecheck
    log=$logs/$tool-$run.log
    start=$SECONDS
    "$san" --tool "$tool" --error-exitcode 99 --print-limit 1000 "$bin" "${args[@]}" > "$log" 2>&1
    rc=$? took=$((SECONDS - start))
    # The tool's closing count; a run without one did not run under the tool and is a failure.
    summary=$(grep -aoE "(ERROR|RACECHECK) SUMMARY: [0-9]+" "$log" | grep -oE "[0-9]+$" | tail -1)
    n=$summary library=0
    if [ "$tool" = racecheck ] && [ -n "$summary" ]; then
      # A hazard is reported over two lines (the two accesses); count those naming no nvjet_.
      read -r n library < <(awk '/Race reported between/ { pair = $0; getline; pair = pair $0;
                                  if (pair ~ /nvjet_/) lib++; else ours++ }
                                END { print ours + 0, lib + 0 }' "$log")
      # Hazards the summary counts but not as such pairs are counted as ours.
      [ "$summary" -gt $((n + library)) ] && n=$((summary - library))
      [ "$rc" -eq 99 ] && [ "$n" -eq 0 ] && ! grep -aq "Internal Sanitizer Error" "$log" && rc=0
    fi
    if [ -z "$summary" ]; then
      errors=$((errors + 1))
      line+=" $run: no summary from $tool (exit $rc, $log, ${took} s);"
    elif [ "$rc" -ne 0 ] || [ "$n" -ne 0 ]; then
      errors=$((errors + (n > 0 ? n : 1)))  # a run that failed with no error counted counts one
      line+=" $run: $n errors (exit $rc, $log, ${took} s);"
    else
      line+=" $run: clean$([ "$library" -gt 0 ] && echo " (cuBLASLt's nvjet_ hazards left out: $library)") ${took} s;"
    fi
  done
  printf "%-10s %s\n" "$tool" "${line% ;}"
  [ "$errors" -eq 0 ] || status=1
done
[ "$status" -eq 0 ] && echo "sanitize.sh: no errors in our kernels (logs in $logs)" ||
  echo "sanitize.sh: errors found (logs in $logs)"
exit "$status"
