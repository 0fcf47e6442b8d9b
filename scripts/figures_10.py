#!/usr/bin/env python3
"""Figures of module 10's lesson (modules/10_decoding/README.md), called by
scripts/make_figures.py through make(out_dir); runnable alone:
python3 scripts/figures_10.py [out_dir].

  10_paged_cache.png    the paged KV cache: three sequences, their block-table rows, the pool
                        of pages (shuffled, two free), and one page opened up: key 35 of
                        sequence 0 -> (page, slot) -> element offset
  10_split_combine.png  split-KV: the grid (split, K/V head x row tile, sequence), the
                        partials (O_s, lse_s) of each split, the combine's weights, and the
                        combine as a programmatic dependent launch on one time axis
  10_decode_gbs.png     measured: decode GB/s against the cache length (batch 32) and against
                        the batch (4096 and 32768 keys), module 10 beside PyTorch's
                        FlashAttention-2 and cuDNN backends, with the measured HBM read
                        (docs/results/bench10_h100.json, decode10_torch_h100.json)
  10_splits.png         measured: decode time against the number of splits for six shapes, the
                        split the cost model of decoding.h chooses, and the model's cost
                        scaled to that point (the decode_splits rows of bench10_h100.json)
"""
import json
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
REPO = os.path.dirname(HERE)

from figures_common import COLORS, RESULTS, arrow, box, new_figure, plt, save  # noqa: E402
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator  # noqa: E402

LIGHT = {"q": "#C9D6EC", "k": "#F5D3BC", "v": "#CBE6D2", "o": "#E3DDF2", "s": "#F6D5D6"}
SEQ_COLORS = ["#4C72B0", "#DD8452", "#55A868"]
SEQ_LIGHT = ["#C9D6EC", "#F5D3BC", "#CBE6D2"]
MONO = "DejaVu Sans Mono"


def load(name):
    with open(os.path.join(RESULTS, name)) as f:
        return json.load(f)


# ---------------------------------------------------------------------------------------------
# 10_paged_cache.png

PAGE = 16
SEQ_LENS = [40, 20, 7]                       # tokens of sequences 0, 1, 2
TABLE = [[5, 1, 6], [3, 0, -1], [7, -1, -1]]  # block_table[b][j]; -1: unused
POOL = 8                                     # pages 2 and 4 are free
KV_HEADS = 8
EXAMPLE = (0, 35, 1)                         # sequence, key, K/V head


