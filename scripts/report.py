#!/usr/bin/env python3
"""Fills the generated blocks of results/REPORT.md, and the README's, from the data files under
results/.

    scripts/report.py                  # rewrite the blocks in results/REPORT.md and README.md
    scripts/report.py --check          # exit 1 with a diff if either differs from the data
    scripts/report.py --results DIR    # DIR's REPORT.md and data files instead (and the README
                                       # beside DIR, where there is one)
    scripts/report.py --record FILE --device NAME --command CMD
                                       # note who made a results file that has no date or device
                                       # column (results/provenance.csv, dated now)

A block is `<!-- report:NAME -->...<!-- /report:NAME -->`: a table (on lines of its own, with the
device, date and command that measured it under it) or a number inside a sentence. Everything
between blocks is hand-written prose; everything inside them is replaced. A block whose name this
script does not know, or whose data is missing, stops it with one line (exit 2).
Standard library only.
"""
import argparse
import csv
import difflib
import os
import re
import sys
from datetime import datetime, timezone

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model_names import model_name, model_shape, size_order  # noqa: E402
import attention_table  # noqa: E402
import batch_table  # noqa: E402
import bench_table  # noqa: E402
import clocks_table  # noqa: E402
import ddp_table  # noqa: E402
import gpt2_table  # noqa: E402
import llmc_table  # noqa: E402

REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
BLOCK = re.compile(r"<!-- report:([a-z0-9_]+) -->(.*?)<!-- /report:\1 -->", re.S)
MIB, GIB = 2**20, 2**30
SIZES = ["small", "medium", "large", "xl", "2.7b"]
CONTEXTS = [128, 256, 512, 1024]


class Missing(Exception):
    pass


class Data:
    """The files of one results directory, read once each."""

    def __init__(self, root):
        self.root = root
        self._cache = {}

    def path(self, name):
        p = os.path.join(self.root, name)
        if not os.path.exists(p):
            raise Missing(f"{p}: no such file")
        return p

    def csv(self, name):
        if name not in self._cache:
            with open(self.path(name), newline="") as f:
                self._cache[name] = list(csv.DictReader(f))
        return self._cache[name]

    def text(self, name):
        if name not in self._cache:
            with open(self.path(name)) as f:
                self._cache[name] = f.read()
        return self._cache[name]

    def provenance(self, name):
        """(device, date, command) of a file that has no columns for them."""
        for r in self.csv("provenance.csv"):
            if r["file"] == name:
                return r["device"], r["date_utc"][:10], r["command"]
        raise Missing(f"{name}: no row in {self.root}/provenance.csv")


# ---- formatting ---------------------------------------------------------------------------------

def table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def dates(rows, col="date_utc"):
    ds = sorted({r[col][:10] for r in rows})
    return ds[0] if len(ds) == 1 else f"{ds[0]} to {ds[-1]}"


def devices(rows, col="device_name"):
    return ", ".join(sorted({r[col] for r in rows}))


def source(device, date, command, files, verb="measured"):
    links = ", ".join(f"[{f}]({f})" for f in files)
    return f"\n\n*{device}; {verb} {date}; `{command}` → {links}.*"


def f2(x):
    return f"{x:.2f}"


def span(values, fmt=f2, unit=""):
    lo, hi = min(values), max(values)
    return f"{fmt(lo)}{unit}" if fmt(lo) == fmt(hi) else f"{fmt(lo)}–{fmt(hi)}{unit}"


def num(r, col):
    return float(r[col])


def name_of(r):
    return model_name(r["model.d_model"], r["model.num_layers"], r["model.d_ff"])


# ---- the e2e grid (bench mode, one GPU) -----------------------------------------------------------

E2E_CMD = "scripts/sweep_e2e.sh"


def e2e(data, prec, warmup, size=None, ctx=None):
    out = [r for r in data.csv("e2e.csv") if r["model.precision"] == prec
           and r["bench.warmup"] == str(warmup)
           and (size is None or name_of(r) == size)
           and (ctx is None or r["model.context_length"] == str(ctx))]
    if size is not None and ctx is not None:
        if not out:
            raise Missing(f"e2e.csv: no row for {size}, {prec}, T {ctx}, warm-up {warmup}")
        return out[-1]
    return out


def e2e_grid(data, prec):
    rows = []
    for s in SIZES:
        cells = [s]
        for t in CONTEXTS:
            r = e2e(data, prec, 5, s, t)
            f, fb, st = num(r, "fwd_ms_median"), num(r, "fwd_bwd_ms_median"), num(r, "step_ms_median")
            cells.append(f"{f2(f)} / {f2(fb - f)} / {f2(st)}")
        rows.append(cells)
    used = e2e(data, prec, 5)
    return (table(["model", *(f"{prec}, T {t}" for t in CONTEXTS)], rows)
            + source(f"one {devices(used)}", dates(used),
                     f"PRECISIONS={prec} {E2E_CMD}", ["e2e.csv"]))


def b_e2e_bf16(data):
    return e2e_grid(data, "bf16")


def b_e2e_fp32(data):
    return e2e_grid(data, "fp32")


def b_e2e_points(data):
    return str(len(data.csv("e2e.csv")))


def failed_not_since(data):
    """Rows of e2e.failed.csv with no measured row since (same size, context, precision, warm-up)."""
    keys = {(r["model.d_model"], r["model.context_length"], r["model.precision"], r["bench.warmup"])
            for r in data.csv("e2e.csv")}
    return [r for r in data.csv("e2e.failed.csv")
            if (r["model.d_model"], r["model.context_length"], r["model.precision"],
                r["bench.warmup"]) not in keys]


def b_e2e_failed(data):
    left = failed_not_since(data)
    if not left:
        return "none"
    return "; ".join(f"{name_of(r)} {r['model.precision']} T {r['model.context_length']} "
                     f"warm-up {r['bench.warmup']} ({r['status']})" for r in left)


def b_bwd_over_fwd(data):
    rows = e2e(data, "bf16", 5)
    return span([(num(r, "fwd_bwd_ms_median") - num(r, "fwd_ms_median")) / num(r, "fwd_ms_median")
                 for r in rows], unit="×")


def b_mfu_t512(data):
    first, last = e2e(data, "bf16", 5, SIZES[0], 512), e2e(data, "bf16", 5, SIZES[-1], 512)
    return (f"{100 * num(first, 'mfu'):.1f}% ({SIZES[0]}) to "
            f"{100 * num(last, 'mfu'):.1f}% ({SIZES[-1]})")


def b_fp32_tflops(data):
    return span([num(r, "tflops") for r in e2e(data, "fp32", 5)], fmt=lambda x: f"{x:.0f}",
                unit=" TFLOP/s")


def b_xl_step(data):
    return f2(num(e2e(data, "bf16", 5, "xl", 512), "step_ms_median"))


def b_big_t1024(data):
    r = e2e(data, "bf16", 5, SIZES[-1], 1024)
    return f"{num(r, 'mem_total_bytes') / GIB:.2f} GiB, {f2(num(r, 'step_ms_median'))} ms a step"


# warm-up 0 against 5, at T 512
WARM_ROWS = [("small", "bf16"), ("xl", "bf16"), ("2.7b", "bf16"), ("small", "fp32"), ("xl", "fp32")]


def b_warmup(data):
    rows, used = [], []
    for s, p in WARM_ROWS:
        cold, warm = e2e(data, p, 0, s, 512), e2e(data, p, 5, s, 512)
        used += [cold, warm]
        c = lambda r, m: (f"{f2(num(r, m + '_ms_mean'))} ± {f2(num(r, m + '_ms_std'))}, "
                          f"max {f2(num(r, m + '_ms_max'))}, median {f2(num(r, m + '_ms_median'))}")
        w = lambda r, m: f"{f2(num(r, m + '_ms_mean'))} ± {f2(num(r, m + '_ms_std'))}"
        rows.append([f"{s}, {p}", c(cold, "fwd"), w(warm, "fwd"), c(cold, "fwd_bwd"),
                     w(warm, "fwd_bwd"), c(cold, "step"), w(warm, "step")])
    return (table(["model, precision", "forward, warm-up 0", "forward, warm-up 5",
                   "fwd+bwd, warm-up 0", "fwd+bwd, warm-up 5", "step, warm-up 0", "step, warm-up 5"],
                  rows)
            + source(f"one {devices(used)}", dates(used), E2E_CMD, ["e2e.csv"]))


def first_call_extra(data, prec, metric):
    """max - median of the cold runs (the first repetition pays the start-up) over every size at T 512."""
    return [num(r, metric + "_ms_max") - num(r, metric + "_ms_median")
            for r in e2e(data, prec, 0) if r["model.context_length"] == "512"]


def b_cold_fwd_bf16(data):
    return span(first_call_extra(data, "bf16", "fwd"), fmt=lambda x: f"{x:.0f}", unit=" ms")


def b_cold_fwd_fp32(data):
    return span(first_call_extra(data, "fp32", "fwd"), fmt=lambda x: f"{x:.0f}", unit=" ms")


def b_cold_median_shift(data):
    shifts = []
    for p in ("bf16", "fp32"):
        for cold in e2e(data, p, 0):
            warm = e2e(data, p, 5, name_of(cold), cold["model.context_length"])
            for m in ("fwd", "fwd_bwd", "step"):
                shifts.append(abs(num(cold, m + "_ms_median") / num(warm, m + "_ms_median") - 1))
    return f"{100 * max(shifts):.1f}%"


