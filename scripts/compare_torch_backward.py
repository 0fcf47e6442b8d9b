#!/usr/bin/env python3
"""PyTorch's side of module 11's benchmark: SDPA's backward beside bench_11's, per backend.

The forward, the backward and forward+backward of scaled_dot_product_attention on bench_11's
ladder shapes, through the FlashAttention-2, cuDNN and memory-efficient backends.

  python3 scripts/compare_torch_backward.py --out docs/results/torch11_h100.json
  python3 scripts/compare_torch_backward.py --out t.json --seqs 4096 --dims 128 --iters 10

Shapes: bf16, batch = 16384 / N, heads = 2048 / d (d = 64: 32 heads, d = 128: 16), causal and
not, Q, K, V [B, H, N, d] (the layout SDPA takes) with requires_grad. For each shape and
backend (torch.nn.attention.sdpa_kernel with one SDPBackend), three timings, each the median
of --iters event-timed calls after --warmup calls:

  fwd      the forward with autograd recording, so the backend also writes the log-sum-exp
           the backward needs (bench_11's forward writes it too)
  bwd      torch.autograd.grad(out, (q, k, v), dout, retain_graph=True) on one recorded
           forward: the backward kernels alone. autograd.grad returns fresh dQ, dK, dV
           instead of adding into .grad, so no accumulation kernels are timed
  fwd_bwd  a forward and its autograd.grad, as a training step runs them

FLOPs as bench_11 counts them: forward 4 * B * H * visible_pairs * d (visible_pairs = N * N,
or N * (N + 1) / 2 causal), backward 2.5 times that, forward+backward 3.5 times.
Writes {"device", "torch", "cuda", "cudnn", "dtype", "timing", "flops", "records": [...]}, one
record per shape and backend with bench_11's fields ("rung" = torch_flash, torch_cudnn,
torch_efficient) plus "backend" (the SDPBackend name) and "status": "ok", or
"unavailable: <phase>: <why>" with null times for the phases that could not run (a backend
that rejects a shape is recorded, never fatal). scripts/results_11.py joins the two files on
(head_dim, seq, causal). Needs PyTorch 2.3 or newer with CUDA; without them it says so in
one line and exits 1.
"""
import argparse
import json
import sys
import warnings

from compare_torch import time_call  # median of event-timed calls, as for the forward

SEQS = [512, 1024, 2048, 4096, 8192, 16384]
DIMS = [64, 128]
# Our rung name -> the torch.nn.attention.SDPBackend member.
BACKENDS = {"torch_flash": "FLASH_ATTENTION", "torch_cudnn": "CUDNN_ATTENTION",
            "torch_efficient": "EFFICIENT_ATTENTION"}
SHORT = {"flash": "torch_flash", "cudnn": "torch_cudnn", "efficient": "torch_efficient"}


def visible_pairs(n, causal):
    return n * (n + 1) // 2 if causal else n * n


def reason(err, caught):
    """One line: the exception's first line, then what the backend warned. When sdpa_kernel
    allows no kernel that fits, the exception only says so; the warnings say why."""
    text = str(err).splitlines()[0] if str(err) else type(err).__name__
    why = [str(w.message).splitlines()[0] for w in caught if str(w.message)]
    if why:
        text += " (" + "; ".join(why[:3]) + ")"
    return text[:300]


