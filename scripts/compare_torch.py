#!/usr/bin/env python3
"""Time PyTorch's scaled_dot_product_attention on the benchmark shapes, beside our kernels.

Writes results in the `attn bench` JSON schema (attn-bench/1), one row per shape and backend,
so scripts/plot_bench.py draws them next to the course's kernels:

    python scripts/compare_torch.py --preset ladder --dtype float32 --out torch.json
    python scripts/compare_torch.py --merge-into docs/results/bench.json   # append rows

Backends: `efficient` (memory-efficient attention: the fp32 fused kernel PyTorch has),
`flash` (FlashAttention-2; fp16/bf16 only) and `math` (the unfused reference path).
Timing: CUDA events around each call, warm-up first, median of the timed runs; inputs are
uniform random in [-1, 1), as in `attn bench`. Needs torch with CUDA; without it, it says so
and exits 77 (skipped).
"""
import argparse
import json
import sys
from datetime import datetime, timezone

LADDER = [(16384 // n, heads, n, dim, causal)
          for causal in (False, True)
          for heads, dim in ((32, 64), (16, 128))
          for n in (512, 1024, 2048, 4096, 8192, 16384)]
QUICK = [(1, 8, n, 64, False) for n in (256, 1024)]


def visible_pairs(seq_q, seq_k, causal):
    """Query-key pairs the causal mask leaves visible (bottom-right aligned), per head."""
    if not causal:
        return seq_q * seq_k
    return sum(max(0, min(seq_k, i + 1 + seq_k - seq_q)) for i in range(seq_q))


def time_call(torch, fn, warmup, iters):
    """Median milliseconds of fn() over `iters` event-timed calls after `warmup` calls."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    stops = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    for start, stop in zip(starts, stops):
        start.record()
        fn()
        stop.record()
    torch.cuda.synchronize()
    times = sorted(s.elapsed_time(e) for s, e in zip(starts, stops))
    mid = len(times) // 2
    return times[mid] if len(times) % 2 else 0.5 * (times[mid - 1] + times[mid])


def bench_shape(torch, backend, shape, dtype, warmup, iters):
    """One result row for one shape and backend (status says why if it could not run)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F
    batch, heads, seq, dim, causal = shape
    row = {"kernel": f"torch_sdpa_{backend}", "module": None, "impl": "torch",
           "batch": batch, "heads": heads, "kv_heads": heads, "seq_q": seq, "seq_k": seq,
           "head_dim": dim,
           "causal": causal, "status": "ok", "check": "-", "dtype": str(dtype).split(".")[-1]}
    pairs = visible_pairs(seq, seq, causal)
    elem = torch.tensor([], dtype=dtype).element_size()
    row["flops"] = 4.0 * batch * heads * pairs * dim
    row["bytes_fused"] = float(elem * batch * heads * dim * 4 * seq)
    row["bytes_unfused"] = row["bytes_fused"] + 4.0 * elem * batch * heads * seq * seq
    which = {"efficient": SDPBackend.EFFICIENT_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
             "math": SDPBackend.MATH}[backend]
    try:
        gen = torch.Generator(device="cuda").manual_seed(1234)
        q, k, v = (torch.rand(batch, heads, seq, dim, device="cuda", dtype=dtype,
                              generator=gen) * 2 - 1 for _ in range(3))
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        with sdpa_kernel([which]):
            def call():
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            call()
            torch.cuda.synchronize()
            # Inputs plus the output plus whatever the backend allocates while it runs.
            row["device_bytes"] = float(torch.cuda.max_memory_allocated() - base
                                        + 3 * q.numel() * elem)
            ms = time_call(torch, call, warmup, iters)
    except (RuntimeError, torch.cuda.OutOfMemoryError) as err:
        row.update(status=f"unsupported: {str(err).splitlines()[0][:120]}", median_ms=0.0,
                   tflops=0.0, gbs=0.0, device_bytes=0.0)
        torch.cuda.empty_cache()
        return row
    row.update(median_ms=ms, min_ms=ms, iterations=iters,
               tflops=row["flops"] / (ms * 1e-3) / 1e12,
               gbs=row["bytes_fused"] / (ms * 1e-3) / 1e9)
    del q, k, v
    torch.cuda.empty_cache()
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=["ladder", "quick"], default="ladder")
    parser.add_argument("--backends", default="efficient", help="comma list: efficient,flash,math")
    parser.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--out", help="write a new JSON file")
    parser.add_argument("--merge-into", help="append the rows to an existing bench JSON")
    args = parser.parse_args()
    if not args.out and not args.merge_into:
        parser.error("give --out or --merge-into")
    try:
        import torch
    except ImportError:
        print("skipped: torch is not installed")
        return 77
    if not torch.cuda.is_available():
        print("skipped: torch sees no CUDA device")
        return 77
    dtype = getattr(torch, args.dtype)
    if args.dtype == "float32":
        # Plain fp32 arithmetic: no TF32 tensor cores, as our fp32 kernels.
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    shapes = LADDER if args.preset == "ladder" else QUICK
    rows = []
    for backend in args.backends.split(","):
        for shape in shapes:
            row = bench_shape(torch, backend, shape, dtype, args.warmup, args.iters)
            rows.append(row)
            b, h, n, d, c = shape
            print(f"{row['kernel']:<22} B={b} H={h} N={n} D={d}{' causal' if c else '':<7} "
                  f"{row['median_ms']:10.3f} ms {row['tflops']:8.2f} TFLOP/s  {row['status']}")
    if args.merge_into:
        with open(args.merge_into) as f:
            doc = json.load(f)
        doc["results"].extend(rows)
        doc.setdefault("torch", torch.__version__)
        path = args.merge_into
    else:
        props = torch.cuda.get_device_properties(0)
        doc = {"schema": "attn-bench/1",
               "created": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
               "preset": args.preset, "torch": torch.__version__,
               "device": {"name": props.name, "cc": f"{props.major}.{props.minor}",
                          "sms": props.multi_processor_count},
               "results": rows}
        path = args.out
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
