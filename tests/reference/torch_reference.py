"""Independent PyTorch reference for the C++ Transformer LM: the tests' oracle, and the baseline
that lmtrain's bench mode is compared with.

Run with an interpreter that has torch (1.13+) and numpy, e.g. Debian's /usr/bin/python3:

    /usr/bin/python3 tests/reference/torch_reference.py check --in IN.safetensors --out OUT.safetensors
    python3 tests/reference/torch_reference.py bench --precision bf16 [--compile] [--csv FILE] [--mem-timeline CSV]
    python3 tests/reference/torch_reference.py attention --seq-lens 4096 16384 --head-dims 64 128 [--csv FILE]

`bench` times forward, forward+backward and the full step (fused AdamW, no clipping) of the same
model on a GPU, as a PyTorch user would write it (autocast for bf16, naive attention); see
`bench --help` and scripts/bench_vs_torch.sh. `bench --mem-timeline CSV` also records the allocated
CUDA memory over one more full step (scripts/memory_timeline.sh draws it beside lmtrain's).

Exchange format: safetensors files (8-byte little-endian uint64 header length N, N bytes of
JSON header padded with spaces, then raw little-endian data; "data_offsets" are relative to
the start of the data section). Supported dtypes: F64, F32, I32.

`check` input:
  __metadata__ (all strings): d_model d_ff num_layers num_heads vocab_size context_length
      rope_theta norm_eps lr beta1 beta2 eps weight_decay steps, and optionally tie_embeddings
      (1: no lm_head.weight, the head reads token_embeddings.weight)
  batch.inputs, batch.targets   I32 [B, T], T <= context_length
  model parameters, all F64 or all F32 (that dtype is the working precision), Linear
  convention weight [out, in], y = x @ W.T:
      token_embeddings.weight [V, d]
      layers.{i}.ln1.weight [d]            layers.{i}.attn.qkv_proj.weight [3d, d] (q; k; v rows)
      layers.{i}.attn.output_proj.weight [d, d]
      layers.{i}.ln2.weight [d]            layers.{i}.ffn.w1.weight / w3.weight [d_ff, d]
      layers.{i}.ffn.w2.weight [d, d_ff]
      ln_final.weight [d]                  lm_head.weight [V, d]

`check` output (in the parameters' dtype):
  logits [B, T, V], loss [1]      forward pass with the initial parameters
  grad.<name>                     d loss / d <name> at the initial parameters
  losses [steps]                  loss at the start of each AdamW step (losses[0] == loss)
  final.<name>                    parameters after `steps` torch.optim.AdamW steps on the same batch
"""
import argparse
import bisect
import csv
import datetime
import json
import math
import os
import statistics
import struct
import sys
import time
import tomllib

import numpy as np
import torch
import torch.nn.functional as F

NP_DTYPES = {"F64": "<f8", "F32": "<f4", "I32": "<i4"}
TORCH_TO_ST = {torch.float64: "F64", torch.float32: "F32", torch.int32: "I32"}


def read_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    metadata = header.pop("__metadata__", {})
    data = blob[8 + n:]
    tensors = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        arr = np.frombuffer(data[begin:end], dtype=NP_DTYPES[info["dtype"]]).reshape(info["shape"])
        # frombuffer views are read-only; copy so torch owns writable native-endian memory.
        tensors[name] = torch.from_numpy(arr.astype(arr.dtype.newbyteorder("="), copy=True))
    return tensors, metadata


def write_safetensors(path, tensors, metadata=None):
    header, chunks, offset = {}, [], 0
    for name, t in tensors.items():
        st_dtype = TORCH_TO_ST[t.dtype]
        raw = t.detach().contiguous().numpy().astype(NP_DTYPES[st_dtype]).tobytes()
        header[name] = {"dtype": st_dtype, "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    if metadata:
        header["__metadata__"] = metadata
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)  # keeps the data section 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(chunks))


def rmsnorm(x, weight, eps):
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def rope(x, theta):
    # x: [B, H, T, dh]; rotates adjacent pairs (x[2k], x[2k+1]) by p * theta^(-2k/dh).
    T, dh = x.shape[-2], x.shape[-1]
    k = torch.arange(dh // 2, dtype=torch.float64, device=x.device)
    angle = torch.arange(T, dtype=torch.float64, device=x.device)[:, None] * theta ** (-2 * k / dh)
    angle = angle.to(x.dtype)  # [T, dh/2], computed in fp64 like lmtrain
    cos, sin = torch.cos(angle), torch.sin(angle)
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).flatten(-2)


