#!/usr/bin/env python3
"""Summary of scripts/clocks.sh's nvidia-smi samples: over the samples in which the GPU was busy
(utilization.gpu >= 90 %), the SM clock and the power draw, and how many of them had the
software power cap among their clock-event reasons; with the step that bench mode timed
meanwhile. Plots the SM clock and the power over the run (needs matplotlib). scripts/report.py
uses summary and table_row for REPORT.md.

    scripts/clocks_table.py results/clocks_gpt2-small.csv results/clocks_gpt2-small.log \\
        results/clocks_gpt2-small.png > results/clocks_gpt2-small.md
"""
import csv
import io
import re
import statistics
import sys
from datetime import datetime

BUSY = 90  # utilization.gpu, %
POWER_CAP = 0x4  # nvmlClocksEventReasonSwPowerCap
FIELDS = ["time", "name", "sm", "sm_max", "power", "power_limit", "util", "reasons"]
HEADER = ["device", "date", "model, batch x T", "step ms (median)", "busy samples",
          "SM clock MHz, busy: median (min–max)", "max SM clock MHz", "power W, busy: median",
          "power limit W", "busy samples at the power cap"]


def samples(text):
    """The samples of clocks.sh's CSV text (nvidia-smi's header line first), in order."""
    out = []
    for r in list(csv.reader(io.StringIO(text), skipinitialspace=True))[1:]:
        if len(r) != len(FIELDS):
            continue  # a line cut short when the sampler was stopped
        s = dict(zip(FIELDS, r))
        s["time"] = datetime.strptime(s["time"], "%Y/%m/%d %H:%M:%S.%f")
        for k in ("sm", "sm_max", "power", "power_limit", "util"):
            s[k] = float(s[k])
        s["reasons"] = int(s["reasons"], 16)
        out.append(s)
    return out


def summary(csv_text, log_text, model):
    """The run's figures: bench's header and step, and the busy samples' clock and power."""
    data = samples(csv_text)
    head = re.search(r"^== lmtrain bench: \S+ on (.*?), (\w+), batch (\d+) x context (\d+)", log_text, re.M)
    step = re.search(r"^step \(with AdamW\)\s+[\d.]+\s+[\d.]+\s+([\d.]+)", log_text, re.M)
    busy = [s for s in data if s["util"] >= BUSY]
    if not head or not step or not busy:
        raise ValueError("no bench header or step line in the log, or no busy sample")
    sm = [s["sm"] for s in busy]
    return {
        "device": head.group(1), "precision": head.group(2), "date": f"{data[0]['time']:%Y-%m-%d}",
        "shape": f"{model}, {head.group(3)} x {head.group(4)}", "step": float(step.group(1)),
        "busy": len(busy), "samples": len(data), "sm": statistics.median(sm), "sm_min": min(sm),
        "sm_max_seen": max(sm), "sm_max": busy[0]["sm_max"],
        "power": statistics.median(s["power"] for s in busy), "power_limit": busy[0]["power_limit"],
        "capped": sum(1 for s in busy if s["reasons"] & POWER_CAP),
        "interval_ms": 1e3 * statistics.median((b["time"] - a["time"]).total_seconds()
                                               for a, b in zip(data, data[1:])),
        "data": data,
    }


def table_row(s):
    return [s["device"], s["date"], s["shape"], f"{s['step']:.2f}", f"{s['busy']} of {s['samples']}",
            f"{s['sm']:.0f} ({s['sm_min']:.0f}–{s['sm_max_seen']:.0f})", f"{s['sm_max']:.0f}",
            f"{s['power']:.0f}", f"{s['power_limit']:.0f}",
            f"{s['capped']} ({100 * s['capped'] / s['busy']:.0f}%)"]


def note(s):
    return (f"By scripts/clocks.sh: nvidia-smi sampled GPU 0 every {s['interval_ms']:.0f} ms while lmtrain's "
            f"bench mode ran ({s['precision']}, the config's step, forward and backward as CUDA graphs "
            f"unless GRAPHS=0); busy: utilization.gpu >= {BUSY} %; power cap: the software power cap "
            f"among clocks_event_reasons.active. nvidia-smi's power.draw is an average over a window, so it "
            f"lags the clock.")


def plot(s, path):
    import matplotlib
    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt
    data = s["data"]
    t = [(x["time"] - data[0]["time"]).total_seconds() for x in data]
    fig, ax = plt.subplots(figsize=(8, 3.5))
    ax.plot(t, [x["sm"] for x in data], color="tab:blue")
    ax.set_xlabel("s since the first sample")
    ax.set_ylabel("SM clock, MHz", color="tab:blue")
    ax.set_ylim(0, 1.1 * s["sm_max"])
    ax2 = ax.twinx()
    ax2.plot(t, [x["power"] for x in data], color="tab:red")
    ax2.axhline(s["power_limit"], color="tab:red", linestyle=":", linewidth=1)
    ax2.set_ylabel("power draw, W (dotted: the limit)", color="tab:red")
    ax2.set_ylim(0, 1.1 * s["power_limit"])
    ax.set_title(f"{s['device']}: bench, {s['shape']}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def die(msg):
    print(f"clocks_table.py: {msg}", file=sys.stderr)
    sys.exit(2)


def main(argv):
    if len(argv) != 4:
        die("usage: clocks_table.py SAMPLES.csv BENCH.log PLOT.png")
    model = re.sub(r"^.*clocks_|\.csv$", "", argv[1])
    try:
        with open(argv[1]) as f, open(argv[2]) as g:
            s = summary(f.read(), g.read(), model)
    except (OSError, ValueError) as e:
        die(f"{argv[1]}, {argv[2]}: {e}")
    print("| " + " | ".join(HEADER) + " |")
    print("|" + "---|" * len(HEADER))
    print("| " + " | ".join(table_row(s)) + " |")
    png = argv[3].split("/")[-1]
    print(f"\n{note(s)} Plot: [{png}]({png}).")
    try:
        plot(s, argv[3])
    except ImportError:
        print("clocks_table.py: no matplotlib (Debian: python3-matplotlib): no plot", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv)
