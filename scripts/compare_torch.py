#!/usr/bin/env python3
"""Time PyTorch's scaled_dot_product_attention on the benchmark shapes, beside our kernels.

Writes results in the `attn bench` JSON schema (attn-bench/1), one row per shape and backend,
so scripts/plot_bench.py draws them next to the course's kernels:

    python scripts/compare_torch.py --preset ladder --out torch.json            # fp32
    python scripts/compare_torch.py --dtype bf16 --merge-into docs/results/bench.json

--dtype f32 | f16 | bf16 (float32, float16, bfloat16 work too), default f32: the element type
of Q, K, V and O, as `attn bench --dtype`. Each row carries it as "dtype" ("f32", "f16",
"bf16", the names `attn bench` writes).
--backend (a comma list runs several; --backends is the same option):
  efficient  memory-efficient attention (CUTLASS): the fused kernel PyTorch has for fp32;
             the default for f32
  flash      FlashAttention-2: f16/bf16 only; the default for f16 and bf16
  math       the unfused reference path (scores in memory)
  cudnn      cuDNN's fused attention (f16/bf16, recent PyTorch and cuDNN)
Rows are named torch_sdpa_<backend> (torch_sdpa_efficient, torch_sdpa_flash, ...); a backend
that cannot run a shape gets status "unsupported: <why>".
--merge-into adds the rows to an `attn bench` JSON file; a row it already holds for the same
kernel, shape and dtype is replaced (so a rerun does not duplicate it), rows of other dtypes
and of other kernels are kept.
--errors DIR (fp32): also measures each backend's error on the inputs that
`bench_07 --dtype f32 --inputs DIR` wrote (DIR/errors_inputs.json and its .npy files): the
relative L2 error and the largest absolute error of O against a float64 attention computed
here, on exactly the Q, K, V that bench_07's error table used (module 07, README section 10).
The rows go to an "errors" list beside "results" (merged by kernel and inputs). Needs numpy.
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

# Our names for the element types (as in `attn bench`), with the spellings accepted for them.
DTYPES = {"f32": ("f32", "fp32", "float32"), "f16": ("f16", "fp16", "half", "float16"),
          "bf16": ("bf16", "bfloat16")}
TORCH_DTYPE = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}
BACKENDS = ("efficient", "flash", "math", "cudnn")
# The torch.nn.attention.SDPBackend member of each backend.
SDP_BACKEND = {"efficient": "EFFICIENT_ATTENTION", "flash": "FLASH_ATTENTION", "math": "MATH",
               "cudnn": "CUDNN_ATTENTION"}
# The fields that say which measurement a row is: a merged row replaces an old one that
# agrees on all of them.
ROW_KEY = ("kernel", "batch", "heads", "kv_heads", "seq_q", "seq_k", "head_dim", "causal",
           "dtype")


def parse_dtype(text):
    """'bf16', 'bfloat16', ... -> 'bf16'; raises ValueError for anything else."""
    for name, spellings in DTYPES.items():
        if text.lower() in spellings:
            return name
    raise ValueError(f"unknown dtype {text!r} (f32, f16 or bf16)")


def dtype_arg(text):
    """--dtype's type: parse_dtype with argparse's error (a usage line, exit 2)."""
    try:
        return parse_dtype(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def row_dtype(row):
    """A row's dtype in our names: rows written before dtypes existed are f32."""
    text = row.get("dtype") or "f32"
    try:
        return parse_dtype(text)
    except ValueError:
        return text


def row_key(row):
    """What identifies a measurement: kernel, shape and dtype (see ROW_KEY)."""
    return tuple(row_dtype(row) if k == "dtype" else row.get(k) for k in ROW_KEY)


def merge_rows(old_rows, new_rows):
    """old_rows with each row that new_rows measures again replaced in place; the rest of
    new_rows appended. Rows match on kernel, shape and dtype: an f32 and a bf16 row of the same
    kernel and shape are different measurements and both stay."""
    fresh = {row_key(r): r for r in new_rows}
    merged, used = [], set()
    for row in old_rows:
        key = row_key(row)
        if key in fresh:
            merged.append(fresh[key])
            used.add(key)
        else:
            merged.append(row)
    merged += [r for r in new_rows if row_key(r) not in used]
    return merged


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


