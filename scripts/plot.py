#!/usr/bin/env python3
"""Draws one PNG from a sweep's CSV alone (and its <stem>.failed.csv, if there is one).

    scripts/plot.py results/e2e.csv --x model.context_length --y step_ms_median \
        --series model.d_model,model.precision --where bench.warmup=5 --logy --out results/e2e.png

One line per distinct value of the --series columns, y against x (both numeric, sorted by x; an
x measured again, e.g. after a change, is drawn from its latest row); --where keeps only rows whose column has that value, or one of several given as A|B
(repeatable). Lines are labelled for a reader: a model by its config's name (small, xl, ...), a
precision or implementation by its value, other columns as name=value. Points that failed (out of
memory, timeout) and have no row since are listed under the plot with their status, so a missing
point says why.
Needs matplotlib (Debian: python3-matplotlib).
"""
import argparse
import csv
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model_names import model_name  # noqa: E402

# How a series column's value reads in a legend (default: "key=value").
LABELS = {
    "model.d_model": lambda r, v: model_name(v, r.get("model.num_layers"), r.get("model.d_ff")),
    "model.precision": lambda r, v: v,
    "model.attention": lambda r, v: f"{v} attention",
    "impl": lambda r, v: v,
    "mask": lambda r, v: v,
    "dtype": lambda r, v: v,
    "head_dim": lambda r, v: f"head dim {v}",
    "world_size": lambda r, v: f"{v} ranks",
    "allreduce.backend": lambda r, v: {"mpi": "MPI, host buffers", "nccl": "NCCL, GPU buffers"}.get(v, v),
    "ddp.strategy": lambda r, v: v,
}


def die(msg):
    print(f"plot.py: error: {msg}", file=sys.stderr)
    sys.exit(2)


def read(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def number(text):
    try:
        float(text)
        return True
    except ValueError:
        return False


def measured(failed, rows):
    """Whether a failed point has a row since (a re-run with --retry-failed): one with the same
    value in every config column the two files share."""
    own = ("status", "exit_code", "date_utc", "error")  # the failed file's, not a config's
    cols = [c for c in failed if c in rows[0] and c not in own]
    return any(all(r[c] == failed[c] for c in cols) for r in rows)


def keep(row, where):
    return all(row.get(k) in v.split("|") for k, v in where)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv")
    ap.add_argument("--x", required=True)
    ap.add_argument("--y", required=True)
    ap.add_argument("--series", default="", help="comma-separated columns; one line per value")
    ap.add_argument("--where", action="append", default=[], metavar="COL=VAL[|VAL...]")
    ap.add_argument("--scale-y", type=float, default=1.0, help="multiply y (e.g. 1e-9 for GB)")
    ap.add_argument("--scale-x", type=float, default=1.0, help="multiply x (e.g. 2**-20 for MiB)")
    ap.add_argument("--xlabel", default="")
    ap.add_argument("--ylabel", default="")
    ap.add_argument("--title", default="", help="{column} (dots as _) is the last plotted row's value")
    ap.add_argument("--logx", action="store_true")
    ap.add_argument("--logy", action="store_true")
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    if not os.path.exists(a.csv):
        die(f"{a.csv}: no such file")
    where = []
    for w in a.where:
        k, eq, v = w.partition("=")
        if not eq:
            die(f"--where {w}: expected COL=VAL")
        where.append((k, v))
    series = [s for s in a.series.split(",") if s]
    rows = read(a.csv)
    if not rows:
        die(f"{a.csv}: no rows")
    for col in [a.x, a.y, *series, *(k for k, _ in where)]:
        if col not in rows[0]:
            die(f"{a.csv}: no column {col}")

    try:
        import matplotlib
    except ImportError:
        die(f"this Python ({sys.executable}) has no matplotlib: install python3-matplotlib, or "
            f"run the script with PYTHON set to one that has it; {a.csv} is complete, no plot drawn")
    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    label = lambda r: ", ".join(LABELS.get(s, lambda r, v: f"{s.split('.')[-1]}={v}")(r, r[s])
                                for s in series) or a.y
    lines, order = {}, {}  # order: the series values, numbers as numbers (768 before 1024)
    last = {}
    for r in rows:
        if not keep(r, where) or r[a.y] == "":
            continue
        last = r
        order[label(r)] = tuple((0, float(r[s]), "") if number(r[s]) else (1, 0.0, r[s]) for s in series)
        try:
            lines.setdefault(label(r), {})[float(r[a.x]) * a.scale_x] = float(r[a.y]) * a.scale_y
        except ValueError:
            die(f"{a.csv}: non-numeric {a.x} = {r[a.x]!r} or {a.y} = {r[a.y]!r}")
    stem = a.csv[:-4] if a.csv.endswith(".csv") else a.csv
    failed = []
    if os.path.exists(stem + ".failed.csv"):
        for r in read(stem + ".failed.csv"):
            if all(c in r for c in [a.x, *series]) and keep(r, where) and not measured(r, rows):
                failed.append(f"{label(r)}, {a.xlabel or a.x} {float(r[a.x]) * a.scale_x:g}: {r['status']}")

    fig, ax = plt.subplots(figsize=(8, 5))
    for name, by_x in sorted(lines.items(), key=lambda kv: order[kv[0]]):
        pts = sorted(by_x.items())
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name)
    ax.set_xlabel(a.xlabel or a.x)
    ax.set_ylabel(a.ylabel or a.y)
    from matplotlib.ticker import FuncFormatter, LogLocator
    plain = FuncFormatter(lambda v, _: f"{v:g}")  # 512, not 2^9; 0.5, not 5x10^-1
    if a.logx:
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(plain)
    if a.logy:
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(plain)
        ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
    try:
        title = a.title.format(**{k.replace(".", "_"): v for k, v in last.items()})
    except (KeyError, IndexError, ValueError) as e:
        die(f"--title {a.title!r}: {e} is not a column of the plotted rows")
    ax.set_title(title or f"{a.y} vs {a.x}" + "".join(f", {k}={v}" for k, v in where))
    ax.grid(True, alpha=0.3)
    if lines:
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))  # beside, not over, the lines
    if failed:
        fig.text(0.01, 0.01, "not measured: " + "; ".join(dict.fromkeys(failed)), fontsize=7, wrap=True)
        fig.subplots_adjust(bottom=0.2)
    fig.savefig(a.out, dpi=120, bbox_inches="tight")
    print(f"plot.py: {a.out} ({sum(len(p) for p in lines.values())} points, {len(lines)} lines"
          + (f", {len(failed)} failed" if failed else "") + ")")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