def b_mp_ratio(data):
    rows = []
    for s in SIZES:
        rows.append([s] + [f"{num(e2e(data, 'fp32', 5, s, t), 'step_ms_median') / num(e2e(data, 'bf16', 5, s, t), 'step_ms_median'):.2f}×"
                           for t in CONTEXTS])
    used = e2e(data, "fp32", 5) + e2e(data, "bf16", 5)
    return (table(["model", *(f"T {t}" for t in CONTEXTS)], rows)
            + source(f"one {devices(used)}", dates(used), E2E_CMD, ["e2e.csv"]))


def b_xl_tflops(data):
    b, f = e2e(data, "bf16", 5, "xl", 512), e2e(data, "fp32", 5, "xl", 512)
    return (f"{num(b, 'tflops'):.0f} TFLOP/s in bf16 ({100 * num(b, 'mfu'):.1f}% MFU) against "
            f"{num(f, 'tflops'):.0f} TFLOP/s in fp32")


# ---- flash against naive attention in the whole model, and against PyTorch ---------------------------

BENCH_CMD = "scripts/bench_vs_torch.sh, then ATTENTION=naive TORCH_MODES= scripts/bench_vs_torch.sh"


def latest_bench(data, attention):
    """The latest bench_lmtrain row of each model size with this attention."""
    out = {}
    for r in data.csv("bench_lmtrain.csv"):
        if r["model.attention"] == attention and r["model.context_length"] == "512":
            out[name_of(r)] = r
    return out


def b_flash_vs_naive(data):
    flash, naive = latest_bench(data, "flash"), latest_bench(data, "naive")
    rows, used = [], []
    for s in sorted(set(flash) & set(naive), key=size_order):
        f, n = flash[s], naive[s]
        used += [f, n]
        rows.append([s, f"{num(n, 'fwd_ms_median') / num(f, 'fwd_ms_median'):.2f}×",
                     f"{num(n, 'fwd_bwd_ms_median') / num(f, 'fwd_bwd_ms_median'):.2f}×",
                     f"{num(n, 'step_ms_median') / num(f, 'step_ms_median'):.2f}×",
                     f"{num(n, 'mem_total_bytes') / MIB:,.0f} / {num(f, 'mem_total_bytes') / MIB:,.0f}"])
    return (table(["model", "forward, naive / flash", "fwd+bwd, naive / flash",
                   "full step, naive / flash", "step memory MiB, naive / flash"], rows)
            + source(f"one {devices(used)}", dates(used), BENCH_CMD, ["bench_lmtrain.csv"]))


def latest_torch(data, size, compiled):
    rows = [r for r in data.csv("bench_torch.csv")
            if r["label"] == f"{size}-{'compile' if compiled else 'eager'}"]
    if not rows:
        raise Missing(f"bench_torch.csv: no {size} rows")
    return rows[-1], rows


def b_torch_model(data):
    flash = latest_bench(data, "flash")
    rows, used = [], []
    for s in sorted(flash, key=size_order):
        e, _ = latest_torch(data, s, False)
        c, compiled = latest_torch(data, s, True)
        ours = flash[s]
        used += [e, c]
        # Ours against PyTorch's only where measured in one call (bench_table.beside).
        near = bench_table.beside(ours, compiled)
        rows.append([s, f2(num(e, "fwd_ms_median")), f2(num(c, "fwd_ms_median")),
                     f"{num(e, 'fwd_ms_median') / num(c, 'fwd_ms_median'):.2f}×",
                     f2(num(e, "step_ms_median")), f2(num(c, "step_ms_median")),
                     f"{num(e, 'step_ms_median') / num(c, 'step_ms_median'):.2f}×",
                     f"{num(near, 'step_ms_median') / num(ours, 'step_ms_median'):.2f}×" if near
                     else "n/a (not measured in one call)"])
    return (table(["model", "forward ms, eager", "forward ms, compiled", "compile speed-up",
                   "full step ms, eager", "full step ms, compiled", "compile speed-up",
                   "lmtrain (flash) faster than compiled, full step"], rows)
            + source(f"one {devices(used, 'gpu_name')}", dates(used, "date"), "scripts/bench_vs_torch.sh",
                     ["bench_torch.csv", "bench_lmtrain.csv"]))


def b_torch_eager_spread(data):
    parts = []
    for s in sorted(latest_bench(data, "flash"), key=size_order):
        _, rows = latest_torch(data, s, False)
        vals = [num(r, "step_ms_median") for r in rows]
        parts.append(f"{s} {min(vals):.0f}–{max(vals):.0f}")
    return ", ".join(parts)


# ---- kernel profiles ----------------------------------------------------------------------------------

def kernels(data, name):
    """{'header': {...}, phase: [(ms, pct, calls, kernel)], phase + '_total': ms}"""
    text = data.text(name)
    out = {}
    m = re.search(r"^forward\s+[\d.]+\s+[\d.]+\s+([\d.]+)", text, re.M)
    out["fwd_median"] = float(m.group(1))
    m = re.search(r"^step \(with AdamW\)\s+[\d.]+\s+[\d.]+\s+([\d.]+)", text, re.M)
    out["step_median"] = float(m.group(1))
    m = re.search(r"step phases \(median ms\): forward ([\d.]+), backward ([\d.]+), optimizer ([\d.]+)", text)
    out["phases"] = tuple(float(x) for x in m.groups())
    out["device"] = re.search(r"^== lmtrain bench: \S+ on (.*?), ", text, re.M).group(1)
    for phase, total, body in re.findall(
            r"^top kernels, (\w+) \(one pass, ([\d.]+) ms of kernels in all\)\n.*?\n((?:\s+[\d.]+\s+[\d.]+%\s+\d+\s+.*\n?)+)",
            text, re.M):
        out[phase + "_total"] = float(total)
        out[phase] = [(float(a), float(b), int(c), k.strip()) for a, b, c, k in
                      re.findall(r"^\s+([\d.]+)\s+([\d.]+)%\s+(\d+)\s+(.*)$", body, re.M)]
    for phase in ("forward", "backward", "optimizer"):
        if phase not in out:
            raise Missing(f"{name}: no kernel table for {phase}")
    # Each phase's span and the GPU's idle time in it, in the phases' order (profiles since bench
    # printed them; with the replay, "graphs": true).
    spans = re.findall(r"^  first kernel's start to last one's end ([\d.]+) ms, the GPU idle between "
                       r"kernels for ([\d.]+) ms", text, re.M)
    for phase, (span, idle) in zip(("forward", "backward", "optimizer"), spans):
        out[phase + "_span"], out[phase + "_idle"] = float(span), float(idle)
    out["graphs"] = "forward and backward as CUDA graphs" in text
    return out


KFLASH, KNAIVE = "kernels_xl_bf16_flash.txt", "kernels_xl_bf16_naive.txt"


def kernel_table(data, name, phase, top):
    k = kernels(data, name)
    device, date, cmd = data.provenance(name)
    rows = [[f"{ms:.3f}", f"{pct:.1f}%", calls, f"`{kern}`"] for ms, pct, calls, kern in k[phase][:top]]
    return (table(["ms", f"% of the {phase}'s kernel time", "calls", "kernel"], rows)
            + source(device, date, cmd, [name]))


def replayed_kernels(data, name):
    """kernels(data, name) of a profile taken with CUDA graphs, with each phase's idle time."""
    k = kernels(data, name)
    if not k["graphs"] or "forward_idle" not in k:
        raise Missing(f"{name}: not profiled with CUDA graphs, or no idle time")
    return k


def b_kernels_fwd(data):
    return kernel_table(data, KFLASH, "forward", 11)


def b_kernels_bwd(data):
    return kernel_table(data, KFLASH, "backward", 12)


def b_kprof_fwd(data):
    k = replayed_kernels(data, KFLASH)
    row = e2e(data, "bf16", 5, "xl", 512)
    grid_dev, prof_dev = row["device_name"], data.provenance(KFLASH)[0].removeprefix("one ")
    on = ("", "") if grid_dev == prof_dev else (f" on one {grid_dev}", f" on one {prof_dev}")
    return (f"{f2(num(row, 'fwd_ms_median'))} ms (the e2e grid's median{on[0]}, §1.1.3(b), forward "
            f"launched kernel by kernel); in the profiled run{on[1]}, forward and backward replayed "
            f"as CUDA graphs, the forward takes "
            f"{k['fwd_median']:.2f} ms and its kernels {k['forward_total']:.2f} ms, "
            f"{100 * k['forward_total'] / k['fwd_median']:.0f}% of it: from its first kernel's start to "
            f"its last one's end ({k['forward_span']:.2f} ms) the GPU sits idle between kernels for "
            f"{k['forward_idle']:.2f} ms, and the backward for {k['backward_idle']:.2f} of "
            f"{k['backward_span']:.2f} ms")


def b_kprof_top(data):
    ms, pct, calls, kern = kernels(data, KFLASH)["forward"][0]
    return f"`{kern}`: {ms:.2f} ms in {calls} calls ({pct:.1f}% of the forward's kernel time)"


def nonmatmul(k, phase):
    return [(ms, pct, calls, kern) for ms, pct, calls, kern in k[phase] if not kern.startswith("nvjet")]