def attention(h, w_qkv, w_o, num_heads, theta, sdpa=False):
    B, T, d = h.shape
    dh = d // num_heads
    q, k, v = (t.view(B, T, num_heads, dh).transpose(1, 2) for t in (h @ w_qkv.T).split(d, dim=-1))
    q, k = rope(q, theta), rope(k, theta)
    if sdpa:  # PyTorch's fused kernels (FlashAttention-2 or cuDNN, its choice), as a user writes it
        return F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, d) @ w_o.T
    scores = q @ k.transpose(-1, -2) / math.sqrt(dh)
    future = torch.ones(T, T, dtype=torch.bool, device=h.device).triu(1)
    probs = torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1)
    return (probs @ v).transpose(1, 2).reshape(B, T, d) @ w_o.T


def ffn(h, w1, w2, w3):
    a = h @ w1.T
    return (a * torch.sigmoid(a) * (h @ w3.T)) @ w2.T


def forward(p, inputs, cfg):
    eps, theta = cfg["norm_eps"], cfg["rope_theta"]
    x = p["token_embeddings.weight"][inputs.long()]
    for i in range(cfg["num_layers"]):
        l = f"layers.{i}."
        x = x + attention(rmsnorm(x, p[l + "ln1.weight"], eps), p[l + "attn.qkv_proj.weight"],
                          p[l + "attn.output_proj.weight"], cfg["num_heads"], theta,
                          cfg.get("sdpa", False))
        x = x + ffn(rmsnorm(x, p[l + "ln2.weight"], eps), p[l + "ffn.w1.weight"],
                    p[l + "ffn.w2.weight"], p[l + "ffn.w3.weight"])
    head = p["token_embeddings.weight" if cfg.get("tie_embeddings") else "lm_head.weight"]
    return rmsnorm(x, p["ln_final.weight"], eps) @ head.T


def loss_of(logits, targets):
    return F.cross_entropy(logits.flatten(0, 1), targets.long().flatten())


INT_KEYS = ("d_model", "d_ff", "num_layers", "num_heads", "vocab_size", "context_length", "steps")
FLOAT_KEYS = ("rope_theta", "norm_eps", "lr", "beta1", "beta2", "eps", "weight_decay")


def check(args):
    tensors, meta = read_safetensors(args.inp)
    cfg = {k: int(meta[k]) for k in INT_KEYS}
    cfg.update({k: float(meta[k]) for k in FLOAT_KEYS})
    cfg["tie_embeddings"] = int(meta.get("tie_embeddings", "0")) == 1
    inputs, targets = tensors.pop("batch.inputs"), tensors.pop("batch.targets")
    dtypes = {t.dtype for t in tensors.values()}
    if len(dtypes) != 1 or not dtypes <= {torch.float64, torch.float32}:
        raise SystemExit(f"parameters must share one float dtype (F64 or F32), got {dtypes}")
    if inputs.shape[1] > cfg["context_length"] or cfg["d_model"] % cfg["num_heads"]:
        raise SystemExit("need T <= context_length and num_heads dividing d_model")

    params = {name: t.requires_grad_() for name, t in tensors.items()}
    names = list(params)
    logits = forward(params, inputs, cfg)
    loss = loss_of(logits, targets)
    grads = torch.autograd.grad(loss, [params[n] for n in names])

    opt = torch.optim.AdamW([params[n] for n in names], lr=cfg["lr"], betas=(cfg["beta1"], cfg["beta2"]),
                            eps=cfg["eps"], weight_decay=cfg["weight_decay"])
    losses = []
    for _ in range(cfg["steps"]):
        opt.zero_grad()
        step_loss = loss_of(forward(params, inputs, cfg), targets)
        step_loss.backward()
        losses.append(step_loss.detach())
        opt.step()

    dtype = dtypes.pop()
    out = {"logits": logits.detach(), "loss": loss.detach().reshape(1)}
    out.update({f"grad.{n}": g for n, g in zip(names, grads)})
    out["losses"] = torch.stack(losses) if losses else torch.zeros(0, dtype=dtype)
    out.update({f"final.{n}": params[n].detach() for n in names})
    write_safetensors(args.out, out)


