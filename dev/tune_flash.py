#!/usr/bin/env python3
"""Tile-shape sweep of the FlashAttention kernels on this machine's GPU.

For each candidate of one kernel, a copy of build/ is rebuilt with that kernel's table entry
replaced (EXTRA_NVCCFLAGS=-DLMT_FLASH_<KERNEL>_..., sm_90a only; only the kernel's own object is
recompiled; candidates build in parallel) and its attention mode times flash on the grid. The
mma.sync kernels (fwd, dkdv, dq: run by flash-mma) take (warps per block, row tiles of 16 per warp,
streamed tile); the Hopper wgmma kernels (sm90_fwd, sm90_fwd_short, sm90_fwd_shortest, sm90_dkdv,
sm90_dq: run by flash on an H100 or H200) take (warpgroups per block, streamed tile), written to
the CSV as warps = 4 x warpgroups, row_tiles = 1 (the computing warpgroups: each has one more, the
TMA producer), and the short-T entries with blocks of their own (sm90_fwd_shortest,
sm90_dkdv_short, sm90_dq_short) a third value, the blocks an SM (the CSV's blocks; 1 for the other
Hopper entries, empty for mma.sync). sm90_fwd_shortest and sm90_fwd_short are the persistent
forward's entries, which run at T up to sm90_fwd_shortest_t and past it up to sm90_short_t
(flash.cuh) and only there, sm90_fwd the forward's entry past those, and likewise the backward's
with sm90_bwd_short_t: time each at its lengths, the short ones with enough heads to fill the GPU
(--batch, --heads). Rows go to results/flash_tuning.csv; the best candidate per kernel and head dim
is printed (forward time for the forward kernels, backward time for the others: the backward runs
both of its kernels, the other one fixed at its table entry). The tables themselves live in
cuda/attention/flash.cuh, the timings behind them in results/flash_tuning.md.

    make -j all && dev/tune_flash.py [--kernels sm90_dkdv sm90_dq] [--head-dims 64 128]
        [--seq-lens 8192 16384] [--batch 1] [--heads 16] [--jobs 8] [--test] [--timeout 120]
    dev/tune_flash.py --kernels sm90_fwd_short --head-dims 64 --seq-lens 1024 2048 \
        --batch 16 --heads 12
"""
import argparse
import csv
import datetime
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

CANDIDATES = {
    "fwd": [(4, 2, 64), (4, 2, 32), (4, 1, 64), (8, 1, 64), (4, 1, 128), (8, 1, 128), (8, 2, 64)],
    "dkdv": [(4, 2, 32), (4, 1, 32), (4, 1, 64), (8, 1, 32)],
    "dq": [(4, 2, 64), (4, 1, 64), (4, 2, 32), (8, 1, 64)],
    "sm90_fwd": [(2, 128), (2, 64), (3, 64), (3, 128)],
    "sm90_fwd_short": [(2, 128), (2, 64), (3, 64), (3, 128)],
    "sm90_fwd_shortest": [(1, 64, 3), (1, 128, 2), (2, 128, 1), (1, 64, 2)],
    "sm90_dkdv": [(2, 64), (1, 64), (2, 128), (3, 64)],
    "sm90_dq": [(2, 64), (1, 64), (3, 64)],
    "sm90_dkdv_short": [(1, 128, 2), (1, 64, 2), (2, 128, 1)],
    "sm90_dq_short": [(1, 64, 2), (2, 128, 1), (2, 64, 1)],
}
# The object each kernel's table entry is compiled into, and the impl that runs it.
SOURCE = {"fwd": "flash_sm80_fwd", "dkdv": "flash_sm80_bwd", "dq": "flash_sm80_bwd",
          "sm90_fwd": "flash_sm90_fwd", "sm90_fwd_short": "flash_sm90_fwd",
          "sm90_fwd_shortest": "flash_sm90_fwd",
          "sm90_dkdv": "flash_sm90_bwd", "sm90_dq": "flash_sm90_bwd",
          "sm90_dkdv_short": "flash_sm90_bwd", "sm90_dq_short": "flash_sm90_bwd"}


def flags(kernel, cand):
    k = kernel.upper()
    if kernel.startswith("sm90_"):
        g, t = cand[:2]
        blocks = f" -DLMT_FLASH_{k}_BLOCKS={cand[2]}" if len(cand) > 2 else ""
        return f"-DLMT_FLASH_{k}_GROUPS={g} -DLMT_FLASH_{k}_TILE={t}" + blocks
    w, m, t = cand
    return f"-DLMT_FLASH_{k}_WARPS={w} -DLMT_FLASH_{k}_MTILES={m} -DLMT_FLASH_{k}_TILE={t}"


def shape(kernel, cand):
    """(warps, row_tiles, tile, blocks) for the CSV."""
    if kernel.startswith("sm90_"):
        return (4 * cand[0], 1, cand[1], cand[2] if len(cand) > 2 else 1)
    return (*cand, "")
COLUMNS = ["date_utc", "device_name", "kernel", "warps", "row_tiles", "tile", "blocks", "batch",
           "heads", "head_dim", "seq_len", "fwd_ms", "bwd_ms", "status"]


def build(kernel, cand, env):
    out = os.path.join("build_tune", kernel + "".join(f"_{x}" for x in cand))
    if not os.path.exists(out):
        shutil.copytree("build", out, symlinks=True)
    obj = os.path.join(out, "obj", "cuda", "attention", SOURCE[kernel] + ".o")
    if os.path.exists(obj):
        os.remove(obj)
    cmd = ["make", f"BUILD={out}", f"EXTRA_NVCCFLAGS={flags(kernel, cand)}",
           "CUDA_ARCHS=-gencode arch=compute_90a,code=sm_90a", f"{out}/lmtrain", f"{out}/tests"]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    return out, r.returncode, r.stdout[-2000:] + r.stderr[-2000:]


