#!/usr/bin/env bash
# CS336 §2.3.2(b): one training step of each rank as a picture, for naive DDP (all-reduces after
# backward) and overlap (each layer's all-reduce launched as backward finishes it): a 2-rank bench
# run with --trace per strategy into results/timeline_<strategy>.json, then
# scripts/ddp_timeline.py -> results/timeline_<strategy>.png, and each file's device, date and
# command into results/provenance.csv.
#   scripts/ddp_timeline.sh                         # CPU ranks (MPI), the tiny model, 4 layers
#   DEVICE=cuda SIZE=xl NP=2 scripts/ddp_timeline.sh  # 2 GPUs (NCCL), writes timeline_*_cuda.*
# Env: DEVICE (cpu), SIZE (tiny), LAYERS (4 for tiny; the config's otherwise), NP (2), STRATEGIES
#      (naive overlap), MPIRUN (mpirun -q --oversubscribe), PYTHON (/usr/bin/python3).
set -euo pipefail
cd "$(dirname "$0")/.."
device=${DEVICE:-cpu} size=${SIZE:-tiny} np=${NP:-2} py=${PYTHON:-/usr/bin/python3}
mpirun=${MPIRUN:-mpirun -q --oversubscribe}
cfg=configs/models/$size.toml
[ -f "$cfg" ] || { echo "ddp_timeline.sh: no config $cfg" >&2; exit 2; }
layers=${LAYERS:-}
[ "$size" = tiny ] && layers=${layers:-4}
suffix=$([ "$device" = cpu ] || echo "_$device")
for s in ${STRATEGIES:-naive overlap}; do
  out=results/timeline_${s}${suffix}
  cmd="$mpirun -np $np build/lmtrain --config $cfg${layers:+ --set model.num_layers=$layers} \
--set run.mode=bench --set run.device=$device --set ddp.strategy=$s --set bench.warmup=2 \
--set bench.steps=3 --set bench.kernels=0 --trace $out.json"
  log=$($cmd)
  name=$(sed -n 's/^== lmtrain bench: [^ ]* on \(.*\), [a-z0-9]*, batch.*/\1/p' <<<"$log")
  "$py" scripts/report.py --record "$out.json" --device "$np ranks on $name" --command "$cmd"
  "$py" scripts/ddp_timeline.py "$out.json" --out "$out.png" \
    --title "DDP $s: the last of 3 timed steps on each of $np ranks ($size$([ -n "$layers" ] && echo ", $layers layers"), $device)"
done
