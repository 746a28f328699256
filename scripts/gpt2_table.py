#!/usr/bin/env python3
"""Markdown table of scripts/bench_gpt2.sh's rows: for each batch shape, the latest lmtrain
measurement (run.graphs 0 and 1; its train mode's, where that file is given) beside the PyTorch
rows (SDPA, eager and torch.compile) measured in the same call. scripts/report.py uses table_rows
for REPORT.md.

    scripts/gpt2_table.py results/gpt2_lmtrain.csv results/gpt2_torch.csv \
        [results/gpt2_train.csv] > results/gpt2.md
"""
import sys

from bench_table import beside, print_table, residual, rows, seconds_apart

HEADER = ["B x T", "device", "date", "lmtrain step ms (graphs 0 / 1)",
          "lmtrain, bf16 residual stream, ms", "lmtrain train mode ms/step",
          "PyTorch SDPA eager ms",
          "PyTorch SDPA compile ms", "vs compile", "lmtrain tokens/s", "lmtrain MFU",
          "lmtrain memory GiB", "PyTorch compile peak GiB"]
NOTE = ("configs/models/gpt2-small.toml (d_model 768, 12 layers, 12 heads, d_ff 2048, vocabulary "
        "50 304, the embeddings tied to the LM head as GPT-2's: 124M parameters), bf16 with fp32 "
        "master weights, gradients and AdamW state, by scripts/bench_gpt2.sh: medians of 20 timed "
        "full steps (forward, backward, AdamW) after 5 warm-up steps, lmtrain's bench mode and "
        "PyTorch's model (tests/reference/torch_reference.py bench --attention sdpa, autocast "
        "bf16, fused AdamW) in one call on one GPU. 'vs "
        "compile' is PyTorch compiled over lmtrain with graphs (> 1: lmtrain faster). lmtrain "
        "memory: everything its allocator holds; PyTorch: torch.cuda.max_memory_allocated over "
        "one full step. 'bf16 residual stream': lmtrain with model.residual_dtype = \"bf16\" "
        "(graphs), as llm.c keeps it; every other column with the default fp32 stream. 'train "
        "mode': lmtrain's train mode (graphs) over its steps after the first, host time (the "
        "synthetic source's batches drawn, the loss and the gradient norm read back and the "
        "gradients clipped every step), where bench times the GPU's work alone.")


def latest(ours):
    """(batch, context, graphs, residual dtype) -> the newest lmtrain row."""
    return {(int(r["train.batch_size"]), int(r["model.context_length"]), r["run.graphs"],
             residual(r)): r for r in ours}


def trained_beside(latest_rows, train_rows):
    """(batch, context) -> the newest train row (graphs) measured in the same call as latest_rows'
    bench row with graphs and the fp32 stream."""
    out = {}
    for r in train_rows:
        key = (int(r["train.batch_size"]), int(r["model.context_length"]))
        bench = latest_rows.get((*key, "1", "fp32"))
        if r["run.graphs"] == "1" and bench is not None and seconds_apart(bench, r) < 600:
            out[key] = r
    return out


def table_rows(ours, torch_rows, train_rows=()):
    """One row of HEADER's cells per batch shape, largest context and batch first."""
    latest_rows = latest(ours)
    trained = trained_beside(latest_rows, train_rows)
    torch = {}
    for r in torch_rows:
        mode = "compile" if r["compile"] in ("True", "1", "true") else "eager"
        torch.setdefault((int(r["batch_size"]), int(r["context_length"]), mode), []).append(r)
    out = []
    for (b, t, graphs, res), o in sorted(latest_rows.items(),
                                         key=lambda kv: (-kv[0][1], -kv[0][0])):
        if graphs != "1" or res != "fp32" or (b, t, "0", "fp32") not in latest_rows:
            continue
        ms = float(o["step_ms_median"])
        ms0 = float(latest_rows[(b, t, "0", "fp32")]["step_ms_median"])
        r16 = latest_rows.get((b, t, "1", "bf16"))  # shown if measured in the same call
        ms16 = (f"{float(r16['step_ms_median']):.2f}"
                if r16 and seconds_apart(o, r16) < 600 else "n/a")
        tr = trained.get((b, t))
        train_ms = f"{float(tr['ms_per_step_after_first']):.2f}" if tr else "n/a"
        th = {m: beside(o, torch.get((b, t, m), [])) for m in ("eager", "compile")}
        step = lambda m: f"{float(th[m]['step_ms_median']):.2f}" if th[m] else "n/a"
        vs = f"{float(th['compile']['step_ms_median']) / ms:.2f}x" if th["compile"] else "n/a"
        peak = (f"{float(th['compile']['peak_mem_step_bytes']) / 2**30:.2f}" if th["compile"]
                else "n/a")
        out.append([f"{b} x {t}", o["device_name"], o["date_utc"][:10], f"{ms0:.2f} / {ms:.2f}",
                    ms16, train_ms, step("eager"), step("compile"), vs,
                    f"{float(o['tokens_per_s']) / 1e3:.0f}k",
                    f"{100 * float(o['mfu']):.1f}%", f"{float(o['mem_total_bytes']) / 2**30:.2f}",
                    peak])
    return out


def main(ours_csv, torch_csv, train_csv=None):
    print_table(HEADER, table_rows(rows(ours_csv), rows(torch_csv),
                                   rows(train_csv) if train_csv else ()), NOTE)


if __name__ == "__main__":
    main(*sys.argv[1:4])
