#!/usr/bin/env bash
# CS336 §2.2-2.3 and ZeRO-1 on GPUs: bench mode on one model with N ranks for every gradient
# strategy (naive, flat, overlap; bucketed and zero1 over bucket sizes; both again with NCCL held
# to a few thread blocks, ddp.comm_ctas), then every strategy again with several micro-batches per
# optimizer step (train.grad_accum; bucketed and zero1 at one bucket size), and the same model on
# one rank at each grad_accum as the baseline; rows in results/ddp.csv and results/ddp_1rank.csv
# (a re-run skips points already there), then results/ddp.md (step time, communication, exposed
# share, scaling against one rank, optimizer bytes per rank) and a PNG of step time against
# bucket size.
#   scripts/sweep_ddp.sh                 # on 2 GPUs: xl, batch 4 x 512 per GPU, bf16
#   SWEEP_QUICK=1 scripts/sweep_ddp.sh   # the tiny model on 2 CPU ranks, in seconds (tests run this)
# Env: MODEL (config file), NP (2), BUCKETS_MB, CTAS (comm_ctas values, each at CTAS_BUCKET_MB),
# ACCUM (grad_accum values, "1 4"; quick "1 2"; bucketed and zero1 at CTAS_BUCKET_MB, quick: the
# first of BUCKETS_MB), STEPS, CSV, TIMEOUT (s per point), PYTHON, LMTRAIN.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
py=${PYTHON:-/usr/bin/python3}
if [ "${SWEEP_QUICK:-0}" = 1 ]; then
  model=${MODEL:-configs/models/tiny.toml} buckets=${BUCKETS_MB:-0.01 0.1} steps=${STEPS:-2}
  device=cpu csv=${CSV:-results/ddp_quick.csv} extra="model.precision=fp32" ctas=${CTAS:-}
  accum=${ACCUM:-1 2} accum_bucket=${buckets%% *}
else
  model=${MODEL:-configs/models/xl.toml} buckets=${BUCKETS_MB:-1 10 100 1000} steps=${STEPS:-10}
  device=cuda csv=${CSV:-results/ddp.csv} extra="model.precision=bf16" ctas=${CTAS:-8 16}
  accum=${ACCUM:-1 4} accum_bucket=${CTAS_BUCKET_MB:-100}
fi
ctas_bucket=${CTAS_BUCKET_MB:-100}
# grad_accum 1 is the grid without the key (its default), as earlier sweeps ran it: their rows count.
accums=$(for k in $accum; do [ "$k" = 1 ] || echo "$k"; done)
np=${NP:-2}
one=${csv%.csv}_1rank.csv
points=$(mktemp)
trap 'rm -f "$points"' EXIT
{
  for s in naive flat overlap; do echo "config=$model $extra ddp.strategy=$s"; done
  for b in $buckets; do
    for s in bucketed zero1; do echo "config=$model $extra ddp.strategy=$s ddp.bucket_mb=$b"; done
  done
  for c in $ctas; do
    for s in bucketed zero1; do
      echo "config=$model $extra ddp.strategy=$s ddp.bucket_mb=$ctas_bucket ddp.comm_ctas=$c"
    done
  done
  for k in $accums; do
    for s in naive flat overlap; do echo "config=$model $extra ddp.strategy=$s train.grad_accum=$k"; done
    for s in bucketed zero1; do
      echo "config=$model $extra ddp.strategy=$s ddp.bucket_mb=$accum_bucket train.grad_accum=$k"
    done
  done
} >"$points"
common=(--lmtrain "${LMTRAIN:-build/lmtrain}" --set run.mode=bench --set run.device="$device"
        --set bench.steps="$steps" --set bench.kernels=0 --timeout "${TIMEOUT:-0}")
alone=("config=$model $extra")
for k in $accums; do alone+=("config=$model $extra train.grad_accum=$k"); done
"$py" scripts/sweep.py --csv "$one" "${common[@]}" -- "${alone[@]}"
"$py" scripts/sweep.py --csv "$csv" --np "$np" "${common[@]}" --points-file "$points"
write_to "${csv%.csv}.md" "$py" scripts/ddp_table.py "$csv" "$one"
cat "${csv%.csv}.md"
if [ -s "$csv" ]; then
  "$py" scripts/plot.py "$csv" --x ddp.bucket_mb --y step_ms_median --logx \
    --where "ddp.strategy=bucketed|zero1" --where ddp.comm_ctas=0 --where train.grad_accum=1 \
    --series ddp.strategy \
    --xlabel "bucket size (MB)" --ylabel "step time, median (ms)" \
    --title "Step time against bucket size: {world_size} ranks on {device_name}, batch {train_batch_size} per rank" \
    --out "${csv%.csv}_buckets.png"
fi
