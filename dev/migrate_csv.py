#!/usr/bin/env python3
"""Brings lmtrain's CSVs to the columns the current build/lmtrain writes, so that new rows append
to them (lmtrain refuses a file with another header). Each file's columns are put in the
binary's order for its kind, every old cell kept under its name; a config key the file lacks gets
its default (the key did not exist when the rows were measured, so they ran as its default
does), a metric it lacks stays empty. A column the binary no longer writes stops the migration
with one line: nothing is dropped. A mode this machine cannot run (attention without a GPU)
keeps its file's metric columns after the current config columns and RUN_COLUMNS.

    dev/migrate_csv.py results/*.csv     # files without a run.mode column are left alone

Kinds: a mode's rows (the header lmtrain writes with --csv in that mode, read from a short CPU
run of it), and a sweep's <stem>.failed.csv (the config columns, then scripts/sweep.py's).
"""
import csv
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "scripts"))
from sweep import FAILED_COLUMNS, resolved_config  # noqa: E402

LMTRAIN = os.environ.get("LMTRAIN", "build/lmtrain")
# A short CPU run of each mode (the tiny default model): its --csv header is what the mode writes.
PROBES = {
    "train": ["--set", "train.steps=1"],
    "bench": ["--set", "bench.warmup=0", "--set", "bench.steps=1", "--set", "bench.kernels=0"],
    "attention": ["--set", "attention.seq_lens=[16]", "--set", "attention.head_dims=[16]",
                  "--set", 'attention.impls=["naive"]', "--set", "attention.warmup=0",
                  "--set", "attention.iters=1"],
    "plan": [],
    "allreduce": ["--set", "allreduce.backend=mpi", "--set", "allreduce.sizes_mb=[1]",
                  "--set", "allreduce.warmup=0", "--set", "allreduce.iters=1"],
}
# What every mode writes between the config and its metrics (report.hpp's run_columns).
RUN_COLUMNS = ["lmtrain_version"]


def header_of(mode):
    """What the mode writes, or None where its probe cannot run here."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "probe.csv")
        r = subprocess.run([LMTRAIN, "--set", "run.device=cpu", "--set", f"run.mode={mode}",
                            *PROBES[mode], "--csv", path], capture_output=True, text=True)
        if r.returncode != 0:
            print(f"migrate_csv: mode {mode} does not run here ({r.stderr.strip()[-200:]}): "
                  "its files keep their metric columns")
            return None
        with open(path, newline="") as f:
            return next(csv.reader(f))


def migrate(path, names, defaults, headers):
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    if not rows or "run.mode" not in rows[0]:
        return "left alone (not an lmtrain CSV)"
    old, body = rows[0], rows[1:]
    if path.endswith(".failed.csv"):
        new = names + FAILED_COLUMNS
    else:
        modes = {r[old.index("run.mode")] for r in body}
        if len(modes) != 1:
            sys.exit(f"migrate_csv: {path}: rows of modes {sorted(modes)}; expected one")
        mode = modes.pop()
        if mode not in headers:
            headers[mode] = header_of(mode)
        new = headers[mode] or names + RUN_COLUMNS + [
            c for c in old if c not in defaults and c not in RUN_COLUMNS]
    if new == old:
        return "already current"
    gone = [c for c in old if c not in new]
    if gone:
        sys.exit(f"migrate_csv: {path}: columns {gone} are no longer written; not migrated")
    fill = {c: defaults.get(c, "") for c in new if c not in old}
    out = [[r[old.index(c)] if c in old else fill[c] for c in new] for r in body]
    with open(path, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(new)
        w.writerows(out)
    return "added " + ", ".join(f"{c} ({v or 'empty'})" for c, v in fill.items())


def main(paths):
    names, values = resolved_config(LMTRAIN, [], "defaults")
    defaults = dict(zip(names, values))
    headers = {}
    for path in paths:
        print(f"{path}: {migrate(path, names, defaults, headers)}")


if __name__ == "__main__":
    main(sys.argv[1:])
