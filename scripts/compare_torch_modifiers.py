#!/usr/bin/env python3
"""PyTorch's side of module 12's benchmark: the same modifiers on the same shapes as bench_12,
through FlexAttention (torch.nn.attention.flex_attention, compiled: PyTorch's way to write a
score or mask modifier as a small function and get a fused kernel with masked blocks skipped),
and the unfused RoPE (rotary applied with torch ops, then SDPA's FlashAttention-2 backend).

  python3 scripts/compare_torch_modifiers.py --out torch12.json [--seqs 4096] [--dims 64 128]

Shapes: bf16, batch = 16384 / N, heads = 2048 / d, BHSD (bench_12's ladder). Each variant is
timed with CUDA events, median of --iters runs after --warmup runs (and after the compile).
Writes {"device", "torch", "records": [{"variant", "head_dim", "seq", "backend", "ms"}]}; the
variant names are bench_12's, so the two files join on (variant, head_dim, seq).
"""
import argparse
import json
import math
import statistics
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--seqs", type=int, nargs="+", default=[4096])
    ap.add_argument("--dims", type=int, nargs="+", default=[64, 128])
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--iters", type=int, default=20)
    args = ap.parse_args()
    try:
        import torch
        from torch.nn.attention import SDPBackend, sdpa_kernel
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    except ImportError as e:
        print(f"compare_torch_modifiers: PyTorch with FlexAttention is needed ({e})")
        return 1
    dev = "cuda"
    # One compiled kernel per (modifier, mask, shape): more than dynamo's default of 8
    # recompilations of one function, after which it would silently run flex_attention
    # uncompiled (the unfused path that materializes the scores).
    torch._dynamo.config.cache_size_limit = 1024
    torch._dynamo.config.accumulated_cache_size_limit = 8192
    flex = torch.compile(flex_attention, dynamic=False)

    def time_ms(fn):
        for _ in range(args.warmup):
            fn()
        torch.cuda.synchronize()
        times = []
        for _ in range(args.iters):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b))
        return statistics.median(times)

    def t5_bucket(rel, num_buckets=32, max_distance=128):
        # common/modifiers.h, bidirectional: half the buckets for keys after the query.
        half = num_buckets // 2
        ret = (rel > 0).long() * half
        n = rel.abs()
        max_exact = half // 2
        large = max_exact + (torch.log(n.float().clamp(min=1) / max_exact)
                             / math.log(max_distance / max_exact) * (half - max_exact)).long()
        large = large.clamp(max=half - 1)
        return ret + torch.where(n < max_exact, n, large)

    records = []
    for d in args.dims:
        for n in args.seqs:
            batch, heads = max(1, 16384 // n), 2048 // d
            g = torch.Generator(device=dev).manual_seed(1)
            q, k, v = (torch.rand(batch, heads, n, d, device=dev, generator=g,
                                  dtype=torch.float32).mul_(2).sub_(1).to(torch.bfloat16)
                       for _ in range(3))
            slopes = torch.tensor([2.0 ** (-8.0 * (h + 1) / heads) for h in range(heads)],
                                  device=dev)
            bias = (torch.rand(n, n, device=dev, generator=g) * 4 - 2).to(torch.bfloat16)
            table = torch.rand(heads, 32, device=dev, generator=g) * 2 - 1
            rel_by_distance = table[:, t5_bucket(torch.arange(-(n - 1), n, device=dev))]
            docs = torch.arange(n, device=dev) // ((n + 3) // 4)
            window, prefix = 1024, n // 4

            def alibi(score, b, h, qi, ki):
                return score - slopes[h] * (qi - ki).abs()

            def softcap(score, b, h, qi, ki):
                return 30.0 * torch.tanh(score / 30.0)

            def add_bias(score, b, h, qi, ki):
                return score + bias[qi, ki]

            def relative(score, b, h, qi, ki):
                return score + rel_by_distance[h, ki - qi + n - 1]

            masks = {
                "causal": lambda b, h, qi, ki: qi >= ki,
                "window": lambda b, h, qi, ki: (qi >= ki) & (qi - ki < window),
                "prefix": lambda b, h, qi, ki: (qi >= ki) | (ki < prefix),
                "documents": lambda b, h, qi, ki: docs[qi] == docs[ki],
                "documents causal": lambda b, h, qi, ki: (docs[qi] == docs[ki]) & (qi >= ki),
            }
            block_masks = {name: create_block_mask(fn, None, None, n, n, device=dev)
                           for name, fn in masks.items()}
            variants = [
                ("plain (flex)", None, None),
                ("alibi", alibi, None), ("alibi causal", alibi, "causal"),
                ("softcap", softcap, None), ("softcap causal", softcap, "causal"),
                ("bias", add_bias, None), ("bias causal", add_bias, "causal"),
                ("relative", relative, None), ("relative causal", relative, "causal"),
                ("causal (07 rule)", None, "causal"),
                ("window 1024", None, "window"), ("prefix N/4", None, "prefix"),
                ("documents x4", None, "documents"),
                ("documents x4 causal", None, "documents causal"),
            ]
            for name, score_mod, mask in variants:
                if name == "window 1024" and window >= n:
                    continue
                bm = block_masks[mask] if mask else None
                try:
                    ms = time_ms(lambda: flex(q, k, v, score_mod=score_mod, block_mask=bm))
                except Exception as e:  # one line, then the next variant
                    print(f"{name} d={d} N={n}: flex failed: {str(e).splitlines()[0]}")
                    continue
                records.append({"variant": name, "head_dim": d, "seq": n, "backend": "flex",
                                "ms": ms})
                print(f"{name:24s} d={d:3d} N={n:6d} flex {ms:9.4f} ms", flush=True)
            # RoPE the unfused way (half-split, base 10000), then SDPA's FLASH backend.
            inv = 10000.0 ** (-torch.arange(0, d // 2, device=dev, dtype=torch.float64) * 2 / d)
            ang = torch.arange(n, device=dev, dtype=torch.float64)[:, None] * inv[None, :]
            cos, sin = ang.cos().float(), ang.sin().float()

            def rope(x):
                x1, x2 = x[..., : d // 2].float(), x[..., d // 2:].float()
                return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1).to(x.dtype)

            for causal in (False, True):
                tag = " causal" if causal else ""
                with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                    plain = time_ms(lambda: torch.nn.functional.scaled_dot_product_attention(
                        q, k, v, is_causal=causal))
                    unfused = time_ms(lambda: torch.nn.functional.scaled_dot_product_attention(
                        rope(q), rope(k), v, is_causal=causal))
                for name, ms in (("plain (sdpa flash)" + tag, plain),
                                 ("rope half" + tag, unfused)):
                    records.append({"variant": name, "head_dim": d, "seq": n,
                                    "backend": "sdpa flash" + (" + torch rope" if "rope" in name
                                                               else ""), "ms": ms})
                    print(f"{name:24s} d={d:3d} N={n:6d} sdpa {ms:9.4f} ms", flush=True)
    with open(args.out, "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                   "records": records}, f, indent=1)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
