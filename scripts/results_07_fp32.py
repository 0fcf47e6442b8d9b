#!/usr/bin/env python3
"""The measured tables of module 07's fp32 rungs (TF32 and 3xTF32) beside module 06's FFMA
kernel and PyTorch's fp32 SDPA, from bench_07 --dtype f32's JSON and scripts/compare_torch.py's.

  python3 scripts/results_07_fp32.py                 print the tables (markdown)
  python3 scripts/results_07_fp32.py --update        rewrite them in
                                                     modules/07_tensor_cores/README.md and
                                                     docs/results.md
  --bench FILE   bench_07 --dtype f32 --json FILE (default docs/results/bench07_fp32_h100.json)
  --torch FILE   compare_torch.py --dtype f32 --errors DIR --out FILE
                 (default docs/results/torch07_fp32_h100.json)

Three blocks, each between its marker comments:

  <!-- results_07_fp32:speed --> ... <!-- /results_07_fp32:speed -->
      per head dim, one row per (causal, N): TFLOP/s of FFMA (module 06), TF32, 3xTF32
      (forward_3xtf32) and PyTorch's fp32 SDPA (memory-efficient backend), and the ratios
  <!-- results_07_fp32:ladder --> ... <!-- /results_07_fp32:ladder -->
      every rung of bench_07 --dtype f32 at N = 8192 (or the longest N measured below it)
  <!-- results_07_fp32:errors --> ... <!-- /results_07_fp32:errors -->
      relative L2 error against the double reference, every rung and PyTorch on the same inputs

The TFLOP/s printed are values of the two files to the printed precision, so the documentation
check (tests/test_docs.py) finds them; the ratios are arithmetic on them, under headers that
name no unit; the errors have no unit. Standard library only.
"""
import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(ROOT, "docs", "results", "bench07_fp32_h100.json")
TORCH = os.path.join(ROOT, "docs", "results", "torch07_fp32_h100.json")
DOCS = [os.path.join(ROOT, "modules", "07_tensor_cores", "README.md"),
        os.path.join(ROOT, "docs", "results.md")]
FFMA, TF32, X3 = "ffma_06", "tf32", "3xtf32"
TORCH_KERNEL = "torch_sdpa_efficient"
# bench_07's rungs in the order the ladder table lists them, with what each one is.
RUNGS = [
    (FFMA, "module 06: fp32 FFMA on the CUDA cores"),
    (TF32, "plain TF32: operands rounded to TF32, one mma per product"),
    ("3xtf32_smem_split", "3xTF32, K and V split once per tile into two shared planes"),
    ("3xtf32_fa2", "3xTF32, FlashAttention-2's copy order, split in shared memory (D = 128: "
                   "2 blocks of 4 warps)"),
    ("3xtf32_q_regs", "3xTF32, one row tile per warp, Q split once into registers, K and V "
                      "split in shared memory"),
    ("3xtf32_q_regs_at_load", "the same, K and V split at each fragment load"),
    (X3, "3xTF32, `forward_3xtf32()`: K and V split at each fragment load"),
]
BLOCKS = ("speed", "ladder", "errors")
LADDER_N = 8192


def markers(block):
    return f"<!-- results_07_fp32:{block} -->", f"<!-- /results_07_fp32:{block} -->"


def device_name(doc):
    dev = doc.get("device", "?")
    return dev.get("name", "?") if isinstance(dev, dict) else str(dev)


def num(x, spec):
    return "-" if x is None else format(x, spec)


def ratio(a, b):
    return "-" if a is None or not b else f"{a / b:.2f}"


def ours(bench, rung, d, n, causal):
    for r in bench.get("rows", []):
        if (r.get("rung") == rung and r.get("head_dim") == d and r.get("seq") == n and
                bool(r.get("causal")) == causal and r.get("status") == "ok"):
            return r.get("tflops")
    return None


def theirs(torch_doc, d, n, causal):
    for r in torch_doc.get("results", []):
        if (r.get("kernel") == TORCH_KERNEL and r.get("head_dim") == d and
                r.get("seq_q") == n and bool(r.get("causal")) == causal and
                (r.get("dtype") or "f32") == "f32" and r.get("status") == "ok"):
            return r.get("tflops")
    return None


def speed(bench, torch_doc):
    rows = bench.get("rows", [])
    out = [f"{device_name(bench)}, fp32 tensors, batch x N = 16384 tokens, heads x d = 2048, "
           "TFLOP/s counting 4 B H d x (visible pairs) (causal: the pairs the mask leaves). "
           "FFMA: module 06 (`ffma_06`); TF32 and 3xTF32: `forward_tf32()` and "
           "`forward_3xtf32()` (`tf32`, `3xtf32`); PyTorch "
           f"{torch_doc.get('torch', '?')}: SDPA's memory-efficient backend on fp32 tensors. "
           "3xTF32 / X is 3xTF32's TFLOP/s over X's."]
    for d in sorted({r["head_dim"] for r in rows}):
        heads = sorted({r["heads"] for r in rows if r["head_dim"] == d})
        out += ["", f"d = {d} ({', '.join(map(str, heads))} heads):", ""]
        cols = ["N", "batch", "causal", "FFMA TFLOP/s", "TF32 TFLOP/s", "3xTF32 TFLOP/s",
                "PyTorch fp32 TFLOP/s", "3xTF32 / PyTorch", "3xTF32 / FFMA"]
        out.append("| " + " | ".join(cols) + " |")
        out.append("|---:|---:|---|" + "---:|" * (len(cols) - 3))
        for causal in (False, True):
            for n in sorted({r["seq"] for r in rows if r["head_dim"] == d}):
                batch = next((r["batch"] for r in rows if r["head_dim"] == d and r["seq"] == n),
                             "-")
                ffma, tf32, x3 = (ours(bench, rung, d, n, causal) for rung in (FFMA, TF32, X3))
                torch_tf = theirs(torch_doc, d, n, causal)
                out.append("| " + " | ".join(
                    [str(n), str(batch), "yes" if causal else "no", num(ffma, ".1f"),
                     num(tf32, ".1f"), num(x3, ".1f"), num(torch_tf, ".1f"),
                     ratio(x3, torch_tf), ratio(x3, ffma)]) + " |")
    return "\n".join(out)


