#!/usr/bin/env python3
"""The measured tables of module 11 (the backward pass) beside PyTorch's SDPA, from bench_11's
JSON and scripts/compare_torch_backward.py's JSON.

  python3 scripts/results_11.py                 print the tables (markdown)
  python3 scripts/results_11.py --update        rewrite the backward block in
                                                modules/11_backward/README.md and both blocks
                                                in docs/results.md
  --bench FILE   bench_11's output (default docs/results/bench11_h200.json)
  --torch FILE   compare_torch_backward.py's output (default docs/results/torch11_h200.json)

Two blocks, each one table per head dim (rows: causal or not, then N), each between its
marker comments:

  <!-- results_11:backward --> ... <!-- /results_11:backward -->   the backward alone
  <!-- results_11:fwd_bwd --> ... <!-- /results_11:fwd_bwd -->     forward + backward

Ours are bench_11's "wgmma" rung (Hopper; "wgmma_cp_async", the same products without the
producer warpgroup, where the file has it) and "mma_sync" rung (every GPU from sm_80); the ratios
use the record bench_11 marks "picked", the kernel the module's entry point runs for the shape.
PyTorch's are the FLASH_ATTENTION and CUDNN_ATTENTION
backends (torch_flash, torch_cudnn). The times and TFLOP/s printed are values of the two files
to the printed precision, so the documentation check (tests/test_docs.py) finds them; the
ratios (our TFLOP/s over theirs) are arithmetic on them, printed as plain numbers under
headers that name no unit, so the check leaves them alone. Standard library only.
"""
import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(ROOT, "docs", "results", "bench11_h200.json")
TORCH = os.path.join(ROOT, "docs", "results", "torch11_h200.json")
# file -> the blocks it holds (the lesson shows the backward alone and links to docs/results.md
# for forward + backward)
DOCS = {os.path.join(ROOT, "modules", "11_backward", "README.md"): ("backward",),
        os.path.join(ROOT, "docs", "results.md"): ("backward", "fwd_bwd")}
# (rung, label), the main one first; rungs a file lacks are left out
OURS = [("wgmma", "wgmma"), ("wgmma_cp_async", "wgmma, cp.async"), ("mma_sync", "mma.sync")]
THEIRS = [("torch_flash", "FLASH"), ("torch_cudnn", "cuDNN")]
# block name -> (field prefix of the records, what the block measures, FLOPs per forward FLOP)
BLOCKS = {
    "backward": ("bwd", "the backward alone (dQ, dK, dV from the saved log-sum-exp)", "2.5"),
    "fwd_bwd": ("fwd_bwd", "forward (with the log-sum-exp) + backward", "3.5"),
}


def markers(block):
    return f"<!-- results_11:{block} -->", f"<!-- /results_11:{block} -->"


def device_name(doc):
    dev = doc.get("device", "?")
    return dev.get("name", "?") if isinstance(dev, dict) else str(dev)


def cudnn_text(version):
    """torch.backends.cudnn.version()'s integer as a version: 91002 -> 9.10.2 (cuDNN 9 and
    newer count major * 10000 + minor * 100 + patch; older ones are left as they are)."""
    if isinstance(version, int) and version >= 90000:
        return f"{version // 10000}.{version % 10000 // 100}.{version % 100}"
    return str(version)


def find(records, rung, d, n, causal):
    hit = [r for r in records if r.get("rung") == rung and r.get("head_dim") == d and
           r.get("seq") == n and bool(r.get("causal")) == causal]
    return hit[0] if hit else None


def value(rec, key):
    return None if rec is None else rec.get(key)


def num(x, spec):
    return "-" if x is None else format(x, spec)


def ratio(a, b):
    return "-" if a is None or not b else f"{a / b:.2f}"


def picked(records, d, n, causal):
    """The record of the kernel the module's own entry point runs for this shape (bench_11's
    "picked" field: entry_points.cuh, fastest_path), or None."""
    hit = [r for r in records if r.get("picked") and r.get("head_dim") == d and
           r.get("seq") == n and bool(r.get("causal")) == causal]
    return hit[0] if hit else None


