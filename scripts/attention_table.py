#!/usr/bin/env python3
"""Markdown table of attention, ours vs PyTorch, from the two attention CSVs (the latest row per
implementation and shape), with the ratio of our flash to SDPA's flash and cuDNN backends. A column
for each implementation with rows in the CSVs, in IMPLS's order; a section per GPU (a shape under
the GPU of its latest row, ours where it has one).

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

    def span(rows, col):
        ds = sorted({r[col][:10] for r in rows})
        return ds[0] if len(ds) == 1 else f"{ds[0]} to {ds[-1]}"

    # A section per GPU: a shape's rows (the latest of each implementation) under the GPU that
    # its latest row ran on (ours where it has one), in the order the GPUs first appear.
    keys = sorted(set(ours) | set(torch))

    def gpu(k):
        if k in ours:
            return max(ours[k].values(), key=lambda r: r["date_utc"])["device_name"]
        return max(torch[k].values(), key=lambda r: r["date"])["gpu_name"]

    where = {k: gpu(k) for k in keys}
    for g in dict.fromkeys(where.values()):
        mine = [k for k in keys if where[k] == g]
        lm = [r for k in mine for r in ours.get(k, {}).values()]
        tr = [r for k in mine for r in torch.get(k, {}).values()]
        iters, warmup = ((lm[0]["attention.iters"], lm[0]["attention.warmup"]) if lm
                         else (tr[0]["iters"], tr[0]["warmup"]))
        sources = ([f"lmtrain rows {span(lm, 'date_utc')}"] if lm else []) + \
                  ([f"torch rows {span(tr, 'date')}"] if tr else [])
        print(f"## {g}\n")
        print(f"Attention, ours vs PyTorch {tr[0]['torch'] if tr else '(none)'} on one {g} "
              f"({', '.join(sources)}); medians of {iters} runs after {warmup} warm-up; "
              "`scripts/attention_vs_torch.sh`.\n")
        for col, title in (("fwd_bwd_ms", "forward + backward, ms"), ("fwd_ms", "forward, ms"),
                           ("bwd_ms", "backward, ms")):
            print(f"### {title}\n")
            print("| dtype | mask | B×H | T | dh | " + " | ".join(impls) +
                  " | SDPA-flash / ours | cuDNN / ours |")
            print("|" + "---|" * (5 + len(impls) + 2))
            for key in mine:
                rows = {**ours.get(key, {}), **torch.get(key, {})}
                dtype, mask, b, h, t, dh = key
                cells = [cell(rows.get(i), col) for i in impls]
                flash = rows.get("lmtrain flash")
                print(f"| {dtype} | {mask} | {b}×{h} | {t} | {dh} | " + " | ".join(cells) +
                      f" | {ratio(flash, rows.get('torch sdpa-flash'), col)}"
                      f" | {ratio(flash, rows.get('torch sdpa-cudnn'), col)} |")
            print()
    print("A ratio above 1× means our flash is faster. TFLOP/s and peak memory per row are in the CSVs.")


if __name__ == "__main__":
    main(*sys.argv[1:3])
