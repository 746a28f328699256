#!/usr/bin/env python3
"""Runs build/lmtrain once per grid point, each appending its row to one CSV; re-runnable.

    scripts/sweep.py --csv results/e2e.csv --set run.mode=bench -- \
        "config=configs/models/small.toml model.precision=bf16" \
        "config=configs/models/small.toml model.precision=fp32"

A point is whitespace-separated `section.key=value` overrides (passed as --set) and
`config=FILE` (passed as --config, before the overrides); --set/--config given to sweep.py apply
to every point, before the point's own. Points also come one per line from --points-file ('#'
starts a comment).

Before any run every point's resolved config is read back with `lmtrain --print-config`: a bad
point stops the sweep there (one line, exit 2). A point whose resolved config already has a row in
the CSV (every config column equal, world_size equal to --np and device_name to the device the run
will take, where the CSV has those columns) is skipped, so an interrupted sweep is re-run as it was
started, and one CSV can hold the same points on several rank counts and devices. That device is
--device-name if given, else lmtrain's rule (run.device, model.precision, --np against the GPUs
nvidia-smi lists, narrowed by CUDA_VISIBLE_DEVICES; the all-reduce mode's backend): "cpu", or the
first GPU's name. A point whose run fails (non-zero exit: out of memory, a timeout, anything else)
gets a row in CSV's sibling `<stem>.failed.csv` (its config columns, status oom | timeout | failed,
the exit code, the date and lmtrain's last error line), any rows its run wrote to the CSV before it
failed are cut from it (all-reduce mode writes a row per message size as it goes), and the sweep
goes on; such points are skipped on a re-run too unless --retry-failed (or RETRY_FAILED=1 in the
environment, which reaches it through the sweep_*.sh scripts), on any device (that file has no
device column: on another GPU, --retry-failed runs them). Standard library only.
"""
import argparse
import csv
import datetime
import os
import re
import shlex
import subprocess
import sys
import time

OOM = re.compile(r"out of (GPU |host )?memory|CUDA_ERROR_OUT_OF_MEMORY|cudaErrorMemoryAllocation")
FAILED_COLUMNS = ["world_size", "status", "exit_code", "date_utc", "error"]


class BadInput(Exception):
    pass


def parse_point(text, where):
    """Tokens of one point as lmtrain arguments (configs first, then overrides)."""
    configs, sets = [], []
    for tok in shlex.split(text):
        key, eq, value = tok.partition("=")
        if not eq or not key or not value:
            raise BadInput(f"{where}: '{tok}': expected section.key=value or config=FILE")
        if key == "config":
            configs += ["--config", value]
        elif re.fullmatch(r"[a-z_]+\.[a-z_0-9]+", key):
            sets += ["--set", tok]
        else:
            raise BadInput(f"{where}: '{tok}': expected section.key=value or config=FILE")
    return configs + sets


def resolved_config(lmtrain, args, where):
    """The point's config as CSV columns: (names, values), from --print-config."""
    r = subprocess.run([lmtrain, *args, "--print-config"], capture_output=True, text=True)
    if r.returncode != 0:
        msg = (r.stderr.strip() or r.stdout.strip()).splitlines()
        raise BadInput(f"{where}: lmtrain refused it: {msg[-1] if msg else 'exit %d' % r.returncode}")
    names, values, section = [], [], ""
    for line in r.stdout.splitlines():
        m = re.fullmatch(r"\[(\w+)\]", line.strip())
        if m:
            section = m.group(1)
            continue
        if " = " not in line:
            continue
        key, _, value = line.partition(" = ")
        if value.startswith('"'):  # a TOML basic string, as config_columns() writes it unquoted
            value = value[1:-1].encode().decode("unicode_escape")
        elif value.startswith("["):  # a list, as config_columns() writes it: space-separated
            value = value[1:-1].replace(",", "").replace('"', "")
        names.append(f"{section}.{key}")
        values.append(value)
    return names, values


def read_rows(path):
    if not os.path.exists(path) or os.path.getsize(path) == 0:
        return None, []
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    return rows[0], rows[1:]