def bench_shape(torch, backend, shape, dtype_name, warmup, iters):
    """One result row for one shape and backend (status says why if it could not run)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F
    batch, heads, seq, dim, causal = shape
    dtype = getattr(torch, TORCH_DTYPE[dtype_name])
    row = {"kernel": f"torch_sdpa_{backend}", "module": None, "impl": "torch",
           "batch": batch, "heads": heads, "kv_heads": heads, "seq_q": seq, "seq_k": seq,
           "head_dim": dim,
           "causal": causal, "status": "ok", "check": "-", "dtype": dtype_name}
    pairs = visible_pairs(seq, seq, causal)
    elem = torch.tensor([], dtype=dtype).element_size()
    row["flops"] = 4.0 * batch * heads * pairs * dim
    row["bytes_fused"] = float(elem * batch * heads * dim * 4 * seq)
    # The unfused figure counts S and P as fp32 (4 bytes) whatever the dtype, as `attn bench`
    # does (common/problem.h): the same yardstick for every row.
    row["bytes_unfused"] = row["bytes_fused"] + 4.0 * 4 * batch * heads * seq * seq
    which = getattr(SDPBackend, SDP_BACKEND[backend], None)
    if which is None:
        row.update(status=f"unsupported: this PyTorch ({torch.__version__}) has no "
                          f"SDPBackend.{SDP_BACKEND[backend]}",
                   median_ms=0.0, tflops=0.0, gbs=0.0, device_bytes=0.0)
        return row
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


def error_rows(torch, backend, directory):
    """One row per input set of DIR/errors_inputs.json: the backend's relative L2 error and
    largest absolute error against float64 attention on the same Q, K, V."""
    import numpy as np
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F
    with open(f"{directory}/errors_inputs.json") as f:
        manifest = json.load(f)
    which = getattr(SDPBackend, SDP_BACKEND[backend], None)
    rows = []
    for s in manifest["sets"]:
        q, k, v = (torch.from_numpy(np.load(f"{directory}/{s['name']}_{t}.npy")).cuda()
                   for t in "qkv")
        row = {"kernel": f"torch_sdpa_{backend}", "inputs": s["name"], "batch": s["batch"],
               "heads": s["heads"], "seq": s["seq"], "head_dim": s["head_dim"],
               "causal": s["causal"], "range": s["range"], "dtype": "f32", "status": "ok"}
        # float64 reference, written out (SDPA's causal mask is top-left aligned, the course's
        # bottom-right; with seq_q == seq_k, as here, the two agree).
        q64, k64, v64 = q.double(), k.double(), v.double()
        scores = q64 @ k64.transpose(-1, -2) / (s["head_dim"] ** 0.5)
        if s["causal"]:
            n = s["seq"]
            mask = torch.ones(n, n, dtype=torch.bool, device="cuda").tril()
            scores = scores.masked_fill(~mask, float("-inf"))
        want = torch.softmax(scores, dim=-1) @ v64
        try:
            if which is None:
                raise RuntimeError(f"this PyTorch has no SDPBackend.{SDP_BACKEND[backend]}")
            with sdpa_kernel([which]):
                got = F.scaled_dot_product_attention(q, k, v, is_causal=s["causal"]).double()
            row["rel_l2"] = float(torch.linalg.norm(got - want) / torch.linalg.norm(want))
            row["max_abs"] = float((got - want).abs().max())
        except RuntimeError as err:
            row.update(status=f"unsupported: {str(err).splitlines()[0][:120]}", rel_l2=None,
                       max_abs=None)
        rows.append(row)
        print(f"errors {row['kernel']:<22} {s['name']:<20} rel L2 {row.get('rel_l2')}  "
              f"max abs {row.get('max_abs')}  {row['status']}")
    return rows


def merge_errors(old_rows, new_rows):
    """old_rows with the rows new_rows measures again (same kernel and inputs) replaced."""
    fresh = {(r["kernel"], r["inputs"]): r for r in new_rows}
    kept = [r for r in old_rows if (r.get("kernel"), r.get("inputs")) not in fresh]
    return kept + new_rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=["ladder", "quick"], default="ladder")
    parser.add_argument("--dtype", default="f32", type=dtype_arg,
                        help="f32 (default), f16 or bf16: the element type of Q, K, V, O")
    parser.add_argument("--backend", "--backends", dest="backends",
                        help="efficient, flash, math or cudnn, or a comma list of them "
                             "(default: efficient for f32, flash for f16 and bf16)")
    parser.add_argument("--seqs", help="only these N of the preset (comma list, e.g. 512,1024)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--out", help="write a new JSON file")
    parser.add_argument("--merge-into", help="add the rows to an existing bench JSON (replacing "
                                             "rows of the same kernel, shape and dtype)")
    parser.add_argument("--errors", metavar="DIR",
                        help="fp32: also measure the error on the inputs bench_07 --dtype f32 "
                             "--inputs DIR wrote")
    args = parser.parse_args()
    if args.errors and args.dtype != "f32":
        parser.error("--errors measures fp32 SDPA (give --dtype f32, the default)")
    if not args.out and not args.merge_into:
        parser.error("give --out or --merge-into")
    backends = (args.backends or ("efficient" if args.dtype == "f32" else "flash")).split(",")
    unknown = [b for b in backends if b not in BACKENDS]
    if unknown:
        parser.error(f"unknown backend {', '.join(unknown)} (choose from {', '.join(BACKENDS)})")
    try:
        import torch
    except ImportError:
        print("skipped: torch is not installed")
        return 77
    if not torch.cuda.is_available():
        print("skipped: torch sees no CUDA device")
        return 77
    if args.dtype == "f32":
        # Plain fp32 arithmetic: no TF32 tensor cores, as our fp32 kernels.
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    shapes = LADDER if args.preset == "ladder" else QUICK
    if args.seqs:
        keep = {int(n) for n in args.seqs.split(",")}
        shapes = [s for s in shapes if s[2] in keep]
    rows = []
    for backend in backends:
        for shape in shapes:
            row = bench_shape(torch, backend, shape, args.dtype, args.warmup, args.iters)
            rows.append(row)
            b, h, n, d, c = shape
            print(f"{row['kernel']:<22} {args.dtype:<4} B={b} H={h} N={n} D={d}"
                  f"{' causal' if c else '':<7} {row['median_ms']:10.3f} ms "
                  f"{row['tflops']:8.2f} TFLOP/s  {row['status']}")
    errors = []
    if args.errors:
        for backend in backends:
            errors += error_rows(torch, backend, args.errors)
    if args.merge_into:
        with open(args.merge_into) as f:
            doc = json.load(f)
        doc["results"] = merge_rows(doc["results"], rows)
        if errors:
            doc["errors"] = merge_errors(doc.get("errors", []), errors)
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
        if errors:
            doc["errors"] = errors
        path = args.out
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