def paged_cache(out_dir):
    fig, ax = new_figure(12.8, 8.0)
    ax.text(0.2, 7.75, "A paged KV cache: page_size = 16 tokens, kv_heads = 8, head_dim = 128 "
            "(the K cache; V is laid out the same)", fontsize=11, weight="bold", va="center")

    # Left: the sequences as tokens, cut into pages of 16.
    ax.text(0.2, 7.3, "sequences (logical order of their tokens)", fontsize=9, style="italic",
            va="center")
    unit = 0.085
    for b, n in enumerate(SEQ_LENS):
        y = 6.55 - 0.7 * b
        ax.text(0.2, y + 0.2, f"b = {b}\n{n} keys", fontsize=8, va="center")
        for j in range((n + PAGE - 1) // PAGE):
            used = min(PAGE, n - j * PAGE)
            x = 1.05 + j * (PAGE * unit + 0.08)
            box(ax, x, y, PAGE * unit, 0.4, face="white", edge=SEQ_COLORS[b], lw=0.8)
            box(ax, x, y, used * unit, 0.4, face=SEQ_LIGHT[b], edge=SEQ_COLORS[b], lw=0.8)
            ax.text(x + PAGE * unit / 2, y - 0.1, f"page j = {j}", ha="center", va="center",
                    fontsize=7)
    # The example key.
    b0, key, head = EXAMPLE
    j, slot = key // PAGE, key % PAGE
    kx = 1.05 + j * (PAGE * unit + 0.08) + slot * unit
    box(ax, kx, 6.55, unit, 0.4, face=COLORS["s"], edge=COLORS["s"], lw=0.8, zorder=3)
    ax.text(kx + unit / 2, 7.0, f"key {key}", ha="center", fontsize=7.5, color=COLORS["s"],
            weight="bold")

    # Middle: the block table.
    tx, ty, cw, ch = 5.75, 5.1, 0.62, 0.42
    ax.text(tx, 7.3, "block_table [batch, pages_per_seq] (int32)", fontsize=9, style="italic",
            va="center")
    for jj in range(3):
        ax.text(tx + (jj + 0.5) * cw + 0.5, ty + 3 * ch + 0.65, f"j={jj}", ha="center",
                fontsize=8)
    for b in range(3):
        y = ty + (2 - b) * ch + 0.5
        ax.text(tx + 0.35, y + ch / 2, f"b={b}", ha="center", va="center", fontsize=8)
        for jj in range(3):
            v = TABLE[b][jj]
            hl = (b, jj) == (b0, j)
            box(ax, tx + 0.5 + jj * cw, y, cw, ch, face=COLORS["s"] if hl else
                (SEQ_LIGHT[b] if v >= 0 else "white"), edge="#777777", lw=0.7,
                text=str(v), fontsize=9, text_color="white" if hl else
                ("black" if v >= 0 else COLORS["muted"]), weight="bold" if hl else "normal")
    ax.text(tx + 0.5, ty + 0.3, "-1: past the sequence's last page (unused)", fontsize=7,
            color=COLORS["muted"], va="center")
    arrow(ax, kx + unit / 2, 6.55, tx + 0.5 + j * cw + cw / 2, ty + 2 * ch + 0.5 + ch,
          color=COLORS["s"], lw=1.1, connection="arc3,rad=0.25")
    ax.text(3.3, 5.55, f"j = key / 16 = {j}\nslot = key % 16 = {slot}", fontsize=8,
            color=COLORS["s"], family=MONO, va="center")

    # Right: the pool of pages.
    px, py, pw, ph = 9.7, 3.35, 2.9, 0.44
    ax.text(px, 7.3, "the pool: K cache [num_pages, 16, 8, 128],\n32 KiB a page, any order",
            fontsize=9, style="italic", va="center")
    owner = {}
    for b in range(3):
        for jj in range(3):
            if TABLE[b][jj] >= 0:
                owner[TABLE[b][jj]] = (b, jj)
    for page in range(POOL):
        y = py + (POOL - 1 - page) * ph
        if page in owner:
            b, jj = owner[page]
            face, text = SEQ_LIGHT[b], f"page {page}: sequence {b}, its page {jj}"
        else:
            face, text = "#F2F2F2", f"page {page}: free"
        hl = page == TABLE[b0][j]
        box(ax, px, y, pw, ph, face=face, edge=COLORS["s"] if hl else "#777777",
            lw=2.0 if hl else 0.7, text=text, fontsize=8, weight="bold" if hl else "normal")
    page_y = py + (POOL - 1 - TABLE[b0][j]) * ph
    arrow(ax, tx + 0.5 + j * cw + cw, ty + 2 * ch + 0.5 + ch / 2, px, page_y + ph / 2,
          color=COLORS["s"], lw=1.1)
    ax.text(8.1, 4.45, f"block_table[{b0}][{j}]\n= page {TABLE[b0][j]}", fontsize=8,
            color=COLORS["s"], ha="center", family=MONO)

    # Bottom: the page opened up.
    ox, oy = 0.2, 0.55
    ax.text(ox, 2.85, f"page {TABLE[b0][j]} opened: 16 slots (tokens) x 8 K/V heads x 128 "
            "elements; one (slot, head) row = 256 contiguous bytes", fontsize=9,
            style="italic", va="center")
    sw, sh = 0.5, 0.12
    for s in range(PAGE):
        for h in range(KV_HEADS):
            x = ox + 0.55 + h * sw
            y = oy + (PAGE - 1 - s) * sh
            hl = (s, h) == (slot, head)
            written = j * PAGE + s < SEQ_LENS[b0]
            box(ax, x, y, sw, sh, face=COLORS["s"] if hl else (SEQ_LIGHT[b0] if written else
                "white"), edge="#DDDDDD" if not hl else COLORS["s"], lw=0.4)
    for h in range(KV_HEADS):
        ax.text(ox + 0.55 + (h + 0.5) * sw, oy + PAGE * sh + 0.07, f"h{h}", ha="center",
                fontsize=7)
    ax.text(ox + 0.55 + KV_HEADS * sw + 0.1, oy + 4 * sh,
            f"slots {SEQ_LENS[b0] - j * PAGE}-15:\nnot written yet\n(the next tokens\n"
            "of sequence 0)", fontsize=7, va="center", color=COLORS["muted"])
    for s in (0, slot, 15):
        ax.text(ox + 0.5, oy + (PAGE - 1 - s) * sh + sh / 2, f"slot {s}", ha="right",
                va="center", fontsize=6.5, color=COLORS["s"] if s == slot else "black")
    ax.text(ox + 0.55 + KV_HEADS * sw / 2, oy - 0.18, "one token: 8 heads x 256 B = 2 KiB",
            ha="center", fontsize=7.5)

    page = TABLE[b0][j]
    offset = ((page * PAGE + slot) * KV_HEADS + head) * 128
    lines = [
        f"key {key} of sequence {b0}, K/V head {head}:",
        f"  page  = block_table[{b0}][{key} >> 4] = block_table[{b0}][{j}] = {page}",
        f"  slot  = {key} & 15 = {slot}",
        f"  offset = ((page * page_size + slot) * kv_heads + head) * head_dim",
        f"         = (({page} * 16 + {slot}) * 8 + {head}) * 128 = {offset:,} elements",
        "",
        "64-bit: 32-bit page numbers, but a pool can pass 2^31 elements",
        "(32 sequences x 131072 tokens x 8 heads x 128 = 2^32).",
    ]
    for n, line in enumerate(lines):
        ax.text(6.0, 2.4 - n * 0.26, line, fontsize=8.5, family=MONO, va="center",
                color=COLORS["s"] if n in (0, 4) else "black")
    return save(fig, out_dir, "10_paged_cache.png")


# ---------------------------------------------------------------------------------------------
# 10_split_combine.png


def split_combine(out_dir):
    fig, ax = new_figure(12.8, 7.6)
    ax.text(0.2, 7.35, "Split-KV: each split of the keys is one block; a combine kernel merges "
            "the splits' partial outputs with their log-sum-exps", fontsize=11, weight="bold",
            va="center")

    # The keys of two sequences and the splits.
    splits, per, unit = 4, 1.55, 1.0
    x0 = 1.5
    ax.text(0.2, 6.8, "keys_per_split = 1024 (whole 64-key tiles); splits planned for the "
            "longest sequence", fontsize=8.5, style="italic", va="center")
    seqs = [("b = 0: 4000 keys", 4000), ("b = 1: 1500 keys", 1500)]
    for r, (name, n) in enumerate(seqs):
        y = 6.05 - r * 0.75
        ax.text(0.2, y + 0.22, name, fontsize=8, va="center")
        for s in range(splits):
            lo, hi = s * 1024, min((s + 1) * 1024, n)
            x = x0 + s * (per + 0.1)
            if hi <= lo:
                box(ax, x, y, per, 0.45, face="white", edge=COLORS["muted"], lw=0.7,
                    text=f"split {s}: empty\nlse = -inf", fontsize=7,
                    text_color=COLORS["muted"])
                continue
            frac = (hi - lo) / 1024
            box(ax, x, y, per, 0.45, face="white", edge=COLORS["k"], lw=0.7)
            box(ax, x, y, per * frac, 0.45, face=LIGHT["k"], edge=COLORS["k"], lw=0.7)
            ax.text(x + per / 2, y + 0.225, f"split {s}: keys {lo}-{hi - 1}", ha="center",
                    va="center", fontsize=7)
    ax.text(x0 + 2 * (per + 0.1), 4.95, "grid = (splits, kv_heads x row tiles, batch); "
            "one block per cell, 2 per SM", fontsize=8, ha="center", va="center")

    # Per block: the partial.
    bx = 8.5
    box(ax, bx, 5.1, 4.1, 1.55, face=COLORS["onchip"], rounded=True)
    ax.text(bx + 0.12, 6.45, "block (split s, K/V head, sequence b)", fontsize=9,
            weight="bold", va="center")
    ax.text(bx + 0.12, 6.1, "4 warps, a 16-key slice of every 64-key tile each:\n"
            "online softmax per warp, warps merged in shared memory", fontsize=7.5, va="center")
    ax.text(bx + 0.12, 5.5, "writes, per query row (fp32 workspace):\n"
            "  O_s   = its output, divided by its own sum l_s\n"
            "  lse_s = m_s + log2(l_s)   (-inf if it saw no key)", fontsize=7.5, va="center",
            family=MONO)
    arrow(ax, x0 + 4 * (per + 0.1) - 0.05, 6.27, bx, 6.0, color=COLORS["k"])

    # The combine.
    cy = 2.45
    box(ax, 0.2, cy, 12.4, 2.05, face="white", edge=COLORS["o"], lw=1.2, rounded=True)
    ax.text(0.35, cy + 1.82, "combine kernel: one block per output row (b, token, head)",
            fontsize=9, weight="bold", va="center")
    lse = [3.1, 4.0, 2.2, -math.inf]
    top = max(lse)
    raw = [0.0 if v == -math.inf else 2.0 ** (v - top) for v in lse]
    total = sum(raw)
    w = [r / total for r in raw]
    for s in range(4):
        x = 0.4 + s * 2.05
        lse_text = "-inf" if lse[s] == -math.inf else f"{lse[s]:.1f}"
        raw_text = "0" if raw[s] == 0 else f"2^({lse_text} - {top:.1f}) = {raw[s]:.3f}"
        box(ax, x, cy + 0.6, 1.9, 0.95, face=LIGHT["o"] if raw[s] else "#F2F2F2",
            edge=COLORS["o"], lw=0.7,
            text=f"split {s}: lse = {lse_text}\n{raw_text}\nw = {w[s]:.3f}", fontsize=7.5)
    ax.text(8.8, cy + 1.25, f"L = max_s lse_s = {top:.1f}\n"
            "w_s = 2^(lse_s - L) / sum_t 2^(lse_t - L)\n"
            "O = sum_s w_s O_s        (written as bf16)", fontsize=8.5, family=MONO,
            va="center")
    ax.text(0.4, cy + 0.3, "An empty split has lse = -inf and weight 0. If every split is "
            "empty, L = -inf and 2^(-inf - (-inf)) is NaN: all weights are 0 and the row is 0.",
            fontsize=8, va="center", color=COLORS["s"])
    arrow(ax, bx + 2.0, 5.1, bx + 2.0, cy + 2.05, color=COLORS["o"],
          text="O_s, lse_s", text_offset=(0.45, -0.05))

    # The launch timeline.
    ty = 0.35
    ax.text(0.2, 1.95, "On Hopper the combine is a programmatic dependent launch "
            "(schematic times):", fontsize=9, weight="bold", va="center")
    ax.text(0.2, 1.55, "plain", fontsize=8, va="center")
    ax.text(0.2, 0.75, "programmatic\ndependent", fontsize=8, va="center")
    s0 = 1.6
    for y, pdl in ((1.35, False), (ty + 0.2, True)):
        for wv in range(2):
            box(ax, s0 + wv * 2.6, y, 2.5, 0.38, face=LIGHT["k"], edge=COLORS["k"], lw=0.7,
                text=f"decode blocks, wave {wv}", fontsize=7.5)
        end = s0 + 2 * 2.6
        if not pdl:
            box(ax, end + 0.05, y, 1.0, 0.38, face="white", edge=COLORS["muted"], lw=0.7,
                text="launch", fontsize=7, text_color=COLORS["muted"])
            box(ax, end + 1.1, y, 1.4, 0.38, face=LIGHT["o"], edge=COLORS["o"], lw=0.7,
                text="combine", fontsize=7.5)
        else:
            last = s0 + 2.6  # the last wave's blocks have started: the launch may begin
            box(ax, last + 0.05, y + 0.42, 0.8, 0.3, face="white", edge=COLORS["muted"],
                lw=0.7, text="launch", fontsize=7, text_color=COLORS["muted"])
            box(ax, last + 0.9, y + 0.42, end - last - 0.9, 0.3, face="white",
                edge=COLORS["o"], lw=0.7, text="combine blocks wait", fontsize=7,
                text_color=COLORS["o"])
            box(ax, end + 0.05, y, 1.4, 0.38, face=LIGHT["o"], edge=COLORS["o"], lw=0.7,
                text="combine", fontsize=7.5)
    ax.text(9.9, 1.1, "Every decode block runs\ngriddepcontrol.launch_dependents at its "
            "start:\nonce the last wave has started, the combine\nmay be launched. Its "
            "griddepcontrol.wait\nreturns once the decode grid has ended\nand its writes are "
            "visible.", fontsize=7.5, va="center")
    return save(fig, out_dir, "10_split_combine.png")


# ---------------------------------------------------------------------------------------------
# 10_decode_gbs.png


def decode_series():
    """(ours by seq_k at batch 32, ours by (batch, seq_k), the HBM read, PyTorch rows)."""
    ours = load("bench10_h100.json")
    torch = load("decode10_torch_h100.json")
    rows = [r for r in ours["decode"] if r["kernel"] == "decode"]
    # The file's first decode rows sweep seq_k at batch 32 (ascending); the batch sweep follows.
    by_seq = []
    for r in rows:
        if r["batch"] != 32 or (by_seq and r["seq_k"] <= by_seq[-1]["seq_k"]):
            break
        by_seq.append(r)
    by_batch = {}  # the first row of each shape, as scripts/results_table.py takes it
    for r in rows:
        by_batch.setdefault((r["batch"], r["seq_k"]), r)
    hbm = ours["device"]["measured_hbm_read_gbs"]
    return by_seq, by_batch, hbm, ours["device"]["peak_bandwidth_gbs"], torch["rows"]


def torch_gbs(rows, kernel, layout, batch, seq):
    for r in rows:
        if (r["kernel"], r.get("layout"), r["batch"], r["seq_k"]) == (kernel, layout, batch,
                                                                        seq) and \
                r["status"] == "ok":
            return r["gbs"]
    return None


SERIES = [("ours", "module 10 (paged cache, pages shuffled)", COLORS["o"]),
          ("torch_sdpa_flash", "PyTorch SDPA, FLASH_ATTENTION (FA2)", COLORS["k"]),
          ("torch_sdpa_cudnn", "PyTorch SDPA, CUDNN_ATTENTION", COLORS["q"])]


def decode_gbs(out_dir):
    by_seq, by_batch, hbm, spec, trows = decode_series()
    fig, (a, b) = plt.subplots(1, 2, figsize=(12.0, 4.8), gridspec_kw={"width_ratios": [3, 2]})
    seqs = [r["seq_k"] for r in by_seq]
    for kernel, label, color in SERIES:
        if kernel == "ours":
            a.plot(seqs, [r["gbs"] for r in by_seq], "o-", color=color, label=label, lw=2)
            continue
        for layout, style in (("bshd", "s-"), ("bhsd", "x:")):
            ys = [torch_gbs(trows, kernel, layout, 32, n) for n in seqs]
            a.plot(seqs, ys, style, color=color, lw=1.4 if layout == "bshd" else 1.0,
                   ms=4, label=f"{label}, {layout} cache" if layout == "bshd" else
                   f"same, {layout} cache")
    for ax in (a, b):
        ax.axhline(hbm, color="black", lw=1.0, ls="--")
        ax.axhline(spec, color=COLORS["muted"], lw=0.8, ls=":")
        ax.grid(True, alpha=0.3)
        ax.set_ylim(0, 3500)
        ax.set_xscale("log", base=2)
    a.text(seqs[0], hbm + 40, f"measured HBM read: {hbm:.0f} GB/s", fontsize=8)
    a.text(seqs[0], spec + 40, f"spec sheet: {spec:.0f} GB/s", fontsize=8,
           color=COLORS["muted"])
    a.set_xticks(seqs)
    a.set_xticklabels([f"{n // 1024}k" if n >= 1024 else str(n) for n in seqs])
    a.set_xlabel("cache length seq_k (keys per sequence)")
    a.set_ylabel("GB/s (K/V read once, Q and O once)")
    a.set_title("batch 32: GB/s against the cache length", fontsize=10)
    a.legend(fontsize=7.5, loc="lower right")

    batches = sorted({bb for bb, _ in by_batch})
    for kernel, label, color in SERIES:
        for seq, style in ((32768, "-"), (4096, "--")):
            if kernel == "ours":
                ys = [by_batch[(bb, seq)]["gbs"] if (bb, seq) in by_batch else None
                      for bb in batches]
            else:
                ys = [torch_gbs(trows, kernel, "bshd", bb, seq) for bb in batches]
            pts = [(bb, y) for bb, y in zip(batches, ys) if y is not None]
            b.plot([p[0] for p in pts], [p[1] for p in pts], "o" + style, color=color, ms=4,
                   lw=1.8 if kernel == "ours" else 1.2,
                   label=f"{label.split(' (')[0].split(',')[-1].strip()}, {seq // 1024}k keys")
    b.set_xticks(batches)
    b.set_xticklabels([str(bb) for bb in batches])
    b.set_xlabel("batch (sequences)")
    b.set_title("GB/s against the batch (bshd cache for PyTorch)", fontsize=10)
    b.legend(fontsize=7, loc="lower right", ncol=2)
    fig.suptitle("Decoding on the H100: 32 query heads over 8 K/V heads, d = 128, one new token "
                 "per sequence, bf16 (bench_10 and compare_torch_decode.py)", fontsize=10.5)
    fig.tight_layout(rect=(0, 0, 1, 0.94))
    return save(fig, out_dir, "10_decode_gbs.png")


# ---------------------------------------------------------------------------------------------
# 10_splits.png

SMS, BLOCKS_PER_SM, FIXED_KEYS, KEY_MULTIPLE = 132, 2, 128, 64


def plan_with_splits(max_len, splits):
    """decoding.h's plan_with_splits: (splits, keys_per_split) for about `splits` splits."""
    most = max(1, (max_len + KEY_MULTIPLE - 1) // KEY_MULTIPLE)
    splits = max(1, min(splits, most, 1024))
    per = (max_len + splits - 1) // splits
    kps = max(KEY_MULTIPLE, (per + KEY_MULTIPLE - 1) // KEY_MULTIPLE * KEY_MULTIPLE)
    return max(1, (max_len + kps - 1) // kps), kps


def model_cost(batch, kv_heads, row_tiles, max_len, splits):
    """decoding.h's cost: waves x (keys per split + fixed keys)."""
    s, kps = plan_with_splits(max_len, splits)
    base = batch * kv_heads * row_tiles
    slots = SMS * BLOCKS_PER_SM
    return ((base * s + slots - 1) // slots) * (kps + FIXED_KEYS)


SPLIT_SHAPES = [(1, 32768), (4, 32768), (16, 4096), (32, 4096), (32, 32768), (128, 4096)]


def splits_figure(out_dir):
    rows = [r for r in load("bench10_h100.json")["decode"]
            if r["kernel"] in ("decode_splits", "decode_splits_chosen")]
    fig, axes = plt.subplots(2, 3, figsize=(12.0, 6.6))
    for ax, (batch, seq) in zip(axes.flat, SPLIT_SHAPES):
        mine = sorted((r for r in rows if r["batch"] == batch and r["seq_k"] == seq),
                      key=lambda r: r["splits"])
        xs = [r["splits"] for r in mine]
        ys = [r["median_ms"] for r in mine]
        chosen = [r for r in mine if r["kernel"] == "decode_splits_chosen"][0]
        row_tiles = (mine[0]["heads"] // mine[0]["kv_heads"] + 15) // 16
        cost = [model_cost(batch, mine[0]["kv_heads"], row_tiles, seq, s) for s in xs]
        scale = chosen["median_ms"] / cost[xs.index(chosen["splits"])]
        ax.plot(xs, [c * scale for c in cost], "--", color=COLORS["muted"], lw=1.2,
                label="cost model, scaled to the choice")
        ax.plot(xs, ys, "o-", color=COLORS["o"], lw=1.8, ms=4, label="measured")
        ax.plot([chosen["splits"]], [chosen["median_ms"]], "*", color=COLORS["s"], ms=14,
                label="the model's choice", zorder=5)
        blocks = batch * mine[0]["kv_heads"] * row_tiles
        ax.set_title(f"batch {batch}, {seq // 1024}k keys: {blocks} blocks per split",
                     fontsize=9.5)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(xs)
        ax.set_xticklabels([str(x) for x in xs], fontsize=7.5)
        ax.set_xlabel("splits", fontsize=8.5)
        ax.set_ylabel("ms", fontsize=8.5)
        ax.grid(True, which="both", alpha=0.25)
        lo = min(ys + [c * scale for c in cost])
        hi = max(ys)
        ax.set_ylim(lo * 0.85, hi * 1.25)
        ticks = sorted({float(f"{lo * 0.9 * (hi * 1.2 / (lo * 0.9)) ** (k / 4):.2g}")
                        for k in range(5)})
        ax.yaxis.set_major_locator(FixedLocator(ticks))
        ax.yaxis.set_minor_locator(NullLocator())
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.tick_params(axis="y", labelsize=7.5)
    axes.flat[0].legend(fontsize=7.5, loc="upper right")
    fig.suptitle("Decode time against the number of splits (bench_10 on the H100; 264 block "
                 "slots = 132 SMs x 2): waves x (keys per split + 128)", fontsize=10.5)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    return save(fig, out_dir, "10_splits.png")


def make(out_dir):
    return [paged_cache(out_dir), split_combine(out_dir), decode_gbs(out_dir),
            splits_figure(out_dir)]


if __name__ == "__main__":
    for path in make(sys.argv[1] if len(sys.argv) > 1 else os.path.join(REPO, "docs", "img")):
        print(path)
