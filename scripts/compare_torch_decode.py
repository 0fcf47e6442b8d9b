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
cache's rows. Every backend of a shape reads one allocation of q, k, v; --placements K
allocates them K times.

--ours build/release/libdecode_capi_10.so also runs module 10's decode (bench/10_decoding/
decode_capi.cu, through ctypes) on the tensors the backends read: as pages of --page-size
tokens in order (the same bytes at the same addresses; its output is checked against each
backend's) and shuffled (the paged case). A bshd cache is a token-major paged cache; a bhsd
cache is read as batch x kv_heads sequences of one K/V head (a head-major cache).

    python3 scripts/compare_torch_decode.py --layouts bhsd,bshd \
        --out docs/results/decode10_torch_h100.json

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


def parse_page_sizes(text):
    """--page-size: a comma list of powers of two from 1 to 1024."""
    try:
        sizes = [int(x) for x in text.split(",")]
    except ValueError:
        raise ValueError(f"--page-size takes powers of two such as 16 or 16,64 (got {text})")
    for size in sizes:
        if size < 1 or size > 1024 or size & (size - 1):
            raise ValueError(f"--page-size is a power of two from 1 to 1024 (got {size})")
    return sizes


def parse_ours(text):
    """--ours: a comma list of [label=]library; the labels name the rows, so they differ."""
    builds = []
    for item in filter(None, text.split(",")):
        label, _, path = item.rpartition("=")
        if not path:
            raise ValueError(f"--ours: no library after '{label}='")
        if any(label == other for other, _ in builds):
            raise ValueError(f"--ours: two builds labelled '{label}' (name them label=library)")
        builds.append((label, path))
    return builds


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


def cache_tensors(torch, batch, seq, layout, heads=32, kv_heads=8, dim=128):
    """q [B, H, 1, D] and the K/V caches [B, KVH, N, D] as SDPA takes them. bhsd: each head's
    rows contiguous; bshd: a token's heads side by side (the order of a paged cache's rows),
    the same tensor seen through strides."""
    dtype = torch.bfloat16
    q = torch.rand(batch, heads, 1, dim, device="cuda", dtype=dtype) * 2 - 1

    def cache():
        if layout == "bhsd":
            return torch.rand(batch, kv_heads, seq, dim, device="cuda", dtype=dtype) * 2 - 1
        t = torch.rand(batch, seq, kv_heads, dim, device="cuda", dtype=dtype) * 2 - 1
        return t.transpose(1, 2)
    return q, cache(), cache()


class Ours:
    """Module 10's decode from bench/'s libdecode_capi_10.so (ctypes), run on the tensors the
    backends read: a bshd cache is a pool of pages of page_size tokens in order, so ours reads
    the same bytes at the same addresses; a bhsd cache is the same for batch x kv_heads
    sequences of one K/V head (a head-major cache); with shuffle the block table visits the
    same pages in a random order (the paged case: other tokens, so no output check)."""

    def __init__(self, path):
        import ctypes
        self.ct = ctypes
        self.lib = ctypes.CDLL(path)
        p, i = ctypes.c_void_p, ctypes.c_int
        self.lib.attn_decode.restype = i
        self.lib.attn_decode.argtypes = ([p] * 7 + [ctypes.c_size_t] + [i] * 7 +
                                         [p, ctypes.c_char_p, i])
        self.lib.attn_decode_workspace_bytes.restype = ctypes.c_size_t
        self.lib.attn_decode_workspace_bytes.argtypes = [i] * 7

    def prepare(self, torch, q, k, v, page_size, shuffle, seed=1):
        batch, heads, _, dim = q.shape
        kv_heads, seq = k.shape[1], k.shape[2]
        out = torch.empty(batch, 1, heads, dim, device="cuda", dtype=q.dtype)
        if k.stride(1) == seq * dim:
            # bhsd: each K/V head's rows are contiguous, a head-major ("HND") cache. Ours reads
            # it as batch x kv_heads sequences of one K/V head each, whose `group` query heads
            # are the ones that share it: Q [B, H, 1, D] and O [B, 1, H, D] hold the same
            # bytes as [B * KVH, 1, group, D].
            batch, heads, kv_heads = batch * kv_heads, heads // kv_heads, 1
        if seq % page_size:
            raise ValueError(f"seq_k {seq} is not a multiple of the page size {page_size}")
        per_seq = seq // page_size
        pages = batch * per_seq
        order = (torch.randperm(pages, generator=torch.Generator().manual_seed(seed))
                 if shuffle else torch.arange(pages))
        table = order.to(torch.int32).view(batch, per_seq).cuda()
        lens = torch.full((batch,), seq, dtype=torch.int32, device="cuda")
        shape = (batch, heads, kv_heads, dim, seq, page_size, 1)
        work = torch.empty(max(1, self.lib.attn_decode_workspace_bytes(*shape)),
                           dtype=torch.uint8, device="cuda")
        error = self.ct.create_string_buffer(512)
        ptrs = [q.data_ptr(), k.data_ptr(), v.data_ptr(), table.data_ptr(), lens.data_ptr(),
                out.data_ptr(), work.data_ptr()]

        def call():
            stream = torch.cuda.current_stream().cuda_stream
            if self.lib.attn_decode(*ptrs, work.numel(), *shape, stream, error, 512):
                raise RuntimeError(error.value.decode())
        call.keep = (table, lens, work)  # alive as long as call is
        return call, out


def time_one(torch, name, layout, batch, seq, placement, call, flush, warmup, iters, heads=32,
             kv_heads=8, dim=128):
    row = {"kernel": name, "layout": layout, "batch": batch, "heads": heads,
           "kv_heads": kv_heads, "head_dim": dim, "seq_q": 1, "seq_k": seq, "dtype": "bf16",
           "placement": placement, "status": "ok"}
    row["bytes"] = 2.0 * (2 * batch * kv_heads * seq * dim + 2 * batch * heads * dim)
    try:
        call()
        torch.cuda.synchronize()
        ms = median_ms(torch, call, flush, warmup, iters)
    except (RuntimeError, torch.cuda.OutOfMemoryError, TypeError) as err:
        row.update(status=f"unsupported: {str(err).splitlines()[0][:160]}", median_ms=0.0,
                   gbs=0.0)
        return row
    row.update(median_ms=ms, gbs=row["bytes"] / (ms * 1e-3) / 1e9)
    return row


def compare(row, out, outputs):
    """Relative L2 distance of our output to each backend's (same inputs, bf16 outputs)."""
    if row["status"] != "ok":
        return
    mine = out.float().reshape(out.shape[0], -1)
    for backend, theirs in outputs.items():
        ref = theirs.float().reshape(out.shape[0], -1)
        row[f"rel_l2_vs_{backend}"] = float((mine - ref).norm() / ref.norm())


def bench_shape(torch, backends, ours, page_sizes, batch, seq, layout, placement, flush, warmup,
                iters):
    """Every backend, and each of our builds, on one allocation of q, k, v."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F
    rows, outputs = [], {}
    try:
        q, k, v = cache_tensors(torch, batch, seq, layout)
    except torch.cuda.OutOfMemoryError as err:
        return [{"kernel": "allocation", "layout": layout, "batch": batch, "seq_k": seq,
                 "placement": placement, "median_ms": 0.0, "gbs": 0.0,
                 "status": f"unsupported: {str(err).splitlines()[0][:160]}"}]
    for backend in backends:
        with sdpa_kernel([getattr(SDPBackend, BACKENDS[backend])]):
            def call():
                outputs[backend] = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
            rows.append(time_one(torch, f"torch_sdpa_{backend}", layout, batch, seq, placement,
                                 call, flush, warmup, iters))
    for label, lib in ours:
        for page_size in page_sizes:
            for shuffle in (False, True):
                call, out = lib.prepare(torch, q, k, v, page_size, shuffle)
                name = (f"ours{'-' + label if label else ''}_page{page_size}_" +
                        ("shuffled" if shuffle else "in_order"))
                row = time_one(torch, name, layout, batch, seq, placement, call, flush, warmup,
                               iters)
                if not shuffle:
                    compare(row, out, outputs)
                rows.append(row)
    del q, k, v, outputs
    torch.cuda.empty_cache()
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default="flash,cudnn")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--shapes", default="",
                        help="batch:seq_k pairs to time instead of the sweep, e.g. 32:4096,1:32768")
    parser.add_argument("--layouts", default="bhsd",
                        help="bhsd and/or bshd (comma list): the dense caches' memory order")
    parser.add_argument("--ours", default="",
                        help="libdecode_capi_10.so: time module 10's decode on the same "
                             "tensors (pages in order and shuffled); a comma list of "
                             "[label=]library times several builds side by side")
    parser.add_argument("--page-size", default="16",
                        help="ours: tokens per page (a comma list times each)")
    parser.add_argument("--placements", type=int, default=1,
                        help="allocations of each shape's tensors (the time moves with where "
                             "the driver puts them)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    backends = args.backends.split(",")
    unknown = [b for b in backends if b not in BACKENDS]
    if unknown:
        parser.error(f"unknown backend {', '.join(unknown)} (choose from {', '.join(BACKENDS)})")
    todo = shapes(args.quick)
    if args.shapes:
        try:
            todo = [tuple(int(x) for x in pair.split(":")) for pair in args.shapes.split(",")]
        except ValueError:
            parser.error(f"--shapes takes batch:seq_k pairs such as 32:4096 (got {args.shapes})")
        if any(len(t) != 2 or min(t) < 1 for t in todo):
            parser.error(f"--shapes takes positive batch:seq_k pairs (got {args.shapes})")
    try:
        page_sizes = parse_page_sizes(args.page_size)
        builds = parse_ours(args.ours)
    except ValueError as err:
        parser.error(str(err))
    if builds and any(seq % size for _, seq in todo for size in page_sizes):
        parser.error("--ours reads each dense cache as pages of --page-size tokens: every "
                     "seq_k must be a multiple of each page size")
    try:
        import torch
    except ImportError:
        sys.exit("compare_torch_decode.py: PyTorch is not installed (pip install torch)")
    if not torch.cuda.is_available():
        sys.exit("compare_torch_decode.py: no CUDA GPU visible to PyTorch")
    flush = torch.zeros(64 << 20, dtype=torch.float32, device="cuda")  # 256 MiB
    ours = []
    for label, path in builds:
        try:
            ours.append((label, Ours(path)))
        except OSError as err:
            sys.exit(f"compare_torch_decode.py: cannot load {path}: {err}")
    rows = []
    print(f"{'kernel':<28} {'layout':<6} {'batch':>5} {'seq_k':>7} {'alloc':>5} {'ms':>9} "
          f"{'GB/s':>8}  status")
    for layout in args.layouts.split(","):
        for batch, seq in todo:
            for placement in range(args.placements):
                for row in bench_shape(torch, backends, ours, page_sizes, batch, seq, layout,
                                       placement, flush, args.warmup, args.iters):
                    rows.append(row)
                    checks = " ".join(f"{k[10:]} {v:.1e}" for k, v in row.items()
                                      if k.startswith("rel_l2_vs_"))
                    print(f"{row['kernel']:<28} {layout:<6} {batch:>5} {seq:>7} {placement:>5} "
                          f"{row.get('median_ms', 0):>9.4f} {row.get('gbs', 0):>8.0f}  "
                          f"{row['status']} {checks}", flush=True)
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