def bench_shape(torch, rung, d, n, causal, warmup, iters):
    """One record: the three timings of one backend on one shape; a phase that fails leaves
    its fields null and says why in "status"."""
    from torch.nn.attention import SDPBackend
    batch, heads = max(1, 16384 // n), 2048 // d
    flops = 4.0 * batch * heads * visible_pairs(n, causal) * d
    rec = {"rung": rung, "backend": BACKENDS[rung], "seq": n, "head_dim": d, "heads": heads,
           "batch": batch, "causal": causal, "dtype": "bf16", "status": "ok"}
    for key in ("fwd", "bwd", "fwd_bwd"):
        rec[f"{key}_ms"] = None
        rec[f"{key}_tflops"] = None
    which = getattr(SDPBackend, BACKENDS[rung], None)
    if which is None:
        rec["status"] = (f"unavailable: this PyTorch ({torch.__version__}) has no "
                         f"SDPBackend.{BACKENDS[rung]}")
        return rec
    measure(torch, rec, which, warmup, iters)
    for key, times in (("fwd", 1.0), ("bwd", 2.5), ("fwd_bwd", 3.5)):
        ms = rec[f"{key}_ms"]
        if ms:
            rec[f"{key}_tflops"] = times * flops / (ms * 1e-3) / 1e12
    # The shape's tensors died with measure(): hand their memory back before the next shape,
    # whose sizes differ.
    torch.cuda.empty_cache()
    return rec


def measure(torch, rec, which, warmup, iters):
    """Fills rec's three times (or its status) for one backend `which` on rec's shape."""
    from torch.nn.attention import sdpa_kernel
    import torch.nn.functional as F
    batch, heads, n, d, causal = (rec[k] for k in ("batch", "heads", "seq", "head_dim",
                                                   "causal"))
    phase = "inputs"
    # Any exception of one backend on one shape (no kernel for it, out of memory, a head dim
    # it does not support) becomes the record's status; the other shapes still run.
    try:
        gen = torch.Generator(device="cuda").manual_seed(1234)

        def uniform(shape):  # in [-1, 1), as bench_11 fills its inputs
            return torch.rand(shape, device="cuda", dtype=torch.bfloat16, generator=gen) * 2 - 1

        q, k, v = (uniform((batch, heads, n, d)).requires_grad_() for _ in range(3))

        def attend():
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

        with sdpa_kernel([which]):
            phase = "forward"
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                try:
                    out = attend()
                    torch.cuda.synchronize()
                except Exception as err:
                    raise RuntimeError(reason(err, caught)) from None
            rec["fwd_ms"] = time_call(torch, attend, warmup, iters)
            # dout with out's strides: a backend whose backward wants dout laid out as out
            # would otherwise copy it inside the timed call.
            dout = torch.empty_like(out)
            dout.copy_(uniform(out.shape))
            phase = "backward"
            rec["bwd_ms"] = time_call(
                torch, lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True),
                warmup, iters)
            phase = "forward+backward"
            rec["fwd_bwd_ms"] = time_call(
                torch, lambda: torch.autograd.grad(attend(), (q, k, v), dout), warmup, iters)
    except Exception as err:
        rec["status"] = f"unavailable: {phase}: {reason(err, [])}"


def fmt(x, spec):
    """x formatted by spec ("9.4f"); a missing value as "-" in the same width."""
    return format(x, spec) if x is not None else "-".rjust(int(spec.split(".")[0]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="the JSON file to write")
    ap.add_argument("--seqs", type=int, nargs="+", default=SEQS,
                    help="sequence lengths N (default: bench_11's ladder, 512 to 16384)")
    ap.add_argument("--dims", type=int, nargs="+", default=DIMS, help="head dims (64 128)")
    ap.add_argument("--backends", default="flash,cudnn,efficient",
                    help="comma list of flash, cudnn, efficient (default: all three)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--iters", type=int, default=20)
    args = ap.parse_args()
    unknown = [b for b in args.backends.split(",") if b not in SHORT]
    if unknown:
        ap.error(f"unknown backend {', '.join(unknown)} (choose from {', '.join(SHORT)})")
    rungs = [SHORT[b] for b in args.backends.split(",")]
    bad_dims = [d for d in args.dims if d <= 0 or 2048 % d]
    if bad_dims:
        ap.error(f"head dims must divide 2048 (heads = 2048 / d): {bad_dims}")
    try:
        import torch
        from torch.nn.attention import sdpa_kernel  # noqa: F401  (PyTorch 2.3 and newer)
    except ImportError as e:
        print(f"compare_torch_backward: PyTorch with torch.nn.attention is needed ({e})")
        return 1
    if not torch.cuda.is_available():
        print("compare_torch_backward: PyTorch sees no CUDA device")
        return 1
    records = []
    print(f"{'rung':<16} {'d':>3} {'N':>6} {'causal':>6} {'fwd ms':>9} {'bwd ms':>9} "
          f"{'f+b ms':>9} {'fwd TF':>7} {'bwd TF':>7} {'f+b TF':>7}  status", flush=True)
    for d in args.dims:
        for n in args.seqs:
            for causal in (False, True):
                for rung in rungs:
                    r = bench_shape(torch, rung, d, n, causal, args.warmup, args.iters)
                    records.append(r)
                    print(f"{rung:<16} {d:>3} {n:>6} {'yes' if causal else 'no':>6} "
                          f"{fmt(r['fwd_ms'], '9.4f')} {fmt(r['bwd_ms'], '9.4f')} "
                          f"{fmt(r['fwd_bwd_ms'], '9.4f')} {fmt(r['fwd_tflops'], '7.1f')} "
                          f"{fmt(r['bwd_tflops'], '7.1f')} {fmt(r['fwd_bwd_tflops'], '7.1f')}"
                          f"  {r['status']}", flush=True)
    doc = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
           "dtype": "bf16",
           "timing": f"median of {args.iters} event-timed calls after {args.warmup}",
           "flops": "forward 4*B*H*visible_pairs*d; backward 2.5x; fwd+bwd 3.5x",
           "records": records}
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
