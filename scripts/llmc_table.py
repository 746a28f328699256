#!/usr/bin/env python3
"""Markdown table of scripts/llmc_vs_lmtrain.sh's rows: for each call and batch shape, llm.c's step
beside lmtrain's train and bench modes, each run's median, and their ratio.
scripts/report.py uses table_rows for REPORT.md.

    scripts/llmc_table.py results/llmc.csv > results/llmc.md
"""
import statistics
import sys

from bench_table import print_table, rows

HEADER = ["B x T", "device", "date (UTC)", "llm.c step ms", "lmtrain train mode ms",
          "lmtrain train mode, bf16 residual stream, ms", "lmtrain bench ms",
          "llm.c / lmtrain train mode", "tokens/s llm.c / lmtrain"]
TOOLS = ["llm.c", "lmtrain train", "lmtrain train bf16 residual", "lmtrain bench"]
NOTE = ("By scripts/llmc_vs_lmtrain.sh: llm.c's train_gpt2cu (GPT-2 124M, cuDNN attention; -e d12 "
        "-r 0 -w 1 -z 0: from scratch, nothing recomputed, fp32 master weights, no ZeRO) on random "
        "GPT-2 tokens, and lmtrain's configs/models/gpt2-small.toml (the same matmul FLOPs per "
        "token on the same padded vocabulary of 50 304) on its synthetic source with run.graphs, "
        "bf16 with fp32 master weights both, taking turns in one call on one GPU (each call's own rows: the GPUs differ). Each cell lists "
        "every run's median step over its steps after its warm-up (results/llmc.csv's warmup): "
        "the host's full step (forward, backward, the gradient norm read back, clipping, AdamW) "
        "for llm.c and lmtrain's train mode (its default fp32 residual stream, and in bf16, "
        "model.residual_dtype, as llm.c keeps it), the GPU's work alone, its steps queued back "
        "to back, for lmtrain's bench mode. The ratio and tokens/s are of the runs' medians, "
        "llm.c's and lmtrain's default train mode's (> 1: lmtrain faster).")


def table_rows(all_rows):
    """One row of HEADER's cells per call (one date_utc each, oldest first) and batch shape
    (largest context and batch first); shapes missing llm.c's or lmtrain's train mode are left
    out."""
    by = {}
    for r in all_rows:
        key = (r["date_utc"], -int(r["context"]), -int(r["batch"]))
        by.setdefault(key, {"device": r["device"], "ms": {}})["ms"].setdefault(
            r["tool"], []).append(float(r["ms_median"]))
    out = []
    for (date, t, b), call in sorted(by.items()):
        b, t, ms = -b, -t, call["ms"]
        if "llm.c" not in ms or "lmtrain train" not in ms:
            continue
        mid = {tool: statistics.median(v) for tool, v in ms.items()}
        cell = lambda tool: ", ".join(f"{x:.2f}" for x in ms[tool]) if tool in ms else "n/a"
        tokens = lambda tool: f"{b * t / mid[tool]:.0f}k"  # tokens per ms = thousands per s
        out.append([f"{b} x {t}", call["device"], date[:16].replace("T", " ")]
                   + [cell(tool) for tool in TOOLS]
                   + [f"{mid['llm.c'] / mid['lmtrain train']:.2f}x",
                      f"{tokens('llm.c')} / {tokens('lmtrain train')}"])
    return out


def main(path):
    print_table(HEADER, table_rows(rows(path)), NOTE)


if __name__ == "__main__":
    main(sys.argv[1])