def init_params(cfg, device):
    """CS336 init: Linear ~ N(0, 2/(in+out)) truncated at 3 sigma, embedding N(0, 1) at 3, gains 1.
    Tied (cfg["tie_embeddings"]): no lm_head.weight, the embedding N(0, 1/d) at 3 sigma."""
    d, f, V, tied = cfg["d_model"], cfg["d_ff"], cfg["vocab_size"], cfg.get("tie_embeddings")
    shapes = {"token_embeddings.weight": (V, d), "ln_final.weight": (d,)}
    if not tied:
        shapes["lm_head.weight"] = (V, d)
    for i in range(cfg["num_layers"]):
        l = f"layers.{i}."
        shapes.update({l + "ln1.weight": (d,), l + "attn.qkv_proj.weight": (3 * d, d),
                       l + "attn.output_proj.weight": (d, d), l + "ln2.weight": (d,),
                       l + "ffn.w1.weight": (f, d), l + "ffn.w3.weight": (f, d),
                       l + "ffn.w2.weight": (d, f)})
    params = {}
    for name, shape in shapes.items():
        if len(shape) == 1:
            t = torch.ones(shape)
        else:
            std = math.sqrt(2.0 / (shape[0] + shape[1]))
            if name.startswith("token_"):
                std = 1.0 / math.sqrt(d) if tied else 1.0
            t = torch.empty(shape)
            torch.nn.init.trunc_normal_(t, 0.0, std, -3 * std, 3 * std)
        params[name] = t.to(device).requires_grad_()
    return params


def timed(body, warmup, steps, cuda):
    """Runs body warmup times, then times it steps times (CUDA events on the GPU)."""
    for _ in range(warmup):
        body()
    times = []
    for _ in range(steps):
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            body()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            body()
            times.append(1e3 * (time.perf_counter() - t0))
    return {"mean": statistics.mean(times),
            "std": statistics.stdev(times) if len(times) > 1 else 0.0,
            "median": statistics.median(times), "min": min(times), "max": max(times)}


def append_csv(path, row):
    """Appends row under the file's header; a column the file lacks is added to it (earlier rows
    get it empty), so a new column never shifts the others."""
    rows, fields = [], list(row)
    if os.path.exists(path) and os.path.getsize(path) > 0:
        with open(path, newline="") as f:
            r = csv.DictReader(f)
            rows = list(r)
            fields = list(r.fieldnames) + [k for k in row if k not in r.fieldnames]
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, restval="")
        w.writeheader()
        w.writerows(rows + [row])


PHASES = ("forward", "backward", "optimizer")


def allocation_timeline(entries, start_bytes, boundaries):
    """The allocated bytes after each allocation event of a CUDA caching-allocator trace (the
    entries of torch.cuda.memory._snapshot()["device_traces"][device], oldest first): "alloc" adds
    its size, "free_completed" (the block is back in the cache: where torch.cuda.memory_allocated
    drops) subtracts it; "free_requested" (a free still waiting on other streams), "segment_*"
    (cudaMalloc/cudaFree of cache segments: reserved memory, not allocated), "snapshot", "oom" and
    any other action change nothing and are not events. Sizes in the trace are the requested
    sizes, so the totals can drift from memory_allocated() (rounded blocks) by the rounding.
    start_bytes: allocated before the first entry; boundaries: the trace lengths at the end of
    each phase but the last (entry i is in PHASES[number of boundaries <= i]).
    Returns [(event, allocated_bytes, phase)], event counting from 0."""
    rows, total = [], start_bytes
    for i, e in enumerate(entries):
        if e["action"] not in ("alloc", "free_completed"):
            continue
        total += e["size"] if e["action"] == "alloc" else -e["size"]
        rows.append((len(rows), total, PHASES[bisect.bisect_right(boundaries, i)]))
    return rows


