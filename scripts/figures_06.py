#!/usr/bin/env python3
"""Figures of module 06's lesson (modules/06_multi_head/README.md), called by
scripts/make_figures.py through make(out_dir); runnable alone:
python3 scripts/figures_06.py [out_dir].

  06_grid_mapping.png    one flat gridDim.x over (batch, head, query block), query blocks fastest
  06_register_tile.png   the 128 x 64 score tile of a block: the rows and keys one thread owns
  06_pipeline.png        the cp.async schedule of the 1 + 2 scheme (one K, two V buffers)
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
REPO = os.path.dirname(HERE)

from figures_common import COLORS, box, new_figure, save  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

HEAD_COLORS = ["#4C72B0", "#DD8452", "#55A868", "#8172B3", "#937860", "#DA8BC3"]


def grid_mapping(out_dir):
    batch, heads, qblocks = 2, 3, 4
    fig, ax = new_figure(11.0, 4.3)
    ax.text(0.2, 4.05, f"gridDim.x = batch · heads · query_blocks = {batch} · {heads} · {qblocks} "
            f"= {batch * heads * qblocks} blocks (up to 2³¹ - 1; y and z stop at 65535)",
            fontsize=10.5, weight="bold", va="center")
    w = 10.6 / (batch * heads * qblocks)
    for x in range(batch * heads * qblocks):
        qb, bh = x % qblocks, x // qblocks
        b, h = bh // heads, bh % heads
        box(ax, 0.2 + x * w, 2.6, w * 0.95, 0.9, face=HEAD_COLORS[h], alpha=0.35 + 0.5 * b,
            text=f"{x}\nq{qb}", fontsize=7.5)
    for bh in range(batch * heads):
        b, h = bh // heads, bh % heads
        x0 = 0.2 + bh * qblocks * w
        ax.plot([x0 + 0.02, x0 + qblocks * w - 0.05], [2.45, 2.45], color=HEAD_COLORS[h], lw=3)
        ax.text(x0 + qblocks * w / 2, 2.2, f"b={b}, h={h}", ha="center", fontsize=8.5)
    ax.text(0.2, 3.62, "blockIdx.x (top) and its query block (bottom)", fontsize=9)
    lines = ["query blocks vary fastest: blocks that run together share one (b, h), so its K/V",
             "tiles come from L2; then the heads of a batch, then the batches",
             "GQA: query heads h of one group read the same K/V head (Problem::kv_head)",
             "causal: each head's query blocks handed out in reverse order (the heaviest first)"]
    for i, line in enumerate(lines):
        ax.text(0.3, 1.6 - i * 0.38, line, fontsize=9.5, va="center")
    return save(fig, out_dir, "06_grid_mapping.png")


def register_tile(out_dir):
    rows, keys, groups, lanes, tm, tn = 128, 64, 16, 16, 8, 4
    g0, l0 = 1, 2  # the thread drawn: row group 1, lane 2 (threadIdx.x = 18)
    fig, ax = new_figure(10.0, 6.55)
    cell = 0.042
    x0, y0 = 0.5, 0.4
    ax.text(0.2, 6.35, "The score tile of a block, 128 queries x 64 keys: thread 18 (row group 1, "
            "lane 2) owns 8 rows x 4 keys", fontsize=10.5, weight="bold", va="center")
    for r in range(rows):
        for k in range(keys):
            mine = r % groups == g0 and k % lanes == l0
            group = r % groups == g0
            face = COLORS["s"] if mine else ("#F6D5D6" if group else "white")
            ax.add_patch(Rectangle(
                (x0 + k * cell * 1.6, y0 + (rows - 1 - r) * cell), cell * 1.6, cell,
                facecolor=face, edgecolor="#DDDDDD" if not mine else COLORS["edge"], lw=0.2))
    ax.text(x0 + keys * cell * 0.8, y0 + rows * cell + 0.1, "keys 0 .. 63 of the K tile",
            ha="center", fontsize=9)
    ax.text(x0 - 0.1, y0 + rows * cell / 2, "queries 0 .. 127", rotation=90, ha="right",
            va="center", fontsize=9)
    tx = x0 + keys * cell * 1.6 + 0.4
    notes = ["thread t: group = t / 16, lane = t % 16",
             "rows  group, group + 16, ..., group + 112   (TM = 8)",
             "keys  lane, lane + 16, lane + 32, lane + 48   (TN = 4)",
             "",
             "light: the 16 lanes of row group 1 (one half-warp)",
             "share these 8 rows: the row max is 4 xor shuffles",
             "(masks 8, 4, 2, 1) inside the half-warp",
             "",
             "per step of 4 head-dim columns the thread reads",
             "TM + TN = 12 float4 (Q rows, K rows) and does",
             "TM · TN · 4 = 128 FMAs: 10.7 FMAs per read",
             "(module 03: 4)",
             "",
             "P V: the same rows x D/16 output columns",
             "(columns 4·lane .. 4·lane+3 of each 64)"]
    for i, n in enumerate(notes):
        ax.text(tx, 5.3 - i * 0.33, n, fontsize=9, va="center")
    return save(fig, out_dir, "06_register_tile.png")


def pipeline(out_dir):
    fig, ax = new_figure(11.0, 3.6)
    ax.text(0.2, 3.4, "D = 128, one K buffer and two V buffers (1 + 2): two barriers per key tile",
            fontsize=10.5, weight="bold", va="center")
    ax.text(0.2, 2.55, "copies\n(cp.async)", fontsize=9, va="center")
    ax.text(0.2, 1.45, "compute", fontsize=9, va="center")
    x = 1.4
    for t in range(2):
        # barrier A
        ax.plot([x, x], [0.9, 3.05], color=COLORS["edge"], lw=1.5, ls="--")
        ax.text(x, 0.7, f"A{t}", ha="center", fontsize=8)
        box(ax, x + 0.05, 1.2, 2.6, 0.5, face=COLORS["k"], alpha=0.8,
            text=f"S = Q K({t})ᵀ, softmax, P", fontsize=8.5)
        box(ax, x + 0.05, 2.35, 4.6, 0.4, face=COLORS["v"], alpha=0.6,
            text=f"V({t + 1}) -> V buffer {(t + 1) % 2}", fontsize=8.5)
        xb = x + 2.75
        ax.plot([xb, xb], [0.9, 3.05], color=COLORS["edge"], lw=1.5, ls="--")
        ax.text(xb, 0.7, f"B{t}", ha="center", fontsize=8)
        box(ax, xb + 0.05, 1.2, 1.8, 0.5, face=COLORS["v"], alpha=0.8,
            text=f"O += P V({t}) [buf {t % 2}]", fontsize=8.5)
        box(ax, xb + 0.05, 1.85, 1.8, 0.4, face=COLORS["k"], alpha=0.5,
            text=f"K({t + 1}) -> K", fontsize=8.5)
        x = xb + 1.95
    ax.text(0.2, 0.25, "A: everyone's K(t) landed, everyone done with P V(t-1) (its V buffer is "
            "free).  B: V(t) landed, everyone done with K(t).  Wait, then barrier, then read.",
            fontsize=8.5, va="center")
    return save(fig, out_dir, "06_pipeline.png")


def make(out_dir):
    return [grid_mapping(out_dir), register_tile(out_dir), pipeline(out_dir)]


if __name__ == "__main__":
    for path in make(sys.argv[1] if len(sys.argv) > 1 else os.path.join(REPO, "docs", "img")):
        print(path)
