#!/usr/bin/env python3
"""Markdown table of the DDP sweep (scripts/sweep_ddp.sh) from its two CSVs alone: per strategy,
micro-batches per optimizer step (train.grad_accum; 1 where a row predates the column), bucket
size and cap on NCCL's thread blocks (ddp.comm_ctas; "auto": NCCL's choice) the median step (the
whole optimizer step, every micro-batch), its communication (mean of rank 0's collectives per
step) and the part of it the step waited for (exposed), the scaling against one rank on the same
per-rank batch and grad_accum (one-rank step / N-rank step: 100% is perfect), and rank 0's
optimizer-state bytes.

    scripts/ddp_table.py results/ddp.csv results/ddp_1rank.csv > results/ddp.md
"""
import csv
import sys


def rows(path):
    try:
        with open(path, newline="") as f:
            return list(csv.DictReader(f))
    except FileNotFoundError:
        return []


def accum(r):
    """train.grad_accum, 1 where the row predates the column."""
    return int(r.get("train.grad_accum") or 1)


def main(ranks_csv, one_csv):
    many, one = rows(ranks_csv), rows(one_csv)
    if not many:
        print(f"No rows in {ranks_csv} yet.")
        return
    base = {accum(r): r for r in one}  # the newest one-rank row of each grad_accum
    first = many[0]
    print(f"DDP strategies: {first['model.d_model']} x {first['model.num_layers']} layers, "
          f"{first['model.precision']}, micro-batch {first['train.batch_size']} x {first['model.context_length']} "
          f"per rank, {first['world_size']} ranks on {first['device_name']} ({first['date_utc'][:10]}); "
          f"medians of {first['bench.steps']} steps, a step being one optimizer step (all grad_accum "
          f"micro-batches); `scripts/sweep_ddp.sh`.\n")
    if base:
        steps = ", ".join(f"{float(r['step_ms_median']):.2f} ms (grad_accum {k})" for k, r in sorted(base.items()))
        print(f"One rank, same per-rank micro-batch: a step of {steps}; optimizer state "
              f"{int(one[-1]['optimizer_bytes']) / 2**20:.1f} MiB.\n")
    print("| strategy | grad_accum | bucket MiB | NCCL CTAs | step ms | comm ms | exposed ms | exposed share "
          "| scaling | optimizer MiB (rank 0) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in many:
        step, exposed = float(r["step_ms_median"]), float(r["exposed_ms"])
        bucket = r["ddp.bucket_mb"] if r["ddp.strategy"] in ("bucketed", "zero1") else "–"
        alone = base.get(accum(r))
        scaling = f"{100 * float(alone['step_ms_median']) / step:.1f}%" if alone else "–"
        ctas = r.get("ddp.comm_ctas", "0")
        print(f"| {r['ddp.strategy']} | {accum(r)} | {bucket} | {ctas if ctas != '0' else 'auto'} | {step:.2f} | "
              f"{float(r['comm_ms']):.2f} | "
              f"{exposed:.2f} | {100 * exposed / step:.1f}% | {scaling} | "
              f"{int(r['optimizer_bytes']) / 2**20:.1f} |")


if __name__ == "__main__":
    main(*sys.argv[1:3])