def visible_gpus():
    """The names of the GPUs a run sees: nvidia-smi's, in its order, narrowed by
    CUDA_VISIBLE_DEVICES (indices or UUIDs, up to the first that names none, as CUDA reads it);
    none without nvidia-smi."""
    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=name,uuid", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return []
    if r.returncode != 0:
        return []
    gpus = [[x.strip() for x in line.rsplit(",", 1)] for line in r.stdout.splitlines()
            if "," in line]
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is None:
        return [name for name, _ in gpus]
    seen = []
    for item in listed.split(","):
        item = item.strip()
        match = ([gpus[int(item)]] if item.isdigit() and int(item) < len(gpus) else
                 [g for g in gpus if item.startswith("GPU-") and g[1].startswith(item)])
        if len(match) != 1 or match[0] in seen:
            break
        seen.append(match[0])
    return [name for name, _ in seen]


def point_device(names, values, ranks, gpus):
    """The device_name a run of this resolved config on `ranks` ranks writes, by lmtrain's
    resolve_device (src/runtime.cpp): cuda, the first GPU's name, where run.device asks for it or
    is auto and every rank has a GPU and the precision is not fp64; else "cpu". The all-reduce
    mode's buffers are the GPU's under allreduce.backend = nccl, else the host's."""
    config = dict(zip(names, values))
    if config.get("run.mode") == "allreduce":
        return gpus[0] if gpus and config.get("allreduce.backend") == "nccl" else "cpu"
    device = config.get("run.device", "auto")
    if device == "cpu" or not gpus:
        return "cpu"
    if device == "auto" and (config.get("model.precision") == "fp64" or ranks > len(gpus)):
        return "cpu"
    return gpus[0]


def has_row(header, rows, names, values, ranks, device=None):
    """Whether a row has these config values, and was run on `ranks` ranks and on `device` where
    the CSV says (`device` None: on any)."""
    if header is None:
        return False
    if "world_size" in header:
        names, values = names + ["world_size"], values + [ranks]
    if device is not None and "device_name" in header:
        names, values = names + ["device_name"], values + [device]
    try:
        idx = [header.index(n) for n in names]
    except ValueError:
        return False  # the CSV was written by another config layout: nothing matches
    want = list(values)
    return any([row[i] if i < len(row) else None for i in idx] == want for row in rows)


def drop_rows_since(path, size):
    """A failed run's rows (all-reduce mode writes one a message size as it goes; a run may fail
    after writing them) are not a measurement of its point: the CSV is cut back to `size` bytes,
    its length before the run (None: there was none), so that a re-run measures the point again.
    Returns how many rows were dropped."""
    if not os.path.exists(path):
        return 0
    with open(path, "rb") as f:
        f.seek(size or 0)
        added = f.read()
    if size is None:
        os.remove(path)
        return max(added.count(b"\n") - 1, 0)  # its header
    with open(path, "r+b") as f:
        f.truncate(size)
    return added.count(b"\n")