def record_mem_timeline(step, path, max_entries=1_000_000):
    """Runs step(mark) once with the allocator's history on (mark() is called at the end of the
    forward and of the backward) and writes allocation_timeline() as CSV event,allocated_bytes,phase.
    No stack traces are kept (context=None), so the snapshots at the marks stay cheap."""
    dev = torch.cuda.current_device()
    trace = lambda: torch.cuda.memory._snapshot()["device_traces"][dev]
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    start = torch.cuda.memory_allocated()
    ends = []
    torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python",
                                             max_entries=max_entries)
    try:
        step(lambda: ends.append(len(trace())))
        torch.cuda.synchronize()
        entries = trace()
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)
    if len(entries) >= max_entries:
        raise SystemExit(f"--mem-timeline: the trace filled its {max_entries} entries; the oldest were dropped")
    rows = allocation_timeline(entries, start, ends)
    with open(path, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["event", "allocated_bytes", "phase"])
        w.writerows(rows)
    peak = max([start] + [r[1] for r in rows])
    print(f"memory timeline: {len(rows)} events of {len(entries)} trace entries -> {path}; peak "
          f"{peak / 2**30:.2f} GiB (torch.cuda.max_memory_allocated over the step: "
          f"{torch.cuda.max_memory_allocated() / 2**30:.2f} GiB)")


# The model's shape flags of `bench` and their defaults (lmtrain's small model).
SHAPE_DEFAULTS = {"d_model": 768, "d_ff": 3072, "num_layers": 12, "num_heads": 12, "vocab_size": 10000}


def resolve_shape(args):
    """Each shape flag not given: from the [model] table of --config (an lmtrain TOML file), else
    its default. Flags given explicitly win over the file."""
    model = {}
    if args.config:
        with open(args.config, "rb") as f:
            model = tomllib.load(f).get("model", {})
    for key, default in SHAPE_DEFAULTS.items():
        if getattr(args, key) is None:
            setattr(args, key, int(model.get(key, default)))
    if args.tie_embeddings is None:
        args.tie_embeddings = bool(model.get("tie_embeddings", False))


