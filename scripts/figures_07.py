#!/usr/bin/env python3
"""Figures of module 07's lesson (modules/07_tensor_cores/README.md), called by
scripts/make_figures.py through make(out_dir); runnable alone:
python3 scripts/figures_07.py [out_dir].

  07_warp_tiles.png   a block of 4 warps x 32 query rows over one 64-key K/V tile: what is
                      in shared memory and what each warp keeps in registers
  07_swizzle.png      logical chunk c of row r stored at physical chunk c ^ (r % 8): the banks
                      one ldmatrix matrix hits, plain and swizzled
  07_ladder.png       TFLOP/s of every rung of bench_07 (docs/results/ladder07_h100.json)
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
REPO = os.path.dirname(HERE)

from figures_common import COLORS, arrow, box, ladder_bars, new_figure, plt, save  # noqa: E402

WARP_COLORS = ["#4C72B0", "#6F8FC7", "#93ADD8", "#B6C9E8"]


def warp_tiles(out_dir):
    fig, ax = new_figure(11.0, 6.1)
    ax.text(0.2, 5.9, "One block: 128 queries (4 warps x 32 rows), one K/V tile of 64 keys, "
            "D = 64", fontsize=10.5, weight="bold", va="center")
    # Q block, split by warps, each in 2 row tiles of 16.
    qx, qy, qh, qw = 0.3, 0.6, 4.2, 1.3
    for w in range(4):
        y = qy + qh - (w + 1) * qh / 4
        for mt in range(2):
            box(ax, qx, y + (1 - mt) * qh / 8, qw, qh / 8, face=WARP_COLORS[w], lw=0.6,
                text=f"warp {w}, rows {32 * w + 16 * mt}-{32 * w + 16 * mt + 15}",
                fontsize=7, text_color="white" if w < 2 else "black")
    ax.text(qx + qw / 2, qy - 0.25, "Q block (128 x D)", ha="center", fontsize=9)
    # K tile (shared) transposed, V tile (shared).
    box(ax, 2.3, 4.95, 4.2, 0.5, face=COLORS["onchip"],
        text="K tile in shared memory: 64 keys x D (read as Kᵀ with ldmatrix)", fontsize=8.5)
    box(ax, 7.2, 0.6, 0.9, 3.2, face=COLORS["onchip"], text="V tile\n64 keys\nx D\n\nshared\nmemory\n(ldmatrix\n.trans)",
        fontsize=8)
    # S tiles per warp (registers).
    for w in range(4):
        y = qy + qh - (w + 1) * qh / 4
        box(ax, 2.3, y + 0.04, 4.2, qh / 4 - 0.08, face="#F6D5D6", edge=COLORS["s"],
            text=f"warp {w}: S, then P (32 x 64) in its registers (C layout -> A layout)",
            fontsize=8)
        box(ax, 8.5, y + 0.04, 2.2, qh / 4 - 0.08, face="#E3DDF2", edge=COLORS["o"],
            text=f"warp {w}: O (32 x D), m, l\nin registers", fontsize=8)
        arrow(ax, 6.5, y + qh / 8, 8.5, y + qh / 8, lw=1.0, color=COLORS["muted"])
    ax.text(7.65, 4.95, "O += P V", fontsize=9, ha="center")
    ax.text(1.9, 5.2, "S = Q Kᵀ", fontsize=9, ha="center")
    arrow(ax, 1.6, 2.7, 2.3, 2.7, lw=1.0, color=COLORS["muted"])
    ax.text(0.3, 0.12, "Every warp reads all 64 keys of the tile from shared memory; nothing else "
            "is shared between warps (FlashAttention-2's split).", fontsize=9, va="center")
    return save(fig, out_dir, "07_warp_tiles.png")


def swizzle(out_dir):
    fig, axes = plt.subplots(1, 2, figsize=(10.5, 4.6))
    cmap = plt.get_cmap("tab10")
    for ax, swz in zip(axes, (False, True)):
        for r in range(8):
            for p in range(8):
                c = p ^ r if swz else p  # the logical chunk stored at physical chunk p
                face = cmap(c) if c == 0 else "white"
                ax.add_patch(plt.Rectangle((p, 7 - r), 1, 1, facecolor=face,
                                           edgecolor=COLORS["edge"], lw=0.8, alpha=0.85))
                ax.text(p + 0.5, 7.5 - r, str(c), ha="center", va="center", fontsize=9,
                        color="white" if c == 0 else "black")
        ax.set_xlim(0, 8)
        ax.set_ylim(0, 8)
        ax.set_xticks([p + 0.5 for p in range(8)])
        ax.set_xticklabels([f"{4 * p}-{4 * p + 3}" for p in range(8)], fontsize=7)
        ax.set_yticks([7.5 - r for r in range(8)])
        ax.set_yticklabels([f"row {r}" for r in range(8)], fontsize=8)
        ax.set_xlabel("physical chunk = 4 banks (bank numbers)")
        ax.set_aspect("equal")
        ax.set_title("swizzled: physical chunk = c ^ (r % 8)\nlogical chunk 0 of rows 0-7: "
                     "32 banks, 1 wavefront" if swz else
                     "plain: physical chunk = c\nlogical chunk 0 of rows 0-7: "
                     "banks 0-3 eight times, 8 wavefronts", fontsize=9.5)
    fig.suptitle("D = 64 (128-byte rows): which logical chunk each 16-byte slot holds",
                 fontsize=11)
    fig.tight_layout()
    return save(fig, out_dir, "07_swizzle.png")


def ladder(out_dir):
    return ladder_bars("ladder07_h100.json", "bench_07 on the H100, N = 8192, bf16: each rung "
                       "adds one change (qblocks_fast: not adopted)", out_dir, "07_ladder.png")


def make(out_dir):
    return [warp_tiles(out_dir), swizzle(out_dir), ladder(out_dir)]


if __name__ == "__main__":
    for path in make(sys.argv[1] if len(sys.argv) > 1 else os.path.join(REPO, "docs", "img")):
        print(path)
