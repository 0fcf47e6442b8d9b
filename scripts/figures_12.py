#!/usr/bin/env python3
"""Figures of module 12's lesson (modules/12_modifiers/README.md), called by
scripts/make_figures.py through make(out_dir); runnable alone:
python3 scripts/figures_12.py [out_dir] [--bench12 FILE].

  12_tile_maps.png   N = 1024 queries x 1024 keys in blocks of 128 queries (4 warps of 32 rows)
                     and tiles of 64 keys: the class of each (warp, key tile) under five masks
                     (causal, sliding window 256, prefix-LM 256, 4 documents, 4 documents and
                     causal): full, partial, skipped by the warp although its block loads the
                     tile, or outside the block's key range (never loaded). Computed here from
                     the rules of common/modifiers.h (bottom-right positions) and the kernel's
                     steps (block_tiles, classify and classify_documents of
                     modules/12_modifiers and solutions/12_modifiers), not measured.
  12_overheads.png   measured: time ratios of bench_12 on the H200
                     (docs/results/bench12_h200.json): score modifiers and RoPE against module
                     07 with the same mask, masks against a perfect skip of masked tiles, at
                     d = 64 and d = 128 and each N of the file. Skipped with one line while the
                     file does not exist.
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
REPO = os.path.dirname(HERE)

import numpy as np  # noqa: E402

from figures_common import COLORS, RESULTS, plt, save, save_full_colour  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

BENCH12 = os.path.join(RESULTS, "bench12_h200.json")

# ---------------------------------------------------------------------------------------------
# 12_tile_maps.png: the kernel's tile classification, in Python

N = 1024          # queries and keys (seq_q == seq_k: position i' = i)
BLOCK_ROWS = 128  # queries per block (4 warps x 2 row tiles of 16)
WARP_ROWS = 32    # queries per warp: the unit the kernel classifies
KEYS = 64         # keys per K/V tile

MASKED, PARTIAL, FULL = 0, 1, 2
NOT_LOADED, SKIPPED, PARTIAL_TILE, FULL_TILE = 0, 1, 2, 3  # what the map draws
DOC_CUTS = [300, 480, 820]  # the first key of documents 1, 2, 3


def visible(rules, seg, pos, j):
    """common/modifiers.h: causal (with the prefix every query sees), window, documents."""
    causal_ok = not rules["causal"] or j <= pos or j < rules["prefix"]
    window_ok = rules["window"] == 0 or j > pos - rules["window"]
    doc_ok = seg is None or seg[pos] == seg[j]
    return causal_ok and window_ok and doc_ok


def classify(rules, pos_lo, pos_hi, key_lo, key_hi):
    """The four corners of a tile decide each monotone rule (solutions' classify)."""
    full, none = True, False
    if rules["causal"]:
        full = full and (key_hi <= pos_lo or key_hi < rules["prefix"])
        none = none or (key_lo > pos_hi and key_lo >= rules["prefix"])
    if rules["window"] > 0:
        full = full and key_lo > pos_hi - rules["window"]
        none = none or key_hi <= pos_lo - rules["window"]
    return MASKED if none else FULL if full else PARTIAL


def classify_documents(q_lo, q_hi, k_lo, k_hi):
    """Segment ids never decrease: the rows hold ids [q_lo, q_hi], the keys [k_lo, k_hi]."""
    if q_hi < k_lo or k_hi < q_lo:
        return MASKED
    if q_lo == q_hi == k_lo == k_hi:
        return FULL
    return PARTIAL


def first_at_least(seg, ident):
    """The first key whose id is >= ident (a binary search, as the kernel's)."""
    return int(np.searchsorted(seg, ident, side="left"))


def block_tiles(rules, seg, q0, q_last):
    """The key tiles [first, end) a block loads: outside them no query of the block sees a key."""
    lo, hi = 0, N
    if rules["causal"]:
        hi = min(hi, max(q_last + 1, rules["prefix"], 0))
    if rules["window"] > 0:
        lo = max(lo, q0 - rules["window"] + 1)
    if seg is not None:
        lo = max(lo, first_at_least(seg, seg[q0]))
        hi = min(hi, first_at_least(seg, seg[q_last] + 1))
    if hi <= lo:
        return 0, 0
    return lo // KEYS, (hi + KEYS - 1) // KEYS


def tile_map(rules, seg):
    """(map of what each (warp, key tile) does, exact visibility N x N)."""
    warps, tiles = N // WARP_ROWS, N // KEYS
    out = np.full((warps, tiles), NOT_LOADED)
    for w in range(warps):
        q0 = (w * WARP_ROWS) // BLOCK_ROWS * BLOCK_ROWS
        first, end = block_tiles(rules, seg, q0, q0 + BLOCK_ROWS - 1)
        pos_lo, pos_hi = w * WARP_ROWS, (w + 1) * WARP_ROWS - 1
        for t in range(first, end):
            key_lo, key_hi = t * KEYS, (t + 1) * KEYS - 1
            c = classify(rules, pos_lo, pos_hi, key_lo, key_hi)
            if seg is not None and c != MASKED:  # documents AND the other rules
                d = classify_documents(seg[pos_lo], seg[pos_hi], seg[key_lo], seg[key_hi])
                c = d if d != FULL else c
            out[w, t] = {MASKED: SKIPPED, PARTIAL: PARTIAL_TILE, FULL: FULL_TILE}[c]
    pos = np.arange(N)[:, None]
    key = np.arange(N)[None, :]
    vis = np.ones((N, N), dtype=bool)
    if rules["causal"]:
        vis &= (key <= pos) | (key < rules["prefix"])
    if rules["window"] > 0:
        vis &= key > pos - rules["window"]
    if seg is not None:
        vis &= seg[pos] == seg[key]
    return out, vis


def check_classes(rules, seg, out, vis):
    """The map is sound: no skipped tile holds a visible pair, no full tile a masked one."""
    for w in range(out.shape[0]):
        for t in range(out.shape[1]):
            cell = vis[w * WARP_ROWS:(w + 1) * WARP_ROWS, t * KEYS:(t + 1) * KEYS]
            if out[w, t] in (NOT_LOADED, SKIPPED):
                assert not cell.any(), (rules, w, t)
            if out[w, t] == FULL_TILE:
                assert cell.all(), (rules, w, t)


MAP_COLORS = {NOT_LOADED: "#F4F4F4", SKIPPED: "#BDBDBD", PARTIAL_TILE: COLORS["partial"],
              FULL_TILE: COLORS["visible"]}


def tile_maps(out_dir):
    # 4 documents of 300, 180, 340 and 204 tokens: edges inside tiles and blocks.
    docs = np.searchsorted(np.array(DOC_CUTS), np.arange(N), side="right")
    cases = [
        ("causal", dict(causal=1, prefix=0, window=0), None),
        ("sliding window 256 (causal)", dict(causal=1, prefix=0, window=256), None),
        ("prefix-LM, prefix 256 (causal)", dict(causal=1, prefix=256, window=0), None),
        ("4 documents (300, 180, 340, 204)", dict(causal=0, prefix=0, window=0), docs),
        ("4 documents, causal", dict(causal=1, prefix=0, window=0), docs),
    ]
    fig, axes = plt.subplots(1, len(cases), figsize=(16.5, 4.9))
    rgb = {k: np.array([int(v[i:i + 2], 16) / 255 for i in (1, 3, 5)])
           for k, v in MAP_COLORS.items()}
    for ax, (title, rules, seg) in zip(axes, cases):
        out, vis = tile_map(rules, seg)
        check_classes(rules, seg, out, vis)
        image = np.zeros(out.shape + (3,))
        for k, c in rgb.items():
            image[out == k] = c
        # One cell per (warp, key tile): 32 rows x 64 keys, drawn to scale.
        ax.imshow(image, extent=(0, N, N, 0), interpolation="nearest", aspect="equal")
        ax.contour(np.arange(N) + 0.5, np.arange(N) + 0.5, vis.astype(float), levels=[0.5],
                   colors=[COLORS["edge"]], linewidths=0.9)
        for x in range(0, N + 1, KEYS):
            ax.axvline(x, color="white", lw=0.4)
        for y in range(0, N + 1, WARP_ROWS):
            ax.axhline(y, color="white", lw=0.4)
        for y in range(0, N + 1, BLOCK_ROWS):
            ax.axhline(y, color=COLORS["q"], lw=1.1)
        ax.set_xlim(0, N)
        ax.set_ylim(N, 0)
        ax.set_xticks(range(0, N + 1, 256))
        ax.set_yticks(range(0, N + 1, 256))
        ax.tick_params(labelsize=7.5)
        ax.set_xlabel("key j", fontsize=8.5)
        if ax is axes[0]:
            ax.set_ylabel("query i (blue lines: blocks of 128)", fontsize=8.5)
        computed = np.isin(out, (PARTIAL_TILE, FULL_TILE)).sum() * WARP_ROWS * KEYS
        loaded = 0  # key tiles a block copies, counted per block (4 warps share them)
        for b in range(N // BLOCK_ROWS):
            rows = out[b * BLOCK_ROWS // WARP_ROWS:(b + 1) * BLOCK_ROWS // WARP_ROWS]
            loaded += (rows != NOT_LOADED).any(axis=0).sum() * BLOCK_ROWS * KEYS
        ax.set_title(f"{title}\nvisible {100 * vis.mean():.0f}%, computed "
                     f"{100 * computed / N**2:.0f}%, loaded {100 * loaded / N**2:.0f}%",
                     fontsize=9)
    handles = [Patch(facecolor=MAP_COLORS[FULL_TILE], edgecolor="black",
                     label="full: every pair visible, no per-score test"),
               Patch(facecolor=MAP_COLORS[PARTIAL_TILE], edgecolor="black",
                     label="partial: computed with the per-score mask"),
               Patch(facecolor=MAP_COLORS[SKIPPED], edgecolor="black",
                     label="masked for this warp: copied for the block, not computed"),
               Patch(facecolor=MAP_COLORS[NOT_LOADED], edgecolor="black",
                     label="outside the block's key range: never copied")]
    fig.legend(handles=handles, loc="lower center", ncol=4, frameon=False, fontsize=8.5)
    fig.suptitle("Tile classes for N = 1024: one cell per warp (32 queries) x key tile (64 "
                 "keys); black: the edge of the visible pairs. Percentages: of the N x N pairs",
                 fontsize=10.5)
    fig.subplots_adjust(left=0.04, right=0.995, top=0.84, bottom=0.15, wspace=0.18)
    return save(fig, out_dir, "12_tile_maps.png")


# ---------------------------------------------------------------------------------------------
# 12_overheads.png: measured ratios


def load_bench(path):
    with open(path) as f:
        return json.load(f)


def overheads(out_dir, path=BENCH12):
    if not os.path.exists(path):
        print(f"figures_12: {os.path.relpath(path, REPO)} does not exist yet: "
              "12_overheads.png not drawn")
        return None
    data = load_bench(path)
    rows = data["records"]
    seqs = sorted({r["seq"] for r in rows})
    dims = sorted({r["head_dim"] for r in rows})
    engine = lambda r: r.get("engine", "mma")  # files from before the wgmma rows: mma
    kernels = {"mma": "module 07's kernel", "wgmma": "module 09's kernel"}
    panels = [(e, d) for e in kernels if any(engine(r) == e for r in rows) for d in dims]
    seq_colors = ["#93ADD8", COLORS["q"], "#1F3A68", "#0B1A33"]
    fig, axes = plt.subplots(len(panels), 2, figsize=(15.5, 4.0 * len(panels)),
                             gridspec_kw={"width_ratios": [2.1, 1]}, squeeze=False)
    for row, (e, d) in enumerate(panels):
        for col, is_mask in enumerate((False, True)):
            ax = axes[row][col]
            mine = [r for r in rows if engine(r) == e and r["head_dim"] == d and
                    r["mask"] == is_mask]
            names = []  # file order, from the largest N (which has every variant)
            for r in sorted(mine, key=lambda r: -r["seq"]):
                if r["variant"] not in names:
                    names.append(r["variant"])
            width = 0.8 / len(seqs)
            top = 1.0
            for k, n in enumerate(seqs):
                xs, ys = [], []
                for i, name in enumerate(names):
                    hit = [r for r in mine if r["variant"] == name and r["seq"] == n]
                    if hit:
                        xs.append(i + (k - (len(seqs) - 1) / 2) * width)
                        ys.append(hit[0]["ratio"])
                top = max([top] + ys)
                ax.bar(xs, ys, width, color=seq_colors[k % len(seq_colors)],
                       label=f"N = {n}")
            ax.axhline(1.0, color=COLORS["edge"], lw=1.0)
            ax.set_xticks(range(len(names)))
            ax.set_xticklabels(names, rotation=35, ha="right", fontsize=8)
            ax.set_xlim(-0.6, len(names) - 0.4)
            ax.set_ylim(0, top * 1.12)
            ax.grid(True, axis="y", alpha=0.3)
            ax.tick_params(axis="y", labelsize=8)
            if is_mask:
                ax.set_title(f"masks, d = {d}, {kernels[e]}: time / a perfect skip",
                             fontsize=9)
            else:
                rope = any(name.startswith("rope") for name in names)
                ax.set_title(f"score modifiers{' and RoPE' if rope else ''}, d = {d}, "
                             f"{kernels[e]}: time / its time without them, same mask", fontsize=9)
                ax.set_ylabel("time ratio (1 = no cost)", fontsize=9)
            if row == 0 and col == 0:
                ax.legend(fontsize=8, ncol=len(seqs), loc="upper left")
    fig.suptitle(f"bench_12 on the {data['device']}, bf16, batch x N = 16384 tokens, heads x d "
                 "= 2048: what each modifier costs", fontsize=10.5)
    fig.tight_layout(rect=(0, 0, 1, 0.96))
    return save_full_colour(fig, out_dir, "12_overheads.png")


def make(out_dir, bench12=BENCH12):
    return [p for p in (tile_maps(out_dir), overheads(out_dir, bench12)) if p]


if __name__ == "__main__":
    args = sys.argv[1:]
    bench = BENCH12
    if "--bench12" in args:  # another file of the same schema (a run not committed yet)
        i = args.index("--bench12")
        bench = args[i + 1]
        del args[i:i + 2]
    for path in make(args[0] if args else os.path.join(REPO, "docs", "img"), bench):
        print(path)
