#!/usr/bin/env python3
"""The measured tables of module 09's 3xTF32 rung (fp32 on wgmma) beside module 07's 3xTF32 and
PyTorch's fp32 SDPA, from bench_09_tf32's JSON and scripts/compare_torch.py's.

  python3 scripts/results_09_tf32.py              print the tables (markdown)
  python3 scripts/results_09_tf32.py --update     rewrite them in docs/results.md
  --bench FILE   bench_09_tf32 --json FILE (default docs/results/bench09_tf32_h200.json)
  --torch FILE   compare_torch.py --dtype f32 --errors DIR --out FILE, DIR written by
                 bench_09_tf32 --inputs DIR (default docs/results/torch09_tf32_h200.json)

Two blocks, each between its marker comments:

  <!-- results_09_tf32:speed --> ... <!-- /results_09_tf32:speed -->
      per head dim, one row per (causal, N): TFLOP/s of the wgmma 3xTF32 rung (split pass
      included), its plain-TF32 variant, module 07's 3xTF32 and PyTorch's fp32 SDPA, the split
      pass's time, and the ratios
  <!-- results_09_tf32:errors --> ... <!-- /results_09_tf32:errors -->
      relative L2 error against the double reference, every rung and PyTorch on the same inputs

The helpers (number formats, the PyTorch lookup, the marker replacement) are
results_07_fp32.py's. Standard library only.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import results_07_fp32 as r07  # noqa: E402

ROOT = r07.ROOT
BENCH = os.path.join(ROOT, "docs", "results", "bench09_tf32_h200.json")
TORCH = os.path.join(ROOT, "docs", "results", "torch09_tf32_h200.json")
DOC = os.path.join(ROOT, "docs", "results.md")
X3, TF32, X3_07, SPLIT = "3xtf32_wgmma", "tf32_wgmma", "3xtf32_07", "split_pass"


def markers(block):
    return f"<!-- results_09_tf32:{block} -->", f"<!-- /results_09_tf32:{block} -->"


def row_of(bench, rung, d, n, causal):
    for r in bench.get("rows", []):
        if (r.get("rung") == rung and r.get("head_dim") == d and r.get("seq") == n and
                bool(r.get("causal")) == causal and r.get("status") == "ok"):
            return r
    return None


def speed(bench, torch_doc):
    rows = bench.get("rows", [])
    out = [f"{r07.device_name(bench)}, fp32 tensors, batch x N = 16384 tokens, heads x d = "
           "2048, TFLOP/s counting 4 B H d x (visible pairs). `3xtf32_wgmma`: module 09's "
           "`forward_3xtf32()`, the split pass included; `tf32_wgmma`: the same kernel with only "
           "the big x big products (plain TF32); `3xtf32_07`: module 07's `forward_3xtf32()`; "
           f"PyTorch {torch_doc.get('torch', '?')}: SDPA's memory-efficient backend on fp32 "
           "tensors, timed right after on the same GPU; split: the split pass alone, ms."]
    for d in sorted({r["head_dim"] for r in rows}):
        heads = sorted({r["heads"] for r in rows if r["head_dim"] == d})
        out += ["", f"d = {d} ({', '.join(map(str, heads))} heads):", ""]
        cols = ["N", "batch", "causal", "3xtf32_wgmma TFLOP/s", "tf32_wgmma TFLOP/s",
                "3xtf32_07 TFLOP/s", "PyTorch fp32 TFLOP/s", "split ms",
                "3xtf32_wgmma / PyTorch", "3xtf32_wgmma / 3xtf32_07"]
        out.append("| " + " | ".join(cols) + " |")
        out.append("|---:|---:|---|" + "---:|" * (len(cols) - 3))
        for causal in (False, True):
            for n in sorted({r["seq"] for r in rows if r["head_dim"] == d}):
                got = {k: row_of(bench, k, d, n, causal) for k in (X3, TF32, X3_07, SPLIT)}
                tf = {k: (v or {}).get("tflops") for k, v in got.items()}
                batch = next((r["batch"] for r in rows if r["head_dim"] == d and r["seq"] == n),
                             "-")
                torch_tf = r07.theirs(torch_doc, d, n, causal)
                split_ms = (got[SPLIT] or {}).get("median_ms")
                out.append("| " + " | ".join(
                    [str(n), str(batch), "yes" if causal else "no", r07.num(tf[X3], ".1f"),
                     r07.num(tf[TF32], ".1f"), r07.num(tf[X3_07], ".1f"),
                     r07.num(torch_tf, ".2f"), r07.num(split_ms, ".3f"),
                     r07.ratio(tf[X3], torch_tf), r07.ratio(tf[X3], tf[X3_07])]) + " |")
    return "\n".join(out)


def errors(bench, torch_doc):
    errs = bench.get("errors", [])
    sets = []
    for e in errs:
        if e["inputs"] not in sets:
            sets.append(e["inputs"])
    torch_errs = {(e.get("kernel"), e.get("inputs")): e for e in torch_doc.get("errors", [])}
    out = [f"{r07.device_name(bench)}: relative L2 error of O against the double-precision "
           "reference on the inputs of module 07's error table (bench/fp32_error_inputs.h: 4 "
           "heads of N = 1024; `range1`: Q and K entries in [-1, 1); `range4`: in [-4, 4)). The "
           "course's fp32 tolerance is 1e-4, plain TF32's 5e-3.", ""]
    out.append("| kernel | " + " | ".join(f"`{s}`" for s in sets) + " |")
    out.append("|---|" + "---:|" * len(sets))
    for rung in (X3, TF32, X3_07):
        vals = {e["inputs"]: e for e in errs if e.get("rung") == rung}
        cells = [f"`{rung}`"] + ["-" if vals.get(s) is None or vals[s].get("rel_l2", -1) < 0
                                 else f"{vals[s]['rel_l2']:.1e}" for s in sets]
        out.append("| " + " | ".join(cells) + " |")
    for kernel in sorted({k for k, _ in torch_errs}):
        cells = [f"PyTorch `{kernel}`"]
        for s in sets:
            e = torch_errs.get((kernel, s))
            cells.append("-" if e is None or e.get("rel_l2") is None else f"{e['rel_l2']:.1e}")
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bench", default=BENCH, help="bench_09_tf32's JSON")
    ap.add_argument("--torch", default=TORCH, help="compare_torch.py's JSON (fp32, --errors)")
    ap.add_argument("--update", action="store_true", help="rewrite the blocks in docs/results.md")
    args = ap.parse_args(argv)
    for path, writer in ((args.bench, "bench_09_tf32 --json"),
                         (args.torch, "scripts/compare_torch.py --dtype f32 --errors DIR --out")):
        if not os.path.exists(path):
            print(f"results_09_tf32: missing {r07.shown(path)} ({writer} writes it)")
            return 1
    with open(args.bench) as f:
        bench = json.load(f)
    with open(args.torch) as f:
        torch_doc = json.load(f)
    bodies = {"speed": speed(bench, torch_doc), "errors": errors(bench, torch_doc)}
    if not args.update:
        for block, body in bodies.items():
            begin, end = markers(block)
            print(f"{begin}\n{body}\n{end}\n")
        return 0
    with open(DOC) as f:
        text = f.read()
    for block, body in bodies.items():
        new = r07.replace_block(text, block, body, markers)
        if new is None:
            print(f"results_09_tf32: docs/results.md has no results_09_tf32:{block} block")
            return 1
        text = new
    with open(DOC, "w") as f:
        f.write(text)
    print(f"results_09_tf32: rewrote speed, errors in docs/results.md from "
          f"{r07.shown(args.bench)} and {r07.shown(args.torch)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
