#!/usr/bin/env python3
"""The measured tables of module 12's lesson (modules/12_modifiers/README.md, section 4), from
bench_12's JSON (docs/results/bench12_h200.json by default).

  python3 scripts/results_12.py [FILE]            print the tables (markdown)
  python3 scripts/results_12.py [FILE] --torch T  also ours beside PyTorch (T from
                                                  compare_torch_modifiers.py, the same run;
                                                  without FILE: docs/results/torch12_h200.json)
  python3 scripts/results_12.py [FILE] --update   rewrite them in the lesson, between
                                                  <!-- table: python3 scripts/results_12.py -->
                                                  and <!-- end table -->

Every number printed is a value of the file to the printed precision (the `ratio` of a
record: time over its baseline), so the documentation check (tests/test_docs.py) finds it:

  score modifiers and RoPE   ratio = ms / the same kernel's ms without modifiers on the same
                             problem (same mask): module 07's (engine mma) or module 09's
                             (engine wgmma, Hopper);
  masks                      ratio = ms / (visible fraction + T / N) x that kernel's unmasked
                             ms: against a kernel that skips every masked tile perfectly and
                             pays for one T-key tile column of the diagonal (T = 64 for mma;
                             for wgmma 128 at d = 64; at d = 128 128 up to 1024 keys, 2048
                             with the causal mask, and for windows of up to 1024 keys, else
                             160: m12::hopper_tile_keys).
Records without an engine (files from before module 09's kernel ran the hooks) are mma.
Standard library only.
"""
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT = os.path.join(ROOT, "docs", "results", "bench12_h200.json")
DEFAULT_TORCH = os.path.join(ROOT, "docs", "results", "torch12_h200.json")
LESSON = os.path.join(ROOT, "modules", "12_modifiers", "README.md")
BEGIN = "<!-- table: python3 scripts/results_12.py -->"
END = "<!-- end table -->"

# Rows of the score table: the modifier, then the same with the causal mask.
SCORE_GROUPS = [
    ("no modifier", "no modifier"), ("ALiBi", "alibi"), ("bias [1, 1, N, N]", "bias"),
    ("soft-cap 30", "softcap"), ("T5 relative", "relative"),
    ("RoPE interleaved", "rope interleaved"), ("RoPE half", "rope half"),
    ("RoPE interleaved, K in the tiles", "rope interl. in tiles"),
    ("RoPE half, K in the tiles", "rope half in tiles"),
]


def engine(r):
    return r.get("engine", "mma")


def variants_in_order(records, mask):
    names = []
    for r in sorted(records, key=lambda r: -r["seq"]):  # the largest N has every variant
        if r["mask"] == mask and r["variant"] not in names:
            names.append(r["variant"])
    return names


def cell(records, variant, d, n, key="ratio"):
    hit = [r for r in records if r["variant"] == variant and r["head_dim"] == d and
           r["seq"] == n]
    return hit[0][key] if hit else None


def ratio_of(records, variant, d, n, key="ratio"):
    """The record's ratio, or with key module07_ms its time over module 07's time without
    modifiers on the same problem."""
    if key == "ratio":
        return cell(records, variant, d, n)
    ms, base = cell(records, variant, d, n, "ms"), cell(records, variant, d, n, key)
    return ms / base if ms and base else None


def ratio_text(x):
    return "-" if x is None else f"{x:.2f}x"


ENGINE_TEXT = {
    "mma": ("module 07's kernel (mma.sync, every GPU from sm_80)", "module 07's", "64-key"),
    "wgmma": ("module 09's kernel (wgmma, Hopper)", "module 09's",
              "128-key (d = 64; d = 128 up to N = 1024, windows up to 1024, the bias and T5) "
              "or 160-key (d = 128)"),
}


def tables(data, eng="mma"):
    recs = [r for r in data["records"] if engine(r) == eng]
    if not recs:
        return ""
    title, plain, tile = ENGINE_TEXT[eng]
    dims = sorted({r["head_dim"] for r in recs})
    seqs = sorted({r["seq"] for r in recs})
    cols = [(d, n) for d in dims for n in seqs]
    head = " | ".join(f"d = {d}, N = {n}" for d, n in cols)
    sep = "|".join(["---"] + ["---:"] * len(cols))
    out = []
    out.append(f"**On {title}.** {data['device']}, bf16, batch x N = 16384 tokens, heads x d = "
               f"2048; every variant checked against the double reference first (all passed: "
               f"{'yes' if data.get('checks_passed') else 'NO'}).")
    out.append("")
    present = {r["variant"] for r in recs}
    rope = any(v.startswith("rope") for v in present)

    def score_rows(key):
        for label, base in SCORE_GROUPS:
            if base not in present and base + " causal" not in present:
                continue
            vals = " | ".join(
                f"{ratio_text(ratio_of(recs, base, d, n, key))} / "
                f"{ratio_text(ratio_of(recs, base + ' causal', d, n, key))}" for d, n in cols)
            out.append(f"| {label} | {vals} |")

    out.append(f"Score modifiers{' and RoPE' if rope else ''}, time / {plain} time "
               "without modifiers on the same problem; each cell: without / with the causal "
               "mask:")
    out.append("")
    out.append(f"| modifier | {head} |")
    out.append(f"|{sep}|")
    score_rows("ratio")
    out.append("")
    if eng == "wgmma":
        out.append("The same records, time / module 07's time without modifiers on the same "
                   "problem (module07_ms, timed beside each record):")
        out.append("")
        out.append(f"| modifier | {head} |")
        out.append(f"|{sep}|")
        score_rows("module07_ms")
        out.append("")
    out.append(f"Masks, time / a perfect skip (the visible fraction of {plain} unmasked time "
               f"plus one {tile} tile column); visible: the share of the N x N pairs:")
    out.append("")
    out.append(f"| mask | visible, N = {seqs[-1]} | {head} |")
    out.append("|---|---:|" + "|".join(["---:"] * len(cols)) + "|")
    for name in variants_in_order(recs, True):
        hit = [r for r in recs if r["variant"] == name and r["seq"] == seqs[-1]]
        vis = (f"{100.0 * hit[0]['visible_pairs'] / (hit[0]['batch'] * seqs[-1] ** 2):.1f}%"
               if hit else "-")
        vals = " | ".join(ratio_text(cell(recs, name, d, n)) for d, n in cols)
        out.append(f"| {name} | {vis} | {vals} |")
    return "\n".join(out)


