#!/usr/bin/env python3
"""Print Markdown tables of TFLOP/s (and the median time in ms) from `attn bench` JSON files,
for docs/results.md and the lessons:

    python scripts/results_table.py docs/results/*.json

One table per (head_dim, causal); rows are kernels in module order (others, like PyTorch,
last), columns are sequence lengths. Only rows with status "ok" are used.

Element types: rows carry "dtype" ("f32", "f16", "bf16"; none means f32, PyTorch rows'
"float32" is f32 too). When the files mix dtypes, each (kernel, dtype) pair is its own table
row, labelled "kernel (bf16)", so an fp32 and a bf16 run of one kernel never share a row.
With one dtype the rows are labelled by kernel alone, as before dtypes existed. A row of
module 12 run with modifiers ("modifiers": "window=1024") is its own table row too, labelled
"kernel [window=1024]".

Module 10's files are recognised by their schema and get tables of their own:
bench_10's JSON ("attn-decode-bench/1") and scripts/compare_torch_decode.py's
("attn-decode-torch/1"), given together, print decode GB/s against the cache length at batch
32 and against the batch, with PyTorch's backends beside ours, and the packed-prefill rows:

    python scripts/results_table.py docs/results/bench10_h100.json docs/results/decode10_torch_h100.json

Each decode shape is taken from the first `decode` row that has it.
"""
import json
import sys
from collections import defaultdict

# Our dtype names for the spellings found in bench files, and their order in a table.
DTYPE_NAMES = {"f32": "f32", "fp32": "f32", "float32": "f32", "f16": "f16", "fp16": "f16",
               "half": "f16", "float16": "f16", "bf16": "bf16", "bfloat16": "bf16"}
DTYPE_ORDER = ("f32", "f16", "bf16")


DECODE_SCHEMAS = ("attn-decode-bench/1", "attn-decode-torch/1")


def load_docs(paths):
    """(dense result rows with status "ok", module 10's documents by schema)."""
    rows, decode = [], {schema: [] for schema in DECODE_SCHEMAS}
    for path in paths:
        with open(path) as f:
            doc = json.load(f)
        if doc.get("schema") in decode:
            decode[doc["schema"]].append(doc)
        else:
            rows += [r for r in doc["results"] if r.get("status") == "ok"]
    return rows, decode


def load(paths):
    return load_docs(paths)[0]


def decode_tables(benches, torches):
    """Module 10: decode GB/s of bench_10's `decode` rows beside PyTorch's rows of the same
    shapes (one column per backend and cache layout), then the packed-prefill rows."""
    ours, hbm = {}, None
    for doc in benches:
        hbm = doc.get("device", {}).get("measured_hbm_read_gbs", hbm)
        for r in doc.get("decode", []):
            if r["kernel"] == "decode":
                ours.setdefault((r["batch"], r["seq_k"]), r)
    theirs, columns = {}, []
    for doc in torches:
        for r in doc.get("rows", []):
            if r.get("status") != "ok":
                continue
            name = r["kernel"].replace("torch_sdpa_", "")
            label = f"{name} {r['layout']}" if r.get("layout") else name
            if label not in columns:
                columns.append(label)
            theirs.setdefault((label, r["batch"], r["seq_k"]), r)

    def gbs(label, batch, seq):
        r = theirs.get((label, batch, seq))
        return f"{r['gbs']:.0f}" if r else "-"

    def table(title, keys, first):
        print(f"\n**{title}** (GB/s; ours also median ms and the fraction of the measured HBM "
              "read)\n")
        print(f"| {first} | ours, ms | ours, GB/s | of HBM read | " +
              " | ".join(f"{c}, GB/s" for c in columns) + " |")
        print("|---:|---:|---:|---:|" + "---:|" * len(columns))
        for batch, seq in keys:
            r = ours[(batch, seq)]
            share = r.get("fraction_of_hbm_read", r["gbs"] / hbm if hbm else None)
            share = f"{100 * share:.0f}%" if share is not None else "-"
            print(f"| {batch if first == 'batch' else seq} | {r['median_ms']:.4f} | "
                  f"{r['gbs']:.0f} | {share} | " +
                  " | ".join(gbs(c, batch, seq) for c in columns) + " |")

    if ours:
        if hbm:
            print(f"\nMeasured HBM read: {hbm:.0f} GB/s.")
        table("batch 32, against the cache length", sorted(k for k in ours if k[0] == 32),
              "keys")
        for seq in sorted({s for b, s in ours if b != 32}):
            table(f"{seq} keys, against the batch", sorted(k for k in ours if k[1] == seq),
                  "batch")
    prefill = [r for doc in benches for r in doc.get("prefill", [])]
    if prefill:
        print("\n**packed prefill** (TFLOP/s, median ms)\n")
        print("| kernel | sequences | heads x d | causal | ms | TFLOP/s |")
        print("|---|---:|---|---|---:|---:|")
        for r in prefill:
            print(f"| {r['kernel']} | {r['sequences']} | {r['heads']} x {r['head_dim']} | "
                  f"{'yes' if r['causal'] else 'no'} | {r['median_ms']:.4f} | "
                  f"{r['tflops']:.1f} |")


def row_dtype(row):
    """The row's dtype as "f32", "f16" or "bf16" (no dtype: f32); an unknown one as written."""
    text = str(row.get("dtype") or "f32")
    return DTYPE_NAMES.get(text.lower(), text)


def dtype_rank(dtype):
    return DTYPE_ORDER.index(dtype) if dtype in DTYPE_ORDER else len(DTYPE_ORDER)


def order(kernel, module, dtype="f32"):
    return (module is None, module if module is not None else 0, kernel, dtype_rank(dtype))


def main(paths):
    rows, decode = load_docs(paths)
    if any(decode.values()):
        decode_tables(decode["attn-decode-bench/1"], decode["attn-decode-torch/1"])
    mixed = len({row_dtype(r) for r in rows}) > 1
    groups = defaultdict(dict)
    sort_keys = {}
    for r in rows:
        dtype = row_dtype(r)
        label = f"{r['kernel']} ({dtype})" if mixed else r["kernel"]
        modifiers = r.get("modifiers") or "none"
        if modifiers != "none":
            label += f" [{modifiers}]"
        groups[(r["head_dim"], r["causal"])][(label, r["seq_q"])] = r
        sort_keys[label] = order(r["kernel"], r.get("module"), dtype)
    for (dim, causal), cells in sorted(groups.items()):
        seqs = sorted({s for _, s in cells})
        # Module order, then the label itself: a kernel with modifiers after the same kernel
        # without (a set's order changes from run to run with Python's string hashing).
        labels = sorted({k for k, _ in cells}, key=lambda k: (sort_keys[k], k))
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