def append_failed(path, names, values, ranks, status, code, error):
    header, _ = read_rows(path)
    new_header = names + FAILED_COLUMNS
    if header is not None and header != new_header:
        raise BadInput(f"{path} has another header than this sweep's failed rows; move it away")
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    with open(path, "a", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        if header is None:
            w.writerow(new_header)
        w.writerow(values + [ranks, status, str(code), date, error])


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--csv", required=True, help="rows go here (lmtrain --csv)")
    ap.add_argument("--lmtrain", default="build/lmtrain")
    ap.add_argument("--np", type=int, default=1, help="ranks per run (>1: under --mpirun)")
    ap.add_argument("--mpirun", default=os.environ.get("MPIRUN", "mpirun -q --oversubscribe --bind-to none"))
    ap.add_argument("--set", action="append", default=[], metavar="K=V", help="for every point")
    ap.add_argument("--config", action="append", default=[], metavar="FILE", help="for every point")
    ap.add_argument("--points-file", help="one point per line")
    ap.add_argument("--timeout", type=float, default=0, help="seconds per run; 0: none")
    ap.add_argument("--device-name", help="the device the runs take, as their rows' device_name "
                    "says (default: from run.device, the precision, --np and nvidia-smi)")
    ap.add_argument("--retry-failed", action="store_true",
                    default=os.environ.get("RETRY_FAILED") == "1",
                    help="run points in the failed file again (default: RETRY_FAILED=1)")
    ap.add_argument("points", nargs="*")
    a = ap.parse_args(argv)
    if a.np < 1:
        raise BadInput(f"--np {a.np}: expected at least 1")
    texts = [(p, f"point {i + 1}") for i, p in enumerate(a.points)]
    if a.points_file:
        try:
            with open(a.points_file) as f:
                for n, line in enumerate(f, 1):
                    line = line.split("#", 1)[0].strip()
                    if line:
                        texts.append((line, f"{a.points_file}:{n}"))
        except OSError as e:
            raise BadInput(f"--points-file {a.points_file}: {e.strerror}")
    if not texts:
        raise BadInput("no grid points given")
    if not os.access(a.lmtrain, os.X_OK):
        raise BadInput(f"--lmtrain {a.lmtrain}: not an executable (make all first)")
    base = [x for c in a.config for x in ("--config", c)] + [x for s in a.set for x in ("--set", s)]
    points = []
    for text, where in texts:
        args = base + parse_point(text, where)
        points.append((text, args, *resolved_config(a.lmtrain, args, where)))

    header, _ = read_rows(a.csv)
    missing = [n for n in points[0][2] if header is not None and n not in header]
    if missing:  # every run would be refused: say so once, before any
        raise BadInput(f"{a.csv} has another header (no column {missing[0]}): use a new file")
    stem = a.csv[:-4] if a.csv.endswith(".csv") else a.csv
    failed_path = stem + ".failed.csv"
    os.makedirs(os.path.dirname(a.csv) or ".", exist_ok=True)
    launcher = shlex.split(a.mpirun) + ["-np", str(a.np)] if a.np > 1 else []
    ran = skipped = failed = 0
    gpus = None if a.device_name else visible_gpus()
    t_start = time.time()
    for i, (text, args, names, values) in enumerate(points, 1):
        tag = f"[{i}/{len(points)}] {text}"
        header, rows = read_rows(a.csv)
        device = a.device_name or point_device(names, values, a.np, gpus)
        if has_row(header, rows, names, values, str(a.np), device):
            print(f"{tag}: skip (row already in {a.csv} on {device})", flush=True)
            skipped += 1
            continue
        fheader, frows = read_rows(failed_path)
        if not a.retry_failed and has_row(fheader, frows, names, values, str(a.np)):
            print(f"{tag}: skip (failed before, in {failed_path}; --retry-failed runs it)", flush=True)
            skipped += 1
            continue
        t0 = time.time()
        size = os.path.getsize(a.csv) if os.path.exists(a.csv) else None
        cmd = launcher + [a.lmtrain, *args, "--csv", a.csv]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout or None)
            code, out = r.returncode, r.stdout + r.stderr
        except subprocess.TimeoutExpired as e:  # its output may come back as bytes even so
            code = -1
            out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        dt = time.time() - t0
        if code == 0:
            ran += 1
            print(f"{tag}: done in {dt:.1f} s", flush=True)
            continue
        if "has another header" in out:  # the CSV, not the point: stop, as before any run
            raise BadInput(out.strip().splitlines()[-1])
        failed += 1
        dropped = drop_rows_since(a.csv, size)
        status = "timeout" if code == -1 else "oom" if OOM.search(out) else "failed"
        # lmtrain's own last error line (MPI_Abort's banner follows it), else the last line.
        lines = [l for l in out.strip().splitlines() if l.strip()]
        own = [l for l in lines if l.startswith("lmtrain: error")]
        error = (own or lines or [""])[-1]
        append_failed(failed_path, names, values, str(a.np), status, code, error)
        print(f"{tag}: {status.upper()} (exit {code}) after {dt:.1f} s: {error}"
              + (f" ({dropped} rows it wrote dropped from {a.csv})" if dropped else ""), flush=True)
    print(f"sweep: {ran} ran, {skipped} skipped, {failed} failed in {time.time() - t_start:.0f} s; "
          f"rows in {a.csv}" + (f", failures in {failed_path}" if failed else ""), flush=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except BadInput as e:
        print(f"sweep.py: error: {e}", file=sys.stderr)
        sys.exit(2)
