#!/usr/bin/env python3
"""Markdown table of scripts/bench_batch.sh's rows: for each AdamW state dtype, master-weights
setting and split of the optimizer step into micro-batches (batch x grad_accum), the newest
measurement: the step, AdamW's share of it, tokens/s, MFU and memory. scripts/report.py uses table_rows for REPORT.md.

    scripts/batch_table.py results/batch_xl.csv > results/batch_xl.md
"""
import sys

from bench_table import print_table, residual, rows

HEADER = ["residual stream", "AdamW state", "fp32 masters", "batch x grad_accum", "tokens a step", "graphs", "device", "date", "step ms",
          "AdamW ms", "tokens/s", "MFU", "memory GiB"]
NOTE = ("By scripts/bench_batch.sh: lmtrain's bench mode, bf16 (fp32 masters: optim.master_weights; "
        "without them the weights only matmuls read are bf16 alone; residual stream: "
        "model.residual_dtype), medians "
        "of the timed full steps (every micro-batch's forward and backward, then AdamW) after "
        "warm-up, all rows of one state dtype and date in one call on one GPU; graphs: forward and "
        "backward replayed as CUDA graphs (run.graphs). MFU: model matmul "
        "FLOPs (docs/design.md's formula) over the step, of the bench.peak_tflops in the CSV. AdamW "
        "ms: the median of the step's optimizer phase. memory: everything the allocator holds.")


def masters(r):
    """optim.master_weights, "true" where the row predates the key."""
    return r.get("optim.master_weights") or "true"


def newest(data):
    """{(residual dtype, state dtype, masters, batch, grad_accum): the newest row of it}."""
    latest = {}
    for r in data:
        key = (residual(r), r.get("optim.state_dtype", "fp32"),
               masters(r), int(r["train.batch_size"]), int(r["train.grad_accum"]))
        latest[key] = r
    return latest


def table_rows(data):
    """One row of HEADER's cells per (residual dtype, state dtype, masters, batch, grad_accum),
    newest each."""
    latest = newest(data)
    out = []
    order = lambda kv: (kv[0][0] != "fp32", kv[0][1] != "fp32", kv[0][1], kv[0][2] != "true",
                        kv[0][3] * kv[0][4], kv[0][3])
    for (res, state, held, b, k), r in sorted(latest.items(), key=order):
        tokens = b * k * int(r["model.context_length"])
        out.append([res, state, "yes" if held == "true" else "no", f"{b} x {k}", f"{tokens:,}",
                    "yes" if r.get("run.graphs", "0") == "1" else "no", r["device_name"], r["date_utc"][:10],
                    f"{float(r['step_ms_median']):.2f}", f"{float(r['optimizer_ms_median']):.2f}",
                    f"{float(r['tokens_per_s']) / 1e3:.1f}k", f"{100 * float(r['mfu']):.1f}%",
                    f"{float(r['mem_total_bytes']) / 2**30:.2f}"])
    return out


def main(path):
    print_table(HEADER, table_rows(rows(path)), NOTE)


if __name__ == "__main__":
    main(sys.argv[1])