def b_kprof_other(data):
    k = kernels(data, KFLASH)
    rest = nonmatmul(k, "forward")
    top = ", ".join(f"`{kern}` {ms:.2f} ms ({pct:.1f}%)" for ms, pct, _, kern in rest[:4])
    return f"{top}; all kernels other than cuBLASLt's: {sum(x[0] for x in rest):.2f} of {k['forward_total']:.2f} ms"


def param_count(data, size):
    for r in data.csv("memory_plan.csv"):
        if name_of(r) == size:
            return int(r["param_count"])
    raise Missing(f"memory_plan.csv: no {size} row")


def b_kprof_step(data):
    k = kernels(data, KFLASH)
    f, b, o = (100 * x / sum(k["phases"]) for x in k["phases"])
    return f"forward {f:.0f}%, backward {b:.0f}%, optimizer {o:.0f}%"


ADAMW_BYTES = 16 + 14  # per parameter: reads fp32 parameter, gradient, m, v; writes the three and a bf16 copy


def b_kprof_adamw(data):
    k = kernels(data, KFLASH)
    (ms, _, calls, kern), = k["optimizer"][:1]
    n = param_count(data, "xl")
    gb = ADAMW_BYTES * n / 1e9
    return (f"`{kern}`, {calls} call, {ms:.2f} ms over {n / 1e9:.2f} G parameters: "
            f"{gb:.0f} GB moved, {gb / ms:.2f} TB/s")


def b_softmax_table(data):
    k = kernels(data, KNAIVE)
    d, L = model_shape(KNAIVE.split("_")[1])  # kernels_<size>_...
    hdr = re.search(r"batch (\d+) x context (\d+)", data.text(KNAIVE))
    B, T = int(hdr.group(1)), int(hdr.group(2))
    flops = 2 * B * T * T * d * L  # one of QK^T or PV over the full T x T, every layer
    per_seq = [x for x in k["forward"] if x[2] == B * L and x[3].startswith("nvjet")]
    soft = [x for x in k["forward"] if x[3].startswith("softmax_fwd")]
    if len(per_seq) != 2 or len(soft) != 1:
        raise Missing(f"{KNAIVE}: expected two {B * L}-call GEMMs and one softmax_fwd kernel")
    rows = [[f"attention matmul `{kern}` ({calls} calls)", f"{ms:.2f}", f"{flops / 1e9:.0f} G",
             f"{flops / ms / 1e9:.0f} TFLOP/s"] for ms, _, calls, kern in per_seq]
    ms, _, calls, kern = soft[0]
    rows.append([f"causal softmax `{kern}` ({calls} calls)", f"{ms:.2f}", "a few per score", "–"])
    device, date, cmd = data.provenance(KNAIVE)
    return (table(["forward, all layers", "ms", "FLOPs", "rate"], rows)
            + source(device, date, cmd, [KNAIVE]))


def b_softmax_ratio(data):
    k = kernels(data, KNAIVE)
    B = int(re.search(r"batch (\d+) x", data.text(KNAIVE)).group(1))
    L = model_shape(KNAIVE.split("_")[1])[1]
    mm = sum(x[0] for x in k["forward"] if x[2] == B * L and x[3].startswith("nvjet"))
    soft = sum(x[0] for x in k["forward"] if x[3].startswith("softmax_fwd"))
    bsoft = sum(x[0] for x in k["backward"] if x[3].startswith("softmax_bwd"))
    return (f"{soft / mm:.2f}× as long as both attention matmuls together in the forward "
            f"({soft:.2f} against {mm:.2f} ms); its backward kernel takes {bsoft:.2f} ms")


# ---- memory ------------------------------------------------------------------------------------------

def b_peak_memory(data):
    rows, used = [], []
    for s in SIZES:
        r = e2e(data, "bf16", 5, s, 512)
        used.append(r)
        cells = [s, f"{num(r, 'mem_forward_bytes') / MIB:,.0f}", f"{num(r, 'mem_total_bytes') / MIB:,.0f}"]
        for compiled in (False, True):
            try:
                t, _ = latest_torch(data, s, compiled)
                cells.append(f"{num(t, 'peak_mem_fwd_bytes') / MIB:,.0f} / {num(t, 'peak_mem_step_bytes') / MIB:,.0f}")
            except Missing:
                cells.append("not measured")
        rows.append(cells)
    return (table(["Model Size", "Forward Pass (MiB)", "Full Training Step (MiB)",
                   "PyTorch eager, fwd / step (MiB)", "torch.compile, fwd / step (MiB)"], rows)
            + source(f"one {devices(used)}", dates(used), f"{E2E_CMD} (lmtrain); scripts/bench_vs_torch.sh (PyTorch)",
                     ["e2e.csv", "bench_torch.csv"]))


def plan_errors(data, name):
    """Errors (%) of plan mode against the measured bytes, forward and step, per row of a *_vs_plan.md,
    with the row's precision."""
    out = []
    for line in data.text(name).splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 9 and cells[6].endswith("%") and cells[6] != "error":
            out.append((cells[2], float(cells[6].rstrip("%")), float(cells[8].rstrip("%"))))
    if not out:
        raise Missing(f"{name}: no rows")
    return out


def b_plan_exact(data):
    errs = [e for p, f, s in plan_errors(data, "e2e_vs_plan.md") if p == "bf16" for e in (f, s)]
    n = sum(1 for p, _, _ in plan_errors(data, "e2e_vs_plan.md") if p == "bf16")
    return f"{n} bf16 points, largest error {max(abs(e) for e in errs):.2f}%"


def b_plan_fp32(data):
    errs = [s for p, _, s in plan_errors(data, "e2e_vs_plan.md") if p == "fp32"]
    return f"{min(errs):+.2f}% to {max(errs):+.2f}%"


def b_mem_precision(data):
    rows, used = [], []
    for s in SIZES:
        for t in (512, 1024):
            f, b = e2e(data, "fp32", 5, s, t), e2e(data, "bf16", 5, s, t)
            used += [f, b]
            g = lambda r, c: f"{num(r, c) / GIB:.2f}"
            rows.append([s, t, f"{g(f, 'mem_forward_bytes')} / {g(f, 'mem_total_bytes')}",
                         f"{g(b, 'mem_forward_bytes')} / {g(b, 'mem_total_bytes')}",
                         f"{100 * (num(b, 'mem_total_bytes') / num(f, 'mem_total_bytes') - 1):+.1f}%"])
    return (table(["model", "T", "fp32, forward / step GiB", "bf16, forward / step GiB",
                   "bf16 step against fp32"], rows)
            + source(f"one {devices(used)}", dates(used), E2E_CMD, ["e2e.csv"]))


def plan_row(data, size, prec, ctx):
    for r in data.csv("memory_plan.csv"):
        if (name_of(r) == size and r["model.precision"] == prec
                and r["model.context_length"] == str(ctx) and r["model.attention"] == "flash"):
            return r
    raise Missing(f"memory_plan.csv: no {size} {prec} T {ctx} row")


def b_residual(data):
    parts = []
    for size in ("xl", SIZES[-1]):
        r = e2e(data, "bf16", 5, size, 512)
        B, T, d, L = (int(r[k]) for k in ("train.batch_size", "model.context_length", "model.d_model",
                                           "model.num_layers"))
        one = B * T * d * 4
        parts.append(f"{size}: {B} × {T} × {d} × 4 B = {one:,} B = {one / MIB:.1f} MiB, and "
                     f"{2 * L + 1} of them saved, {(2 * L + 1) * one / GIB:.2f} GiB")
    return "; ".join(parts)


def b_allocations(data):
    r = plan_row(data, "xl", "bf16", 512)
    g = lambda col: int(r[col])
    bf16_copy = g("forward_cuda_bytes") - g("params_bytes") - g("activations_cuda_bytes")
    workspace = g("total_cuda_bytes") - g("forward_cuda_bytes") - g("grads_bytes") - g("optimizer_bytes")
    rows = [["parameters, fp32 (one flat buffer)", f"{g('params_bytes') / GIB:.2f}"],
            ["their bf16 copy (what the matmuls read)", f"{bf16_copy / GIB:.2f}"],
            ["gradients, fp32 (one flat buffer)", f"{g('grads_bytes') / GIB:.2f}"],
            ["AdamW m and v, fp32", f"{g('optimizer_bytes') / GIB:.2f}"],
            ["activation arena (every saved tensor, carved from one allocation)",
             f"{g('activations_cuda_bytes') / GIB:.2f}"],
            ["workspace (backward's scratch for one layer, operand slots, ...)", f"{workspace / GIB:.2f}"],
            ["total on the GPU", f"{g('total_cuda_bytes') / GIB:.2f}"]]
    return (table(["xl, bf16, 4 × 512, flash", "GiB"], rows)
            + source("plan mode (no device: a prediction, equal to the allocator where measured)",
                     dates([r]), "PLOT_ONLY=1 CSV=results/e2e.csv scripts/sweep_memory.sh", ["memory_plan.csv"],
                     verb="computed"))


def b_memtl(data):
    rows = data.csv("memory_timeline_torch.csv")
    b = [int(r["allocated_bytes"]) for r in rows]
    end_fwd = max(i for i, r in enumerate(rows) if r["phase"] == "forward")
    device, date, cmd = data.provenance("memory_timeline_torch.csv")
    return (f"starts at {b[0] / GIB:.1f} GiB, rises through the forward to {max(b) / GIB:.1f} GiB "
            f"(its peak, at event {b.index(max(b)):,} of {len(b):,}; the forward ends at {end_fwd:,}) "
            f"and ends the step at {b[-1] / GIB:.1f} GiB, its lowest point {min(b) / GIB:.1f} GiB")