def torch_table(data, torch_data):
    """Ours over PyTorch's time on the same variant and shape, from compare_torch_modifiers.py's
    file (same run as bench_12's): FlexAttention for the score modifiers and masks, SDPA's
    FLASH backend after RoPE applied with torch ops for RoPE. Ours is the kernel forward()
    runs: module 09's where the file has it (wgmma records), else module 07's; for the plain
    problem that is the "no modifier" record. The rows "module 07" and "module 09" set each
    kernel's own unmasked time (its records' plain_full_ms) beside FlexAttention's plain
    kernel."""
    recs = data["records"]
    theirs = {(r["variant"], r["head_dim"], r["seq"]): (r["backend"], r["ms"])
              for r in torch_data["records"]}
    dims = sorted({r["head_dim"] for r in recs})
    seqs = sorted({k[2] for k in theirs})
    cols = [(d, n) for d in dims for n in seqs]
    out = [f"{torch_data['device']}, PyTorch {torch_data.get('torch', '?')}; each cell: our "
           "time / PyTorch's on the same variant and shape in the same run (below 1: ours is "
           "faster; - where PyTorch's kernel did not compile):", ""]
    out.append("| variant | PyTorch | " + " | ".join(f"d = {d}, N = {n}" for d, n in cols) + " |")
    out.append("|---|---|" + "|".join(["---:"] * len(cols)) + "|")

    def plain(eng, d, n):  # the kernel without a mask, timed next to every row
        hit = [r.get("plain_full_ms", r.get("module07_full_ms")) for r in recs
               if engine(r) == eng and r["head_dim"] == d and r["seq"] == n]
        return min(hit) if hit else None

    def ours(variant, d, n):
        if variant == "plain (module 07)":
            return plain("mma", d, n)
        if variant == "plain (module 09)":
            return plain("wgmma", d, n)
        if variant == "plain (flex)":
            variant = "no modifier"
        hopper = [r for r in recs if engine(r) == "wgmma"]
        return cell(hopper, variant, d, n, "ms") or cell(
            [r for r in recs if engine(r) == "mma"], variant, d, n, "ms")

    names = []
    for (v, _, _) in theirs:
        if v not in names and not v.startswith("plain (sdpa"):
            names.append(v)
    extra = ["plain (module 07)"]
    if any(engine(r) == "wgmma" for r in recs):
        extra.append("plain (module 09)")
    for e in reversed(extra):
        names.insert(1, e)
    for (v, d, n), value in list(theirs.items()):
        if v == "plain (flex)":
            for e in extra:
                theirs[(e, d, n)] = value
    for v in names:
        backend = next(b for (vv, _, _), (b, _) in theirs.items() if vv == v)
        cells = []
        for d, n in cols:
            a, b = ours(v, d, n), theirs.get((v, d, n), (None, None))[1]
            cells.append(f"{a / b:.2f}" if a and b else "-")
        label = "plain (forward())" if v == "plain (flex)" else v
        out.append(f"| {label} | {backend} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def main(argv):
    update = "--update" in argv
    torch_path = None
    if "--torch" in argv:
        i = argv.index("--torch")
        torch_path = argv[i + 1]
        argv = argv[:i] + argv[i + 2:]
    args = [a for a in argv if a != "--update"]
    path = args[0] if args else DEFAULT
    if torch_path is None and not args and os.path.exists(DEFAULT_TORCH):
        torch_path = DEFAULT_TORCH  # the lesson's tables: both files of the same call
    if not os.path.exists(path):
        print(f"results_12: {path} does not exist (bench_12 --out writes it)")
        return 1
    with open(path) as f:
        data = json.load(f)
    body = "\n\n".join(t for t in (tables(data, "mma"), tables(data, "wgmma")) if t)
    if torch_path:
        with open(torch_path) as f:
            body += "\n\n" + torch_table(data, json.load(f))
    block = f"{BEGIN}\n{body}\n{END}"
    if not update:
        print(block)
        return 0
    with open(LESSON) as f:
        text = f.read()
    if BEGIN not in text or END not in text:
        print(f"results_12: {LESSON} has no {BEGIN} ... {END} block")
        return 1
    start = text.index(BEGIN)
    stop = text.index(END, start) + len(END)
    with open(LESSON, "w") as f:
        f.write(text[:start] + block + text[stop:])
    print(f"results_12: rewrote the tables of {os.path.relpath(LESSON, ROOT)} from "
          f"{os.path.relpath(path, ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
