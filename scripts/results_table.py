#!/usr/bin/env python3
"""Print Markdown tables of TFLOP/s (and the speedup of each kernel over the one before it)
from `attn bench` JSON files, for docs/results.md and the lessons:

    python scripts/results_table.py docs/results/*.json

One table per (head_dim, causal); rows are kernels in module order (others, like PyTorch,
last), columns are sequence lengths. Only rows with status "ok" are used.
"""
import json
import sys
from collections import defaultdict


def load(paths):
    rows = []
    for path in paths:
        with open(path) as f:
            rows += [r for r in json.load(f)["results"] if r.get("status") == "ok"]
    return rows


def order(kernel, module):
    return (module is None, module if module is not None else 0, kernel)


def main(paths):
    rows = load(paths)
    groups = defaultdict(dict)
    modules = {}
    for r in rows:
        groups[(r["head_dim"], r["causal"])][(r["kernel"], r["seq_q"])] = r
        modules[r["kernel"]] = r.get("module")
    for (dim, causal), cells in sorted(groups.items()):
        seqs = sorted({s for _, s in cells})
        kernels = sorted({k for k, _ in cells}, key=lambda k: order(k, modules[k]))
        heads = {r["heads"] for r in cells.values()}
        print(f"\n**head_dim {dim}, {'causal' if causal else 'non-causal'}** "
              f"(heads {', '.join(map(str, sorted(heads)))}; TFLOP/s, median time in ms)\n")
        print("| kernel | " + " | ".join(f"N={s}" for s in seqs) + " |")
        print("|---|" + "---:|" * len(seqs))
        for k in kernels:
            vals = []
            for s in seqs:
                r = cells.get((k, s))
                ms = r["median_ms"] if r else 0.0
                ms_text = f"{ms:,.0f}" if ms >= 100 else f"{ms:.3g}"
                vals.append(f"{r['tflops']:.2f} ({ms_text} ms)" if r else "-")
            print(f"| {k} | " + " | ".join(vals) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
