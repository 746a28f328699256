#!/usr/bin/env python3
"""scripts/sweep.py and scripts/plot.py on the CPU with the tiny model: rows appended once, points
already in the CSV skipped on a re-run (on the same device only, by lmtrain's rule), failed points recorded (oom / failed) while the sweep goes
on and the rows a failed run wrote cut from the CSV, bad points refused before any run; the quick
sweep scripts end to end (the DDP one on 2 ranks, with grad_accum 2 too), and the all-reduce sweep
on 2 and 4 ranks; scripts/bench_table.py pairs each of our rows with the PyTorch rows measured
beside it; scripts/attention_table.py sets the kernels' own times side by side where rows have
them; scripts/mixed_precision.py writes its tables; scripts/memory_timeline.py draws bench
--trace's memory counter (and a PyTorch timeline CSV) and prints their peaks; and
torch_reference.py's FlashAttention-2 in plain PyTorch matches explicit softmax attention, forward
and gradients, and its allocator-trace reconstruction for bench --mem-timeline gives the right
running totals and phases (both skipped without torch); scripts/report.py's --check passes on the
repository and fails on a copy with one data value changed, it sets lmtrain against compiled PyTorch
only where measured in one call and our attention kernels against cuDNN's where both rows time them, and its --record refuses a file that is not there or a device read
as nothing; scripts/ddp_timeline.py sums a synthetic two-rank trace's step as it should;
scripts/optimizer_state.py reports each choice's own run and keeps its log when a later run fails;
scripts/clocks_table.py summarises the busy samples of an nvidia-smi log; scripts/llmc_table.py
tabulates each call's runs beside llm.c's; scripts/lib.sh's write_to keeps a table when its script
fails; scripts/sanitize.sh's verdicts (with a stand-in for compute-sanitizer); dev/migrate_csv.py
brings an older CSV to the columns the binary writes, its cells kept; dev/gemm_choices.py
keeps the choices it should and reproduces cuda/gemm_choices.inc; dev/tune_flash.py stars only a
candidate timed at every length.

Prints a doctest-style summary line that tests/run_all.sh counts; arguments are ignored.
"""
import argparse
import csv
import importlib.util
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PY = sys.executable
TORCH_REFERENCE = os.path.join(REPO, "tests/reference/torch_reference.py")
BASE = ["--lmtrain", os.path.join(REPO, "build/lmtrain"), "--set", "run.mode=bench",
        "--set", "run.device=cpu", "--set", "bench.warmup=0", "--set", "bench.steps=1",
        "--set", "bench.kernels=0", "--config", os.path.join(REPO, "configs/models/tiny.toml"),
        "--set", "model.context_length=8", "--set", "model.num_layers=1"]
A, B, C = "model.precision=fp32", "model.precision=bf16", "model.precision=fp32 train.batch_size=2"
MISSING = "data.source=file data.path=/nonexistent/tokens.bin"

try:  # torch_reference.py as a module, for its attention implementations
    _spec = importlib.util.spec_from_file_location("torch_reference", TORCH_REFERENCE)
    torch_reference = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(torch_reference)
    import torch
except ImportError:
    torch = torch_reference = None


def script(path):
    """A script of the repository (its path from the root) as a module."""
    name = os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, os.path.join(REPO, path))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def rows(path):
    if not os.path.exists(path):
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


