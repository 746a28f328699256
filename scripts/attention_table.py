#!/usr/bin/env python3
"""Markdown table of attention, ours vs PyTorch, from the two attention CSVs (the latest row per
implementation and shape), with the ratio of our flash to SDPA's flash and cuDNN backends. A column
for each implementation with rows in the CSVs, in IMPLS's order; a section per GPU (a shape under
the GPU of its latest row, ours where it has one); and, for the rows that have them, the kernels'
own time (forward + backward) of our flash and the two SDPA backends.

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


def kernels(row, parts=("fwd", "bwd")):
    """The kernels' own time of these parts (forward, backward) summed, ms, or None (older rows,
    not ok)."""
    if row is None or row["status"] != "ok":
        return None
    if not all(row.get(f"{p}_kernel_ms") for p in parts):
        return None
    return sum(float(row[f"{p}_kernel_ms"]) for p in parts)


KERNEL_IMPLS = ["lmtrain flash", "torch sdpa-flash", "torch sdpa-cudnn"]


def table(title, columns, keys, both, cells_of):
    """A table of one row per shape key: the shape, then cells_of(both(key)) under columns."""
    print(f"### {title}\n")
    print("| dtype | mask | B×H | T | dh | " + " | ".join(columns) + " |")
    print("|" + "---|" * (5 + len(columns)))
    for key in keys:
        dtype, mask, b, h, t, dh = key
        cells = cells_of(both(key))
        print(f"| {dtype} | {mask} | {b}×{h} | {t} | {dh} | " + " | ".join(cells) + " |")
    print()


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
        def both(key):
            return {**ours.get(key, {}), **torch.get(key, {})}

        ratios = ["SDPA-flash / ours", "cuDNN / ours"]
        for col, title in (("fwd_bwd_ms", "forward + backward, ms"), ("fwd_ms", "forward, ms"),
                           ("bwd_ms", "backward, ms")):
            table(title, impls + ratios, mine, both, lambda rows: (
                [cell(rows.get(i), col) for i in impls] +
                [ratio(rows.get("lmtrain flash"), rows.get(i), col)
                 for i in ("torch sdpa-flash", "torch sdpa-cudnn")]))
        # Each call above is timed alone between two CUDA events: its launch (PyTorch's dispatch
        # from Python too) is in its time. The kernels alone, where the rows have them:
        timed = [k for k in mine if any(kernels(both(k).get(i)) for i in KERNEL_IMPLS)]
        if timed:
            def kernel_cells(rows):
                ms = [kernels(rows.get(i)) for i in KERNEL_IMPLS]
                return ([f"{x:.3f}" if x else "–" for x in ms] +
                        [f"{x / ms[0]:.2f}×" if x and ms[0] else "–" for x in ms[1:]])
            table("forward + backward, the kernels alone, ms", KERNEL_IMPLS + ratios, timed, both,
                  kernel_cells)
    print("A ratio above 1× means our flash is faster. Each call is timed alone between two CUDA "
          "events, so its time holds its launch (PyTorch's, its dispatch from Python too); the "
          "kernels' own time is the GPU's busy time per call in CUPTI's records (ours) or "
          "torch.profiler's (PyTorch's). TFLOP/s and peak memory per row are in the CSVs.")


if __name__ == "__main__":
    main(*sys.argv[1:3])
