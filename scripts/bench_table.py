#!/usr/bin/env python3
"""Markdown table of ours vs PyTorch from the two bench CSVs: every lmtrain row (a shape measured
again, after a change, keeps its earlier rows: oldest first), each beside its PyTorch rows.

    scripts/bench_table.py results/bench_lmtrain.csv results/bench_torch.csv > results/bench.md
"""
import csv
import sys
from datetime import datetime


def rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def print_table(header, cells, note):
    """A markdown table of header and the rows of cells, then the note."""
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for r in cells:
        print("| " + " | ".join(r) + " |")
    print("\n" + note)


def shape(d_model, layers, precision, context, batch):
    return (int(d_model), int(layers), precision, int(context), int(batch))


def residual(r):
    """A lmtrain row's model.residual_dtype, "fp32" where the row predates the key."""
    return r.get("model.residual_dtype") or "fp32"


def seconds_apart(a, b):
    """Between two rows' measurements: lmtrain's (date_utc) or PyTorch's (date)."""
    t = [datetime.fromisoformat((r.get("date_utc") or r["date"]).replace("Z", "+00:00"))
         for r in (a, b)]
    return abs((t[0] - t[1]).total_seconds())


def beside(ours, candidates):
    """The PyTorch row measured nearest in time to ours, if within 10 minutes (one call of
    bench_vs_torch.sh, or two consecutive ones on the same machine); else None."""
    best = min(candidates, key=lambda r: seconds_apart(ours, r), default=None)
    return best if best is not None and seconds_apart(ours, best) < 600 else None


def main(ours_csv, torch_csv):
    ours, torch = [], {}
    for r in rows(ours_csv):
        key = shape(r["model.d_model"], r["model.num_layers"], r["model.precision"],
                    r["model.context_length"], r["train.batch_size"])
        ours.append((key + (r.get("model.attention", "naive"),), r["date_utc"], r))
    for r in rows(torch_csv):
        key = shape(r["d_model"], r["num_layers"], r["precision"], r["context_length"],
                    r["batch_size"])
        mode = "compile" if r["compile"] in ("True", "1", "true") else "eager"
        torch.setdefault(key, {}).setdefault(mode, []).append(r)
    print("| d_model x layers | attention | precision | B x T | device | date | lmtrain step ms | "
          "PyTorch eager ms | PyTorch compile ms | vs eager | vs compile | lmtrain fwd ms | "
          "lmtrain MFU | lmtrain memory GiB | PyTorch eager peak GiB (fwd / step) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for key, _, o in sorted(ours, key=lambda k: k[:2]):
        t = {m: beside(o, rs) for m, rs in torch.get(key[:5], {}).items()}
        t = {m: r for m, r in t.items() if r is not None}
        ms = float(o["step_ms_median"])
        eager = float(t["eager"]["step_ms_median"]) if "eager" in t else None
        comp = float(t["compile"]["step_ms_median"]) if "compile" in t else None
        fmt = lambda x: f"{x:.2f}" if x is not None else "n/a"
        gib = lambda r, k: f"{float(r[k]) / 2**30:.1f}"
        torch_mem = (f"{gib(t['eager'], 'peak_mem_fwd_bytes')} / {gib(t['eager'], 'peak_mem_step_bytes')}"
                     if "eager" in t else "n/a")
        ratio = lambda x: f"{x / ms:.2f}x" if x is not None else "n/a"
        print(f"| {key[0]} x {key[1]} | {key[5]} | {key[2]} | {key[4]} x {key[3]} | {o['device_name']} | "
              f"{o['date_utc'][:10]} | {ms:.2f} | {fmt(eager)} | {fmt(comp)} | {ratio(eager)} | "
              f"{ratio(comp)} | {float(o['fwd_ms_median']):.2f} | {100 * float(o['mfu']):.1f}% | "
              f"{gib(o, 'mem_total_bytes')} | {torch_mem} |")
    print("\nMedians of timed steps after warm-up (full step: forward, backward, AdamW), by "
          "scripts/bench_vs_torch.sh; rows of one shape and attention are successive measurements "
          "(lmtrain changing between them), oldest first; each lmtrain row beside the PyTorch rows measured nearest "
          "to it, within 10 minutes on the same machine (n/a: none). PyTorch's model "
          "materialises the attention scores, as lmtrain's naive attention does. "
          "Ratios > 1 mean lmtrain is faster. lmtrain memory: everything its allocator holds "
          "(allocated once, fixed through the step); PyTorch: torch.cuda.max_memory_allocated "
          "over one forward and over one full step.")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
