#!/usr/bin/env python3
"""Plan mode's memory prediction against what bench mode measured, per measured configuration.

    scripts/memory_vs_plan.py results/bench_lmtrain.csv > results/memory_vs_plan.md

For the latest row of each configuration in a bench CSV (mem_forward_bytes, mem_total_bytes:
what the tagged allocator held for forward alone and for a full step) it runs plan mode on the
same model, batch, precision and attention (build/lmtrain, or $LMTRAIN) and prints both with the
error: the CUDA backend's prediction (forward_cuda_bytes, total_cuda_bytes) for rows measured on
a GPU, the CPU backend's (params + activations, total) for the others.
"""
import csv
import os
import subprocess
import sys
import tempfile

KEYS = ["model.d_model", "model.d_ff", "model.num_layers", "model.num_heads", "model.vocab_size",
        "model.tie_embeddings", "model.context_length", "train.batch_size", "model.precision",
        "model.attention"]


def rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def plan(row, lmtrain):
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "plan.csv")
        sets = [a for k in KEYS for a in ("--set", f"{k}={row[k]}")]
        subprocess.run([lmtrain, "--set", "run.mode=plan", *sets, "--csv", out], check=True,
                       stdout=subprocess.DEVNULL)
        return rows(out)[0]


def main(measured_csv):
    lmtrain = os.environ.get("LMTRAIN", "build/lmtrain")
    latest = {}
    for r in rows(measured_csv):
        if r.get("mem_total_bytes"):
            latest[tuple(r[k] for k in KEYS) + (r["device_used"],)] = r
    gib = lambda b: f"{b / 2**30:.3f}"
    err = lambda measured, predicted: f"{100 * (measured - predicted) / predicted:+.2f}%"
    print("| d_model x layers | B x T | precision | attention | device | forward GiB measured / "
          "predicted | error | step GiB measured / predicted | error |")
    print("|---|---|---|---|---|---|---|---|---|")
    for key, r in sorted(latest.items(), key=lambda kv: [int(x) if x.isdigit() else x for x in kv[0]]):
        p = plan(r, lmtrain)
        if r["device_used"] == "cuda":
            fwd, total = int(p["forward_cuda_bytes"]), int(p["total_cuda_bytes"])
        else:
            fwd, total = int(p["params_bytes"]) + int(p["activations_bytes"]), int(p["total_bytes"])
        mf, mt = int(r["mem_forward_bytes"]), int(r["mem_total_bytes"])
        print(f"| {r['model.d_model']} x {r['model.num_layers']} | {r['train.batch_size']} x "
              f"{r['model.context_length']} | {r['model.precision']} | {r['model.attention']} | "
              f"{r.get('device_name', r['device_used'])} | {gib(mf)} / {gib(fwd)} | {err(mf, fwd)} | "
              f"{gib(mt)} / {gib(total)} | {err(mt, total)} |")
    print("\nMeasured: bench mode's tagged allocator (everything lmtrain allocates, fixed after the "
          "first step). Predicted: plan mode for the same configuration. On the GPU plan mode "
          "leaves out only the reductions' partial sums (8,200 bytes); the CUDA context is in "
          "neither. Plan mode describes the code as it is now: rows measured before f933b08 "
          "(2026-11-23 and earlier) held no cuBLASLt workspace (cuBLAS allocated its own, "
          "outside our allocator) and one more n x d fp32 scratch, so their full step is "
          "predicted up to 32 MiB high.")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
