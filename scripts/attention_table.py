#!/usr/bin/env python3
"""Markdown table of attention, ours vs PyTorch, from the two attention CSVs (the latest row per
implementation and shape), with the ratio of our flash to SDPA's flash and cuDNN backends. A column
for each implementation with rows in the CSVs, in IMPLS's order.

    scripts/attention_table.py results/attention_lmtrain.csv results/attention_torch.csv > results/attention.md
"""
import csv
import sys

IMPLS = ["lmtrain naive", "lmtrain flash", "lmtrain flash-mma", "torch naive", "torch naive-compiled", "torch torch-flash",
         "torch sdpa-flash", "torch sdpa-cudnn"]


def latest(path, impl_prefix):
    """{(dtype, mask, batch, heads, T, dh): {impl: row}} keeping the last row of each."""
    out = {}
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            key = (r["dtype"], r["mask"], int(r["batch"]), int(r["heads"]), int(r["seq_len"]),
                   int(r["head_dim"]))
            out.setdefault(key, {})[impl_prefix + r["impl"]] = r
    return out


def cell(row, col):
    if row is None:
        return "–"
    if row["status"] != "ok":
        return row["status"]
    return f"{float(row[col]):.3f}"


def ratio(ours, theirs, col):
    if not ours or not theirs or ours["status"] != "ok" or theirs["status"] != "ok":
        return "–"
    return f"{float(theirs[col]) / float(ours[col]):.2f}×"


def main(ours_csv, torch_csv):
    ours, torch = latest(ours_csv, "lmtrain "), latest(torch_csv, "torch ")
    present = {i for rows in (*ours.values(), *torch.values()) for i in rows}
    impls = [i for i in IMPLS if i in present]
    first = next(iter(next(iter(ours.values())).values()))
    tfirst = next(iter(next(iter(torch.values())).values()))

    def span(rows, col):
        ds = sorted({r[col][:10] for by_impl in rows.values() for r in by_impl.values()})
        return ds[0] if len(ds) == 1 else f"{ds[0]} to {ds[-1]}"

    print(f"Attention, ours vs PyTorch {tfirst['torch']} on one {first['device_name']} "
          f"(lmtrain rows {span(ours, 'date_utc')}, torch rows {span(torch, 'date')}); medians of "
          f"{first['attention.iters']} runs after {first['attention.warmup']} warm-up; "
          "`scripts/attention_vs_torch.sh`.\n")
    for col, title in (("fwd_bwd_ms", "forward + backward, ms"), ("fwd_ms", "forward, ms"),
                       ("bwd_ms", "backward, ms")):
        print(f"### {title}\n")
        print("| dtype | mask | B×H | T | dh | " + " | ".join(impls) +
              " | SDPA-flash / ours | cuDNN / ours |")
        print("|" + "---|" * (5 + len(impls) + 2))
        for key in sorted(set(ours) | set(torch)):
            rows = {**ours.get(key, {}), **torch.get(key, {})}
            dtype, mask, b, h, t, dh = key
            cells = [cell(rows.get(i), col) for i in impls]
            mine = rows.get("lmtrain flash")
            print(f"| {dtype} | {mask} | {b}×{h} | {t} | {dh} | " + " | ".join(cells) +
                  f" | {ratio(mine, rows.get('torch sdpa-flash'), col)}"
                  f" | {ratio(mine, rows.get('torch sdpa-cudnn'), col)} |")
        print()
    print("A ratio above 1× means our flash is faster. TFLOP/s and peak memory per row are in the CSVs.")


if __name__ == "__main__":
    main(*sys.argv[1:3])
