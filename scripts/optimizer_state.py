#!/usr/bin/env python3
"""Trains one model on one token file once per optimizer-state choice and draws the loss curves
side by side: what storing AdamW's moments in bf16 (optim.state_dtype) costs in loss, or the
weights without fp32 masters, or the residual stream in bf16 (model.residual_dtype).

    scripts/optimizer_state.py --data train.npy --val val.npy --config configs/models/small.toml \
        --set model.vocab_size=50304 --steps 2000 [--np 1] [--metric auto|val|train]
    scripts/optimizer_state.py --quick          # tiny model, synthetic tokens, CPU: seconds
    scripts/optimizer_state.py --plot-only      # redraw from the logs of an earlier run

Each choice (--choices, default "state_dtype=fp32 state_dtype=bf16"; a choice is
whitespace-free `key=value` pairs joined by commas, each key of the [optim] section or a
`section.key`) runs
build/lmtrain with the same config, seed and data, its output kept in
<out>/optimizer_state_<choice>.log and its row appended to <out>/optimizer_state.csv (--csv).
The curves come from the progress lines (one every train.log_every steps): the validation loss
(with --val, or on the synthetic source: --eval-batches held-out batches every --log-every
steps; VAL_LOSS below reads it; --metric auto picks it when present), else the training loss
(the mean over the interval, all ranks). Writes <out>/optimizer_state.png and
<out>/optimizer_state.md (the command, the device line, and per choice the final loss, the time
per step and rank 0's optimizer bytes from the CSV's last row of that choice).
"""
import argparse
import datetime
import os
import re
import shlex
import subprocess
import sys

STEP_LOSS = re.compile(r"^step\s+(\d+)/\d+\s+\|\s+loss\s+([0-9.eE+-]+|nan|inf)")
# A validation loss in a progress line, if lmtrain prints one ("| val 3.21 |" or "| val_loss
# 3.21 |"): edit here should its form differ.
VAL_LOSS = re.compile(r"\| val(?:_loss| loss)? ([0-9.eE+-]+|nan|inf)")
DEVICE = re.compile(r"^device [^=].*rank.*$", re.M)


def choice_keys(choice):
    """{config key: value} of one choice ("state_dtype=bf16" -> optim.state_dtype: bf16;
    "model.residual_dtype=bf16" as it is)."""
    out = {}
    for pair in choice.split(","):
        key, eq, value = pair.partition("=")
        if not eq or not re.fullmatch(r"([a-z_]+\.)?[a-z_]+", key) or not value:
            raise SystemExit(f"choice '{choice}': expected key=value[,key=value] of [optim] keys "
                             "or section.key")
        out[key if "." in key else f"optim.{key}"] = value
    return out


def choice_args(choice):
    """--set arguments of one choice."""
    return [x for k, v in choice_keys(choice).items() for x in ("--set", f"{k}={v}")]


def curves(log_text):
    """(steps, training losses, validation losses or None) from lmtrain's progress lines."""
    steps, train, val = [], [], []
    for line in log_text.splitlines():
        m = STEP_LOSS.match(line)
        if not m:
            continue
        steps.append(int(m.group(1)))
        train.append(float(m.group(2)))
        v = VAL_LOSS.search(line)
        val.append(float(v.group(1)) if v else None)
    has_val = any(v is not None for v in val)
    return steps, train, (val if has_val else None)


def csv_rows(csv_path):
    import csv
    if not os.path.exists(csv_path):
        return []
    with open(csv_path, newline="") as f:
        return list(csv.DictReader(f))


