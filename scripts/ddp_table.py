#!/usr/bin/env python3
"""Markdown table of the DDP sweep (scripts/sweep_ddp.sh) from its two CSVs alone: per strategy,
bucket size and cap on NCCL's thread blocks (ddp.comm_ctas; "auto": NCCL's choice) the median
step, its communication (mean of rank 0's collectives per step) and the part of it the step
waited for (exposed), the scaling against one rank on the same per-rank batch (one-rank step /
N-rank step: 100% is perfect), and rank 0's optimizer-state bytes.

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


def main(ranks_csv, one_csv):
    many, one = rows(ranks_csv), rows(one_csv)
    if not many:
        print(f"No rows in {ranks_csv} yet.")
        return
    base = float(one[-1]["step_ms_median"]) if one else None
    first = many[0]
    print(f"DDP strategies: {first['model.d_model']} x {first['model.num_layers']} layers, "
          f"{first['model.precision']}, batch {first['train.batch_size']} x {first['model.context_length']} "
          f"per rank, {first['world_size']} ranks on {first['device_name']} ({first['date_utc'][:10]}); "
          f"medians of {first['bench.steps']} steps; `scripts/sweep_ddp.sh`.\n")
    if base is not None:
        print(f"One rank, same per-rank batch: {base:.2f} ms per step, optimizer state "
              f"{int(one[-1]['optimizer_bytes']) / 2**20:.1f} MiB.\n")
    print("| strategy | bucket MiB | NCCL CTAs | step ms | comm ms | exposed ms | exposed share | scaling "
          "| optimizer MiB (rank 0) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in many:
        step, exposed = float(r["step_ms_median"]), float(r["exposed_ms"])
        bucket = r["ddp.bucket_mb"] if r["ddp.strategy"] in ("bucketed", "zero1") else "–"
        scaling = f"{100 * base / step:.1f}%" if base else "–"
        ctas = r.get("ddp.comm_ctas", "0")
        print(f"| {r['ddp.strategy']} | {bucket} | {ctas if ctas != '0' else 'auto'} | {step:.2f} | {float(r['comm_ms']):.2f} | "
              f"{exposed:.2f} | {100 * exposed / step:.1f}% | {scaling} | "
              f"{int(r['optimizer_bytes']) / 2**20:.1f} |")


if __name__ == "__main__":
    main(*sys.argv[1:3])