def b_memtl_source(data):
    d1, t1, c1 = data.provenance("memory_timeline_lmtrain.json")
    return source(d1, t1, c1, ["memory_timeline_lmtrain.json", "memory_timeline_torch.csv",
                               "memory_timeline.png"]).strip()


# ---- mixed precision (PyTorch) ----------------------------------------------------------------------

MP = "mixed_precision_gpu.md"


def md_section_table(data, name, heading):
    """The first markdown table after a heading that starts with `heading`."""
    text = data.text(name)
    at = text.find("## " + heading)
    if at < 0:
        raise Missing(f"{name}: no section '{heading}'")
    lines = text[at:].splitlines()[1:]
    start = next(i for i, l in enumerate(lines) if l.startswith("|"))
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    return "\n".join(lines[start:end])


def mp_source(data, name):
    m = re.search(r"Command: `(.*?)`.*?\n(.*?); (\S+)$", data.text(name), re.M | re.S)
    return source(m.group(2).strip(), m.group(3)[:10], m.group(1), [name])


def b_mp_accum(data):
    return md_section_table(data, MP, "Accumulation") + mp_source(data, MP)


def b_mp_toy_cuda(data):
    return md_section_table(data, MP, 'Toy model under torch.autocast(device_type="cuda"') + mp_source(data, MP)


def b_mp_layernorm(data):
    return md_section_table(data, MP, "Layer norm statistics") + mp_source(data, MP)


# ---- attention ------------------------------------------------------------------------------------------

ATT_IMPLS = [("lmtrain naive", "naive (ours)"), ("torch naive", "naive (PyTorch)"),
             ("lmtrain flash", "flash (ours)"), ("lmtrain flash-mma", "flash-mma (ours)"),
             ("torch sdpa-flash", "SDPA flash"), ("torch sdpa-cudnn", "SDPA cuDNN")]


def attention_rows(data, batch=1, heads=16):
    """The grid of one batch x heads (the study's B 1 x H 16 unless asked): {key: {impl: row}}."""
    ours = attention_table.latest(data.path("attention_lmtrain.csv"), "lmtrain ")
    torch = attention_table.latest(data.path("attention_torch.csv"), "torch ")
    return {k: {**ours.get(k, {}), **torch.get(k, {})} for k in set(ours) | set(torch)
            if k[2:4] == (batch, heads)}


def att_cell(r, col="fwd_bwd_ms"):
    if r is None:
        return "–"
    return r["status"].upper() if r["status"] != "ok" else f"{float(r[col]):.2f}"


def att_mem(r):
    if r is None or r["status"] != "ok":
        return "–"
    b = float(r["peak_bytes"])
    return f"{b / GIB:.1f} GiB" if b >= GIB else f"{b / MIB:.0f} MiB"


def b_attention(data):
    rows, used = [], []
    grid = attention_rows(data)
    for key in sorted(k for k in grid if k[4] >= 4096 and k[5] in (64, 128)):
        r = grid[key]
        used += list(r.values())
        rows.append([key[4], key[5], *(att_cell(r.get(i)) for i, _ in ATT_IMPLS),
                     att_mem(r.get("lmtrain naive")), att_mem(r.get("lmtrain flash"))])
    lm = [r for r in used if "device_name" in r]
    tr = [r for r in used if "gpu_name" in r]
    return (table(["T", "head dim", *(n for _, n in ATT_IMPLS), "naive peak (ours)", "flash peak (ours)"], rows)
            + source(f"one {devices(lm)}", f"{dates(lm)} (ours), {dates(tr, 'date')} (PyTorch)",
                     "scripts/attention_vs_torch.sh", ["attention_lmtrain.csv", "attention_torch.csv", "attention.md"]))


def b_attention_b8(data):
    """The assignment's grid: batch 8, one head; forward and backward apart."""
    rows, used = [], []
    grid = attention_rows(data, 8, 1)
    if not grid:
        raise Missing("attention: no rows of batch 8 x 1 head")
    impls = [("lmtrain naive", "naive (ours)"), ("lmtrain flash", "flash (ours)"),
             ("torch naive", "naive (PyTorch)")]
    for key in sorted(grid):
        r = grid[key]
        used += list(r.values())
        rows.append([key[4], key[5],
                     *(f"{att_cell(r.get(i), 'fwd_ms')} / {att_cell(r.get(i), 'bwd_ms')}" for i, _ in impls),
                     att_mem(r.get("lmtrain naive")), att_mem(r.get("lmtrain flash"))])
    lm = [r for r in used if "device_name" in r]
    tr = [r for r in used if "gpu_name" in r]
    return (table(["T", "head dim", *(f"{n}: forward / backward ms" for _, n in impls),
                   "naive peak (ours)", "flash peak (ours)"], rows)
            + source(f"one {devices(lm)}", f"{dates(lm)} (ours), {dates(tr, 'date')} (PyTorch)",
                     "BATCH=8 HEADS=1 scripts/attention_vs_torch.sh",
                     ["attention_lmtrain.csv", "attention_torch.csv", "attention.md",
                      "attention_fwd_bwd_b8_h1.png"]))


def att_ratios(data, theirs, col="fwd_bwd_ms", min_t=4096, dims=(64, 128)):
    out = []
    for key, r in attention_rows(data).items():
        a, b = r.get("lmtrain flash"), r.get(theirs)
        if key[4] >= min_t and key[5] in dims and a and b and a["status"] == b["status"] == "ok":
            out.append(float(b[col]) / float(a[col]))
    if not out:
        raise Missing(f"attention: no rows with both lmtrain flash and {theirs}")
    return out


def b_att_vs_naive(data):
    return span(att_ratios(data, "lmtrain naive"), unit="×")


def att_kernel_ratios(data, theirs, part="both", min_t=4096, dims=(64, 128)):
    """Their kernels' own time over ours (the *_kernel_ms columns; part: fwd, bwd or both), where
    both rows have it, at head dims 64 and 128 from T 4096."""
    parts = ("fwd", "bwd") if part == "both" else (part,)
    out = []
    for key, r in attention_rows(data).items():
        a, b = r.get("lmtrain flash"), r.get(theirs)
        mine, theirs_ms = attention_table.kernels(a, parts), attention_table.kernels(b, parts)
        if key[4] >= min_t and key[5] in dims and mine and theirs_ms:
            out.append(theirs_ms / mine)
    if not out:
        raise Missing(f"attention: no rows with both lmtrain flash's and {theirs}'s kernel times")
    return out


def b_att_vs_sdpa(data):
    return span(att_kernel_ratios(data, "torch sdpa-flash"), unit="×")


def b_att_vs_cudnn(data):
    return span(att_kernel_ratios(data, "torch sdpa-cudnn"), unit="×")


def b_att_vs_cudnn_fwd(data):
    return span(att_kernel_ratios(data, "torch sdpa-cudnn", "fwd"), unit="×")


def b_att_vs_cudnn_bwd(data):
    return span(att_kernel_ratios(data, "torch sdpa-cudnn", "bwd"), unit="×")


def b_att_naive_peak(data):
    grid = attention_rows(data)
    ok = [(k, r["lmtrain naive"]) for k, r in grid.items()
          if "lmtrain naive" in r and r["lmtrain naive"]["status"] == "ok"]
    k, r = max(ok, key=lambda kr: (kr[0][4], kr[0][5]))
    return f"{att_mem(r)} at T {k[4]}, head dim {k[5]}"


def b_att_short(data):
    """Every head dim at T up to 1024: ours against the faster SDPA backend."""
    out = []
    for key, r in attention_rows(data).items():
        a = r.get("lmtrain flash")
        if key[4] <= 1024 and a and a["status"] == "ok":
            best = min(float(r[i]["fwd_bwd_ms"]) for i in ("torch sdpa-flash", "torch sdpa-cudnn")
                       if i in r and r[i]["status"] == "ok")
            out.append(best / float(a["fwd_bwd_ms"]))
    return span(out, unit="×")


def att_short_kernels(data, head_dims):
    """b_att_short with the kernels alone (the *_kernel_ms columns, forward + backward), at these
    head dims."""
    out = []
    for key, r in attention_rows(data).items():
        ours = attention_table.kernels(r.get("lmtrain flash"))
        theirs = [attention_table.kernels(r.get(i))
                  for i in ("torch sdpa-flash", "torch sdpa-cudnn")]
        if key[4] <= 1024 and key[5] in head_dims and ours and all(theirs):
            out.append(min(theirs) / ours)
    if not out:
        raise Missing(f"attention: no rows up to T 1024 at head dims {head_dims} with the kernels' "
                      "own times")
    return span(out, unit="×")


def b_att_short_kernels_wgmma(data):  # flash's Hopper kernels' head dims
    return att_short_kernels(data, (64, 128))


def b_att_short_kernels_mma(data):  # the mma.sync kernels'
    return att_short_kernels(data, (16, 32))


# The models' own attention shapes (head dim 64): (batch, heads, T, the model).
MODEL_SHAPES = [(4, 25, 512, "xl, batch 4"), (16, 25, 512, "xl, batch 16"),
                (16, 12, 1024, "gpt2-small, batch 16")]


