#!/usr/bin/env python3
"""Markdown table of the all-reduce benchmark: one row per message size, one column per
(ranks, backend, dtype), each cell the bus bandwidth and the median time (the latest row of each).

    scripts/allreduce_table.py results/allreduce.csv > results/allreduce.md
"""
import csv
import sys


def main(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    cells, series, devices = {}, [], []
    for r in rows:
        s = (int(r["world_size"]), r["allreduce.backend"], r["allreduce.dtype"])
        if s not in series:
            series.append(s)
        cells[(int(r["size_bytes"]), s)] = r  # later rows replace earlier ones
        if r["device_name"] not in devices:
            devices.append(r["device_name"])
    series.sort()
    sizes = sorted({size for size, _ in cells})
    mib = lambda b: f"{b / 2**20:g} MiB" if b < 2**30 else f"{b / 2**30:g} GiB"
    print(f"All-reduce, in place, on {' and '.join(devices)}; bus bandwidth (GB/s) and median time per size, "
          f"`scripts/sweep_allreduce.sh` (rows in `{path}`).\n")
    print("| size | " + " | ".join(f"{n} ranks, {b}, {t}" for n, b, t in series) + " |")
    print("|---|" + "---|" * len(series))
    for size in sizes:
        out = []
        for s in series:
            r = cells.get((size, s))
            out.append(f"{float(r['busbw_gbs']):.1f} ({float(r['time_us']):.0f} µs)" if r else "–")
        print(f"| {mib(size)} | " + " | ".join(out) + " |")
    wrong = sum(int(r["wrong"]) for r in cells.values())
    print(f"\nbusbw = bytes / time × 2(n−1)/n. Elements wrong after the check all-reduce: {wrong}.")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
