#!/usr/bin/env python3
"""PyTorch's attention backends on module 10's decode shapes, timed as bench_10 times ours.

One new query token per sequence (q [B, H, 1, D]) against a dense K/V cache
(k, v [B, KVH, N, D]) through torch.nn.functional.scaled_dot_product_attention with
enable_gqa=True (the K/V heads are shared, not copied), under one backend at a time:
flash (FlashAttention-2), cudnn, efficient. The L2 is evicted before every timed run by
reading 256 MiB (a read leaves no dirty lines to write back during the timed run); the time
is the median of event-timed runs after warm-up. GB/s counts what a decode must move: K and
V once (KVH heads), Q and O once -- the same count as bench_10. --layouts bshd times the
same caches stored token-major ([B, N, KVH, D] seen through strides), the order of a paged
cache's rows.

    python3 scripts/compare_torch_decode.py --layouts bhsd,bshd --out docs/results/decode10_torch_h100.json

Shapes: H = 32, KVH = 8, D = 128, bf16; N from 512 to 131072 at B = 32, and B from 1 to 128
at N = 4096 and 32768 (at most 32 x 131072 cached tokens). --quick: N = 4096, 32768; B = 1, 32.
"""
import argparse
import json
import sys
import time

BACKENDS = {"flash": "FLASH_ATTENTION", "cudnn": "CUDNN_ATTENTION",
            "efficient": "EFFICIENT_ATTENTION"}


def shapes(quick):
    seqs = [4096, 32768] if quick else [512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072]
    batches = [1, 32] if quick else [1, 4, 16, 32, 64, 128]
    out = [(32, n) for n in seqs]
    for b in batches:
        for n in (4096, 32768):
            if b * n <= 32 * 131072 and (b, n) not in out:
                out.append((b, n))
    return out


def median_ms(torch, fn, flush, warmup, iters):
    for _ in range(warmup):
        flush.sum()
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        flush.sum()
        start = torch.cuda.Event(enable_timing=True)
        stop = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(stop))
    times.sort()
    mid = len(times) // 2
    return times[mid] if len(times) % 2 else 0.5 * (times[mid - 1] + times[mid])


def bench(torch, backend, batch, seq, flush, warmup, iters, layout="bhsd", heads=32, kv_heads=8,
          dim=128):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F
    dtype = torch.bfloat16
    row = {"kernel": f"torch_sdpa_{backend}", "layout": layout, "batch": batch, "heads": heads,
           "kv_heads": kv_heads, "head_dim": dim, "seq_q": 1, "seq_k": seq, "dtype": "bf16",
           "status": "ok"}
    row["bytes"] = 2.0 * (2 * batch * kv_heads * seq * dim + 2 * batch * heads * dim)
    try:
        q = torch.rand(batch, heads, 1, dim, device="cuda", dtype=dtype) * 2 - 1
        def cache():
            # bhsd: each head's rows contiguous; bshd: a token's heads side by side (the
            # layout of a paged cache's rows), the same tensor seen through strides.
            if layout == "bhsd":
                return torch.rand(batch, kv_heads, seq, dim, device="cuda", dtype=dtype) * 2 - 1
            t = torch.rand(batch, seq, kv_heads, dim, device="cuda", dtype=dtype) * 2 - 1
            return t.transpose(1, 2)
        k, v = cache(), cache()
        with sdpa_kernel([getattr(SDPBackend, BACKENDS[backend])]):
            def call():
                return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
            call()
            torch.cuda.synchronize()
            ms = median_ms(torch, call, flush, warmup, iters)
    except (RuntimeError, torch.cuda.OutOfMemoryError, TypeError) as err:
        row.update(status=f"unsupported: {str(err).splitlines()[0][:160]}", median_ms=0.0,
                   gbs=0.0)
        torch.cuda.empty_cache()
        return row
    row.update(median_ms=ms, gbs=row["bytes"] / (ms * 1e-3) / 1e9)
    del q, k, v
    torch.cuda.empty_cache()
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default="flash,cudnn")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--layouts", default="bhsd",
                        help="bhsd and/or bshd (comma list): the dense caches' memory order")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    backends = args.backends.split(",")
    unknown = [b for b in backends if b not in BACKENDS]
    if unknown:
        parser.error(f"unknown backend {', '.join(unknown)} (choose from {', '.join(BACKENDS)})")
    try:
        import torch
    except ImportError:
        sys.exit("compare_torch_decode.py: PyTorch is not installed (pip install torch)")
    if not torch.cuda.is_available():
        sys.exit("compare_torch_decode.py: no CUDA GPU visible to PyTorch")
    flush = torch.zeros(64 << 20, dtype=torch.float32, device="cuda")  # 256 MiB
    rows = []
    print(f"{'kernel':<20} {'batch':>5} {'seq_k':>7} {'ms':>9} {'GB/s':>8}  status")
    for layout in args.layouts.split(","):
        for batch, seq in shapes(args.quick):
            for backend in backends:
                row = bench(torch, backend, batch, seq, flush, args.warmup, args.iters, layout)
                rows.append(row)
                print(f"{row['kernel']:<20} {layout} {batch:>5} {seq:>7} {row['median_ms']:>9.4f} "
                      f"{row['gbs']:>8.0f}  {row['status']}", flush=True)
    doc = {"schema": "attn-decode-torch/1",
           "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "device": torch.cuda.get_device_name(0), "torch": torch.__version__,
           "cudnn": torch.backends.cudnn.version(),
           "timing": "median of event-timed runs after warm-up, L2 evicted before each",
           "rows": rows}
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