def b_att_models(data):
    """Ours beside SDPA at the models' shapes (rows that attention_vs_torch.sh wrote for them)."""
    rows, used = [], []
    for b, h, t, model in MODEL_SHAPES:
        r = attention_rows(data, b, h).get(("bf16", "causal", b, h, t, 64), {})
        a, cudnn = r.get("lmtrain flash"), r.get("torch sdpa-cudnn")
        if not a or not cudnn:
            continue
        used += list(r.values())
        ms = [float(a["fwd_ms"]), float(a["bwd_ms"])]
        ours_k, cudnn_k = attention_table.kernels(a), attention_table.kernels(cudnn)
        rows.append([f"{b} × {h}", t, model, " / ".join(f"{x:.4f}" for x in ms),
                     f"{float(a['fwd_tflops']):.0f}", att_cell(r.get("torch sdpa-flash")),
                     att_cell(cudnn), f"{float(cudnn['fwd_bwd_ms']) / float(a['fwd_bwd_ms']):.1f}×",
                     f"{ours_k:.4f} / {cudnn_k:.4f}" if ours_k and cudnn_k else "–",
                     f"{cudnn_k / ours_k:.1f}×" if ours_k and cudnn_k else "–"])
    if not rows:
        raise Missing("attention: no rows at the models' shapes")
    lm = [r for r in used if "device_name" in r]
    tr = [r for r in used if "gpu_name" in r]
    return (table(["B × H", "T", "model", "flash (ours): forward / backward ms", "forward TFLOP/s",
                   "SDPA flash: both ms", "SDPA cuDNN: both ms", "cuDNN / ours",
                   "kernels alone, forward + backward: ours / cuDNN ms", "cuDNN / ours, kernels"],
                  rows)
            + source(f"one {devices(lm)}", f"{dates(lm)} (ours), {dates(tr, 'date')} (PyTorch)",
                     'for s in "4 25 512" "16 25 512" "16 12 1024"; do set -- $s; BATCH=$1 HEADS=$2 '
                     "SEQ_LENS=$3 HEAD_DIMS=64 scripts/attention_vs_torch.sh; done",
                     ["attention_lmtrain.csv", "attention_torch.csv", "attention.md"]))


COMPILED = "attention_torch_compiled.csv"


def b_compiled_attention(data):
    rows = data.csv(COMPILED)
    by = {}
    for r in rows:
        by.setdefault((int(r["seq_len"]), int(r["head_dim"])), {})[r["impl"]] = r
    out = []
    for (t, d), r in sorted(by.items()):
        n, c, s = r.get("naive"), r.get("naive-compiled"), r.get("sdpa-flash")
        out.append([t, d, f"{att_cell(n, 'fwd_ms')} / {att_cell(n)}", f"{att_cell(c, 'fwd_ms')} / {att_cell(c)}",
                    att_cell(s), f"{att_mem(n)} / {att_mem(c)}"])
    return (table(["T", "head dim", "naive fwd / fwd+bwd ms", "compiled fwd / fwd+bwd ms",
                   "SDPA flash fwd+bwd ms", "peak, naive / compiled"], out)
            + source(f"one {devices(rows, 'gpu_name')}", dates(rows, "date"),
                     "python3 tests/reference/torch_reference.py attention --seq-lens 1024 4096 --head-dims 64 128 "
                     "--masks causal --warmup 3 --iters 10 --impls naive naive-compiled torch-flash sdpa-flash "
                     f"--csv results/{COMPILED}", [COMPILED]))


def compiled_pairs(data, t):
    by = {}
    for r in data.csv(COMPILED):
        if int(r["seq_len"]) == t:
            by.setdefault(int(r["head_dim"]), {})[r["impl"]] = r
    return by


def b_compiled_gain(data):
    by = compiled_pairs(data, 4096)
    speed = [float(r["naive"]["fwd_bwd_ms"]) / float(r["naive-compiled"]["fwd_bwd_ms"]) for r in by.values()]
    mem = [1 - float(r["naive-compiled"]["peak_bytes"]) / float(r["naive"]["peak_bytes"]) for r in by.values()]
    return f"{span(speed, unit='×')} faster and its peak memory {span(mem, fmt=lambda x: f'{100 * x:.0f}', unit='%')} lower"


def b_torch_flash(data):
    parts = []
    for t in sorted({int(r["seq_len"]) for r in data.csv(COMPILED)}):
        by = compiled_pairs(data, t)
        r = by.get(64, {})
        if "torch-flash" in r:
            parts.append(f"{float(r['torch-flash']['fwd_ms']):.0f} ms at T {t}")
    ratio = [float(r["torch-flash"]["fwd_ms"]) / float(r["naive"]["fwd_ms"])
             for t in (1024, 4096) for r in compiled_pairs(data, t).values() if "torch-flash" in r]
    return f"{' and '.join(parts)} (head dim 64), {span(ratio, fmt=lambda x: f'{x:.0f}', unit='×')} the naive forward's time"


# ---- all-reduce ------------------------------------------------------------------------------------------

def allreduce(data, backend, world):
    return {int(r["size_bytes"]): r for r in data.csv("allreduce.csv")
            if r["allreduce.backend"] == backend and r["world_size"] == str(world)}


def ar_cell(r):
    if r is None:
        return "not measured"
    us = float(r["time_us"])
    t = f"{us:.0f} µs" if us < 1000 else f"{us / 1000:.2f} ms" if us < 1e6 else f"{us / 1e6:.2f} s"
    return f"{float(r['busbw_gbs']):.1f} ({t})"


def size_label(b):
    return f"{b // GIB} GiB" if b >= GIB else f"{b // MIB} MiB"


def b_allreduce_2(data):
    n, m = allreduce(data, "nccl", 2), allreduce(data, "mpi", 2)
    rows = [[size_label(s), ar_cell(n.get(s)), ar_cell(m.get(s))] for s in sorted(set(n) | set(m))]
    used = list(n.values()) + list(m.values())
    return (table(["size", "NCCL, GPU buffers", "MPI, host buffers"], rows)
            + source(f"2 ranks: {devices(n.values())} (NCCL), its host CPU (MPI)", dates(used),
                     'MPIRUN="mpirun -q --oversubscribe --bind-to none -x NCCL_NVLS_ENABLE=0" scripts/sweep_allreduce.sh',
                     ["allreduce.csv", "allreduce.md", "allreduce_busbw.png"]))


def b_allreduce_mpi(data):
    by = {w: allreduce(data, "mpi", w) for w in (2, 4, 8)}
    failed = {(r["world_size"], r["allreduce.backend"]) for r in data.csv("allreduce.failed.csv")}
    sizes = sorted(set().union(*by.values()))
    rows = [[size_label(s)] + [ar_cell(by[w].get(s)) if s in by[w] or (str(w), "mpi") not in failed
                               else "timed out" for w in (2, 4, 8)] for s in sizes]
    used = [r for w in by.values() for r in w.values()]
    return (table(["size", "2 ranks", "4 ranks", "8 ranks"], rows)
            + source("CPU ranks of the GPU machines (2 ranks: the 2-GPU machine's; 4 and 8: the one-GPU "
                     "machine's 16 cores)", dates(used),
                     'MPIRUN="mpirun -q --bind-to none" NPS="4 8" BACKENDS=mpi TIMEOUT=110 scripts/sweep_allreduce.sh',
                     ["allreduce.csv", "allreduce.failed.csv"]))


X4_CMD = ('CSV=results/allreduce_x4.csv NPS="2 4" BACKENDS=nccl '
          'MPIRUN="mpirun -q --bind-to none -x NCCL_NVLS_ENABLE=0" scripts/sweep_allreduce.sh')


def x4(data, world):
    return {int(r["size_bytes"]): r for r in data.csv("allreduce_x4.csv")
            if r["allreduce.backend"] == "nccl" and r["world_size"] == str(world)}


def b_allreduce_x4(data):
    by = {w: x4(data, w) for w in (2, 4)}
    rows = [[size_label(s)] + [ar_cell(by[w].get(s)) for w in (2, 4)]
            for s in sorted(set(by[2]) | set(by[4]))]
    used = [r for w in by.values() for r in w.values()]
    return (table(["size", "2 ranks", "4 ranks"], rows)
            + source(f"NCCL on one machine of 4 {devices(used)} (NVLink between every pair)",
                     dates(used), X4_CMD,
                     ["allreduce_x4.csv", "allreduce_x4.md", "allreduce_x4_busbw.png"]))


def b_x4_scaling(data):
    two, four = x4(data, 2), x4(data, 4)
    lo, hi = min(two), max(two)
    t = lambda r: float(r["time_us"])
    return (f"{t(four[hi]) / t(two[hi]):.2f}× as long at {size_label(hi)} and "
            f"{t(four[lo]) / t(two[lo]):.2f}× at {size_label(lo)}, its bus bandwidth "
            f"{float(two[hi]['busbw_gbs']):.0f} → {float(four[hi]['busbw_gbs']):.0f} GB/s at "
            f"{size_label(hi)}")


def b_nccl_small(data):
    n = allreduce(data, "nccl", 2)
    return ar_cell(n[min(n)]).split("(")[1].rstrip(")") + f" for {size_label(min(n))}"


def b_nccl_peak(data):
    n = allreduce(data, "nccl", 2)
    return f"{float(n[max(n)]['busbw_gbs']):.0f} GB/s at {size_label(max(n))}"


def b_mpi_vs_nccl(data):
    n, m = allreduce(data, "nccl", 2), allreduce(data, "mpi", 2)
    lo, hi = min(n), max(n)
    r = lambda s: float(m[s]["time_us"]) / float(n[s]["time_us"])
    return f"{r(lo):.0f}× slower at {size_label(lo)} and {r(hi):.0f}× at {size_label(hi)}"


