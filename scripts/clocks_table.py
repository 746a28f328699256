#!/usr/bin/env python3
"""Summary of scripts/clocks.sh's nvidia-smi samples: over the samples in which the GPU was busy
(utilization.gpu >= 90 %), the SM clock and the power draw, and how many of them had the
software power cap among their clock-event reasons; with the step that bench mode timed
meanwhile, or the forward, backward and both that attention mode timed (one point), and the SM
clock in each of those three phases, placed by their medians from the first busy sample. Plots
the SM clock and the power over the run (needs matplotlib). scripts/report.py uses summary and
table_row for REPORT.md.

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
ATT_HEADER = ["device", "date", "attention: impl dtype mask, B x H x T, head dim",
              "forward / backward / both ms (medians)", "busy samples",
              "SM clock MHz, busy: median (min–max)",
              "SM clock MHz, busy: median in the forward / backward / both runs", "max SM clock MHz",
              "power W, busy: median", "power limit W", "busy samples at the power cap"]
ATT_HEAD = re.compile(r"^== lmtrain attention: batch (\d+), heads (\d+) on (.*?); median of (\d+) after "
                      r"(\d+) warm-up ==", re.M)
ATT_ROW = re.compile(r"^(\S+)\s+(\S+)\s+(\S+)\s+(\d+)\s+(\d+) \|\s+([\d.]+)\s+([\d.]+)\s+([\d.]+) \|", re.M)


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


def phase_clocks(busy, seconds):
    """The median SM clock of the busy samples in each of consecutive phases lasting `seconds`
    from the first busy sample (None for a phase without one)."""
    start, begin, out = busy[0]["time"], 0.0, []
    for length in seconds:
        sm = [s["sm"] for s in busy if begin <= (s["time"] - start).total_seconds() < begin + length]
        out.append(statistics.median(sm) if sm else None)
        begin += length
    return out


def summary(csv_text, log_text, model):
    """The run's figures: bench's header and step (or attention mode's header and row, with the
    clock in each of its phases), and the busy samples' clock and power."""
    data = samples(csv_text)
    busy = [s for s in data if s["util"] >= BUSY]
    head = re.search(r"^== lmtrain bench: \S+ on (.*?), (\w+), batch (\d+) x context (\d+)", log_text, re.M)
    step = re.search(r"^step \(with AdamW\)\s+[\d.]+\s+[\d.]+\s+([\d.]+)", log_text, re.M)
    att, row = ATT_HEAD.search(log_text), ATT_ROW.search(log_text)
    if not busy or not ((head and step) or (att and row)):
        raise ValueError("no bench header or step line in the log (nor attention mode's header and "
                         "row), or no busy sample")
    sm = [s["sm"] for s in busy]
    if head and step:
        kind = {"kind": "bench", "device": head.group(1), "precision": head.group(2),
                "shape": f"{model}, {head.group(3)} x {head.group(4)}", "step": float(step.group(1)),
                "timed": f"{float(step.group(1)):.2f}"}
    else:
        impl, dtype, mask, T, dh = row.group(1, 2, 3, 4, 5)
        ms = [float(x) for x in row.group(6, 7, 8)]
        runs = int(att.group(4)) + int(att.group(5))
        kind = {"kind": "attention", "device": att.group(3), "precision": dtype, "T": int(T),
                "dh": int(dh), "iters": int(att.group(4)), "warmup": int(att.group(5)),
                "shape": f"{impl} {dtype} {mask}, {att.group(1)} x {att.group(2)} x {T}, head dim {dh}",
                "timed": " / ".join(f"{x:.3f}" for x in ms),
                "phase_sm": phase_clocks(busy, [runs * x / 1e3 for x in ms])}
    return {
        **kind, "date": f"{data[0]['time']:%Y-%m-%d}",
        "busy": len(busy), "samples": len(data), "sm": statistics.median(sm), "sm_min": min(sm),
        "sm_max_seen": max(sm), "sm_max": busy[0]["sm_max"],
        "power": statistics.median(s["power"] for s in busy), "power_limit": busy[0]["power_limit"],
        "capped": sum(1 for s in busy if s["reasons"] & POWER_CAP),
        "interval_ms": 1e3 * statistics.median((b["time"] - a["time"]).total_seconds()
                                               for a, b in zip(data, data[1:])),
        "data": data,
    }


def table_row(s):
    phases = []
    if s["kind"] == "attention":
        phases = [" / ".join("–" if x is None else f"{x:.0f}" for x in s["phase_sm"])]
    return [s["device"], s["date"], s["shape"], s["timed"], f"{s['busy']} of {s['samples']}",
            f"{s['sm']:.0f} ({s['sm_min']:.0f}–{s['sm_max_seen']:.0f})", *phases, f"{s['sm_max']:.0f}",
            f"{s['power']:.0f}", f"{s['power_limit']:.0f}",
            f"{s['capped']} ({100 * s['capped'] / s['busy']:.0f}%)"]


def note(s):
    if s["kind"] == "bench":
        ran = (f"bench mode ran ({s['precision']}, the config's step, forward and backward as CUDA "
               f"graphs unless GRAPHS=0)")
    else:
        ran = (f"attention mode timed one point's forward, then its backward, then both, "
               f"{s['warmup']} + {s['iters']} runs each (ATT, ITERS); each phase is placed as its "
               f"runs times their median, end to end from the first busy sample, so its edges are "
               f"approximate")
    return (f"By scripts/clocks.sh: nvidia-smi sampled GPU 0 every {s['interval_ms']:.0f} ms while lmtrain's "
            f"{ran}; busy: utilization.gpu >= {BUSY} %; power cap: the software power cap "
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
    ax.set_title(f"{s['device']}: {s['kind']}, {s['shape']}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def die(msg):
    print(f"clocks_table.py: {msg}", file=sys.stderr)
    sys.exit(2)


def main(argv):
    if len(argv) != 4:
        die("usage: clocks_table.py SAMPLES.csv RUN.log PLOT.png")
    model = re.sub(r"^.*clocks_|\.csv$", "", argv[1])
    try:
        with open(argv[1]) as f, open(argv[2]) as g:
            s = summary(f.read(), g.read(), model)
    except (OSError, ValueError) as e:
        die(f"{argv[1]}, {argv[2]}: {e}")
    header = HEADER if s["kind"] == "bench" else ATT_HEADER
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    print("| " + " | ".join(table_row(s)) + " |")
    png = argv[3].split("/")[-1]
    print(f"\n{note(s)} Plot: [{png}]({png}).")
    try:
        plot(s, argv[3])
    except ImportError:
        print("clocks_table.py: no matplotlib (Debian: python3-matplotlib): no plot", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv)