def run(cmd, timeout):
    """The finished process, or None if it ran past `timeout` seconds (then killed)."""
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None


def rank(rows, kernel, dh, col):
    """Each candidate's (warps, row_tiles, tile, blocks) sum of `col` over the lengths it ran at
    (status ok), those timed at every length the rows have, and the best of those. Only a
    candidate timed at every length can be best: a sum with a length missing (out of memory,
    wrong, not run) is smaller without being faster."""
    scores, lengths, complete = {}, set(), {}
    for r in rows:
        if r["kernel"] == kernel and int(r["head_dim"]) == dh:
            key = (r["warps"], r["row_tiles"], r["tile"], r["blocks"])
            lengths.add(r["seq_len"])
            complete.setdefault(key, set())
            if r.get("status") == "ok":
                scores[key] = scores.get(key, 0.0) + float(r[col])
                complete[key].add(r["seq_len"])
    whole = {k: v for k, v in scores.items() if complete[k] == lengths}
    return scores, whole, min(whole, key=whole.get) if whole else None

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kernels", nargs="+", default=["fwd", "dkdv", "dq"], choices=list(CANDIDATES))
    ap.add_argument("--head-dims", nargs="+", type=int, default=[64, 128])
    ap.add_argument("--seq-lens", nargs="+", type=int, default=[8192, 16384])
    ap.add_argument("--batch", type=int, default=1, help="attention.batch")
    ap.add_argument("--heads", type=int, default=16, help="attention.heads")
    ap.add_argument("--jobs", type=int, default=8)
    ap.add_argument("--test", action="store_true",
                    help="also run each candidate's FlashAttention tests (status 'wrong' if they fail)")
    ap.add_argument("--csv", default="results/flash_tuning.csv")
    ap.add_argument("--timeout", type=float, default=120,
                    help="seconds a candidate's timing run, or its tests, may take (status 'hung' "
                         "past it: a kernel that deadlocks stops only this candidate)")
    args = ap.parse_args()
    if not os.path.exists("build/lmtrain"):
        sys.exit("build/lmtrain missing: run make first (the candidates start from build/)")
    env = dict(os.environ)
    todo = [(k, c) for k in args.kernels for c in CANDIDATES[k]]
    with ThreadPoolExecutor(args.jobs) as pool:
        built = list(pool.map(lambda kc: build(kc[0], kc[1], env), todo))
    rows = []
    date = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    for (kernel, cand), (out, rc, log) in zip(todo, built):
        w, m, t, blocks = shape(kernel, cand)
        base = {"date_utc": date, "kernel": kernel, "warps": w, "row_tiles": m, "tile": t,
                "blocks": blocks, "batch": args.batch, "heads": args.heads}
        if rc != 0:
            print(f"{kernel} {cand}: build failed\n{log}", file=sys.stderr)
            rows.append({**base, "status": "build failed"})
            continue
        att = os.path.join(out, "attention.csv")
        if os.path.exists(att):
            os.remove(att)
        impl = "flash" if kernel.startswith("sm90_") else "flash-mma"
        cmd = [f"{out}/lmtrain", "--set", "run.mode=attention", "--set", f'attention.impls=["{impl}"]',
               "--set", f"attention.seq_lens={args.seq_lens}", "--set", f"attention.head_dims={args.head_dims}",
               "--set", f"attention.batch={args.batch}", "--set", f"attention.heads={args.heads}",
               "--set", "attention.warmup=3", "--set", "attention.iters=10", "--csv", att]
        r = run(cmd, args.timeout)
        if r is None:
            print(f"{kernel} {cand}: timing ran past {args.timeout:g} s", file=sys.stderr)
            rows.append({**base, "status": "hung"})
            continue
        if r.returncode != 0:
            print(f"{kernel} {cand}: run failed\n{r.stdout[-1500:]}{r.stderr[-1500:]}", file=sys.stderr)
            rows.append({**base, "status": "run failed"})
            continue
        wrong = False
        if args.test:
            t = run([f"{out}/tests", "-tc=flash attention: O*"], args.timeout)
            wrong = t is None or t.returncode != 0
            if wrong:
                why = "ran past the timeout" if t is None else "failed\n" + t.stdout[-1500:]
                print(f"{kernel} {cand}: tests {why}", file=sys.stderr)
        with open(att, newline="") as f:
            for a in csv.DictReader(f):
                rows.append({**base, "device_name": a["device_name"], "head_dim": a["head_dim"],
                             "seq_len": a["seq_len"], "fwd_ms": a["fwd_ms"], "bwd_ms": a["bwd_ms"],
                             "status": "wrong" if wrong else a["status"]})
    new = not os.path.exists(args.csv) or os.path.getsize(args.csv) == 0
    with open(args.csv, "a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        if new:
            w.writeheader()
        w.writerows({c: r.get(c, "") for c in COLUMNS} for r in rows)
    print(f"{'kernel':15} {'dh':>4} {'warps,tiles,tile,blocks':>23} {'sum ms':>8}   (lower is better; * = best)")
    for kernel in args.kernels:
        col = "fwd_ms" if "fwd" in kernel else "bwd_ms"
        for dh in args.head_dims:
            scores, whole, best = rank(rows, kernel, dh, col)
            for key, ms in sorted(scores.items()):
                mark = "*" if key == best else "" if key in whole else "(not at every length)"
                print(f"{kernel:15} {dh:4} {str(key):>23} {ms:8.3f} {mark}")


if __name__ == "__main__":
    main()