def csv_columns(row, choice):
    """ms_per_step and optimizer_bytes_rank0 of the choice's row in lmtrain's CSV, or None where
    there is no row or its keys are not the choice's."""
    want = choice_keys(choice)
    if row is None or not all(row.get(k) == v for k, v in want.items()):
        return None
    return row["ms_per_step"], row["optimizer_bytes_rank0"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lmtrain", default="build/lmtrain")
    ap.add_argument("--config", action="append", default=[], help="lmtrain --config (repeatable)")
    ap.add_argument("--set", action="append", default=[], help="lmtrain --set (repeatable)")
    ap.add_argument("--data", help="token file (data.source = file); none: the synthetic source")
    ap.add_argument("--val", help="held-out token file (data.val_path) for the validation loss")
    ap.add_argument("--eval-batches", type=int, default=10,
                    help="held-out batches per validation (with --val or the synthetic source); 0: none")
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--log-every", type=int, default=20)
    ap.add_argument("--np", type=int, default=1, help="ranks (mpirun -np); 1: no mpirun")
    ap.add_argument("--mpirun", default="mpirun -q --oversubscribe --bind-to none")
    ap.add_argument("--choices", default="state_dtype=fp32 state_dtype=bf16",
                    help="space-separated choices, each key=value[,key=value] of [optim] keys "
                         "or section.key")
    ap.add_argument("--metric", choices=("auto", "val", "train"), default="auto")
    ap.add_argument("--out", default="results", help="folder of the logs, CSV, PNG and markdown")
    ap.add_argument("--csv", default=None, help="default: <out>/optimizer_state.csv")
    ap.add_argument("--quick", action="store_true",
                    help="the tiny model on the synthetic source on the CPU, 200 steps")
    ap.add_argument("--plot-only", action="store_true", help="only redraw from the logs")
    a = ap.parse_args()
    if a.quick:
        a.config = a.config or ["configs/train.toml"]
        a.set = ["run.device=cpu"] + a.set
        a.steps, a.log_every = 200, 10
    os.makedirs(a.out, exist_ok=True)
    csv_path = a.csv or os.path.join(a.out, "optimizer_state.csv")
    choices = a.choices.split()
    common = [x for c in a.config for x in ("--config", c)]
    if a.data:
        common += ["--set", "data.source=file", "--set", f"data.path={a.data}"]
    common += ["--set", f"train.steps={a.steps}", "--set", f"train.log_every={a.log_every}"]
    if a.val:
        common += ["--set", f"data.val_path={a.val}"]
    if a.eval_batches > 0 and (a.val or not a.data):
        common += ["--set", f"train.eval_batches={a.eval_batches}", "--set", f"train.eval_every={a.log_every}"]
    common += [x for s in a.set for x in ("--set", s)]
    launcher = shlex.split(a.mpirun) + ["-np", str(a.np)] if a.np > 1 else []

    # Each choice's CSV row: the one its run appends; with --plot-only, the CSV's last rows, one
    # per choice in order (a choice's keys alone do not tell its row from a later choice's that
    # adds keys to it).
    runs, device, rows = {}, "", {}
    if a.plot_only:
        last = csv_rows(csv_path)[-len(choices):]
        rows = dict(zip(choices, last)) if len(last) == len(choices) else {}
    for choice in choices:
        log = os.path.join(a.out, f"optimizer_state_{choice.replace(',', '_').replace('=', '-')}.log")
        if not a.plot_only:
            cmd = launcher + [a.lmtrain] + common + choice_args(choice) + ["--csv", csv_path]
            print("+", shlex.join(cmd), flush=True)
            before = len(csv_rows(csv_path))
            r = subprocess.run(cmd, capture_output=True, text=True)
            rows[choice] = (csv_rows(csv_path)[before:] or [None])[0]
            # A failed run's output goes beside the log, which keeps the last good run's (what
            # --plot-only reads).
            with open(log if r.returncode == 0 else log + ".failed", "w") as f:
                f.write(r.stdout + r.stderr)
            if r.returncode != 0:
                tail = (r.stdout + r.stderr).strip().splitlines()[-1:] or ["(no output)"]
                raise SystemExit(f"{choice}: lmtrain exited {r.returncode}: {tail[0]} "
                                 f"(log: {log}.failed)")
        with open(log) as f:
            text = f.read()
        m = DEVICE.search(text)
        device = device or (m.group(0) if m else "")
        runs[choice] = curves(text)
        if not runs[choice][0]:
            raise SystemExit(f"{log}: no progress lines")

    use_val = a.metric == "val" or (a.metric == "auto" and all(r[2] for r in runs.values()))
    if a.metric == "val" and not all(r[2] for r in runs.values()):
        raise SystemExit("--metric val: a log has no validation loss in its progress lines")
    what = "validation loss" if use_val else "training loss (mean over each logging interval)"

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (ax, dx) = plt.subplots(1, 2, figsize=(12, 4.5))
    base_choice = choices[0]
    base_steps, base_train, base_val = runs[base_choice]
    ref = {s: v for s, v in zip(base_steps, base_val if use_val else base_train) if v is not None}
    base_last = ref[max(ref)]
    for choice, (steps, train, val) in runs.items():
        y = val if use_val else train
        pts = [(s, v) for s, v in zip(steps, y) if v is not None]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], label=choice)
        if choice != base_choice:
            diff = [(s, v - ref[s]) for s, v in pts if ref.get(s) is not None]
            dx.plot([p[0] for p in diff], [p[1] for p in diff], label=f"{choice} − {base_choice}")
    ax.set_xlabel("step"), ax.set_ylabel(what), ax.legend(), ax.grid(alpha=0.3)
    ax.set_title("loss per optimizer-state choice")
    dx.axhline(0, color="black", lw=0.8)
    dx.set_xlabel("step"), dx.set_ylabel(f"difference from {base_choice}"), dx.grid(alpha=0.3)
    if len(runs) > 1:
        dx.legend()
    dx.set_title("difference (same data, seed and schedule)")
    fig.suptitle(device)
    fig.tight_layout()
    png = os.path.join(a.out, "optimizer_state.png")
    fig.savefig(png, dpi=120)

    md = os.path.join(a.out, "optimizer_state.md")
    with open(md, "w") as f:
        f.write("# Optimizer state precision: loss per choice\n\n")
        # The runs' command, also when --plot-only redraws them from their logs.
        argv = [x for x in sys.argv[1:] if x != "--plot-only"]
        now = f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%dT%H:%M:%SZ}"
        f.write(f"Command: `{shlex.join(['scripts/optimizer_state.py'] + argv)}`  \n")
        f.write(f"{device}; {'redrawn from the logs ' if a.plot_only else ''}{now}  \n")
        f.write(f"Curves: {what}; plot: {os.path.basename(png)}\n\n")
        f.write(f"| choice | last step | last {'validation' if use_val else 'training'} loss |"
                f" difference from {base_choice} | ms per step | optimizer bytes (rank 0) |\n"
                "|---|---|---|---|---|---|\n")
        for choice, (steps, train, val) in runs.items():
            y = [v for v in (val if use_val else train) if v is not None][-1]
            ms, opt_bytes = csv_columns(rows.get(choice), choice) or ("", "")
            f.write(f"| {choice} | {steps[-1]} | {y:.4f} | {y - base_last:+.4f} | {ms} | {opt_bytes} |\n")
    print(open(md).read())
    print(f"written: {png}, {md}")


if __name__ == "__main__":
    main()
