#!/usr/bin/env python3
"""Figures of module 08's lesson (modules/08_cute/README.md), called by
scripts/make_figures.py through make(out_dir); runnable alone:
python3 scripts/figures_08.py [out_dir].

  08_row_permutation.png  which warp owns each row of a 128-query tile under the two tiled
                          MMAs of TODO 4: the plain tiling (Tile<_64, _16, _16>: warp w gets
                          rows 16w + 64j) and the permuted one (Tile<Rows, _16, _16> with
                          Rows = (16, 4, 2):(1, 32, 16): warp w gets rows 32w .. 32w + 31),
                          beside the causal mask of the tile on the diagonal
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
REPO = os.path.dirname(HERE)

from figures_common import COLORS, box, new_figure, save  # noqa: E402

WARP_COLORS = [COLORS["q"], COLORS["k"], COLORS["v"], COLORS["o"]]
ROWS, WARPS, ATOM = 128, 4, 16


def warp_of_row_plain(row):
    # logical row m = i + 16 w + 64 j is the physical row: warp = (row // 16) % 4
    return (row // ATOM) % WARPS


def warp_of_row_permuted(row):
    # Rows = (16, 4, 2):(1, 32, 16) sends m = i + 16 w + 64 j to i + 32 w + 16 j: warp = row // 32
    return row // (2 * ATOM)


def row_permutation(out_dir):
    fig, ax = new_figure(11.0, 6.4)
    ax.text(0.2, 6.15, "Which warp owns each query row of a 128-row tile (TODO 4)", fontsize=11,
            weight="bold", va="center")
    scale = 5.0 / ROWS  # figure units per row
    columns = ((0.6, "plain tiling: Tile<_64, _16, _16>", warp_of_row_plain),
               (4.4, "with the row permutation Rows", warp_of_row_permuted))
    for x0, title, owner in columns:
        ax.text(x0 + 1.1, 5.75, title, ha="center", fontsize=9)
        for r in range(0, ROWS, 8):
            w = owner(r)
            box(ax, x0, 5.5 - (r + 8) * scale, 2.2, 8 * scale, face=WARP_COLORS[w],
                edge="white", lw=0.4)
        for r in range(0, ROWS, 16):
            ax.text(x0 - 0.08, 5.5 - r * scale, str(r), ha="right", va="top",
                    fontsize=7)
    # The causal diagonal of the block's last key tiles: a warp's rows are contiguous only
    # with the permutation, so only then can a whole warp skip a key tile.
    x0 = 8.2
    ax.text(x0 + 1.1, 5.75, "causal mask on the diagonal", ha="center", fontsize=9)
    box(ax, x0, 0.5, 2.2, 5.0, face=COLORS["masked"], edge=COLORS["edge"], lw=0.6)
    for r in range(ROWS):
        visible = (r + 1) / ROWS
        box(ax, x0, 5.5 - (r + 1) * scale, 2.2 * visible, scale, face=COLORS["visible"],
            edge=None, lw=0)
    ax.text(x0 + 1.1, 0.3, "keys of the last 128 (visible: green)", ha="center", fontsize=8)
    for w in range(WARPS):
        box(ax, 3.2 + 0.55 * w, 0.05, 0.45, 0.25, face=WARP_COLORS[w], text=f"warp {w}",
            fontsize=7, text_color="white")
    ax.set_xlim(0, 11.0)
    ax.set_ylim(0, 6.4)
    return save(fig, out_dir, "08_row_permutation.png")


def make(out_dir):
    return [row_permutation(out_dir)]


if __name__ == "__main__":
    for path in make(sys.argv[1] if len(sys.argv) > 1 else os.path.join(REPO, "docs", "img")):
        print(path)