def ladder(bench):
    rows = bench.get("rows", [])
    seqs = sorted({r["seq"] for r in rows})
    if not seqs:
        return "(no rows)"
    n = max([s for s in seqs if s <= LADDER_N] or seqs)
    shapes = [(d, causal) for causal in (False, True) for d in (64, 128)]
    out = [f"{device_name(bench)}, fp32, N = {n}, TFLOP/s; check: the rung's worst relative L2 "
           "error on bench_07's small check shapes (plain TF32 against its own tolerance, the "
           "others against 1e-4).", ""]
    cols = ["rung", "what it changes"] + [
        f"d = {d}{' causal' if causal else ''} TFLOP/s" for d, causal in shapes] + ["check"]
    out.append("| " + " | ".join(cols) + " |")
    out.append("|---|---|" + "---:|" * (len(cols) - 2))
    for rung, what in RUNGS:
        recs = [r for r in rows if r.get("rung") == rung]
        if not recs:
            continue
        check = recs[0].get("check_rel_l2")
        cells = [f"`{rung}`", what] + [num(ours(bench, rung, d, n, causal), ".1f")
                                       for d, causal in shapes]
        cells.append("failed" if check is None or check < 0 else f"{check:.1e}")
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def errors(bench, torch_doc):
    errs = bench.get("errors", [])
    sets = []
    for e in errs:
        if e["inputs"] not in sets:
            sets.append(e["inputs"])
    torch_errs = {(e.get("kernel"), e.get("inputs")): e for e in torch_doc.get("errors", [])}
    first = errs[0] if errs else {}
    out = [f"{device_name(bench)}: relative L2 error of O against the double-precision reference "
           f"on the same fp32 inputs ({first.get('heads', '?')} heads of N = "
           f"{first.get('seq', '?')}; `d64_range1`: d = 64, Q and K entries in [-1, 1); "
           "`range4`: in [-4, 4), logits of a few units; V in [-1, 1) always). The course's fp32 "
           "tolerance is 1e-4, plain TF32's 5e-3.", ""]
    out.append("| kernel | " + " | ".join(f"`{s}`" for s in sets) + " |")
    out.append("|---|" + "---:|" * len(sets))
    for rung, _ in RUNGS:
        vals = {e["inputs"]: e for e in errs if e.get("rung") == rung}
        if not vals:
            continue
        cells = [f"`{rung}`"]
        for s in sets:
            e = vals.get(s)
            cells.append("-" if e is None or e.get("rel_l2") is None or e["rel_l2"] < 0
                         else f"{e['rel_l2']:.1e}")
        out.append("| " + " | ".join(cells) + " |")
    for kernel in sorted({k for k, _ in torch_errs}):
        cells = [f"PyTorch `{kernel}`"]
        for s in sets:
            e = torch_errs.get((kernel, s))
            cells.append("-" if e is None or e.get("rel_l2") is None else f"{e['rel_l2']:.1e}")
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def shown(path):
    rel = os.path.relpath(os.path.abspath(path), ROOT)
    return path if rel.startswith("..") else rel


def replace_block(text, block, body, markers_of=markers):
    """text with the lines between block's two markers (markers_of(block): this script's, or
    another results script's) replaced by body; None when text does not hold both in order."""
    begin, end = markers_of(block)
    start = text.find(begin)
    stop = text.find(end, start + len(begin)) if start >= 0 else -1
    if start < 0 or stop < 0:
        return None
    return text[:start + len(begin)] + "\n" + body + "\n" + text[stop:]


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bench", default=BENCH, help="bench_07 --dtype f32's JSON")
    ap.add_argument("--torch", default=TORCH, help="compare_torch.py's JSON (fp32, --errors)")
    ap.add_argument("--update", action="store_true",
                    help="rewrite the blocks in the lesson and docs/results.md")
    args = ap.parse_args(argv)
    missing = [f"{shown(p)} ({w} writes it)" for p, w in
               ((args.bench, "bench_07 --dtype f32 --json"),
                (args.torch, "scripts/compare_torch.py --dtype f32 --errors DIR --out"))
               if not os.path.exists(p)]
    if missing:
        print(f"results_07_fp32: missing {'; '.join(missing)}")
        return 1
    with open(args.bench) as f:
        bench = json.load(f)
    with open(args.torch) as f:
        torch_doc = json.load(f)
    bodies = {"speed": speed(bench, torch_doc), "ladder": ladder(bench),
              "errors": errors(bench, torch_doc)}
    if not args.update:
        for block in BLOCKS:
            begin, end = markers(block)
            print(f"{begin}\n{bodies[block]}\n{end}\n")
        return 0
    failed = False
    for path in DOCS:
        rel = os.path.relpath(path, ROOT)
        with open(path) as f:
            text = f.read()
        done = []
        for block in BLOCKS:
            new = replace_block(text, block, bodies[block])
            if new is None:
                continue  # docs/results.md need not hold every block
            text, done = new, done + [block]
        if not done:
            print(f"results_07_fp32: {rel} has no results_07_fp32 block")
            failed = True
            continue
        with open(path, "w") as f:
            f.write(text)
        print(f"results_07_fp32: rewrote {', '.join(done)} in {rel} from {shown(args.bench)} "
              f"and {shown(args.torch)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
