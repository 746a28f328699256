#!/usr/bin/env python3
"""CS336 §1.1.6(a): allocated device memory over a training step as one PNG, lmtrain's panel
beside PyTorch's; the y unit (GiB) is all the panels share.

    scripts/memory_timeline.py --lmtrain-trace T.json [--torch-csv T.csv] --out PNG [--title ...]

--lmtrain-trace: `lmtrain --set run.mode=bench --trace T.json` (Chrome trace: "X" spans named
forward / backward / optimizer with ts and dur in µs, and "C" samples of the counter
"allocated MiB", one series per memory tag, stacked here). x: ms after the first step's start.
--torch-csv: `torch_reference.py bench --mem-timeline T.csv` (event,allocated_bytes,phase; one
row per alloc or free of the caching allocator). x: allocation event number.
Phases are shaded spans. Prints one line: the output and each panel's peak (GiB and bytes).
"""
import argparse
import csv
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

GIB = 2**30
COLORS = {"forward": "tab:blue", "backward": "tab:orange", "optimizer": "tab:green"}  # phases
TAG_COLORS = ["tab:purple", "tab:brown", "tab:pink", "tab:olive", "tab:cyan", "tab:gray"]  # memory


def fail(msg):
    print(f"memory_timeline.py: {msg}", file=sys.stderr)
    sys.exit(2)


def read_lmtrain(path):
    """-> (spans [(phase, start_ms, end_ms)], samples [(ms, {tag: bytes})]), relative to the
    first span's start."""
    try:
        with open(path) as f:
            events = json.load(f)["traceEvents"]
    except (OSError, ValueError, KeyError) as e:
        fail(f"{path}: not a Chrome trace ({e})")
    spans = [(e["name"], e["ts"], e["ts"] + e["dur"]) for e in events if e.get("ph") == "X"]
    samples = [(e["ts"], {k: v * 2**20 for k, v in e["args"].items()})
               for e in events if e.get("ph") == "C" and e.get("name") == "allocated MiB"]
    if not spans or not samples:
        fail(f"{path}: no phase spans or no 'allocated MiB' counter (written by bench --trace?)")
    t0 = min(s[1] for s in spans)
    return ([(n, (a - t0) / 1e3, (b - t0) / 1e3) for n, a, b in spans],
            sorted(((t - t0) / 1e3, v) for t, v in samples))


def read_torch(path):
    """-> (events, allocated bytes, phases) of the CSV's rows."""
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
        return ([int(r["event"]) for r in rows], [int(r["allocated_bytes"]) for r in rows],
                [r["phase"] for r in rows])
    except (OSError, KeyError, ValueError) as e:
        fail(f"{path}: not an event,allocated_bytes,phase CSV ({e})")


def shade(ax, spans):
    """Phase spans as shaded bands along the top of the panel (the data stays below 1/1.2 of its
    height), a dotted line down at each start, the name inside bands wide enough for it, and one
    legend entry per phase."""
    lo, hi = min(s[1] for s in spans), max(s[2] for s in spans)
    seen = set()
    for name, a, b in spans:
        ax.axvspan(a, b, ymin=0.87, ymax=1, color=COLORS.get(name, "grey"), alpha=0.4, lw=0,
                   label=None if name in seen else f"{name} phase")
        ax.axvline(a, color="grey", lw=0.6, ls=":")
        seen.add(name)
        if b - a > 0.08 * (hi - lo):
            ax.text((a + b) / 2, 0.935, name, transform=ax.get_xaxis_transform(), ha="center",
                    va="center", fontsize=8)


def lmtrain_panel(ax, path):
    spans, samples = read_lmtrain(path)
    ts = [t for t, _ in samples]
    keys = {k for _, v in samples for k in v}
    order = ["params", "grads", "optimizer", "activations", "workspace"]  # bench's printing order
    tags = [k for k in order if k in keys] + sorted(keys - set(order))
    totals = [sum(v.values()) for _, v in samples]
    shade(ax, spans)
    ax.stackplot(ts, [[v.get(k, 0) / GIB for _, v in samples] for k in tags],
                 labels=[f"{k} (memory)" for k in tags], colors=TAG_COLORS, step="post", alpha=0.6)
    ax.plot(ts, [t / GIB for t in totals], "k.-", drawstyle="steps-post", label="total")
    flat = max(totals) == min(totals)
    steps = sum(n == "forward" for n, _, _ in spans)
    ax.set_title(f"lmtrain: {steps} step(s), counter sampled {len(samples)} times"
                 + (" (flat: nothing allocated inside a step)" if flat else ""), fontsize=9)
    ax.set_xlabel("time since the first timed step's start (ms)")
    ax.set_ylim(0, max(totals) / GIB * 1.2)
    return max(round(t) for t in totals)


def torch_panel(ax, path):
    events, allocated, phases = read_torch(path)
    if not events:
        fail(f"{path}: no rows")
    spans, start = [], 0  # contiguous runs of one phase, each event covering [event, event + 1)
    for i in range(1, len(events) + 1):
        if i == len(events) or phases[i] != phases[start]:
            spans.append((phases[start], events[start], events[i - 1] + 1))
            start = i
    shade(ax, spans)
    ax.plot(events, [b / GIB for b in allocated], "k-", drawstyle="steps-post", lw=1,
            label="allocated")
    ax.set_title(f"PyTorch: one step, {len(events)} allocation events", fontsize=9)
    ax.set_xlabel("allocation event number (alloc or free, in order; not time)")
    ax.set_ylim(0, max(allocated) / GIB * 1.2)
    return max(allocated)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--lmtrain-trace", required=True, help="bench --trace JSON")
    p.add_argument("--torch-csv", help="torch_reference.py bench --mem-timeline CSV")
    p.add_argument("--out", required=True, help="PNG to write")
    p.add_argument("--title", default="Allocated device memory over a training step")
    args = p.parse_args()
    fig, axes = plt.subplots(1, 2 if args.torch_csv else 1, figsize=(13 if args.torch_csv else 7, 4.5),
                             squeeze=False)
    peaks = [("lmtrain", lmtrain_panel(axes[0][0], args.lmtrain_trace))]
    if args.torch_csv:
        peaks.append(("PyTorch", torch_panel(axes[0][1], args.torch_csv)))
    for ax in axes[0]:
        ax.set_ylabel("allocated (GiB)")
        ax.legend(fontsize=7, loc="best", framealpha=0.9)
    fig.suptitle(args.title)
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    print(f"wrote {args.out}: " + ", ".join(f"{name} peak {b / GIB:.3f} GiB ({b} bytes)"
                                            for name, b in peaks))


if __name__ == "__main__":
    main()