def bench(args):
    resolve_shape(args)
    cuda = args.device == "cuda"
    dev = torch.device(args.device)
    if args.mem_timeline and not cuda:
        raise SystemExit("--mem-timeline records the CUDA caching allocator: it needs --device cuda")
    if args.compile and not hasattr(torch, "compile"):
        raise SystemExit(f"--compile: torch {torch.__version__} has no torch.compile")
    torch.backends.cuda.matmul.allow_tf32 = args.precision == "tf32"
    torch.backends.cudnn.allow_tf32 = args.precision == "tf32"
    torch.manual_seed(args.seed)
    cfg = {"d_model": args.d_model, "d_ff": args.d_ff, "num_layers": args.num_layers,
           "num_heads": args.num_heads, "vocab_size": args.vocab_size, "norm_eps": 1e-5,
           "rope_theta": 10000.0, "sdpa": args.attention == "sdpa",
           "tie_embeddings": args.tie_embeddings}
    params = init_params(cfg, dev)
    inputs = torch.randint(0, args.vocab_size, (args.batch_size, args.context_length), device=dev)
    targets = torch.randint(0, args.vocab_size, (args.batch_size, args.context_length), device=dev)
    opt = torch.optim.AdamW(params.values(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1,
                            **({"fused": True} if cuda else {}))

    def model_loss(inp, tgt):
        with torch.autocast(args.device, dtype=torch.bfloat16, enabled=args.precision == "bf16"):
            return loss_of(forward(params, inp, cfg), tgt)

    fn = torch.compile(model_loss) if args.compile else model_loss

    def fwd():
        fn(inputs, targets)

    def fwd_bwd():
        opt.zero_grad(set_to_none=True)
        fn(inputs, targets).backward()

    # The timed step; mark() runs after the forward (zero_grad, freeing the last step's gradients,
    # counts as forward) and after the backward.
    def step(mark=lambda: None):
        opt.zero_grad(set_to_none=True)
        loss = fn(inputs, targets)
        mark()
        loss.backward()
        mark()
        opt.step()

    def peak(body):
        if not cuda:
            return 0
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        body()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated()

    stats = {m: timed(body, args.warmup, args.steps, cuda)
             for m, body in (("fwd", fwd), ("fwd_bwd", fwd_bwd), ("step", step))}
    row = {"label": args.label, "device": args.device,
           "gpu_name": torch.cuda.get_device_name() if cuda else "cpu",
           "precision": args.precision, "compile": args.compile, "attention": args.attention,
           "d_model": args.d_model,
           "d_ff": args.d_ff, "num_layers": args.num_layers, "num_heads": args.num_heads,
           "vocab_size": args.vocab_size, "tie_embeddings": args.tie_embeddings,
           "context_length": args.context_length,
           "batch_size": args.batch_size, "warmup": args.warmup, "steps": args.steps}
    for m, st in stats.items():
        row.update({f"{m}_ms_{k}": round(v, 4) for k, v in st.items()})
    row["tokens_per_s"] = round(args.batch_size * args.context_length / (stats["step"]["median"] * 1e-3), 1)
    row["peak_mem_fwd_bytes"] = peak(fwd)
    row["peak_mem_step_bytes"] = peak(step)
    row["date"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")

    print(f"== torch {torch.__version__} bench: {args.label} on {row['gpu_name']}, {args.precision}"
          f"{', compiled' if args.compile else ''}, batch {args.batch_size} x context {args.context_length} ==")
    print(f"{'ms':22} {'mean':>9} {'std':>9} {'median':>9} {'min':>9} {'max':>9}")
    for m, name in (("fwd", "forward"), ("fwd_bwd", "forward+backward"), ("step", "step (with AdamW)")):
        st = stats[m]
        print(f"{name:22} {st['mean']:9.3f} {st['std']:9.3f} {st['median']:9.3f} {st['min']:9.3f} {st['max']:9.3f}")
    print(f"step: {row['tokens_per_s']:.0f} tokens/s; peak memory forward {row['peak_mem_fwd_bytes'] / 2**30:.2f} GiB, "
          f"step {row['peak_mem_step_bytes'] / 2**30:.2f} GiB")
    if args.json:
        print(json.dumps(row))
    if args.csv:
        append_csv(args.csv, row)
    if args.mem_timeline:  # after the timed steps: AdamW's state exists, as in every later step
        record_mem_timeline(step, args.mem_timeline)


class FlashAttentionTorch(torch.autograd.Function):
    """FlashAttention-2 in plain PyTorch (CS336 §1.3.2(a)) for [..., T, dh] q, k, v: query tiles
    of bq rows against key tiles of bk, an online softmax (running max m, running sum l, output
    accumulator), never a T x T matrix. Work is in fp32 (fp64 for fp64 inputs); O comes back in the
    inputs' dtype, the logsumexp L [..., T] in the work dtype. Causal: key tiles wholly above the
    diagonal are skipped, tiles crossing it masked by index (key > query, as is_causal does).
    The backward is tiled the same way and recomputes P from Q, K and L (FlashAttention-2's)."""

    @staticmethod
    def forward(ctx, q, k, v, causal=False, bq=64, bk=64):
        work, scale = torch.promote_types(q.dtype, torch.float32), 1.0 / math.sqrt(q.shape[-1])
        tq, tk = q.shape[-2], k.shape[-2]
        o = q.new_empty(q.shape[:-1] + v.shape[-1:])
        lse = q.new_empty(q.shape[:-1], dtype=work)
        for i in range(0, tq, bq):
            qi = q[..., i:i + bq, :].to(work) * scale
            rows = torch.arange(i, i + qi.shape[-2], device=q.device)[:, None]
            m = qi.new_full(qi.shape[:-1] + (1,), float("-inf"))
            l = torch.zeros_like(m)
            acc = qi.new_zeros(qi.shape[:-1] + v.shape[-1:])
            # Causal: key tiles from i + bq on are wholly above the diagonal. Tile 0 always holds
            # key 0, so no row is fully masked and m is finite after the first tile.
            for j in range(0, min(tk, i + bq) if causal else tk, bk):
                s = qi @ k[..., j:j + bk, :].to(work).transpose(-2, -1)
                if causal and j + bk > i + 1:  # some key of the tile is after some query
                    s = s.masked_fill(torch.arange(j, j + s.shape[-1], device=q.device) > rows, float("-inf"))
                m_new = torch.maximum(m, s.amax(-1, keepdim=True))
                p = torch.exp(s - m_new)
                rescale = torch.exp(m - m_new)  # 0 on the first tile (m = -inf)
                l = l * rescale + p.sum(-1, keepdim=True)
                acc = acc * rescale + p @ v[..., j:j + bk, :].to(work)
                m = m_new
            o[..., i:i + bq, :] = acc / l
            lse[..., i:i + bq] = (m + torch.log(l)).squeeze(-1)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.causal, ctx.bq, ctx.bk = causal, bq, bk
        return o

    @staticmethod
    def backward(ctx, do):
        """Per key tile j, over the query tiles i that see it: P = exp(S - L), dV_j += P^T dO_i,
        dP = dO_i V_j^T, dS = P * (dP - D_i) with D = rowsum(dO * O), dQ_i += dS K_j scale,
        dK_j += dS^T Q_i scale."""
        q, k, v, o, lse = ctx.saved_tensors
        causal, bq, bk = ctx.causal, ctx.bq, ctx.bk
        work, scale = lse.dtype, 1.0 / math.sqrt(q.shape[-1])
        d = (do.to(work) * o.to(work)).sum(-1, keepdim=True)
        dq = torch.zeros(q.shape, dtype=work, device=q.device)
        dk, dv = torch.empty_like(k), torch.empty_like(v)
        for j in range(0, k.shape[-2], bk):
            kj, vj = k[..., j:j + bk, :].to(work), v[..., j:j + bk, :].to(work)
            cols = torch.arange(j, j + kj.shape[-2], device=q.device)
            dkj, dvj = torch.zeros_like(kj), torch.zeros_like(vj)
            # Causal: query tiles ending before key j see none of this tile.
            for i in range(j // bq * bq if causal else 0, q.shape[-2], bq):
                qi = q[..., i:i + bq, :].to(work) * scale
                doi = do[..., i:i + bq, :].to(work)
                s = qi @ kj.transpose(-2, -1)
                if causal and j + bk > i + 1:
                    rows = torch.arange(i, i + qi.shape[-2], device=q.device)[:, None]
                    s = s.masked_fill(cols > rows, float("-inf"))
                p = torch.exp(s - lse[..., i:i + bq, None])
                dvj += p.transpose(-2, -1) @ doi
                ds = p * (doi @ vj.transpose(-2, -1) - d[..., i:i + bq, :])
                dq[..., i:i + bq, :] += ds @ kj * scale
                dkj += ds.transpose(-2, -1) @ qi  # qi carries the scale
            dk[..., j:j + bk, :], dv[..., j:j + bk, :] = dkj, dvj
        return dq.to(q.dtype), dk, dv, None, None, None


def attention_impl(name, causal):
    """(q, k, v) -> out for [B, H, T, dh] tensors: naive (scores materialised, as a PyTorch user
    writes it, in the inputs' dtype), the same under torch.compile, FlashAttentionTorch, or
    scaled_dot_product_attention pinned to one backend."""
    if name in ("naive", "naive-compiled"):
        def naive(q, k, v):
            s = q @ k.transpose(-2, -1) * (1.0 / math.sqrt(q.shape[-1]))
            if causal:
                t = q.shape[-2]
                s = s.masked_fill(torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
            return torch.softmax(s, dim=-1) @ v
        if name == "naive":
            return naive
        # Every closure shares naive's code object, and dynamo's recompile limit is per code
        # object: start afresh so each grid point gets its own static-shape compile.
        torch._dynamo.reset()
        return torch.compile(naive)
    if name == "torch-flash":
        return lambda q, k, v: FlashAttentionTorch.apply(q, k, v, causal)
    from torch.nn.attention import SDPBackend, sdpa_kernel  # torch 2.3+

    backend = {"sdpa-flash": SDPBackend.FLASH_ATTENTION, "sdpa-cudnn": SDPBackend.CUDNN_ATTENTION,
               "sdpa-efficient": SDPBackend.EFFICIENT_ATTENTION}[name]

    def sdpa(q, k, v):
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return sdpa


def attention_bench(args):
    """The attention mode's grid in PyTorch: forward, backward, both; TFLOP/s as lmtrain counts
    them (forward 4 B H T^2 dh, halved when causal; backward 2.5x); peak memory; OOM rows kept."""
    if "naive-compiled" in args.impls and not hasattr(torch, "compile"):
        raise SystemExit(f"naive-compiled: torch {torch.__version__} has no torch.compile")
    dev = torch.device("cuda")
    gpu = torch.cuda.get_device_name()
    print(f"== torch {torch.__version__} attention: batch {args.batch}, heads {args.heads} on {gpu} ==")
    print(f"{'impl':14} {'dtype':5} {'mask':6} {'T':>6} {'dh':>4} | {'fwd ms':>9} {'bwd ms':>9} {'both ms':>9}"
          f" | {'fwd TF/s':>8} {'both':>8} | {'peak GiB':>8}")
    for dtype in args.dtypes:
        dt = {"bf16": torch.bfloat16, "fp32": torch.float32}[dtype]
        for mask in args.masks:
            causal = mask == "causal"
            for dh in args.head_dims:
                for T in args.seq_lens:
                    for impl in args.impls:
                        row = {"impl": impl, "dtype": dtype, "mask": mask, "batch": args.batch,
                               "heads": args.heads, "seq_len": T, "head_dim": dh, "status": "ok"}
                        fn = attention_impl(impl, causal)
                        torch.cuda.empty_cache()
                        torch.cuda.reset_peak_memory_stats()
                        try:
                            # [B, T, H, dh] in memory, as a model's projection writes it (lmtrain's layout).
                            q, k, v, g = (torch.randn(args.batch, T, args.heads, dh, device=dev, dtype=dt)
                                          .transpose(1, 2) for _ in range(4))
                            for x in (q, k, v):
                                x.requires_grad_(True)
                            holder = {}

                            def fwd():
                                holder["out"] = fn(q, k, v)

                            # Each backward writes q's, k's and v's gradients afresh, as a training
                            # step's does after zero_grad(set_to_none=True) (and lmtrain's attention
                            # mode's): no kernel adding them to the last call's.
                            def fresh():
                                for x in (q, k, v):
                                    x.grad = None

                            def bwd():
                                fresh()
                                holder["out"].backward(g, retain_graph=True)

                            def both():
                                fresh()
                                fn(q, k, v).backward(g)

                            st_f = timed(fwd, args.warmup, args.iters, True)
                            fwd()
                            st_b = timed(bwd, args.warmup, args.iters, True)
                            del holder["out"]
                            st_fb = timed(both, args.warmup, args.iters, True)
                            row["fwd_kernel_ms"] = kernel_ms(fwd, args.iters)  # after the timing:
                            row["bwd_kernel_ms"] = kernel_ms(bwd, args.iters)  # the profiler slows calls
                            del holder["out"]
                            torch.cuda.synchronize()
                            f = 4.0 * args.batch * args.heads * T * T * dh / (2 if causal else 1)
                            row.update({"fwd_ms": round(st_f["median"], 4), "bwd_ms": round(st_b["median"], 4),
                                        "fwd_bwd_ms": round(st_fb["median"], 4),
                                        "fwd_tflops": round(f / st_f["median"] / 1e9, 2),
                                        "bwd_tflops": round(2.5 * f / st_b["median"] / 1e9, 2),
                                        "fwd_bwd_tflops": round(3.5 * f / st_fb["median"] / 1e9, 2)})
                        except torch.cuda.OutOfMemoryError:
                            row["status"] = "OOM"
                        except RuntimeError as e:  # e.g. no kernel of this backend for the shape
                            row["status"] = "n/a: " + str(e).split("\n")[0][:80]
                        q = k = v = g = holder = None
                        row["peak_bytes"] = torch.cuda.max_memory_allocated()
                        row.update({"gpu_name": gpu, "torch": torch.__version__, "warmup": args.warmup,
                                    "iters": args.iters,
                                    "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")})
                        if row["status"] == "ok":
                            print(f"{impl:14} {dtype:5} {mask:6} {T:6} {dh:4} | {row['fwd_ms']:9.3f} {row['bwd_ms']:9.3f}"
                                  f" {row['fwd_bwd_ms']:9.3f} | {row['fwd_tflops']:8.1f} {row['fwd_bwd_tflops']:8.1f}"
                                  f" | {row['peak_bytes'] / 2**30:8.2f}", flush=True)
                        else:
                            print(f"{impl:14} {dtype:5} {mask:6} {T:6} {dh:4} | {row['status']}", flush=True)
                        if args.csv:
                            append_csv(args.csv, {k: row.get(k, "") for k in ATTENTION_COLUMNS})


ATTENTION_COLUMNS = ["impl", "dtype", "mask", "batch", "heads", "seq_len", "head_dim", "status", "fwd_ms",
                     "bwd_ms", "fwd_bwd_ms", "fwd_tflops", "bwd_tflops", "fwd_bwd_tflops", "peak_bytes",
                     "gpu_name", "torch", "warmup", "iters", "date", "fwd_kernel_ms", "bwd_kernel_ms"]


def kernel_ms(body, iters):
    """The GPU's time per call of body over iters calls, without the host's dispatch or the launch
    that timed() holds: the union of the device's intervals in torch.profiler's records (kernels,
    copies, memsets), as lmtrain's attention mode reports its own (CUPTI's kernel records)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                            torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            body()
        torch.cuda.synchronize()
    spans = sorted((e.time_range.start, e.time_range.end) for e in prof.events()
                   if e.device_type == torch.autograd.DeviceType.CUDA)
    if not spans:  # the column stays empty
        print("torch_reference: torch.profiler recorded no GPU activity", file=sys.stderr)
        return ""
    busy, start, end = 0.0, *spans[0]
    for s, e in spans[1:]:
        if s > end:
            busy, start = busy + end - start, s
        end = max(end, e)
    return round((busy + end - start) / 1e3 / iters, 4)  # us -> ms


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_check = sub.add_parser("check", help="logits, loss, gradients and a few AdamW steps for one batch")
    p_check.add_argument("--in", dest="inp", metavar="IN", required=True, help="input .safetensors")
    p_check.add_argument("--out", required=True, help="output .safetensors")
    p_check.set_defaults(func=check)
    p_bench = sub.add_parser("bench", help="time forward, forward+backward and the training step")
    p_bench.add_argument("--config", metavar="TOML", help="the model shape (d_model, d_ff, "
                         "num_layers, num_heads, vocab_size, tie_embeddings) from an lmtrain "
                         "config's [model] table")
    for key in SHAPE_DEFAULTS:  # resolve_shape fills those not given
        p_bench.add_argument("--" + key.replace("_", "-"), type=int)
    p_bench.add_argument("--tie-embeddings", action=argparse.BooleanOptionalAction,
                         help="the LM head reads the token embeddings (default: the config's, else no)")
    for name, default in (("context-length", 512), ("batch-size", 4), ("warmup", 5), ("steps", 20),
                          ("seed", 0)):
        p_bench.add_argument(f"--{name}", type=int, default=default)
    p_bench.add_argument("--precision", choices=("fp32", "tf32", "bf16"), default="bf16")
    p_bench.add_argument("--compile", action="store_true", help="wrap the model in torch.compile")
    p_bench.add_argument("--attention", choices=("naive", "sdpa"), default="naive",
                         help="naive: scores materialised (as lmtrain's naive); sdpa: "
                         "F.scaled_dot_product_attention")
    p_bench.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p_bench.add_argument("--label", default="", help="free text for the CSV row")
    p_bench.add_argument("--csv", help="append one row (header first in a new file)")
    p_bench.add_argument("--json", action="store_true", help="also print the row as one JSON line")
    p_bench.add_argument("--mem-timeline", metavar="CSV", help="record one more full step's allocated "
                         "CUDA memory: CSV event,allocated_bytes,phase (one row per alloc or free)")
    p_bench.set_defaults(func=bench)
    p_att = sub.add_parser("attention", help="time naive attention (plain or compiled), FlashAttention-2 "
                           "in plain PyTorch, and scaled_dot_product_attention")
    p_att.add_argument("--batch", type=int, default=1)
    p_att.add_argument("--heads", type=int, default=16)
    p_att.add_argument("--seq-lens", type=int, nargs="+", default=[256, 1024, 4096, 16384])
    p_att.add_argument("--head-dims", type=int, nargs="+", default=[64, 128])
    p_att.add_argument("--dtypes", nargs="+", choices=("bf16", "fp32"), default=["bf16"])
    p_att.add_argument("--masks", nargs="+", choices=("causal", "none"), default=["causal"])
    p_att.add_argument("--impls", nargs="+", default=["naive", "sdpa-flash", "sdpa-cudnn"],
                       choices=("naive", "naive-compiled", "torch-flash", "sdpa-flash", "sdpa-cudnn",
                                "sdpa-efficient"))
    p_att.add_argument("--warmup", type=int, default=5)
    p_att.add_argument("--iters", type=int, default=20)
    p_att.add_argument("--csv", help="append one row per grid point (header first in a new file)")
    p_att.set_defaults(func=attention_bench)
    args = parser.parse_args()
    if args.command == "check":
        torch.use_deterministic_algorithms(True)
    args.func(args)


if __name__ == "__main__":
    main()
