#!/usr/bin/env python3
"""Could AdamW hide under the matmuls? A probe in PyTorch, on one GPU.

    python3 dev/adamw_overlap.py

Times, each alone and then both at once on two streams (the matmuls' at high priority), 120
repetitions of xl-shaped bf16 matmuls (W1's forward, input-gradient and weight-gradient matmuls
at 4 x 512 tokens: 126 GFLOP a repetition, 15 TFLOP in all) and PyTorch's fused
AdamW over xl's 2.0 billion fp32 parameters in 48 chunks (a layer each), and prints how much of
AdamW's time the overlap hid. Medians of 5 runs after 2. It answers whether a step that ran each
layer's AdamW during the backward (possible only without gradient clipping, whose global norm
needs every gradient first) could hide AdamW's 20 ms: memory-bound AdamW and compute-bound
matmuls share the same SMs, so only what the matmuls leave idle is hidden.
"""
import time

import torch


def main():
    torch.manual_seed(0)
    dev = "cuda"
    n, d, f = 2048, 1600, 6400
    x = torch.randn(n, d, device=dev, dtype=torch.bfloat16)
    w1 = torch.randn(f, d, device=dev, dtype=torch.bfloat16)
    dy = torch.randn(n, f, device=dev, dtype=torch.bfloat16)

    def matmuls(reps=120):
        for _ in range(reps):
            x @ w1.t()    # forward
            dy @ w1       # input gradient
            dy.t() @ x    # weight gradient

    N = 41_000_000 * 48  # xl's parameters, about
    p, g = torch.zeros(N, device=dev), torch.randn(N, device=dev) * 1e-3
    m, v = torch.zeros(N, device=dev), torch.zeros(N, device=dev)
    step = torch.tensor(1.0, device=dev)

    def adamw(chunks=48):
        c = N // chunks
        for i in range(chunks):
            s = slice(i * c, (i + 1) * c)
            torch._fused_adamw_([p[s]], [g[s]], [m[s]], [v[s]], [], [step], lr=1e-3, beta1=0.9,
                                beta2=0.95, weight_decay=0.1, eps=1e-8, amsgrad=False,
                                maximize=False)

    hi, lo = torch.cuda.Stream(priority=-1), torch.cuda.Stream(priority=0)

    def both():
        with torch.cuda.stream(hi):
            matmuls()
        with torch.cuda.stream(lo):
            adamw()

    def timed(fn, warm=2, reps=5):
        ts = []
        for _ in range(warm + reps):
            torch.cuda.synchronize()
            t = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            ts.append(time.perf_counter() - t)
        ts = sorted(ts[warm:])
        return ts[len(ts) // 2] * 1e3

    tm, ta, tb = timed(matmuls), timed(adamw), timed(both)
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}: matmuls {tm:.2f} ms, "
          f"AdamW {ta:.2f} ms, one after the other {tm + ta:.2f} ms, on two streams {tb:.2f} ms: "
          f"{tm + ta - tb:.2f} ms of AdamW hidden")


if __name__ == "__main__":
    main()
