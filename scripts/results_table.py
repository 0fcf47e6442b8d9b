#!/usr/bin/env python3
"""Print Markdown tables of TFLOP/s (and the median time in ms) from `attn bench` JSON files,
for docs/results.md and the lessons:

    python scripts/results_table.py docs/results/*.json

One table per (head_dim, causal); rows are kernels in module order (others, like PyTorch,
last), columns are sequence lengths. Only rows with status "ok" are used.

Element types: rows carry "dtype" ("f32", "f16", "bf16"; none means f32, PyTorch rows'
"float32" is f32 too). When the files mix dtypes, each (kernel, dtype) pair is its own table
row, labelled "kernel (bf16)", so an fp32 and a bf16 run of one kernel never share a row.
With one dtype the rows are labelled by kernel alone, as before dtypes existed.
"""
import json
import sys
from collections import defaultdict

# Our dtype names for the spellings found in bench files, and their order in a table.
DTYPE_NAMES = {"f32": "f32", "fp32": "f32", "float32": "f32", "f16": "f16", "fp16": "f16",
               "half": "f16", "float16": "f16", "bf16": "bf16", "bfloat16": "bf16"}
DTYPE_ORDER = ("f32", "f16", "bf16")


def load(paths):
    rows = []
    for path in paths:
        with open(path) as f:
            rows += [r for r in json.load(f)["results"] if r.get("status") == "ok"]
    return rows


def row_dtype(row):
    """The row's dtype as "f32", "f16" or "bf16" (no dtype: f32); an unknown one as written."""
    text = str(row.get("dtype") or "f32")
    return DTYPE_NAMES.get(text.lower(), text)


def dtype_rank(dtype):
    return DTYPE_ORDER.index(dtype) if dtype in DTYPE_ORDER else len(DTYPE_ORDER)


def order(kernel, module, dtype="f32"):
    return (module is None, module if module is not None else 0, kernel, dtype_rank(dtype))


def main(paths):
    rows = load(paths)
    mixed = len({row_dtype(r) for r in rows}) > 1
    groups = defaultdict(dict)
    sort_keys = {}
    for r in rows:
        dtype = row_dtype(r)
        label = f"{r['kernel']} ({dtype})" if mixed else r["kernel"]
        groups[(r["head_dim"], r["causal"])][(label, r["seq_q"])] = r
        sort_keys[label] = order(r["kernel"], r.get("module"), dtype)
    for (dim, causal), cells in sorted(groups.items()):
        seqs = sorted({s for _, s in cells})
        labels = sorted({k for k, _ in cells}, key=lambda k: sort_keys[k])
        heads = {r["heads"] for r in cells.values()}
        print(f"\n**head_dim {dim}, {'causal' if causal else 'non-causal'}** "
              f"(heads {', '.join(map(str, sorted(heads)))}; TFLOP/s, median time in ms)\n")
        print("| kernel | " + " | ".join(f"N={s}" for s in seqs) + " |")
        print("|---|" + "---:|" * len(seqs))
        for k in labels:
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