# ---- DDP ---------------------------------------------------------------------------------------------

DDP_CMD = ('MPIRUN="mpirun -q --bind-to none -x NCCL_NVLS_ENABLE=0" TIMEOUT=120 '
           'scripts/sweep_ddp.sh')


DDP_X4_CMD = ('NP=4 BUCKETS_MB="10 100 1000" CSV=results/ddp_x4.csv '
              'MPIRUN="mpirun -q --bind-to none -x NCCL_NVLS_ENABLE=0" scripts/sweep_ddp.sh')


def ddp(data, accum=1, ctas=0, stem="ddp"):
    """The rows of `accum` micro-batches per step with NCCL's own thread blocks (ddp.comm_ctas 0,
    or `ctas`), and the newest one-rank row of the same accum; from stem.csv (ddp.csv: 2 ranks,
    ddp_x4.csv: 4) and stem_1rank.csv."""
    pick = lambda rows: [r for r in rows if ddp_table.accum(r) == accum]
    rows = [r for r in pick(data.csv(f"{stem}.csv")) if int(r.get("ddp.comm_ctas") or 0) == ctas]
    one = pick(data.csv(f"{stem}_1rank.csv"))
    if not one:
        raise Missing(f"{stem}_1rank.csv: no row of grad_accum {accum}")
    return rows, one[-1]


def ddp_row(data, strategy, bucket=None):
    rows, _ = ddp(data)
    out = [r for r in rows if r["ddp.strategy"] == strategy
           and (bucket is None or float(r["ddp.bucket_mb"]) == bucket)]
    if not out:
        raise Missing(f"ddp.csv: no {strategy} row")
    return out[-1]


def ddp_strategy_table(data, stem, ranks, command, accum=1):
    """Every strategy's step, communication and scaling against one GPU at `accum` micro-batches
    a step, from stem.csv; at accum 1 each rank's optimizer state too."""
    rows, one = ddp(data, accum=accum, stem=stem)
    if not rows:
        raise Missing(f"{stem}.csv: no grad_accum {accum} row")
    state = accum == 1
    mib = lambda r: [f"{num(r, 'optimizer_bytes') / MIB:,.1f}"] if state else []
    base = num(one, "step_ms_median")
    order = {"naive": 0, "flat": 1, "overlap": 2, "bucketed": 3, "zero1": 4}
    out = [["1 GPU", "–", f2(base), "–", "–", "–"] + mib(one)]
    for r in sorted(rows, key=lambda r: (order.get(r["ddp.strategy"], 9), float(r["ddp.bucket_mb"]))):
        bucket = f"{float(r['ddp.bucket_mb']):g}" if r["ddp.strategy"] in ("bucketed", "zero1") else "–"
        out.append([r["ddp.strategy"], bucket, f2(num(r, "step_ms_median")), f2(num(r, "comm_ms")),
                    f2(num(r, "exposed_ms")), f"{100 * base / num(r, 'step_ms_median'):.1f}%"] + mib(r))
    return (table(["strategy", "bucket MB", "step ms", "comm ms", "exposed ms", "scaling vs 1 GPU"]
                  + (["optimizer MiB / rank"] if state else []), out)
            + source(f"{ranks} × {devices(rows)} over NCCL", dates(rows + [one]), command,
                     [f"{stem}.csv", f"{stem}_1rank.csv", f"{stem}.md"]))


def b_ddp_table(data):
    return ddp_strategy_table(data, "ddp", 2, DDP_CMD)


def b_ddp_table_x4(data):
    return ddp_strategy_table(data, "ddp_x4", 4, DDP_X4_CMD)


def b_ddp_x4_best(data):
    """The fastest strategy at 4 ranks and its scaling, beside the fastest at 2."""
    def best(stem):
        rows, one = ddp(data, stem=stem)
        r = min(rows, key=lambda r: num(r, "step_ms_median"))
        bucket = f" at {float(r['ddp.bucket_mb']):g} MB" if r["ddp.strategy"] in ("bucketed", "zero1") else ""
        return (f"{r['ddp.strategy']}{bucket}, {f2(num(r, 'step_ms_median'))} ms "
                f"({100 * num(one, 'step_ms_median') / num(r, 'step_ms_median'):.1f}% of linear)")
    return f"{best('ddp_x4')} at 4 ranks, where 2 had {best('ddp')}"


def b_ddp_ctas(data):
    """Bucketed and ZeRO-1 at one bucket size with NCCL's thread blocks capped, beside uncapped."""
    parts = []
    for strategy in ("bucketed", "zero1"):
        capped = {c: r for c in (8, 16) for r in ddp(data, ctas=c)[0] if r["ddp.strategy"] == strategy}
        if not capped:
            raise Missing(f"ddp.csv: no {strategy} row with ddp.comm_ctas")
        bucket = float(next(iter(capped.values()))["ddp.bucket_mb"])
        auto = ddp_row(data, strategy, bucket)
        runs = [("NCCL's choice", auto)] + [(f"{c} CTAs", r) for c, r in sorted(capped.items())]
        parts.append(f"{strategy} at {bucket:g} MB: " + ", ".join(
            f"{label} {f2(num(r, 'step_ms_median'))} ms (exposed {num(r, 'exposed_ms'):.1f})"
            for label, r in runs))
    return "; ".join(parts)


def b_ddp_accum(data):
    return ddp_strategy_table(data, "ddp", 2, DDP_CMD, accum=4)


def b_ddp_accum_x4(data):
    return ddp_strategy_table(data, "ddp_x4", 4, DDP_X4_CMD, accum=4)


def b_ddp_date(data):
    rows, one = ddp(data)
    return dates(rows + [one])


def b_naive_overhead(data):
    _, one = ddp(data)
    r = ddp_row(data, "naive")
    return (f"{num(r, 'step_ms_median') - num(one, 'step_ms_median'):.1f} ms a step over one GPU "
            f"({f2(num(r, 'step_ms_median'))} against {f2(num(one, 'step_ms_median'))} ms), "
            f"{num(r, 'exposed_ms'):.1f} ms of it waiting for communication "
            f"({100 * num(r, 'exposed_ms') / num(r, 'step_ms_median'):.0f}% of the step)")


def grad_bytes(data):
    for r in data.csv("memory_plan.csv"):
        if name_of(r) == "xl":
            return int(r["grads_bytes"])
    raise Missing("memory_plan.csv: no xl row")


def b_grad_gb(data):
    return f"{grad_bytes(data) / 1e9:.1f} GB"


def b_flat_vs_naive(data):
    n, f = ddp_row(data, "naive"), ddp_row(data, "flat")
    return (f"{f2(num(f, 'comm_ms'))} ms of communication instead of {f2(num(n, 'comm_ms'))} "
            f"({grad_bytes(data) / 1e6 / num(f, 'comm_ms'):.0f} GB/s), a step of {f2(num(f, 'step_ms_median'))} ms")


def b_overlap(data):
    _, one = ddp(data)
    r = ddp_row(data, "overlap")
    compute = num(r, "step_ms_median") - num(r, "exposed_ms")
    return (f"exposed communication {f2(num(r, 'exposed_ms'))} ms and a step of {f2(num(r, 'step_ms_median'))} ms; "
            f"the step less its waits is {compute:.1f} ms against one GPU's {num(one, 'step_ms_median'):.1f}")


def b_bucketed(data):
    rows = sorted((r for r in ddp(data)[0] if r["ddp.strategy"] == "bucketed"),
                  key=lambda r: float(r["ddp.bucket_mb"]))
    return "; ".join(f"{float(r['ddp.bucket_mb']):g} MB: {f2(num(r, 'step_ms_median'))} ms "
                     f"(comm {num(r, 'comm_ms'):.1f}, exposed {num(r, 'exposed_ms'):.1f})" for r in rows)


def b_zero1(data):
    rows, one = ddp(data)
    fastest = lambda strategy: min((r for r in rows if r["ddp.strategy"] == strategy),
                                   key=lambda r: num(r, "step_ms_median"))
    z, best = fastest("zero1"), fastest("bucketed")
    ratio = num(z, "step_ms_median") / num(best, "step_ms_median") - 1
    return (f"{num(z, 'optimizer_bytes') / MIB:,.1f} MiB of optimizer state per rank against "
            f"{num(one, 'optimizer_bytes') / MIB:,.1f}; at its best bucket size "
            f"({float(z['ddp.bucket_mb']):g} MB) a step of {f2(num(z, 'step_ms_median'))} ms with "
            f"{f2(num(z, 'exposed_ms'))} ms exposed, {100 * abs(ratio):.1f}% "
            f"{'slower' if ratio > 0 else 'faster'} than the best bucketed run "
            f"({float(best['ddp.bucket_mb']):g} MB, {f2(num(best, 'step_ms_median'))} ms)")


def bucket_model(data):
    n = allreduce(data, "nccl", 2)
    alpha = float(n[min(n)]["time_us"]) * 1e-6
    beta = max(float(r["busbw_gbs"]) for r in n.values()) * 1e9
    _, one = ddp(data)
    t_bwd = (num(one, "fwd_bwd_ms_median") - num(one, "fwd_ms_median")) * 1e-3
    s = grad_bytes(data)
    return alpha, beta, s, t_bwd