class Sweep(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="lmtrain-sweep-test-")
        self.csv = os.path.join(self.dir, "out.csv")
        self.failed = os.path.join(self.dir, "out.failed.csv")

    def tearDown(self):
        shutil.rmtree(self.dir)

    def sweep(self, *points, extra=(), base=BASE):
        r = subprocess.run([PY, os.path.join(REPO, "scripts/sweep.py"), "--csv", self.csv, *base,
                            *extra, *points], capture_output=True, text=True, cwd=REPO)
        return r.returncode, r.stdout + r.stderr

    def test_rows_are_appended_once_and_a_rerun_skips_them(self):
        code, out = self.sweep(A, B)
        self.assertEqual(code, 0, out)
        self.assertIn("2 ran, 0 skipped, 0 failed", out)
        first = rows(self.csv)
        self.assertEqual([r["model.precision"] for r in first], ["fp32", "bf16"])
        code, out = self.sweep(A, B)
        self.assertEqual(code, 0, out)
        self.assertIn("0 ran, 2 skipped", out)
        self.assertEqual(rows(self.csv), first)  # nothing rewritten, nothing added
        # An interrupted sweep re-run with one more point: only the new point runs.
        code, out = self.sweep(A, B, C)
        self.assertIn("1 ran, 2 skipped", out)
        self.assertEqual([r["train.batch_size"] for r in rows(self.csv)], ["8", "8", "2"])

    def test_a_rerun_on_another_device_measures_again(self):
        code, out = self.sweep(A, B)  # run.device=cpu: rows on "cpu"
        self.assertIn("2 ran, 0 skipped", out)
        self.assertEqual({r["device_name"] for r in rows(self.csv)}, {"cpu"})
        code, out = self.sweep(A, B, extra=["--device-name", "NVIDIA Z100"])
        self.assertEqual(code, 0, out)
        self.assertIn("2 ran, 0 skipped", out)  # no row of these points on that device
        code, out = self.sweep(A, B)
        self.assertIn("0 ran, 2 skipped", out)
        self.assertIn("row already in %s on cpu" % self.csv, out)

    def test_the_device_a_point_takes_follows_lmtrains_rule(self):
        sweep = script("scripts/sweep.py")
        names = ["run.device", "model.precision"]
        gpus = ["NVIDIA A", "NVIDIA B"]
        for device, precision, ranks, gpu_list, want in [
                ("auto", "bf16", 1, gpus, "NVIDIA A"), ("auto", "bf16", 2, gpus, "NVIDIA A"),
                ("auto", "bf16", 3, gpus, "cpu"), ("auto", "fp64", 1, gpus, "cpu"),
                ("cpu", "bf16", 1, gpus, "cpu"), ("cuda", "bf16", 1, gpus, "NVIDIA A"),
                ("auto", "bf16", 1, [], "cpu")]:
            self.assertEqual(sweep.point_device(names, [device, precision], ranks, gpu_list), want,
                             (device, precision, ranks, gpu_list))
        names = ["run.mode", "run.device", "allreduce.backend"]  # the all-reduce mode's buffers
        for backend, gpu_list, want in [("nccl", gpus, "NVIDIA A"), ("mpi", gpus, "cpu"),
                                        ("nccl", [], "cpu")]:
            self.assertEqual(sweep.point_device(names, ["allreduce", "auto", backend], 2, gpu_list),
                             want, (backend, gpu_list))
        # nvidia-smi's GPUs, narrowed by CUDA_VISIBLE_DEVICES as CUDA reads it.
        bin_dir = os.path.join(self.dir, "bin")
        os.makedirs(bin_dir)
        with open(os.path.join(bin_dir, "nvidia-smi"), "w") as f:
            f.write("#!/bin/sh\necho 'NVIDIA A, GPU-aaaa-1'\necho 'NVIDIA B, GPU-bbbb-2'\n")
        os.chmod(os.path.join(bin_dir, "nvidia-smi"), 0o755)
        saved = {k: os.environ.get(k) for k in ("PATH", "CUDA_VISIBLE_DEVICES")}
        os.environ["PATH"] = bin_dir + os.pathsep + os.environ["PATH"]
        try:
            for listed, want in [(None, ["NVIDIA A", "NVIDIA B"]), ("1", ["NVIDIA B"]),
                                 ("1,0", ["NVIDIA B", "NVIDIA A"]), ("GPU-bbbb", ["NVIDIA B"]),
                                 ("0,7,1", ["NVIDIA A"]), ("", []), ("0,0", ["NVIDIA A"])]:
                if listed is None:
                    os.environ.pop("CUDA_VISIBLE_DEVICES", None)
                else:
                    os.environ["CUDA_VISIBLE_DEVICES"] = listed
                self.assertEqual(sweep.visible_gpus(), want, listed)
            os.environ["PATH"] = self.dir  # no nvidia-smi at all
            self.assertEqual(sweep.visible_gpus(), [])
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

    def test_list_valued_keys_are_matched_as_the_csv_writes_them(self):
        lists = """model.precision=fp32 attention.seq_lens=[8,16] 'attention.impls=["flash"]'"""
        code, out = self.sweep(A, lists)
        self.assertEqual(code, 0, out)
        self.assertIn("2 ran, 0 skipped", out)
        written = rows(self.csv)
        self.assertEqual([r["attention.seq_lens"] for r in written],
                         ["256 1024 4096 16384", "8 16"])
        self.assertEqual([r["attention.impls"] for r in written], ["naive flash", "flash"])
        code, out = self.sweep(A, lists)
        self.assertIn("0 ran, 2 skipped", out)

    def test_a_failing_point_is_recorded_and_the_sweep_goes_on(self):
        code, out = self.sweep(MISSING, A)
        self.assertEqual(code, 0, out)
        self.assertIn("1 ran, 0 skipped, 1 failed", out)
        self.assertEqual(len(rows(self.csv)), 1)  # the point after the failure ran
        failed = rows(self.failed)
        self.assertEqual(len(failed), 1)
        self.assertEqual(failed[0]["status"], "failed")
        self.assertEqual(failed[0]["exit_code"], "2")
        self.assertEqual(failed[0]["data.path"], "/nonexistent/tokens.bin")
        self.assertIn("cannot open", failed[0]["error"])
        code, out = self.sweep(MISSING, A)  # skipped, not retried, on a re-run...
        self.assertIn("0 ran, 2 skipped, 0 failed", out)
        code, out = self.sweep(MISSING, A, extra=["--retry-failed"])  # ...unless asked
        self.assertIn("0 ran, 1 skipped, 1 failed", out)
        self.assertEqual(len(rows(self.failed)), 2)
        os.environ["RETRY_FAILED"] = "1"  # as the sweep_*.sh scripts pass it on
        try:
            code, out = self.sweep(MISSING, A)
        finally:
            del os.environ["RETRY_FAILED"]
        self.assertIn("0 ran, 1 skipped, 1 failed", out)

    def test_rows_a_failed_run_wrote_are_cut_and_it_runs_again(self):
        # An lmtrain whose measured runs write their row and then fail (as a diverged or
        # partly-measured all-reduce run can): the CSV keeps the rows before it, not its own.
        fake = os.path.join(self.dir, "lmtrain-late-failure")
        with open(fake, "w") as f:
            f.write('#!/bin/sh\n%s "$@" || exit $?\n'
                    'for a in "$@"; do [ "$a" = --csv ] && [ -e "$FAIL_AFTER_ROW" ] && exit 1; done\n'
                    'exit 0\n' % os.path.join(REPO, "build/lmtrain"))
        os.chmod(fake, 0o755)
        base = list(BASE)
        base[1] = fake
        flag = os.path.join(self.dir, "fail")
        os.environ["FAIL_AFTER_ROW"] = flag
        try:
            code, out = self.sweep(A, base=base)  # a good row first
            self.assertEqual(code, 0, out)
            with open(self.csv, "rb") as f:
                before = f.read()
            open(flag, "w").close()
            code, out = self.sweep(A, B, base=base)
            self.assertIn("0 ran, 1 skipped, 1 failed", out)
            self.assertIn("(1 rows it wrote dropped from", out)
            with open(self.csv, "rb") as f:
                self.assertEqual(f.read(), before)
            self.assertEqual(len(rows(self.failed)), 1)
            os.remove(flag)
            code, out = self.sweep(A, B, base=base, extra=["--retry-failed"])
            self.assertIn("1 ran, 1 skipped, 0 failed", out)
            self.assertEqual([r["model.precision"] for r in rows(self.csv)], ["fp32", "bf16"])
            os.remove(self.csv)  # a first run that fails leaves no CSV behind
            open(flag, "w").close()
            code, out = self.sweep(A, base=base)
            self.assertIn("0 ran, 0 skipped, 1 failed", out)
            self.assertFalse(os.path.exists(self.csv))
        finally:
            del os.environ["FAIL_AFTER_ROW"]

    def test_out_of_memory_is_recorded_as_oom(self):
        # An lmtrain that resolves configs like the real one and runs out of memory on every run,
        # its error line followed by the banner MPI_Abort prints.
        fake = os.path.join(self.dir, "lmtrain-oom")
        with open(fake, "w") as f:
            f.write('#!/bin/sh\nfor a in "$@"; do [ "$a" = --print-config ] && exec %s "$@"; done\n'
                    'echo "lmtrain: error (rank 0): out of GPU memory: 512.0 MiB more needed" >&2\n'
                    'printf -- "-----\\nMPI_ABORT was invoked on rank 0\\n-----\\n" >&2\nexit 2\n'
                    % os.path.join(REPO, "build/lmtrain"))
        os.chmod(fake, 0o755)
        base = list(BASE)
        base[1] = fake
        code, out = self.sweep(A, B, base=base)
        self.assertEqual(code, 0, out)
        self.assertIn("OOM (exit 2)", out)
        self.assertEqual([r["status"] for r in rows(self.failed)], ["oom", "oom"])
        self.assertEqual([r["error"] for r in rows(self.failed)],
                         ["lmtrain: error (rank 0): out of GPU memory: 512.0 MiB more needed"] * 2)
        self.assertEqual(rows(self.csv), [])

    def test_bad_points_stop_the_sweep_before_any_run(self):
        for point, expect in [("model.d_modle=3", "unknown key model.d_modle"),
                              ("precision", "expected section.key=value"),
                              ("model.num_heads=5", "not divisible")]:
            code, out = self.sweep(A, point)
            self.assertEqual(code, 2, out)
            self.assertEqual(len(out.strip().splitlines()), 1, out)
            self.assertIn(expect, out)
            self.assertFalse(os.path.exists(self.csv))  # point 1 was not run either

    def test_a_csv_with_another_header_stops_the_sweep(self):
        with open(self.csv, "w") as f:
            f.write("a,b\n1,2\n")
        code, out = self.sweep(A)
        self.assertEqual(code, 2, out)
        self.assertIn("has another header", out)
        self.assertFalse(os.path.exists(self.failed))  # not recorded as a failed point
        # Same config columns, other metrics (a plan CSV given to a bench sweep): lmtrain refuses.
        os.remove(self.csv)
        self.assertEqual(self.sweep(A, extra=["--set", "run.mode=plan"])[0], 0)
        code, out = self.sweep(B)
        self.assertEqual(code, 2, out)
        self.assertIn("has another header", out)
        self.assertFalse(os.path.exists(self.failed))

    def test_plot_draws_a_png_from_the_csv_and_refuses_unknown_columns(self):
        self.sweep(A, B, MISSING)
        png = os.path.join(self.dir, "p.png")
        plot = [PY, os.path.join(REPO, "scripts/plot.py"), self.csv]
        r = subprocess.run(plot + ["--x", "model.context_length", "--y", "step_ms_median",
                                   "--series", "model.precision", "--out", png],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("2 points, 2 lines, 1 failed", r.stdout)
        with open(png, "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
        r = subprocess.run(plot + ["--x", "model.ctx", "--y", "step_ms_median", "--out", png],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 2)
        self.assertIn("no column model.ctx", r.stderr)

    def test_plot_without_matplotlib_says_so_in_one_line(self):
        with open(self.csv, "w") as f:
            f.write("x,y\n1,5\n2,4\n")
        fake = os.path.join(self.dir, "fake")  # a matplotlib that fails to import, first on the path
        os.makedirs(os.path.join(fake, "matplotlib"))
        with open(os.path.join(fake, "matplotlib", "__init__.py"), "w") as f:
            f.write("raise ImportError('not here')\n")
        png = os.path.join(self.dir, "p.png")
        r = subprocess.run([PY, os.path.join(REPO, "scripts/plot.py"), self.csv, "--x", "x",
                            "--y", "y", "--out", png], capture_output=True, text=True,
                           env=dict(os.environ, PYTHONPATH=fake))
        self.assertEqual(r.returncode, 2)
        self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
        self.assertIn("has no matplotlib", r.stderr)
        self.assertFalse(os.path.exists(png))

    def test_plot_draws_a_point_measured_again_from_its_latest_row_not_as_failed(self):
        with open(self.csv, "w") as f:  # x 1 measured twice on the line, then x 2
            f.write("x,y,s\n1,5,a\n1,3,a\n2,4,a\n1,7,b\n")
        png = os.path.join(self.dir, "p.png")
        r = subprocess.run([PY, os.path.join(REPO, "scripts/plot.py"), self.csv, "--x", "x",
                            "--y", "y", "--series", "s", "--out", png],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("3 points, 2 lines", r.stdout)
        with open(os.path.join(self.dir, "out.failed.csv"), "w") as f:  # x 1 failed once, x 3 still
            f.write("x,s,status\n1,a,oom\n3,a,oom\n")  # (y is a metric: not in the failed file)
        r = subprocess.run([PY, os.path.join(REPO, "scripts/plot.py"), self.csv, "--x", "x",
                            "--y", "y", "--series", "s", "--out", png],
                           capture_output=True, text=True)
        self.assertIn("3 points, 2 lines, 1 failed", r.stdout)

    def test_quick_sweep_scripts_run_end_to_end(self):
        env = dict(os.environ, SWEEP_QUICK="1", PYTHON=PY, CONTEXTS="8", WARMUPS="0 1")
        for script, csvs, n in [("sweep_e2e.sh", {"CSV": "e2e.csv"}, 4),
                                ("sweep_memory.sh", {"CSV": "mem.csv", "PLAN_CSV": "plan.csv"}, 2)]:
            for k, v in csvs.items():
                env[k] = os.path.join(self.dir, v)
            r = subprocess.run([os.path.join(REPO, "scripts", script)], capture_output=True,
                               text=True, env=env, cwd=REPO)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertEqual(len(rows(env["CSV"])), n, script)
            self.assertTrue(any(f.endswith(".png") for f in os.listdir(self.dir)))
        mem, plan = rows(os.path.join(self.dir, "mem.csv")), rows(os.path.join(self.dir, "plan.csv"))
        for m, p in zip(mem, plan):  # on the CPU the plan is the measurement
            self.assertEqual(m["mem_total_bytes"], p["total_bytes"])
        with open(os.path.join(self.dir, "mem_vs_plan.md")) as f:  # so every error is 0
            table = [l for l in f.read().splitlines() if l.startswith("| 64 x ")]
        self.assertEqual(len(table), 2, table)
        for line in table:
            self.assertEqual(line.count("| +0.00% |"), 2, line)

    def test_quick_ddp_sweep_tabulates_every_strategy_against_one_rank(self):
        env = dict(os.environ, SWEEP_QUICK="1", PYTHON=PY, CSV=os.path.join(self.dir, "ddp.csv"),
                   CTAS="2")
        r = subprocess.run([os.path.join(REPO, "scripts", "sweep_ddp.sh")], capture_output=True,
                           text=True, env=env, cwd=REPO)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        many, one = rows(env["CSV"]), rows(os.path.join(self.dir, "ddp_1rank.csv"))
        strategies = ["naive", "flat", "overlap", "bucketed", "zero1"]
        self.assertEqual([x["ddp.strategy"] for x in many],
                         ["naive", "flat", "overlap"] + ["bucketed", "zero1"] * 3 + strategies)
        self.assertEqual([x["ddp.bucket_mb"] for x in many if x["ddp.strategy"] in ("bucketed", "zero1")],
                         ["0.01", "0.01", "0.1", "0.1", "100.0", "100.0", "0.01", "0.01"])
        self.assertEqual([x["ddp.comm_ctas"] for x in many], ["0"] * 7 + ["2"] * 2 + ["0"] * 5)
        # grad_accum 2: every strategy, bucketed and zero1 at the first bucket size, one rank too
        self.assertEqual([x["train.grad_accum"] for x in many], ["1"] * 9 + ["2"] * 5)
        self.assertEqual([x["train.grad_accum"] for x in one], ["1", "2"])
        self.assertEqual([x["world_size"] for x in many + one], ["2"] * 14 + ["1"] * 2)
        opt = {x["ddp.strategy"]: int(x["optimizer_bytes"]) for x in many}
        self.assertEqual(opt["flat"], int(one[0]["optimizer_bytes"]))
        self.assertLess(opt["zero1"], opt["flat"] * 0.6)  # half the moments, one shard's worth
        with open(os.path.join(self.dir, "ddp.md")) as f:
            table = f.read()
        self.assertEqual(table.count("\n| "), 15, table)  # the header and the fourteen points
        self.assertEqual(table.count(" | auto | "), 12, table)
        self.assertIn("(grad_accum 1), ", table)  # one-rank steps of both, for the scaling
        self.assertIn(" ms (grad_accum 2);", table)
        for s in strategies:
            scaled = rf"^\| {s} \| 2 \| .*% \| [0-9.]+% \| [0-9.]+ \|$"  # against one rank's grad_accum 2
            self.assertEqual(len(re.findall(scaled, table, re.M)), 1, (s, table))


class AllreduceSweep(unittest.TestCase):
    def test_quick_sweep_runs_each_rank_count_once_and_tabulates_them(self):
        with tempfile.TemporaryDirectory() as d:
            env = dict(os.environ, SWEEP_QUICK="1", PYTHON=PY, NPS="2 4",
                       CSV=os.path.join(d, "ar.csv"))
            run = lambda: subprocess.run([os.path.join(REPO, "scripts", "sweep_allreduce.sh")],
                                         capture_output=True, text=True, env=env, cwd=REPO)
            r = run()
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            got = rows(env["CSV"])  # 1, 2 and 4 MiB on 2 ranks, then on 4
            self.assertEqual([(x["world_size"], int(x["size_bytes"]) >> 20) for x in got],
                             [("2", 1), ("2", 2), ("2", 4), ("4", 1), ("4", 2), ("4", 4)])
            self.assertTrue(all(x["wrong"] == "0" for x in got))
            r = run()  # a re-run skips both rank counts: the same point on 2 ranks is not 4's
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertEqual(r.stdout.count("skip (row already"), 2, r.stdout)
            self.assertEqual(len(rows(env["CSV"])), 6)
            with open(os.path.join(d, "ar.md")) as f:
                table = f.read()
            self.assertIn("| size | 2 ranks, mpi, fp32 | 4 ranks, mpi, fp32 |", table)
            self.assertEqual(table.count(" MiB | "), 3, table)
            self.assertTrue(os.path.exists(os.path.join(d, "ar_busbw.png")))


def write_rows(path, rows):
    """A CSV of rows (dicts) under the first row's keys."""
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


class BenchTable(unittest.TestCase):

    def test_each_row_is_paired_with_the_nearest_pytorch_rows_within_ten_minutes(self):
        shape = {"d_model": "64", "num_layers": "2", "precision": "bf16", "context_length": "32",
                 "batch_size": "4"}
        ours = lambda attn, date, ms: {
            **{("train." if k == "batch_size" else "model.") + k: v for k, v in shape.items()},
            "model.attention": attn, "date_utc": date, "step_ms_median": ms, "fwd_ms_median": "1",
            "mfu": "0.1", "mem_total_bytes": str(2**30), "device_name": "GPU"}
        torch = lambda compiled, date, ms: {**shape, "compile": compiled, "date": date,
                                            "step_ms_median": ms, "peak_mem_fwd_bytes": str(2**31),
                                            "peak_mem_step_bytes": str(2**31)}
        with tempfile.TemporaryDirectory() as d:
            o, t = os.path.join(d, "ours.csv"), os.path.join(d, "torch.csv")
            write_rows(o, [ours("flash", "2026-01-01T10:00:00+00:00", "5.0"),
                           ours("naive", "2026-01-01T12:00:00+00:00", "8.0"),
                           ours("flash", "2026-01-01T08:00:00+00:00", "6.0")])  # earlier, kept
            write_rows(t, [torch("False", "2026-01-01T09:45:00+00:00", "40.0"),  # 15 min: too far
                           torch("False", "2026-01-01T10:03:00+00:00", "20.0"),  # nearest
                           torch("True", "2026-01-01T10:11:00+00:00", "10.0"),   # 11 min: too far
                           torch("True", "2026-01-01T11:55:00+00:00", "16.0")])
            r = subprocess.run([PY, os.path.join(REPO, "scripts/bench_table.py"), o, t],
                               capture_output=True, text=True, cwd=REPO)
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = [l for l in r.stdout.splitlines() if l.startswith("| 64 x 2")]
        self.assertEqual(len(lines), 3)
        self.assertIn("| flash |", lines[0])  # by attention, then oldest first
        self.assertIn("| 6.00 | n/a | n/a | n/a | n/a |", lines[0])
        self.assertIn("| 5.00 | 20.00 | n/a | 4.00x | n/a |", lines[1])
        self.assertIn("| 8.00 | n/a | 16.00 | n/a | 2.00x |", lines[2])


class AttentionTable(unittest.TestCase):
    """scripts/attention_table.py: the kernels-alone table holds the shapes whose rows have the
    kernels' own times, each implementation's forward + backward and its ratio to ours."""

    def test_the_kernels_alone_table(self):
        key = {"dtype": "bf16", "mask": "causal", "batch": "1", "heads": "2", "head_dim": "64",
               "status": "ok", "fwd_ms": "1", "bwd_ms": "2", "fwd_bwd_ms": "3"}
        ours = lambda t, fk, bk: {**key, "impl": "flash", "seq_len": t, "fwd_kernel_ms": fk,
                                  "bwd_kernel_ms": bk, "device_name": "GPU X",
                                  "date_utc": "2026-01-01T00:00:00Z", "attention.iters": "20",
                                  "attention.warmup": "5"}
        theirs = lambda impl, t, fk, bk: {**key, "impl": impl, "seq_len": t, "fwd_kernel_ms": fk,
                                          "bwd_kernel_ms": bk, "gpu_name": "GPU X", "torch": "2",
                                          "date": "2026-01-01T00:00:00+00:00", "iters": "20",
                                          "warmup": "5"}
        with tempfile.TemporaryDirectory() as d:
            o, t = os.path.join(d, "ours.csv"), os.path.join(d, "torch.csv")
            write_rows(o, [ours("512", "0.01", "0.03"), ours("1024", "", "")])
            write_rows(t, [theirs("sdpa-flash", "512", "0.02", "0.06"),
                                 theirs("sdpa-cudnn", "512", "0.01", "0.05"),
                                 theirs("sdpa-cudnn", "1024", "0.1", "0.2")])
            r = subprocess.run([PY, os.path.join(REPO, "scripts/attention_table.py"), o, t],
                               capture_output=True, text=True, cwd=REPO)
        self.assertEqual(r.returncode, 0, r.stderr)
        table = r.stdout[r.stdout.index("the kernels alone"):]
        self.assertIn("| bf16 | causal | 1×2 | 512 | 64 | 0.040 | 0.080 | 0.060 | 2.00× | 1.50× |", table)
        # Ours without kernel times at T 1024: the row still shows cuDNN's, with no ratio.
        self.assertIn("| bf16 | causal | 1×2 | 1024 | 64 | – | – | 0.300 | – | – |", table)


LLMC_TOOLS = ("llm.c", "lmtrain train", "lmtrain train bf16 residual", "lmtrain bench")


class LlmcTable(unittest.TestCase):
    def test_each_call_each_run_and_the_ratio_of_the_medians(self):
        import random
        import statistics
        rng = random.Random()
        calls = (("2026-01-02T09:00:00Z", "GPU B"), ("2026-01-01T10:00:00Z", "GPU A"))
        header = ["date_utc", "device", "tool", "batch", "context", "run", "steps", "warmup",
                  "ms_median", "ms_mean", "command"]
        data, want = [], {}
        for date, device in calls:
            for b, t in ((8, 1024), (4, 512), (2, 256)):
                for run in (1, 2, 3):
                    for tool in LLMC_TOOLS:
                        if (b, t) == (2, 256) and tool == "llm.c":
                            continue  # a shape without llm.c is left out
                        ms = round(rng.uniform(2, 40), 3)
                        data.append([date, device, tool, b, t, run, 50, 10, ms, ms, "cmd, x"])
                        want.setdefault((date, b, t, tool), []).append(ms)
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "llmc.csv")
            with open(path, "w", newline="") as f:
                w = csv.writer(f)
                w.writerow(header)
                w.writerows(data)
            r = subprocess.run([PY, os.path.join(REPO, "scripts/llmc_table.py"), path],
                               capture_output=True, text=True, cwd=REPO)
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = [l for l in r.stdout.splitlines() if re.match(r"\| \d+ x \d+ \|", l)]
        order = [(date, device, b, t) for date, device in sorted(calls)
                 for b, t in ((8, 1024), (4, 512))]  # oldest call first, then by context
        self.assertEqual(len(lines), len(order))
        for line, (date, device, b, t) in zip(lines, order):
            cells = [c.strip() for c in line.strip("|").split("|")]
            self.assertEqual(cells[:3], [f"{b} x {t}", device, date[:10] + " " + date[11:16]])
            for cell, tool in zip(cells[3:7], LLMC_TOOLS):
                self.assertEqual([float(x) for x in cell.split(", ")],
                                 [round(x, 2) for x in want[(date, b, t, tool)]])
            mid = {tool: statistics.median(want[(date, b, t, tool)])
                   for tool in ("llm.c", "lmtrain train")}
            self.assertEqual(cells[7], f"{mid['llm.c'] / mid['lmtrain train']:.2f}x")
            self.assertEqual(cells[8], f"{b * t / mid['llm.c']:.0f}k / "
                                       f"{b * t / mid['lmtrain train']:.0f}k")


class MixedPrecision(unittest.TestCase):
    def test_the_experiment_runs_and_writes_every_section(self):
        with tempfile.TemporaryDirectory() as d:
            md = os.path.join(d, "mp.md")
            r = subprocess.run([PY, os.path.join(REPO, "scripts/mixed_precision.py"), "--out", md],
                               capture_output=True, text=True, cwd=REPO)
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(md) as f:
                text = f.read()
        for part in ["Command: `", "## Accumulation", "| float16 | float16 |", "## Toy model",
                     "| output of fc1 (first layer) | torch.bfloat16 |", "## Layer norm"]:
            self.assertIn(part, text)
        # fp16 accumulation drifts well away from 10 where fp32 stays close (IEEE arithmetic,
        # the point of the experiment).
        row = lambda acc, val: float(text.split(f"| {acc} | {val} | ")[1].split(" |")[0])
        self.assertLess(abs(row("float32", "float32") - 10), 1e-3)
        self.assertGreater(abs(row("float16", "float16") - 10), 1e-2)


class TuneFlash(unittest.TestCase):
    """dev/tune_flash.py's ranking: a candidate is best only if timed (status ok) at every length
    the rows have; one whose sum leaves a length out is listed but not starred."""

    def test_only_a_candidate_timed_at_every_length_is_best(self):
        tune = script("dev/tune_flash.py")

        def row(cand, T, ms, status="ok"):
            return {"kernel": "fwd", "head_dim": "64", "seq_len": str(T), "fwd_ms": str(ms),
                    "status": status, "warps": cand, "row_tiles": "1", "tile": "64", "blocks": "1"}
        rows = [row("4", 512, 1.0), row("4", 4096, 9.0),       # 10.0 at both lengths
                row("8", 512, 0.5), row("8", 4096, 0.0, "oom"),  # 0.5, one length missing
                row("2", 512, 1.5), row("2", 4096, 9.5),       # 11.0 at both
                {**row("4", 512, 0.1), "head_dim": "128"}]     # another head dim: not counted
        scores, whole, best = tune.rank(rows, "fwd", 64, "fwd_ms")
        key = lambda w: (w, "1", "64", "1")
        self.assertEqual(scores, {key("4"): 10.0, key("8"): 0.5, key("2"): 11.0})
        self.assertEqual(set(whole), {key("4"), key("2")})
        self.assertEqual(best, key("4"))


class MigrateCsv(unittest.TestCase):
    """dev/migrate_csv.py: an older file of a mode it can run here takes the binary's header, its
    cells kept under their names and the build's column empty, and lmtrain appends to it; a mode
    it cannot run here (attention, which needs a GPU) keeps its metric columns after the config's
    and the build's."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="lmtrain-migrate-csv-test-")
        self.env = {**os.environ, "LMTRAIN": os.path.join(REPO, "build/lmtrain")}

    def tearDown(self):
        shutil.rmtree(self.dir)

    def migrate(self, path):
        r = subprocess.run([PY, os.path.join(REPO, "dev/migrate_csv.py"), path],
                           capture_output=True, text=True, cwd=self.dir, env=self.env)
        self.assertEqual(r.returncode, 0, r.stderr + r.stdout)
        return r.stdout

    def without(self, path, column):
        with open(path, newline="") as f:
            table = list(csv.reader(f))
        at = table[0].index(column)
        with open(path, "w", newline="") as f:
            csv.writer(f, lineterminator="\n").writerows([r[:at] + r[at + 1:] for r in table])

    def test_an_older_file_takes_the_binarys_header_and_rows_append_to_it(self):
        path = os.path.join(self.dir, "bench.csv")
        run = [os.path.join(REPO, "build/lmtrain"), *BASE[2:], "--csv", path]
        self.assertEqual(subprocess.run(run, capture_output=True).returncode, 0)
        written = rows(path)
        self.without(path, "lmtrain_version")
        self.assertIn("added lmtrain_version (empty)", self.migrate(path))
        migrated = rows(path)
        self.assertEqual(list(migrated[0]), list(written[0]))
        self.assertEqual(migrated[0], {**written[0], "lmtrain_version": ""})
        self.assertIn("already current", self.migrate(path))
        self.assertEqual(subprocess.run(run, capture_output=True).returncode, 0)
        self.assertEqual(rows(path)[1]["lmtrain_version"], written[0]["lmtrain_version"])
        self.assertNotEqual(written[0]["lmtrain_version"], "")

    def test_a_mode_not_run_here_keeps_its_metrics_after_the_build(self):
        names, values = script("scripts/sweep.py").resolved_config(
            self.env["LMTRAIN"], ["--set", "run.mode=attention"], "test")
        metrics = ["date_utc", "device_name", "impl", "fwd_ms"]
        path = os.path.join(self.dir, "attention.csv")
        with open(path, "w", newline="") as f:
            csv.writer(f, lineterminator="\n").writerows(
                [names + metrics, values + ["2026-01-01T00:00:00Z", "GPU X", "flash", "0.5"]])
        self.migrate(path)
        with open(path, newline="") as f:
            table = list(csv.reader(f))
        self.assertEqual(table[0], names + ["lmtrain_version"] + metrics)
        self.assertEqual(table[1], values + ["", "2026-01-01T00:00:00Z", "GPU X", "flash", "0.5"])


class GemmChoices(unittest.TestCase):
    """dev/gemm_choices.py: cuda/gemm_choices.inc is what it makes of results/; a choice is kept
    only at 98 % of the first's times or less, both; of one problem in two files the larger gain;
    a problem timed hot anywhere chosen by its hot times alone; one-matmul outputs concatenated in
    a file each count; a malformed choice line is refused."""

    HEAD = "# choices: per matmul, the candidate that does not split K (...)"

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="lmtrain-gemm-choices-test-")
        self.out = os.path.join(self.dir, "choices.inc")

    def tearDown(self):
        shutil.rmtree(self.dir)

    def choices(self, *files):
        return subprocess.run([PY, os.path.join(REPO, "dev/gemm_choices.py"), "--out", self.out,
                               *files], capture_output=True, text=True, cwd=REPO)

    def line(self, m, config, warm, first, cold, first_cold, hot=None):
        return (f'{{"GPU X", false, true, {m}, 64, 32, true, "{config}"}},  // fwd qkv: {warm} us, '
                f"first {first}; cold {cold}, first {first_cold}"
                + (f"; hot {hot[0]}, first {hot[1]}" if hot else ""))

    def kept(self, *files):
        r = self.choices(*files)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(self.out) as f:
            return [re.search(r'"cfg (\w+)"', l).group(1) for l in f.read().splitlines()
                    if not l.startswith("//")]

    def write(self, name, *sections):
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            for choice_lines in sections:
                f.write("# GPU X; d_model 32\nmatmul rows\n\n# every candidate\nfwd qkv #0 ...\n\n")
                f.write(self.HEAD + "\n" + "".join(l + "\n" for l in choice_lines))
        return path

    def test_the_committed_table_is_what_the_results_give(self):
        r = self.choices()
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(self.out) as f, open(os.path.join(REPO, "cuda/gemm_choices.inc")) as g:
            self.assertEqual(f.read(), g.read())

    def test_gain_threshold_larger_gain_and_concatenated_outputs(self):
        a = self.write("a.txt", [self.line(100, "cfg a100", 90.0, 100.0, 97.0, 100.0),
                                 self.line(200, "cfg a200", 90.0, 100.0, 99.0, 100.0)],
                       [self.line(300, "cfg a300", 50.0, 100.0, 60.0, 100.0)])
        b = self.write("b.txt", [self.line(100, "cfg b100", 80.0, 100.0, 95.0, 100.0),
                                 self.line(300, "cfg b300", 70.0, 100.0, 70.0, 100.0)])
        # 100: b's 0.95 beats a's 0.97; 200: 0.99 > 0.98, dropped; 300: a's second output, 0.6
        self.assertEqual(self.kept(a, b), ["b100", "a300"])

    def test_hot_times_outrank_warm_and_cold(self):
        a = self.write("a.txt", [self.line(100, "cfg a100", 50.0, 100.0, 50.0, 100.0),
                                 self.line(200, "cfg a200", 90.0, 100.0, 90.0, 100.0),
                                 self.line(300, "cfg a300", 90.0, 100.0, 90.0, 100.0)])
        b = self.write("b.txt", [self.line(100, "cfg b100", 99.0, 100.0, 99.0, 100.0, (90.0, 100.0)),
                                 self.line(200, "cfg b200", 90.0, 100.0, 90.0, 100.0, (99.0, 100.0))])
        # 100: b's hot 0.9 over a's warm and cold 0.5; 200: hot 0.99, so the first (a's 0.9 not
        # taken); 300: timed only warm and cold
        self.assertEqual(self.kept(a, b), ["b100", "a300"])

    def test_a_malformed_choice_line_is_refused(self):
        bad = self.write("bad.txt", [self.line(100, "cfg", 90.0, 100.0, 90.0, 100.0)[:-5]])
        r = self.choices(bad)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("not a choice line", r.stderr)


class Report(unittest.TestCase):
    """scripts/report.py: results/REPORT.md is what its data give, and a changed value in a data
    file makes --check fail (on a copy of results/, PNGs left out)."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="lmtrain-report-test-")
        self.results = os.path.join(self.dir, "results")
        shutil.copytree(os.path.join(REPO, "results"), self.results,
                        ignore=shutil.ignore_patterns("*.png"))

    def tearDown(self):
        shutil.rmtree(self.dir)

    def report(self, *args, results=None):
        return subprocess.run([PY, os.path.join(REPO, "scripts/report.py"), *args] +
                              (["--results", results] if results else []),
                              capture_output=True, text=True, cwd=REPO)

    def set_e2e(self, size_shape, column, value):
        """Sets one column of the e2e row of (d_model, layers) in bf16 at T 512, warm-up 5."""
        path = os.path.join(self.results, "e2e.csv")
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            fields, data = reader.fieldnames, list(reader)
        hits = [r for r in data if (r["model.d_model"], r["model.num_layers"]) == size_shape
                and r["model.precision"] == "bf16" and r["model.context_length"] == "512"
                and r["bench.warmup"] == "5"]
        self.assertEqual(len(hits), 1)
        old = hits[0][column]
        hits[0][column] = value
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fields)
            w.writeheader()
            w.writerows(data)
        return old

    def test_the_repository_report_matches_its_data(self):
        r = self.report("--check")
        self.assertEqual(r.returncode, 0, r.stdout[-3000:] + r.stderr)
        self.assertIn("matches its data", r.stdout)

    def test_the_copy_matches_until_one_csv_value_changes(self):
        self.assertEqual(self.report("--check", results=self.results).returncode, 0)
        old = self.set_e2e(("1600", "48"), "step_ms_median", "12345.6789")
        r = self.report("--check", results=self.results)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("differs from what its data give", r.stderr)
        self.assertIn(f"-| xl | ", r.stdout)  # the diff: xl's row of the bf16 grid, old and new
        self.assertIn("/ 12345.68 |", r.stdout)
        self.assertIn(f"/ {float(old):.2f} |", r.stdout)
        # Regenerating writes the new value, and the copy matches again.
        self.assertEqual(self.report(results=self.results).returncode, 0)
        with open(os.path.join(self.results, "REPORT.md")) as f:
            self.assertIn("/ 12345.68 |", f.read())
        self.assertEqual(self.report("--check", results=self.results).returncode, 0)

    def test_the_readme_beside_the_results_follows_make_runs_log(self):
        # A README beside --results has its make_run block checked too: a loss changed in the log
        # is a diff in the README's sample, not REPORT.md's.
        shutil.copy(os.path.join(REPO, "README.md"), self.dir)
        self.assertEqual(self.report("--check", results=self.results).returncode, 0)
        log = os.path.join(self.results, "make_run.log")
        with open(log) as f:
            text = f.read()
        last = [l for l in text.splitlines() if l.startswith("step ")][-1]
        changed = last.replace("| loss ", "| loss 9", 1)
        with open(log, "w") as f:
            f.write(text.replace(last, changed))
        r = self.report("--check", results=self.results)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("README.md differs from what its data give", r.stderr)
        self.assertIn("+    " + changed, r.stdout)
        self.assertIn("REPORT.md matches its data", r.stdout)

    def test_ours_against_compiled_only_when_measured_in_one_call(self):
        # The newest compiled rows moved a day later: the newest lmtrain rows were not measured
        # beside them, so the ratio column says so instead of pairing the two.
        path = os.path.join(self.results, "bench_torch.csv")
        with open(path, newline="") as f:
            table = list(csv.DictReader(f))
        fields = list(table[0].keys())
        for r in table:
            if r["label"].endswith("-compile"):
                r["date"] = r["date"].replace("2026-11-", "2026-12-")
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fields, lineterminator="\n")
            w.writeheader()
            w.writerows(table)
        self.assertEqual(self.report(results=self.results).returncode, 0)
        with open(os.path.join(self.results, "REPORT.md")) as f:
            text = f.read()
        block = text[text.index("<!-- report:torch_model -->"):text.index("<!-- /report:torch_model -->")]
        self.assertIn("n/a (not measured in one call)", block)

    def set_attention(self, name, impl, fwd, bwd):
        """Sets the kernel columns of the newest row of impl at xl's B 4, H 25, T 512 in name."""
        path = os.path.join(self.results, name)
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            fields, data = reader.fieldnames, list(reader)
        hits = [r for r in data if r["impl"] == impl and r["dtype"] == "bf16" and r["mask"] == "causal"
                and (r["batch"], r["heads"], r["seq_len"], r["head_dim"]) == ("4", "25", "512", "64")]
        hits[-1].update({"fwd_kernel_ms": fwd, "bwd_kernel_ms": bwd})
        fields += [k for k in ("fwd_kernel_ms", "bwd_kernel_ms") if k not in fields]
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fields, lineterminator="\n", restval="")
            w.writeheader()
            w.writerows(data)

    def test_the_models_attention_table_sets_the_kernels_alone_side_by_side(self):
        # The last two columns of xl's row: ours and cuDNN's kernels (forward + backward), where
        # both rows have them; a dash where either lacks them.
        def xl_row():
            self.assertEqual(self.report(results=self.results).returncode, 0)
            with open(os.path.join(self.results, "REPORT.md")) as f:
                text = f.read()
            block = text[text.index("<!-- report:att_models -->"):text.index("<!-- /report:att_models -->")]
            return [l for l in block.splitlines() if l.startswith("| 4 × 25 | 512 |")][0]
        self.set_attention("attention_lmtrain.csv", "flash", "0.0125", "0.0375")
        self.set_attention("attention_torch.csv", "sdpa-cudnn", "0.05", "0.15")
        self.assertTrue(xl_row().endswith("| 0.0500 / 0.2000 | 4.0× |"), xl_row())
        self.set_attention("attention_torch.csv", "sdpa-cudnn", "", "")
        self.assertTrue(xl_row().endswith("| – | – |"), xl_row())

    def test_a_number_in_the_prose_follows_its_data_too(self):
        # MFU of the largest model at T 512 is an inline number, not a table cell.
        self.set_e2e(("2560", "32"), "mfu", "0.5")
        r = self.report("--check", results=self.results)
        self.assertEqual(r.returncode, 1)
        self.assertIn("to 50.0% (2.7b)", r.stdout)

    def test_a_missing_file_or_unknown_block_is_one_line_and_exit_2(self):
        os.remove(os.path.join(self.results, "ddp.csv"))
        r = self.report("--check", results=self.results)
        self.assertEqual(r.returncode, 2)
        self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
        self.assertIn("ddp.csv: no such file", r.stderr)
        shutil.copy(os.path.join(REPO, "results", "ddp.csv"), self.results)
        with open(os.path.join(self.results, "REPORT.md"), "a") as f:
            f.write("\n<!-- report:no_such_block -->1<!-- /report:no_such_block -->\n")
        r = self.report("--check", results=self.results)
        self.assertEqual(r.returncode, 2)
        self.assertIn("unknown block 'no_such_block'", r.stderr)

    def test_record_keeps_one_row_per_file(self):
        with open(os.path.join(self.results, "x.txt"), "w") as f:
            f.write("x\n")
        for device in ("first", "second"):
            r = self.report("--record", "results/x.txt", "--device", device, "--command", "make x",
                            results=self.results)
            self.assertEqual(r.returncode, 0, r.stderr)
        got = [r for r in rows(os.path.join(self.results, "provenance.csv")) if r["file"] == "x.txt"]
        self.assertEqual([(r["device"], r["command"]) for r in got], [("second", "make x")])
        self.assertRegex(got[0]["date_utc"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")

    def test_record_refuses_a_missing_file_or_an_empty_device(self):
        with open(os.path.join(self.results, "x.txt"), "w") as f:
            f.write("x\n")
        before = rows(os.path.join(self.results, "provenance.csv"))
        for args, says in [(["results/nothing.txt", "--device", "one GPU"], "no nothing.txt"),
                           (["results/x.txt", "--device", "one "], "names no device"),
                           (["results/x.txt", "--device", "2 ranks on "], "names no device")]:
            r = self.report("--record", *args, "--command", "make x", results=self.results)
            self.assertEqual(r.returncode, 2, args)
            self.assertEqual(len(r.stderr.strip().splitlines()), 1)
            self.assertIn(says, r.stderr)
        self.assertEqual(rows(os.path.join(self.results, "provenance.csv")), before)


class Sanitize(unittest.TestCase):
    """scripts/sanitize.sh's verdicts, with a stand-in for compute-sanitizer that reports what a
    test tells it (FAKE_MODE, for the fused_swiglu run; the train run is always clean): RUNS
    takes the named runs alone; racecheck's hazards in cuBLASLt's nvjet_ kernels are left out and
    counted, ours fail the tool's line, and so do hazards its summary counts in a form the script
    does not read; memcheck's errors fail it; a run with no summary (not run under the tool) fails;
    an unknown run name stops the script in one line, exit 2, before any run."""

    FAKE = """#!/bin/bash
echo "$*" >> "$FAKE_CALLS"
tool=$2 mode=clean
[[ "$*" == *"train.batch_size=128"* ]] && mode=$FAKE_MODE
[ "$mode" = quiet ] && exit 0
race() { echo "========= Error: Race reported between Write access at 0x10 in $1"
         echo "=========     and Read access at 0x20 in $1"; }
case $tool in
  racecheck)
    race nvjet_sm90_tst_128x128_64x4; race nvjet_sm90_tss_64x64_64x6
    n=2
    [ "$mode" = ours ] && race swiglu_dgrad_kernel && n=3
    [ "$mode" = unread ] && echo "========= Error: a hazard of a kind not seen yet" && n=3
    echo "========= RACECHECK SUMMARY: $n hazards displayed ($n errors, 0 warnings)"; exit 99;;
  memcheck)
    [ "$mode" = ours ] && echo "========= ERROR SUMMARY: 3 errors" && exit 99
    echo "========= ERROR SUMMARY: 0 errors"; exit 0;;
  *) echo "========= ERROR SUMMARY: 0 errors"; exit 0;;
esac
"""

    def run_script(self, runs, mode):
        d = tempfile.mkdtemp(prefix="lmtrain-sanitize-test-")
        self.addCleanup(shutil.rmtree, d)
        fake, calls = os.path.join(d, "compute-sanitizer"), os.path.join(d, "calls")
        with open(fake, "w") as f:
            f.write(self.FAKE)
        os.chmod(fake, 0o755)
        env = dict(os.environ, SANITIZER=fake, LMTRAIN="/bin/true", LOGS=os.path.join(d, "logs"),
                   RUNS=runs, FAKE_CALLS=calls, FAKE_MODE=mode)
        r = subprocess.run(["bash", os.path.join(REPO, "scripts/sanitize.sh")], capture_output=True,
                           text=True, cwd=REPO, env=env)
        lines = {l.split()[0]: l for l in r.stdout.splitlines() if l.strip()}
        ncalls = len(open(calls).read().splitlines()) if os.path.exists(calls) else 0
        return r, lines, ncalls

    def test_named_runs_alone_and_the_librarys_hazards_left_out(self):
        r, lines, ncalls = self.run_script("train fused_swiglu", "clean")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(ncalls, 8)  # four tools, two runs
        for tool in ("memcheck", "racecheck", "synccheck", "initcheck"):
            self.assertRegex(lines[tool], r"train: clean.*; fused_swiglu: clean")
            self.assertNotIn("attention", lines[tool])
        self.assertIn("fused_swiglu: clean (cuBLASLt's nvjet_ hazards left out: 2)", lines["racecheck"])
        self.assertIn("no errors in our kernels", r.stdout)

    def test_our_kernels_hazards_and_errors_fail(self):
        r, lines, _ = self.run_script("train fused_swiglu", "ours")
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("fused_swiglu: 1 errors (exit 99", lines["racecheck"])
        self.assertIn("fused_swiglu: 3 errors (exit 99", lines["memcheck"])
        self.assertRegex(lines["synccheck"], r"fused_swiglu: clean")
        self.assertIn("errors found", r.stdout)

    def test_hazards_counted_but_not_read_are_ours(self):
        r, lines, _ = self.run_script("fused_swiglu", "unread")
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("fused_swiglu: 1 errors (exit 99", lines["racecheck"])
        self.assertRegex(lines["memcheck"], r"fused_swiglu: clean")

    def test_a_run_without_a_summary_fails(self):
        r, lines, _ = self.run_script("train fused_swiglu", "quiet")
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        for tool in ("memcheck", "racecheck", "synccheck", "initcheck"):
            self.assertRegex(lines[tool], r"train: clean.*; fused_swiglu: no summary from " + tool)

    def test_an_unknown_run_is_one_line_and_exit_2_before_any_run(self):
        r, _, ncalls = self.run_script("train fused_swigl", "clean")
        self.assertEqual(r.returncode, 2)
        self.assertEqual(len(r.stderr.strip().splitlines()), 1)
        self.assertIn("no run 'fused_swigl'", r.stderr)
        self.assertEqual(ncalls, 0)


class WriteTo(unittest.TestCase):
    """scripts/lib.sh's write_to, through which the scripts write their tables: the file is
    replaced by the command's output only when the command succeeds; else it stays as it was,
    with no .tmp beside it, and the command's status comes back."""

    def test_replaced_on_success_kept_on_failure(self):
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "t.md")
            with open(out, "w") as f:
                f.write("earlier table\n")
            lib = os.path.join(REPO, "scripts/lib.sh")
            r = subprocess.run(["bash", "-c", f'. {lib}; write_to "$0" sh -c "echo partial; exit 3"',
                                out], capture_output=True, text=True)
            self.assertEqual(r.returncode, 3)
            with open(out) as f:
                self.assertEqual(f.read(), "earlier table\n")
            self.assertEqual(os.listdir(d), ["t.md"])
            r = subprocess.run(["bash", "-c", f'. {lib}; write_to "$0" echo new table', out],
                               capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(out) as f:
                self.assertEqual(f.read(), "new table\n")
            self.assertEqual(os.listdir(d), ["t.md"])


class DdpTimeline(unittest.TestCase):
    """scripts/ddp_timeline.py on a synthetic two-rank trace: the step it picks and the time it
    sums per rank, clipped to the step; a file that is not a trace is refused in one line."""

    def test_sums_each_ranks_collectives_and_waits_within_the_step(self):
        def x(name, pid, tid, ts_ms, dur_ms):
            return {"name": name, "ph": "X", "pid": pid, "tid": tid, "ts": ts_ms * 1e3, "dur": dur_ms * 1e3}
        events = []
        for pid, late in ((0, 0.0), (1, 2.0)):
            for step, t0 in enumerate((0.0, 100.0)):  # two timed steps of 50 ms (+ late on rank 1)
                events += [x("forward", pid, 0, t0, 10), x("backward", pid, 0, t0 + 10, 30 + late),
                           x("optimizer", pid, 0, t0 + 40 + late, 10)]
                events += [x("all_reduce", pid, 1, t0 + 20, 0.5), x("wait", pid, 1, t0 + 35, 4 + step),
                           x("wait", pid, 2, t0 + 35, 4 + step)]
        with tempfile.TemporaryDirectory() as d:
            trace, png = os.path.join(d, "t.json"), os.path.join(d, "t.png")
            with open(trace, "w") as f:
                json.dump({"traceEvents": events}, f)
            r = subprocess.run([PY, os.path.join(REPO, "scripts/ddp_timeline.py"), trace, "--out", png],
                               capture_output=True, text=True, cwd=REPO)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertGreater(os.path.getsize(png), 10000)
            # The last step: a 0.5 ms launch and a 5 ms wait in collectives, 5 ms waiting.
            self.assertIn("rank 0: step 50.0 ms, collectives 5.5 ms (2 calls), waiting 5.0 ms", r.stdout)
            self.assertIn("rank 1: step 52.0 ms, collectives 5.5 ms (2 calls), waiting 5.0 ms", r.stdout)
            r = subprocess.run([PY, os.path.join(REPO, "scripts/ddp_timeline.py"), trace, "--out", png,
                                "--step", "0"], capture_output=True, text=True, cwd=REPO)
            self.assertIn("rank 0: step 50.0 ms, collectives 4.5 ms (2 calls), waiting 4.0 ms", r.stdout)
            with open(trace, "w") as f:
                f.write("not json")
            r = subprocess.run([PY, os.path.join(REPO, "scripts/ddp_timeline.py"), trace, "--out", png],
                               capture_output=True, text=True, cwd=REPO)
            self.assertEqual(r.returncode, 2)
            self.assertEqual(len(r.stderr.strip().splitlines()), 1)
            self.assertIn("not a Chrome trace", r.stderr)


class ClocksTable(unittest.TestCase):
    """scripts/clocks_table.py on random nvidia-smi samples (busy and idle, some at the power cap,
    the last line cut short as when the sampler is stopped) and a bench log: the row it writes is
    the busy samples' figures, computed here apart; a log without a step is refused in one line."""

    def test_the_busy_samples_figures_and_a_bad_log(self):
        import random
        import statistics
        rnd = random.Random()
        n = rnd.randrange(41, 90)
        rows = []
        for i in range(n):
            busy = rnd.random() < 0.6
            rows.append((1000 + 15 * rnd.randrange(40) if busy else 345, rnd.uniform(60, 700),
                         rnd.choice([91, 100]) if busy else rnd.randrange(0, 90),
                         rnd.choice([0x0, 0x4, 0x5, 0x1])))
        busy = [r for r in rows if r[2] >= 90]
        lines = ["timestamp, name, clocks.current.sm [MHz], clocks.max.sm [MHz], power.draw [W], "
                 "power.limit [W], utilization.gpu [%], clocks_event_reasons.active"]
        for i, (sm, w, util, why) in enumerate(rows):
            lines.append(f"2026/11/26 08:00:{i // 50:02d}.{20 * (i % 50):03d}, GPU X, {sm}, 1980, {w:.2f}, "
                         f"700.00, {util}, 0x{why:016x}")
        lines.append("2026/11/26 08:01:00.000, GPU X, 19")
        log = ("== lmtrain bench: 162.22M on GPU X, bf16, batch 16 x context 1024, warm-up 3, 10 timed ==\n"
               "ms                          mean       std    median       min       max\n"
               "step (with AdamW)         32.707     1.442    31.915    31.717    35.347\n")
        with tempfile.TemporaryDirectory() as d:
            csv_path, log_path = os.path.join(d, "clocks_gpt2-small.csv"), os.path.join(d, "b.log")
            png = os.path.join(d, "c.png")
            with open(csv_path, "w") as f:
                f.write("\n".join(lines) + "\n")
            with open(log_path, "w") as f:
                f.write(log)
            r = subprocess.run([PY, os.path.join(REPO, "scripts/clocks_table.py"), csv_path, log_path, png],
                               capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
            sm = [b[0] for b in busy]
            capped = sum(1 for b in busy if b[3] & 0x4)
            want = ["GPU X", "2026-11-26", "gpt2-small, 16 x 1024", "31.91", f"{len(busy)} of {n}",
                    f"{statistics.median(sm):.0f} ({min(sm)}–{max(sm)})", "1980",
                    f"{statistics.median(float(f'{b[1]:.2f}') for b in busy):.0f}", "700",
                    f"{capped} ({100 * capped / len(busy):.0f}%)"]
            self.assertEqual(r.stdout.splitlines()[2], "| " + " | ".join(want) + " |")
            self.assertGreater(os.path.getsize(png), 10000)
            with open(log_path, "w") as f:
                f.write(log.splitlines()[0] + "\n")
            r = subprocess.run([PY, os.path.join(REPO, "scripts/clocks_table.py"), csv_path, log_path, png],
                               capture_output=True, text=True)
            self.assertEqual(r.returncode, 2)
            self.assertEqual(len(r.stderr.strip().splitlines()), 1)
            self.assertIn("no bench header or step line", r.stderr)

    def test_attention_modes_phases(self):
        """An attention-mode log: the row gives its three medians and the busy samples' clock in
        each phase, the phases laid end to end from the first busy sample at their runs' medians
        times their runs (computed here from the sample times apart)."""
        import random
        import statistics
        rnd = random.Random()
        fwd, bwd, both = (round(rnd.uniform(0.2, 2.0), 3) for _ in range(3))
        warm, iters = rnd.randrange(1, 6), rnd.randrange(50, 200)
        idle = rnd.randrange(3, 9)
        span = (warm + iters) * (fwd + bwd + both) / 1e3  # seconds of busy samples
        n = idle + int(span / 0.02) + 5
        lines = ["timestamp, name, clocks.current.sm [MHz], clocks.max.sm [MHz], power.draw [W], "
                 "power.limit [W], utilization.gpu [%], clocks_event_reasons.active"]
        busy = []
        for i in range(n):
            ms = 20 * i
            on = idle <= i < n - 3
            sm = 1500 + 15 * rnd.randrange(33) if on else 345
            lines.append(f"2026/11/27 09:{ms // 60000:02d}:{ms // 1000 % 60:02d}.{ms % 1000:03d}, GPU X, "
                         f"{sm}, 1980, 400.00, 700.00, {100 if on else 0}, 0x{4 if on else 0:016x}")
            if on:
                busy.append(((ms - 20 * idle) / 1000, sm))
        log = (f"== lmtrain attention: batch 1, heads 16 on GPU X; median of {iters} after {warm} warm-up ==\n"
               "impl   dtype mask         T   dh |    fwd ms    bwd ms   both ms | fwd TF/s bwd TF/s     both |       peak\n"
               f"flash  bf16  causal   16384   64 | {fwd:9.3f} {bwd:9.3f} {both:9.3f} |    486.4    415.7    431.6 |  290.0 MiB\n")
        bounds, at = [], 0.0
        for x in (fwd, bwd, both):
            length = (warm + iters) * x / 1e3
            bounds.append((at, at + length))
            at += length
        want_phase = []
        for lo, hi in bounds:
            sm = [s for t, s in busy if lo <= t < hi]
            want_phase.append(f"{statistics.median(sm):.0f}" if sm else "–")
        with tempfile.TemporaryDirectory() as d:
            csv_path, log_path = os.path.join(d, "clocks_attention.csv"), os.path.join(d, "a.log")
            with open(csv_path, "w") as f:
                f.write("\n".join(lines) + "\n")
            with open(log_path, "w") as f:
                f.write(log)
            r = subprocess.run([PY, os.path.join(REPO, "scripts/clocks_table.py"), csv_path, log_path,
                                os.path.join(d, "c.png")], capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
            sm = [s for _, s in busy]
            want = ["GPU X", "2026-11-27", "flash bf16 causal, 1 x 16 x 16384, head dim 64",
                    f"{fwd:.3f} / {bwd:.3f} / {both:.3f}", f"{len(busy)} of {n}",
                    f"{statistics.median(sm):.0f} ({min(sm)}–{max(sm)})", " / ".join(want_phase), "1980",
                    "400", "700", f"{len(busy)} (100%)"]
            self.assertEqual(r.stdout.splitlines()[2], "| " + " | ".join(want) + " |")


class MemoryTimeline(unittest.TestCase):
    """scripts/memory_timeline.py on a CPU bench --trace of the tiny model, alone and beside a
    synthetic PyTorch timeline CSV; the peaks it prints are the inputs' maxima, read here apart."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="lmtrain-memtl-test-")
        cls.trace = os.path.join(cls.dir, "trace.json")
        r = subprocess.run([os.path.join(REPO, "build/lmtrain"), "--config",
                            os.path.join(REPO, "configs/models/tiny.toml"), "--set", "run.mode=bench",
                            "--set", "run.device=cpu", "--set", "bench.warmup=0", "--set",
                            "bench.steps=1", "--set", "bench.kernels=0", "--trace", cls.trace],
                           capture_output=True, text=True, cwd=REPO)
        assert r.returncode == 0, r.stdout + r.stderr
        with open(cls.trace) as f:
            events = json.load(f)["traceEvents"]
        # The counter's samples are MiB per memory tag; the allocated total is their sum.
        cls.lmtrain_peak = max(round(sum(v * 2**20 for v in e["args"].values()))
                               for e in events if e["ph"] == "C" and e["name"] == "allocated MiB")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir)

    def draw(self, *extra):
        png = os.path.join(self.dir, "timeline.png")
        if os.path.exists(png):
            os.remove(png)
        r = subprocess.run([PY, os.path.join(REPO, "scripts/memory_timeline.py"), "--lmtrain-trace",
                            self.trace, "--out", png, *extra], capture_output=True, text=True, cwd=REPO)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(len(r.stdout.strip().splitlines()), 1, r.stdout)
        self.assertIn(f"wrote {png}: ", r.stdout)
        with open(png, "rb") as f:
            head = f.read(8)
        self.assertEqual(head, b"\x89PNG\r\n\x1a\n")
        self.assertGreater(os.path.getsize(png), 1000)
        return {name: int(b) for name, b in re.findall(r"(\w+) peak [0-9.]+ GiB \((\d+) bytes\)", r.stdout)}

    def test_lmtrain_panel_alone_prints_the_trace_counters_peak(self):
        self.assertGreater(self.lmtrain_peak, 0)
        self.assertEqual(self.draw(), {"lmtrain": self.lmtrain_peak})

    def test_pytorch_panel_prints_the_csvs_peak(self):
        csv_path = os.path.join(self.dir, "torch.csv")
        sizes = [3 << 20, 5 << 20, -(3 << 20), 7 << 20, -(5 << 20), 1 << 20, -(7 << 20)]
        with open(csv_path, "w", newline="") as f:
            w = csv.writer(f, lineterminator="\n")
            w.writerow(["event", "allocated_bytes", "phase"])
            total = 1 << 30
            for i, d in enumerate(sizes):
                total += d
                w.writerow([i, total, "forward" if i < 2 else "backward" if i < 5 else "optimizer"])
        peak = (1 << 30) + (12 << 20)  # after event 3
        self.assertEqual(self.draw("--torch-csv", csv_path, "--title", "test"),
                         {"lmtrain": self.lmtrain_peak, "PyTorch": peak})

    def test_a_file_that_is_not_a_trace_is_refused_in_one_line(self):
        bad = os.path.join(self.dir, "bad.json")
        with open(bad, "w") as f:
            f.write("{}")
        r = subprocess.run([PY, os.path.join(REPO, "scripts/memory_timeline.py"), "--lmtrain-trace",
                            bad, "--out", os.path.join(self.dir, "x.png")], capture_output=True, text=True)
        self.assertEqual(r.returncode, 2)
        self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
        self.assertIn("not a Chrome trace", r.stderr)


@unittest.skipUnless(torch_reference, "torch (with numpy) is not importable")
class TorchMemTimeline(unittest.TestCase):
    """torch_reference.allocation_timeline (bench --mem-timeline's reconstruction) on a
    hand-written snapshot: alloc adds, free_completed subtracts, the rest are not events."""

    def test_running_totals_and_phases_from_a_fake_snapshot(self):
        snapshot = {"segments": [], "device_traces": [[
            {"action": "segment_alloc", "addr": 0, "size": 20 << 20, "stream": 0},   # 0: reserved
            {"action": "alloc", "addr": 0, "size": 4096, "stream": 0},               # 1: forward
            {"action": "alloc", "addr": 4096, "size": 1024, "stream": 0},            # 2
            {"action": "snapshot", "addr": 0, "size": 5120, "stream": 0},            # 3: mark
            {"action": "free_requested", "addr": 0, "size": 4096, "stream": 0},      # 4: backward
            {"action": "free_completed", "addr": 0, "size": 4096, "stream": 0},      # 5
            {"action": "alloc", "addr": 8192, "size": 512, "stream": 0},             # 6
            {"action": "snapshot", "addr": 0, "size": 1536, "stream": 0},            # 7: mark
            {"action": "free_requested", "addr": 100, "size": 2048, "stream": 0},    # 8: optimizer
            {"action": "free_completed", "addr": 100, "size": 2048, "stream": 0},    # 9: from before
            {"action": "segment_free", "addr": 0, "size": 20 << 20, "stream": 0},    # 10
            {"action": "oom", "device_free": 0, "size": 1 << 40, "stream": 0},       # 11
        ]]}
        entries = snapshot["device_traces"][0]
        rows = torch_reference.allocation_timeline(entries, 10000, [4, 8])
        self.assertEqual(rows, [(0, 14096, "forward"), (1, 15120, "forward"),
                                (2, 11024, "backward"), (3, 11536, "backward"),
                                (4, 9488, "optimizer")])
        # Boundaries one entry either side of a mark (a snapshot entry) give the same rows.
        self.assertEqual(torch_reference.allocation_timeline(entries, 10000, [3, 7]), rows)
        self.assertEqual(torch_reference.allocation_timeline([], 10000, [0, 0]), [])

    def test_mem_timeline_needs_cuda(self):
        r = subprocess.run([PY, TORCH_REFERENCE, "bench", "--device", "cpu", "--mem-timeline",
                            "x.csv"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 1)
        self.assertEqual(r.stderr.strip().splitlines(), [
            "--mem-timeline records the CUDA caching allocator: it needs --device cuda"])


@unittest.skipUnless(torch_reference, "torch (with numpy) is not importable")
class TorchBenchShape(unittest.TestCase):
    """bench's model shape: flags given win, then --config's [model] table, then the defaults."""

    def test_flags_then_config_then_defaults(self):
        with tempfile.TemporaryDirectory() as d:
            cfg = os.path.join(d, "m.toml")
            with open(cfg, "w") as f:
                f.write("[model]\nd_model = 1600\nd_ff = 6400\nnum_layers = 48\ntie_embeddings = true\n"
                        "[train]\nbatch_size = 4\n")
            args = argparse.Namespace(config=cfg, d_model=None, d_ff=None, num_layers=7,
                                      num_heads=None, vocab_size=None, tie_embeddings=None)
            torch_reference.resolve_shape(args)
            untied = argparse.Namespace(config=cfg, d_model=None, d_ff=None, num_layers=None,
                                        num_heads=None, vocab_size=None, tie_embeddings=False)
            torch_reference.resolve_shape(untied)
        self.assertEqual((args.d_model, args.d_ff, args.num_layers, args.num_heads, args.vocab_size,
                          args.tie_embeddings), (1600, 6400, 7, 12, 10000, True))
        self.assertEqual((untied.num_layers, untied.tie_embeddings), (48, False))
        defaults = argparse.Namespace(config=None, d_model=None, d_ff=None, num_layers=None,
                                      num_heads=None, vocab_size=None, tie_embeddings=None)
        torch_reference.resolve_shape(defaults)
        self.assertIs(defaults.tie_embeddings, False)


@unittest.skipUnless(torch, "torch (with numpy) is not importable")
class TorchFlashAttention(unittest.TestCase):
    """attention_impl("torch-flash") against explicit softmax attention in fp64, on inputs laid
    out as attention_bench makes them ([B, T, H, dh] in memory, seen as [B, H, T, dh])."""

    def inputs(self, t, dh, dtype):
        return [torch.randn(2, t, 3, dh, dtype=dtype, generator=self.gen).transpose(1, 2).requires_grad_()
                for _ in range(3)]

    def reference(self, q, k, v, causal):
        s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if causal:
            s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1), float("-inf"))
        m = s.amax(-1, keepdim=True)
        e = torch.exp(s - m)
        return e / e.sum(-1, keepdim=True) @ v, (m + torch.log(e.sum(-1, keepdim=True))).squeeze(-1)

    def assertClose(self, got, want, tol, what):
        err = (got - want).abs().max().item()
        self.assertLessEqual(err, tol * max(1.0, want.abs().max().item()), what)

    def setUp(self):
        self.gen = torch.Generator().manual_seed(0)

    def test_output_logsumexp_and_gradients_match_fp64_softmax(self):
        for t in (1, 17, 130):  # 130 = 64 + 64 + 2: a partial last tile
            for dh in (16, 64):
                for causal in (False, True):
                    what = f"T={t} dh={dh} causal={causal}"
                    q, k, v = self.inputs(t, dh, torch.float64)
                    do = torch.randn(2, 3, t, dh, dtype=torch.float64, generator=self.gen)
                    o = torch_reference.attention_impl("torch-flash", causal)(q, k, v)
                    want_o, want_l = self.reference(q, k, v, causal)
                    self.assertEqual(o.dtype, torch.float64)
                    self.assertClose(o, want_o, 1e-10, what + " O")
                    lse = o.grad_fn.saved_tensors[4]  # L as forward saved it for backward
                    self.assertClose(lse, want_l, 1e-10, what + " L")
                    got = torch.autograd.grad(o, (q, k, v), do)
                    want = torch.autograd.grad(want_o, (q, k, v), do)
                    for name, g, w in zip(("dQ", "dK", "dV"), got, want):
                        self.assertClose(g, w, 1e-10, f"{what} {name}")

    def test_fp32_forward_is_within_1e_5_of_fp64(self):
        for causal in (False, True):
            q, k, v = (x.detach() for x in self.inputs(130, 64, torch.float64))
            o = torch_reference.attention_impl("torch-flash", causal)(q.float(), k.float(), v.float())
            self.assertEqual(o.dtype, torch.float32)
            self.assertClose(o.double(), self.reference(q, k, v, causal)[0], 1e-5, f"causal={causal}")


class OptimizerState(unittest.TestCase):
    """scripts/optimizer_state.py on the CPU: each choice's row in its markdown carries the
    numbers of the CSV row its own run appended (a choice whose keys were a subset of a later
    choice's once showed that one's)."""

    def test_each_choice_reports_its_own_runs_row(self):
        out = tempfile.mkdtemp(prefix="lmtrain-optimizer-state-test-")
        try:
            choices = ["state_dtype=fp32", "state_dtype=bf16", "master_weights=false"]
            r = subprocess.run(
                [PY, os.path.join(REPO, "scripts/optimizer_state.py"), "--lmtrain",
                 os.path.join(REPO, "build/lmtrain"), "--config", os.path.join(REPO, "configs/train.toml"),
                 "--set", "run.device=cpu", "--set", "model.precision=bf16", "--set", "model.num_layers=1",
                 "--steps", "4", "--log-every", "2", "--eval-batches", "1", "--out", out,
                 "--choices", " ".join(choices)], capture_output=True, text=True, cwd=REPO)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            runs = rows(os.path.join(out, "optimizer_state.csv"))
            self.assertEqual([x["optim.master_weights"] for x in runs], ["true", "true", "false"])
            with open(os.path.join(out, "optimizer_state.md")) as f:
                cells = {c[1]: c for c in ([x.strip() for x in l.split("|")] for l in f)
                         if len(c) > 6 and c[1] in choices}
            for choice, run in zip(choices, runs):
                self.assertEqual(cells[choice][5:7], [run["ms_per_step"], run["optimizer_bytes_rank0"]],
                                 choice)
            # A failing run again: its output beside the log, which keeps the good run's.
            log = os.path.join(out, "optimizer_state_state_dtype-fp32.log")
            with open(log) as f:
                good = f.read()
            r = subprocess.run([PY, os.path.join(REPO, "scripts/optimizer_state.py"), "--lmtrain",
                                "/bin/false", "--config", os.path.join(REPO, "configs/train.toml"),
                                "--out", out, "--choices", choices[0]],
                               capture_output=True, text=True, cwd=REPO)
            self.assertNotEqual(r.returncode, 0)
            self.assertIn(log + ".failed", r.stderr)
            with open(log) as f:
                self.assertEqual(f.read(), good)
        finally:
            shutil.rmtree(out)


if __name__ == "__main__":
    # Every TestCase class of this file (a list by hand forgot one).
    suite = unittest.defaultTestLoader.loadTestsFromModule(sys.modules[__name__])
    result = unittest.TextTestRunner(verbosity=2).run(suite)
    bad = len(result.failures) + len(result.errors)
    print(f"[doctest] test cases: {result.testsRun} | {result.testsRun - bad} passed | {bad} failed"
          f" | {len(result.skipped)} skipped")
    sys.exit(0 if result.wasSuccessful() else 1)
