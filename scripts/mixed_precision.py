#!/usr/bin/env python3
"""CS336 §1.1.5, mixed precision, in PyTorch (Debian's python3-torch; CPU unless CUDA is there).

1. The accumulation experiment: 0.01 summed a thousand times with the assignment's four
   accumulator/value dtype pairings (plus bf16, lmtrain's low precision), against the exact 10.
2. The toy model under torch.autocast: dtypes of the parameters, the first layer's output, the
   layer norm's output, the logits, the loss and the gradients. On the CPU autocast's low
   precision is bfloat16 and its op lists are the CPU's; on CUDA (float16 in the assignment) they
   may differ: the table says which device and dtype produced it.
3. Layer norm's sensitivity: its statistics computed in low precision against float64, on
   inputs with a large mean (as residual streams have), to show which part loses accuracy.

    /usr/bin/python3 scripts/mixed_precision.py [--out results/mixed_precision.md]

Prints everything and writes it, with the command and versions, to the markdown file.
"""
import argparse
import datetime
import io
import platform
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F


def accumulation(out):
    out("## Accumulation: 0.01 added 1000 times (exact: 10)\n")
    out("| accumulator | values added | result | error |")
    out("|---|---|---|---|")
    cases = [
        ("float32", "float32", torch.float32, torch.float32, False),
        ("float16", "float16", torch.float16, torch.float16, False),
        ("float32", "float16 (promoted by +=)", torch.float32, torch.float16, False),
        ("float32", "float16 cast to float32", torch.float32, torch.float16, True),
        ("bfloat16", "bfloat16", torch.bfloat16, torch.bfloat16, False),
        ("float32", "bfloat16 cast to float32", torch.float32, torch.bfloat16, True),
    ]
    for acc_name, val_name, acc, val, cast in cases:
        s = torch.tensor(0, dtype=acc)
        for _ in range(1000):
            x = torch.tensor(0.01, dtype=val)
            s += x.type(torch.float32) if cast else x
        out(f"| {acc_name} | {val_name} | {s.item():.10g} | {s.item() - 10:+.3e} |")
    out("")


class ToyModel(nn.Module):  # the assignment's toy model
    def __init__(self, in_features, out_features, ln_fp32=False):
        super().__init__()
        self.fc1 = nn.Linear(in_features, 10, bias=False)
        self.ln = nn.LayerNorm(10)
        self.fc2 = nn.Linear(10, out_features, bias=False)
        self.relu = nn.ReLU()
        self.ln_fp32 = ln_fp32

    def forward(self, x):
        x = self.relu(self.fc1(x))
        if self.ln_fp32:  # what CUDA autocast's op list does for layer_norm, by hand
            with torch.autocast(device_type=x.device.type, enabled=False):
                x = self.ln(x.float())
        else:
            x = self.ln(x)
        x = self.fc2(x)
        return x


def toy_dtypes(out, device, dtype, ln_fp32=False):
    torch.manual_seed(0)
    model = ToyModel(16, 5, ln_fp32).to(device)
    seen = {}

    def record(name):
        def hook(module, inputs, output):  # returns None: the output stays as it is
            seen[name] = output.dtype
        return hook
    model.fc1.register_forward_hook(record("fc1"))
    model.ln.register_forward_hook(record("ln"))
    x = torch.randn(8, 16, device=device)
    y = torch.randint(0, 5, (8,), device=device)
    what = f"torch.autocast(device_type=\"{device}\", dtype={dtype})"
    out(f"## Toy model under {what}" + (", layer norm run in float32 by hand" if ln_fp32 else "") + "\n")
    logits = loss = error = None
    try:
        with torch.autocast(device_type=device, dtype=dtype):
            logits = model(x)
            loss = F.cross_entropy(logits, y)
        loss.backward()
    except RuntimeError as e:
        error = f"{type(e).__name__}: {e}"
        out(f"The forward pass failed: `{error}`\n")
    missing = "not reached"
    out("| tensor | dtype |")
    out("|---|---|")
    grads = {p.grad.dtype for p in model.parameters() if p.grad is not None}
    rows = [("model parameters", ", ".join(sorted({str(p.dtype) for p in model.parameters()}))),
            ("output of fc1 (first layer)", str(seen.get("fc1", missing))),
            ("output of layer norm", str(seen.get("ln", missing))),
            ("logits", str(logits.dtype) if logits is not None else missing),
            ("loss", str(loss.dtype) if loss is not None else missing),
            ("gradients", ", ".join(sorted(str(g) for g in grads)) if grads else missing)]
    for name, types in rows:
        out(f"| {name} | {types} |")
    out("")
    return error is None


def layer_norm_precision(out):
    offset = 8.0
    out(f"## Layer norm statistics in low precision (inputs {offset:g} + N(0, 1), 1024 features, 64 rows)\n")
    out("Max |error| of the normalised output against float64 applied to the same (rounded) "
        "inputs, each variant computing every operation in the dtype named:\n")
    out("| dtype | mean, then E[(x-mean)^2] | E[x^2] - mean^2 (one-pass) | torch layer_norm |")
    out("|---|---|---|---|")
    torch.manual_seed(0)
    x64 = offset + torch.randn(64, 1024, dtype=torch.float64)
    for dt in (torch.float32, torch.bfloat16, torch.float16):
        x = x64.to(dt)
        xr = x.double()  # the reference sees the input as rounded, so only the arithmetic differs
        ref = (xr - xr.mean(-1, keepdim=True)) / torch.sqrt(xr.var(-1, unbiased=False, keepdim=True) + 1e-5)
        try:
            mean = x.mean(-1, keepdim=True)
            two = (x - mean) / torch.sqrt(((x - mean) ** 2).mean(-1, keepdim=True) + 1e-5)
            var1 = (x * x).mean(-1, keepdim=True) - mean * mean
            one = (x - mean) / torch.sqrt(var1.clamp_min(0) + 1e-5)
            tln = F.layer_norm(x, (1024,))
        except RuntimeError as e:
            out(f"| {dt} | not supported on this CPU: {str(e).splitlines()[0]} | | |")
            continue
        errs = [(v.double() - ref).abs().max().item() for v in (two, one, tln)]
        out(f"| {dt} | " + " | ".join(f"{e:.3g}" for e in errs) + " |")
    out("")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="results/mixed_precision.md")
    a = ap.parse_args()
    buf = io.StringIO()

    def out(line=""):
        print(line)
        buf.write(line + "\n")

    out("# Mixed precision (CS336 §1.1.5)\n")
    out(f"Command: `{' '.join(['/usr/bin/python3', 'scripts/mixed_precision.py'] + sys.argv[1:])}`  ")
    out(f"PyTorch {torch.__version__}, Python {platform.python_version()}, {platform.machine()}, "
        f"CUDA {'available' if torch.cuda.is_available() else 'not available'}; "
        f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%dT%H:%M:%SZ}\n")
    accumulation(out)
    if not toy_dtypes(out, "cpu", torch.bfloat16):
        toy_dtypes(out, "cpu", torch.bfloat16, ln_fp32=True)
    if torch.cuda.is_available():  # the assignment's setting
        toy_dtypes(out, "cuda", torch.float16)
    else:
        out("(No GPU here: the CUDA float16 autocast table is not measured. PyTorch's autocast "
            "documentation lists layer_norm, softmax and the losses among the CUDA ops run in float32; the CPU lists of "
            "this PyTorch version may differ, and the table above is what this CPU did.)\n")
    layer_norm_precision(out)
    with open(a.out, "w") as f:
        f.write(buf.getvalue())
    print(f"written to {a.out}")


if __name__ == "__main__":
    main()