def b_bucket_model(data):
    alpha, beta, s, t_bwd = bucket_model(data)
    b_star = (s * alpha * beta) ** 0.5
    return (f"S = {s / 1e9:.1f} GB, α ≈ {alpha * 1e6:.0f} µs (the smallest all-reduce) and β ≈ "
            f"{beta / 1e9:.0f} GB/s (the largest), b* ≈ {b_star / 1e6:.0f} MB; but S / β ≈ "
            f"{s / beta * 1e3:.0f} ms < T_bwd ≈ {t_bwd * 1e3:.0f} ms (one GPU's backward)")


# ---- 4D parallelism (plan mode) -------------------------------------------------------------------------

XXL_CMD = ("for f in 1 45 46 51; do build/lmtrain --config configs/models/xxl.toml --set plan.act_shard_fraction=0.5 "
           "--set plan.device_gb=95 --set plan.fsdp=$f --csv results/plan_xxl.csv; done")


def xxl(data, fsdp):
    for r in data.csv("plan_xxl.csv"):
        if r["plan.fsdp"] == str(fsdp):
            return r
    raise Missing(f"plan_xxl.csv: no fsdp={fsdp} row")


def xxl_source(data):
    rows = data.csv("plan_xxl.csv")
    return source("plan mode (no device: arithmetic on the config)", dates(rows), XXL_CMD, ["plan_xxl.csv"],
                  verb="computed")


def b_xxl_memory(data):
    r = xxl(data, 1)
    n = int(r["param_count"])
    state = int(r["params_bytes"]) + int(r["grads_bytes"]) + int(r["optimizer_bytes"])
    rows = [[f"parameters ({n:,} × 4 B)", f"{int(r['params_bytes']):,}", f"{int(r['params_bytes']) / 1e9:.1f}"],
            ["gradients", f"{int(r['grads_bytes']):,}", f"{int(r['grads_bytes']) / 1e9:.1f}"],
            ["AdamW m and v", f"{int(r['optimizer_bytes']):,}", f"{int(r['optimizer_bytes']) / 1e9:.1f}"],
            ["master weights + gradients + optimizer", f"{state:,}", f"{state / 1e9:.1f}"],
            ["saved activations, bf16", f"{int(r['activations_bytes']):,}", f"{int(r['activations_bytes']) / 1e9:.1f}"],
            ["total", f"{int(r['total_bytes']):,}", f"{int(r['total_bytes']) / 1e9:.1f}"]]
    return table(["", "bytes", "GB"], rows) + xxl_source(data)


def b_xxl_devices(data):
    r = xxl(data, 1)
    state = int(r["params_bytes"]) + int(r["grads_bytes"]) + int(r["optimizer_bytes"])
    return (f"{state / 80e9:.2f} H100s' (80 GB) worth for the fp32 state alone, "
            f"{int(r['total_bytes']) / 80e9:.2f} with the activations")


def b_xxl_sharded(data):
    rows = []
    for f in sorted({int(r["plan.fsdp"]) for r in data.csv("plan_xxl.csv")}):
        r = xxl(data, f)
        ws = int(r["workspace_bytes"])
        rows.append([f, f"{int(r['param_count_device']):,}", f"{int(r['activations_bytes']) / 1e9:.2f}",
                     f"{ws / 1e9:.2f}", f"{int(r['total_bytes']) / 1e9:.2f}",
                     f"{(int(r['total_bytes']) - ws) / 1e9:.2f}",
                     "yes" if r["fits"] == "1" else "no", f"{int(r['comm_fsdp_bytes']) / 1e9:,.0f}"])
    return (table(["N_FSDP", "parameters per device", "activations GB", "gathered block GB",
                   "total GB", "state and activations only, GB", f"fits {xxl(data, 1)['plan.device_gb']} GB",
                   "FSDP traffic per device per step, GB"], rows) + xxl_source(data))


def b_xxl_min(data):
    rows = data.csv("plan_xxl.csv")
    budget = float(rows[0]["plan.device_gb"]) * 1e9
    no_ws = [int(r["plan.fsdp"]) for r in rows if int(r["total_bytes"]) - int(r["workspace_bytes"]) <= budget]
    return (f"N_FSDP ≥ {min(no_ws)} counting state and saved activations only, "
            f"and {rows[0]['min_fsdp']} counting also one gathered block")


# ---- the DDP timelines (CPU, GPUs) ---------------------------------------------------------------------

def timeline_source(data, suffix, command):
    """The timelines' device and date (the naive run's), the command, and their files."""
    d, t, _ = data.provenance(f"timeline_naive{suffix}.json")
    return source(d, t, command, [f"timeline_{s}{suffix}.{e}" for s in ("naive", "overlap")
                                  for e in ("json", "png")]).strip()


def b_timeline_source(data):
    return timeline_source(data, "", "scripts/ddp_timeline.sh")


def b_timeline_source_cuda(data):
    return timeline_source(data, "_cuda", 'DEVICE=cuda SIZE=xl MPIRUN="mpirun -q --bind-to none '
                           '-x NCCL_NVLS_ENABLE=0" scripts/ddp_timeline.sh')


# ---- a real vocabulary: gpt2-small beside PyTorch ------------------------------------------------------

KGPT2 = "kernels_gpt2-small_bf16_flash.txt"


def b_gpt2_table(data):
    ours, torch = data.csv("gpt2_lmtrain.csv"), data.csv("gpt2_torch.csv")
    shown = list(gpt2_table.latest(ours).values())
    return (table(gpt2_table.HEADER,
                  gpt2_table.table_rows(ours, torch, data.csv("gpt2_train.csv")))
            + source(f"one {devices(shown)}", dates(shown), "scripts/bench_gpt2.sh",
                     ["gpt2.md", "gpt2_lmtrain.csv", "gpt2_train.csv", "gpt2_torch.csv"]))


def b_llmc_table(data):
    rows = data.csv("llmc.csv")
    return (table(llmc_table.HEADER, llmc_table.table_rows(rows))
            + source(f"one {devices(rows, col='device')} a call", dates(rows),
                     "LLMC=path/to/llm.c scripts/llmc_vs_lmtrain.sh", ["llmc.md", "llmc.csv"]))


def b_gpt2_residual(data):
    latest = gpt2_table.latest(data.csv("gpt2_lmtrain.csv"))
    parts = []
    for b, t in ((16, 1024), (8, 1024)):
        a, r = latest.get((b, t, "1", "fp32")), latest.get((b, t, "1", "bf16"))
        if a is None or r is None:
            raise Missing(f"gpt2_lmtrain.csv: no graphs rows of {b} x {t} with both residual dtypes")
        parts.append(f"{f2(num(r, 'step_ms_median'))} ms against {f2(num(a, 'step_ms_median'))} "
                     f"at {b} x {t}")
    return ", ".join(parts)


def b_gpt2_train(data):
    """Train mode's steps after the first beside bench's graphs step, measured in one call."""
    latest = gpt2_table.latest(data.csv("gpt2_lmtrain.csv"))
    trained = gpt2_table.trained_beside(latest, data.csv("gpt2_train.csv"))
    if not trained:
        raise Missing("gpt2_train.csv: no train row measured beside a bench row with graphs")
    return ", ".join(f"{f2(num(trained[k], 'ms_per_step_after_first'))} ms against "
                     f"{f2(num(latest[(*k, '1', 'fp32')], 'step_ms_median'))} at {k[0]} x {k[1]}"
                     for k in sorted(trained, key=lambda k: (-k[1], -k[0])))


def b_gpt2_classifier(data):
    k = kernels(data, KGPT2)
    ms = sum(m for m, _, _, name in k["forward"] + k["backward"] if name.startswith("cross_entropy"))
    device, date, cmd = data.provenance(KGPT2)
    return f"{ms:.2f} ms ({device}, {date}, `{cmd}` → [{KGPT2}]({KGPT2}))"


def b_gpt2_idle(data):
    k = replayed_kernels(data, KGPT2)
    kernel_ms = k["forward_total"] + k["backward_total"] + k["optimizer_total"]
    return (f"{k['forward_idle']:.2f} ms of the forward's {k['forward_span']:.2f} and "
            f"{k['backward_idle']:.2f} of the backward's {k['backward_span']:.2f} (one pass each; the "
            f"profiled run's kernels {kernel_ms:.2f} ms, its step {k['step_median']:.2f})")


def clocks_run(data, model):
    """scripts/clocks.sh's run of `model` (clocks_table.summary of its samples and log), and the
    parenthesis naming its source."""
    name = f"clocks_{model}"
    s = clocks_table.summary(data.text(name + ".csv"), data.text(name + ".log"), model)
    device, date, cmd = data.provenance(name + ".md")
    return s, f"({device}, {date}, `{cmd}` → [{name}.md]({name}.md), [{name}.png]({name}.png))"


def b_gpt2_clocks(data):
    s, src = clocks_run(data, "gpt2-small")
    return (f"while bench timed {s['shape'].split(', ')[1].replace(' x ', ' × ')} (a {s['step']:.2f} ms step), "
            f"the SM clock of the busy samples had a median of {s['sm']:.0f} MHz ({s['sm_min']:.0f}–"
            f"{s['sm_max_seen']:.0f}) against the GPU's {s['sm_max']:.0f}, at a median {s['power']:.0f} W "
            f"of its {s['power_limit']:.0f} W limit, {100 * s['capped'] / s['busy']:.0f}% of them under the "
            f"software power cap {src}")