def tables(bench, torch_doc, block):
    prefix, what, times = BLOCKS[block]
    ours = [(rung, label) for rung, label in OURS
            if any(r.get("rung") == rung for r in bench["records"])]
    if not ours:
        return "bench_11's file has none of the rungs " + ", ".join(r for r, _ in OURS)
    labels = dict(ours)
    ours_recs = [r for r in bench["records"] if r.get("rung") in labels]
    theirs_recs = torch_doc["records"]
    out = [f"{device_name(bench)}, bf16, batch x N = 16384 tokens, heads x d = 2048, "
           f"{what}. Ours: bench_11's " + " and ".join(f"`{r}`" for r, _ in ours) +
           f" rungs, every rung checked against the double reference first (all passed: "
           f"{'yes' if bench.get('checks_passed') else 'NO'}); `module` is the kernel module "
           "11's entry point runs for the shape (entry_points.cuh, fastest_path). "
           f"PyTorch {torch_doc.get('torch', '?')} (cuDNN {cudnn_text(torch_doc.get('cudnn'))}): "
           "SDPA's FLASH_ATTENTION and CUDNN_ATTENTION backends on the same shapes, [B, H, N, d]. "
           f"TFLOP/s count {times} times the forward's 4 B H d x (visible pairs); module / X is "
           "the module's TFLOP/s over X's (above 1: ours is faster)."]
    notes = []
    for d in sorted({r["head_dim"] for r in ours_recs}):
        heads = sorted({r["heads"] for r in ours_recs if r["head_dim"] == d})
        head_text = f"{heads[0]} heads" if len(heads) == 1 else "heads " + ", ".join(
            map(str, heads))
        out += ["", f"d = {d} ({head_text}):", ""]
        cols = ["N", "batch", "causal", "module", "module ms"]
        cols += [f"{label} TFLOP/s" for _, label in ours]
        cols += [f"{label} TFLOP/s" for _, label in THEIRS]
        cols += [f"module / {label}" for _, label in THEIRS]
        out.append("| " + " | ".join(cols) + " |")
        out.append("|" + "|".join(["---:"] * 2 + ["---"] * 2 + ["---:"] * (len(cols) - 4)) + "|")
        seqs = sorted({r["seq"] for r in ours_recs if r["head_dim"] == d})
        for causal in (False, True):
            for n in seqs:
                main = picked(ours_recs, d, n, causal)
                if main is None:
                    continue
                main_tf = value(main, f"{prefix}_tflops")
                our_tfs = [value(find(ours_recs, rung, d, n, causal), f"{prefix}_tflops")
                           for rung, _ in ours]
                theirs = []
                for rung, label in THEIRS:
                    rec = find(theirs_recs, rung, d, n, causal)
                    tf = value(rec, f"{prefix}_tflops")
                    theirs.append(tf)
                    if tf is None:
                        why = rec.get("status", "no value") if rec else "not measured"
                        notes.append(f"{label}, d = {d}, N = {n}{' causal' if causal else ''}: "
                                     f"{why}")
                cells = [str(n), str(main.get("batch", "-")), "yes" if causal else "no",
                         labels.get(main.get("rung"), "?"),
                         num(value(main, f"{prefix}_ms"), ".3f")]
                cells += [num(tf, ".1f") for tf in our_tfs]
                cells += [num(tf, ".1f") for tf in theirs]
                cells += [ratio(main_tf, tf) for tf in theirs]
                out.append("| " + " | ".join(cells) + " |")
    if notes:
        out += ["", "No PyTorch number (`-`):", ""]
        out += [f"- {note[:200]}" for note in notes]
    return "\n".join(out)


def shown(path):
    """path relative to the repository when it lies inside it, else as given."""
    rel = os.path.relpath(os.path.abspath(path), ROOT)
    return path if rel.startswith("..") else rel


def load_all(paths):
    """The JSON documents of paths {path: what writes it}; None, after one line naming every
    missing file, when any is missing."""
    missing = [f"{shown(p)} ({writer} writes it)" for p, writer in paths.items()
               if not os.path.exists(p)]
    if missing:
        print(f"results_11: missing {'; '.join(missing)}")
        return None
    docs = []
    for path in paths:
        with open(path) as f:
            docs.append(json.load(f))
    return docs


def replace_block(text, block, body):
    """text with the lines between block's two markers replaced by body; None when text does
    not hold both markers in order."""
    begin, end = markers(block)
    start = text.find(begin)
    stop = text.find(end, start + len(begin)) if start >= 0 else -1
    if start < 0 or stop < 0:
        return None
    return text[:start + len(begin)] + "\n" + body + "\n" + text[stop:]


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bench", default=BENCH, help="bench_11's JSON")
    ap.add_argument("--torch", default=TORCH, help="compare_torch_backward.py's JSON")
    ap.add_argument("--update", action="store_true",
                    help="rewrite the backward block in the lesson, both in docs/results.md")
    args = ap.parse_args(argv)
    loaded = load_all({args.bench: "bench_11 --out",
                       args.torch: "scripts/compare_torch_backward.py --out"})
    if loaded is None:
        return 1
    bench, torch_doc = loaded
    bodies = {block: tables(bench, torch_doc, block) for block in BLOCKS}
    if not args.update:
        for block, body in bodies.items():
            begin, end = markers(block)
            print(f"{begin}\n{body}\n{end}\n")
        return 0
    failed = False
    for path, blocks in DOCS.items():
        rel = os.path.relpath(path, ROOT)
        if not os.path.exists(path):
            print(f"results_11: {rel} does not exist")
            failed = True
            continue
        with open(path) as f:
            text = f.read()
        done = []
        for block in blocks:
            body = bodies[block]
            new = replace_block(text, block, body)
            if new is None:
                begin, end = markers(block)
                print(f"results_11: {rel} has no {begin} ... {end} block")
                failed = True
                continue
            text = new
            done.append(block)
        if done:
            with open(path, "w") as f:
                f.write(text)
            print(f"results_11: rewrote {', '.join(done)} in {rel} from "
                  f"{shown(args.bench)} and {shown(args.torch)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
