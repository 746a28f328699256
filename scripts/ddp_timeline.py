#!/usr/bin/env python3
"""CS336 §2.3.2(b) without Nsight Systems: one training step of every rank as a timeline PNG,
from the Chrome trace that `lmtrain --set run.mode=bench --trace FILE` writes on several ranks.

    scripts/ddp_timeline.py TRACE.json --out PNG [--step N] [--title TEXT]

Per rank (a trace process, pid = rank), three lanes: the step's phases (track 0: forward,
backward, optimizer), its collectives (track 1: on the CPU each host call into MPI, launches and
waits; on GPUs each collective on NCCL's stream) and its waits for them (track 2: the time the
host, or the GPU's compute stream, stood still for communication); a span shorter than 1/500 of
the step is drawn that wide, so that a collective's launch shows. x: ms from that rank's start of
timed step N (default: the last). Prints one line: the output and, per rank, the step's length,
its time in collectives and its waits.
Needs matplotlib (Debian: python3-matplotlib).
"""
import argparse
import json
import sys

PHASE_COLORS = {"forward": "tab:blue", "backward": "tab:orange", "optimizer": "tab:green"}
COMM_COLOR, WAIT_COLOR = "tab:red", "tab:gray"


def fail(msg):
    print(f"ddp_timeline.py: {msg}", file=sys.stderr)
    sys.exit(2)


def read(path):
    """{rank: {tid: [(name, start_ms, end_ms)]}}, sorted by start."""
    try:
        with open(path) as f:
            events = json.load(f)["traceEvents"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        fail(f"{path}: not a Chrome trace ({type(e).__name__}: {e})")
    ranks = {}
    for e in events:
        if e.get("ph") == "X":
            ranks.setdefault(int(e["pid"]), {}).setdefault(int(e["tid"]), []).append(
                (e["name"], e["ts"] / 1e3, (e["ts"] + e["dur"]) / 1e3))
    if not ranks:
        fail(f"{path}: no spans")
    for tracks in ranks.values():
        for spans in tracks.values():
            spans.sort(key=lambda s: s[1])
    return ranks


def step_window(tracks, step):
    """[start, end) of timed step `step` (negative: from the end) on one rank's phase track."""
    phases = tracks.get(0, [])
    starts = [i for i, s in enumerate(phases) if s[0] == "forward"]
    if not starts:
        fail("a rank has no forward span on track 0 (not a bench --trace?)")
    try:
        first = starts[step]
    except IndexError:
        fail(f"--step {step}: the trace has {len(starts)} timed steps")
    nxt = next((i for i in starts if i > first), len(phases))
    return phases[first][1], phases[nxt - 1][2], phases[first:nxt]


def clip(spans, lo, hi):
    return [(n, max(a, lo), min(b, hi)) for n, a, b in spans if b > lo and a < hi]


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace")
    ap.add_argument("--out", required=True)
    ap.add_argument("--step", type=int, default=-1, help="which timed step (0 = first, -1 = last)")
    ap.add_argument("--title", default="")
    a = ap.parse_args(argv)
    ranks = read(a.trace)

    import matplotlib
    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    lanes, summary = [], []
    for rank in sorted(ranks):
        tracks = ranks[rank]
        lo, hi, phases = step_window(tracks, a.step)
        comm = clip(tracks.get(1, []), lo, hi)
        waits = clip(tracks.get(2, []), lo, hi)
        shift = lambda spans: [(n, s - lo, e - lo) for n, s, e in spans]
        lanes += [(f"rank {rank}: compute", shift(phases), None),
                  (f"rank {rank}: collectives", shift(comm), COMM_COLOR),
                  (f"rank {rank}: waiting", shift(waits), WAIT_COLOR)]
        summary.append(f"rank {rank}: step {hi - lo:.1f} ms, collectives {sum(e - s for _, s, e in comm):.1f} ms "
                       f"({len(comm)} calls), waiting {sum(e - s for _, s, e in waits):.1f} ms")

    fig, ax = plt.subplots(figsize=(11, 0.55 * len(lanes) + 1.8))
    visible = max(e for _, spans, _ in lanes for _, _, e in spans) / 500  # a launch shows as a tick
    for y, (label, spans, color) in enumerate(reversed(lanes)):
        bars = [(s, max(e - s, visible)) for _, s, e in spans]
        colors = [color or PHASE_COLORS.get(n, "tab:purple") for n, _, _ in spans]
        ax.broken_barh(bars, (y - 0.35, 0.7), facecolors=colors, edgecolors="black",
                       linewidths=0 if color else 0.3)  # collectives: many, thin
    ax.set_yticks(range(len(lanes)))
    ax.set_yticklabels([lane[0] for lane in reversed(lanes)])
    ax.set_xlabel("time from the rank's start of the step (ms)")
    ax.set_xlim(left=0)
    ax.grid(True, axis="x", alpha=0.3)
    ax.set_title(a.title or f"One training step per rank: {a.trace}")
    handles = [Patch(color=c, label=n) for n, c in PHASE_COLORS.items()]
    handles += [Patch(color=COMM_COLOR, label="in a collective"),
                Patch(color=WAIT_COLOR, label="waiting for communication")]
    ax.legend(handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.savefig(a.out, dpi=120, bbox_inches="tight")
    print(f"ddp_timeline.py: {a.out} ({'; '.join(summary)})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