def b_att_clocks(data):
    s, src = clocks_run(data, "attention")
    fwd, bwd, both = ("–" if x is None else f"{x:.0f}" for x in s["phase_sm"])
    return (f"at T {s['T']}, head dim {s['dh']}, {s['iters']} runs each, the SM clock's median was "
            f"{fwd} MHz in the forward's runs, {bwd} in the backward's and {both} in forward + "
            f"backward's, against the GPU's {s['sm_max']:.0f}, "
            f"{100 * s['capped'] / s['busy']:.0f}% of the busy samples under the software power cap at a "
            f"median {s['power']:.0f} W {src}")


# ---- training a real model: micro-batches and AdamW's state -------------------------------------------

def b_batch_xl(data):
    rows = data.csv("batch_xl.csv")
    return (table(batch_table.HEADER, batch_table.table_rows(rows))
            + source(f"one {devices(rows)}", dates(rows), "scripts/bench_batch.sh", ["batch_xl.md", "batch_xl.csv"]))


def batch_row(data, state, batch, accum, masters="true", residual="fp32"):
    row = batch_table.newest(data.csv("batch_xl.csv")).get((residual, state, masters, batch, accum))
    if row is None:
        raise Missing(f"batch_xl.csv: no row of state {state}, masters {masters}, residual "
                      f"{residual}, {batch} x {accum}")
    return row


def b_batch_best(data):
    best = max(batch_table.newest(data.csv("batch_xl.csv")).values(), key=lambda r: float(r["mfu"]))
    held = "" if batch_table.masters(best) == "true" else " and no fp32 master weights"
    res = " and a bf16 residual stream" if bench_table.residual(best) == "bf16" else ""
    return (f"{100 * float(best['mfu']):.1f}% at {best['train.batch_size']} x "
            f"{best['train.grad_accum']} with {best['optim.state_dtype']} moments{held}{res} "
            f"({f2(num(best, 'step_ms_median'))} ms a step)")


def b_batch_default(data):
    r = batch_row(data, "fp32", 16, 1)
    return f"{100 * num(r, 'mfu'):.1f}% ({f2(num(r, 'step_ms_median'))} ms a step)"


def b_batch_accum(data):
    one, four = batch_row(data, "fp32", 16, 1), batch_row(data, "fp32", 4, 4)
    return (f"{f2(num(four, 'step_ms_median'))} ms as 4 micro-batches of 4 against "
            f"{f2(num(one, 'step_ms_median'))} ms as one of 16")


def b_adamw_bf16(data):
    a, b = batch_row(data, "fp32", 4, 1), batch_row(data, "bf16", 4, 1)
    return (f"{f2(num(b, 'optimizer_ms_median'))} ms against {f2(num(a, 'optimizer_ms_median'))} ms "
            f"(xl, the step {f2(num(a, 'step_ms_median'))} → {f2(num(b, 'step_ms_median'))} ms)")


def b_no_masters(data):
    a, b = batch_row(data, "bf16", 4, 1), batch_row(data, "bf16", 4, 1, "false")
    gib = lambda r: num(r, "mem_total_bytes") / 2**30
    return (f"AdamW {f2(num(b, 'optimizer_ms_median'))} ms against {f2(num(a, 'optimizer_ms_median'))}, "
            f"the step {f2(num(a, 'step_ms_median'))} → {f2(num(b, 'step_ms_median'))} ms and memory "
            f"{gib(a):.2f} → {gib(b):.2f} GiB (xl, 4 x 1, bf16 moments)")


def b_no_masters_split(data):
    a, b = batch_row(data, "bf16", 4, 1, "false"), batch_row(data, "bf16", 16, 1, "false")
    c, d = batch_row(data, "bf16", 4, 1), batch_row(data, "bf16", 16, 1)
    ms = lambda r: f2(num(r, "optimizer_ms_median"))
    return (f"{ms(b)} ms at 16 x 1 against {ms(a)} at 4 x 1, where with masters it takes "
            f"{ms(d)} and {ms(c)}")


def b_optimizer_state(data):
    rows = data.csv("optimizer_state.csv")
    latest = {(r["optim.state_dtype"], batch_table.masters(r),
               bench_table.residual(r)): r for r in rows}
    base = float(latest[("fp32", "true", "fp32")]["val_loss"])
    order = lambda kv: (kv[0][2] != "fp32", kv[0][1] != "true", kv[0][0] != "fp32")
    out = [[state, "yes" if held == "true" else "no", res, r["steps_run"],
            f"{float(r['val_loss']):.4f}", f"{float(r['val_loss']) - base:+.4f}",
            f"{float(r['loss_floor']):.4f}", f"{float(r['ms_per_step']):.2f}",
            f"{int(r['optimizer_bytes_rank0']) / 2**20:.0f}"]
           for (state, held, res), r in sorted(latest.items(), key=order)]
    device, date, cmd = data.provenance("optimizer_state.csv")
    return (table(["optim.state_dtype", "fp32 masters", "residual stream", "steps",
                   "validation loss", "vs fp32, masters", "entropy floor", "ms a step",
                   "AdamW state MiB"], out)
            + source(device, date, cmd, ["optimizer_state.md", "optimizer_state.csv", "optimizer_state.png"]))


# ---- the README's sample of the default job --------------------------------------------------------

def b_make_run(data):
    """make run's output as the README shows it: the run's summary lines, its first and last
    progress lines and the closing table's loss and time lines (the config echo left out)."""
    lines = data.text("make_run.log").splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith("data: ")) - 1  # after "device"
    steps = [l for l in lines if l.startswith("step ")]
    done = lines.index("== done ==")
    closing = [l for l in lines[done + 1:]
               if l.strip().startswith(("final loss", "loss floor", "val loss", "time "))]
    out = lines[start:start + 3] + [steps[0], "...", steps[-1], "", "== done =="] + closing
    device, date, cmd = data.provenance("make_run.log")
    return ("\n".join(("    " + l).rstrip() for l in out) +
            f"\n\n*{device}; {date}; `{cmd}` → [results/make_run.log](results/make_run.log).*")


# ---------------------------------------------------------------------------------------------------------

BLOCKS = {name[2:]: fn for name, fn in globals().items() if name.startswith("b_") and callable(fn)}


def fill(text, data):
    def one(m):
        name = m.group(1)
        if name not in BLOCKS:
            raise Missing(f"unknown block '{name}'")
        out = BLOCKS[name](data)
        if "\n" in out:
            out = "\n" + out + "\n"
        return f"<!-- report:{name} -->{out}<!-- /report:{name} -->"
    return BLOCK.sub(one, text)


def record(root, name, device, command):
    path = os.path.join(root, "provenance.csv")
    cols = ["file", "device", "date_utc", "command"]
    rows = []
    if os.path.exists(path):
        with open(path, newline="") as f:
            rows = [r for r in csv.DictReader(f) if r["file"] != name]
    rows.append({"file": name, "device": device, "command": command,
                 "date_utc": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")})
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, cols)
        w.writeheader()
        w.writerows(sorted(rows, key=lambda r: r["file"]))


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="compare only; exit 1 with a diff if stale")
    ap.add_argument("--results", default=os.path.join(REPO, "results"), help="REPORT.md and the data files")
    ap.add_argument("--record", metavar="FILE", help="a file under --results to note the provenance of")
    ap.add_argument("--device")
    ap.add_argument("--command")
    a = ap.parse_args(argv)
    if a.record:
        if not a.device or not a.command:
            print("report.py: --record needs --device and --command", file=sys.stderr)
            return 2
        name = os.path.basename(a.record)
        if not os.path.exists(os.path.join(a.results, name)):
            print(f"report.py: --record {a.record}: no {name} in {a.results} to note", file=sys.stderr)
            return 2
        # The scripts build the device from a run's header ("one " + what they read from it):
        # nothing read means a header not found, not a device.
        if re.fullmatch(r"\s*(one|\d+ ranks on)?\s*", a.device):
            print(f"report.py: --record {a.record}: --device \"{a.device}\" names no device", file=sys.stderr)
            return 2
        record(a.results, name, a.device, a.command)
        return 0
    # REPORT.md, and the README where --results is a repository's results/ (its make_run block).
    docs = [os.path.join(a.results, "REPORT.md")]
    readme = os.path.join(os.path.dirname(os.path.abspath(a.results)), "README.md")
    if os.path.exists(readme):
        docs.append(readme)
    data, status = Data(a.results), 0
    for doc in docs:
        try:
            with open(doc) as f:
                old = f.read()
            new = fill(old, data)
        except (Missing, OSError) as e:
            print(f"report.py: {os.path.basename(doc)}: {e}", file=sys.stderr)
            return 2
        except (KeyError, ValueError, AttributeError, StopIteration) as e:
            print(f"report.py: {os.path.basename(doc)}: the data do not have the expected form: "
                  f"{type(e).__name__}: {e}", file=sys.stderr)
            return 2
        if a.check:
            if new == old:
                print(f"report.py: {doc} matches its data")
                continue
            sys.stdout.writelines(difflib.unified_diff(old.splitlines(True), new.splitlines(True),
                                                       doc, doc + " (from the data)"))
            print(f"report.py: {doc} differs from what its data give: run scripts/report.py",
                  file=sys.stderr)
            status = 1
            continue
        if new != old:
            with open(doc, "w") as f:
                f.write(new)
        print(f"report.py: {doc}: {len(BLOCK.findall(new))} blocks")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
