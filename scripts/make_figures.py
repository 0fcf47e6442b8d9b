#!/usr/bin/env python3
"""Draw the course's figures as PNG files in docs/img/ (matplotlib; deterministic).

Usage: python3 scripts/make_figures.py [--out-dir docs/img] [--only NAME] [--list]

The figures of this file, one function each:

  execution_model   fig_execution_model.png   grid -> blocks -> warps -> threads; SMs run blocks
  tiling            fig_tiling.png            FlashAttention tiling: Q blocks outside, K/V tiles
                                              streamed through shared memory, S/P stay on chip
  online_softmax    fig_online_softmax.png    running max m, sum l, alpha = 2^(m_old - m_new)
  causal_tiles      fig_causal_tiles.png      query blocks x key tiles under a bottom-right
                                              aligned causal mask (seq_q != seq_k)
  mma_fragments     fig_mma_fragments.png     mma.sync m16n8k16: which lane holds which elements

Then every scripts/figures_*.py (one per lesson that needs its own figures) is imported and
its `make(out_dir)` called; `--only figures_02` runs that file alone. Every figure is a pure
function of the constants below, so a second run writes the same bytes.
"""
import argparse
import glob
import importlib.util
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from figures_common import COLORS, arrow, box, new_figure, plt, save  # noqa: E402

REPO = os.path.dirname(HERE)
DEFAULT_OUT = os.path.join(REPO, "docs", "img")


# ---------------------------------------------------------------------------------------------
# (a) The execution model


def fig_execution_model(out_dir):
    """Grid -> blocks -> warps -> threads on the left; the GPU's SMs and memories on the right,
    labelled with module 01's launch (blocks of 128 threads, one query per thread)."""
    fig, ax = new_figure(11.0, 6.6)
    block_colors = ["#4C72B0", "#DD8452", "#55A868", "#8172B3", "#937860"]

    # Left: the launch.
    ax.text(0.2, 6.35, "The launch: naive_attention_kernel<<<G, 128, 0, stream>>>(...)",
            fontsize=11, weight="bold", va="center")
    box(ax, 0.2, 4.9, 5.4, 1.15, face="#F7F7F7", rounded=True)
    ax.text(0.35, 5.88, "grid: G blocks (gridDim.x = G), numbered by blockIdx.x", fontsize=9,
            va="center")
    labels = ["block 0", "block 1", "block 2", "...", "block G-1"]
    for n, label in enumerate(labels):
        x = 0.4 + n * 1.03
        if label == "...":
            ax.text(x + 0.45, 5.3, "...", ha="center", va="center", fontsize=12)
            continue
        box(ax, x, 5.05, 0.9, 0.5, face=block_colors[n], text=label, fontsize=8,
            text_color="white", weight="bold")

    # Zoom on block 1.
    arrow(ax, 1.88, 5.05, 1.6, 4.55, color=COLORS["muted"])
    box(ax, 0.2, 3.25, 5.4, 1.3, face="#FBE9DC", edge=block_colors[1], rounded=True)
    ax.text(0.35, 4.38, "block 1: blockDim.x = 128 threads = 4 warps; runs on one SM",
            fontsize=9, va="center")
    for w in range(4):
        box(ax, 0.35 + w * 1.3, 3.4, 1.2, 0.75, face="white", edge=block_colors[1],
            text=f"warp {w}\nthreads {32 * w}-{32 * w + 31}", fontsize=8)

    # Zoom on warp 0: 32 lanes.
    arrow(ax, 0.95, 3.4, 0.95, 2.85, color=COLORS["muted"])
    box(ax, 0.2, 1.75, 5.4, 1.1, face="#F7F7F7", rounded=True)
    ax.text(0.35, 2.68, "warp 0: 32 threads (lanes) that issue each instruction together",
            fontsize=9, va="center")
    for lane in range(32):
        x = 0.35 + lane * 0.16
        box(ax, x, 1.9, 0.14, 0.5, face="#FCD9C0" if lane != 5 else block_colors[1],
            edge="#B0B0B0", lw=0.5)
        if lane in (0, 5, 31):
            ax.text(x + 0.07, 2.47, str(lane), ha="center", va="bottom", fontsize=7)

    # One thread.
    arrow(ax, 1.22, 1.9, 1.22, 1.35, color=COLORS["muted"])
    box(ax, 0.2, 0.2, 5.4, 1.15, face="white", edge=block_colors[1], rounded=True)
    ax.text(0.35, 1.12, "thread 5 of block 1 (threadIdx.x = 5, blockIdx.x = 1):", fontsize=9,
            va="center", weight="bold")
    ax.text(0.35, 0.78, "row = blockIdx.x * blockDim.x + threadIdx.x = 1 * 128 + 5 = 133",
            fontsize=9, va="center", family="DejaVu Sans Mono")
    ax.text(0.35, 0.42, "one query row; its own registers hold m, l, b, h, i, pointers",
            fontsize=9, va="center")

    # Right: the GPU.
    ax.text(6.0, 6.35, "The GPU (H100: 132 SMs)", fontsize=11, weight="bold", va="center")
    sm_x = [6.0, 7.6, 9.35]
    sm_names = ["SM 0", "SM 1", "SM 131"]
    resident = [[0, 3], [1, 4], [2]]
    for x, name, blocks in zip(sm_x, sm_names, resident):
        box(ax, x, 3.3, 1.5, 2.8, face="white", rounded=True)
        ax.text(x + 0.75, 5.92, name, ha="center", va="center", fontsize=9, weight="bold")
        for s in range(4):
            box(ax, x + 0.1 + s * 0.33, 5.42, 0.3, 0.3, face="#DDE6F2", edge="#7F95B8", lw=0.6)
        ax.text(x + 0.75, 5.3, "4 warp schedulers", ha="center", va="top", fontsize=7)
        box(ax, x + 0.1, 4.45, 1.3, 0.55, face=COLORS["onchip"],
            text="registers\n256 KiB", fontsize=7)
        box(ax, x + 0.1, 3.85, 1.3, 0.55, face=COLORS["onchip"],
            text="shared mem / L1\n<= 228 KiB", fontsize=7)
        for n, b in enumerate(blocks):
            box(ax, x + 0.1 + n * 0.66, 3.4, 0.6, 0.38, face=block_colors[b] if b < 4 else
                block_colors[4], text=f"blk {b}" if b < 4 else "blk 4",
                fontsize=7, text_color="white")
    ax.text(9.22, 4.7, "...", ha="center", va="center", fontsize=14)
    ax.text(8.45, 3.07, "each SM runs several resident blocks (up to 2048 threads)",
            ha="center", va="center", fontsize=8, style="italic",
            bbox=dict(facecolor="white", edgecolor="none", pad=1.0), zorder=10)

    box(ax, 6.0, 2.3, 4.85, 0.55, face=COLORS["global"], text="L2 cache (50 MiB), shared by all SMs",
        fontsize=9)
    box(ax, 6.0, 1.45, 4.85, 0.7, face=COLORS["global"],
        text="global memory (HBM, 80 GB): Q, K, V, O from cudaMalloc", fontsize=9)
    for x in (6.3, 10.55):
        arrow(ax, x, 3.3, x, 2.85, style="<|-|>", color=COLORS["muted"], lw=1.0)
    arrow(ax, 8.5, 2.3, 8.5, 2.15, style="<|-|>", color=COLORS["muted"], lw=1.0)

    box(ax, 6.0, 0.2, 4.85, 0.75, face="#EAF2E3", rounded=True,
        text="host: CPU and its memory (std::vector); launches kernels, copies data", fontsize=9)
    arrow(ax, 7.2, 0.95, 7.2, 1.45, style="<|-|>", lw=1.2)
    ax.text(7.35, 1.2, "cudaMemcpy (over PCIe)", fontsize=8, va="center")

    return save(fig, out_dir, "fig_execution_model.png")


# ---------------------------------------------------------------------------------------------
# (b) The FlashAttention tiling


def _matrix(ax, x, y, w, h, color, label, parts, highlight, horizontal=False, hl_label=None):
    """A matrix in global memory split into `parts` slices, one of them highlighted."""
    box(ax, x, y, w, h, face="white", edge=color, lw=1.4)
    for n in range(1, parts):
        if horizontal:
            xs = x + w * n / parts
            ax.plot([xs, xs], [y, y + h], color=color, lw=0.5, alpha=0.6)
        else:
            ys = y + h - h * n / parts
            ax.plot([x, x + w], [ys, ys], color=color, lw=0.5, alpha=0.6)
    if horizontal:
        sx, sy, sw, sh = x + w * highlight / parts, y, w / parts, h
    else:
        sx, sy, sw, sh = x, y + h - h * (highlight + 1) / parts, w, h / parts
    box(ax, sx, sy, sw, sh, face=color, edge=color, alpha=0.85)
    ax.text(x + w / 2, y - 0.08, label, ha="center", va="top", fontsize=10,
            weight="bold", color=color)
    if hl_label:
        ax.text(sx + sw / 2, sy + sh / 2, hl_label, ha="center", va="center", fontsize=8,
                color="white", weight="bold")
    return sx, sy, sw, sh


def fig_tiling(out_dir):
    """Q blocks in the outer (parallel) loop, K/V tiles streamed through shared memory in the
    inner loop, S and P only on chip, O written once: the FlashAttention forward pass."""
    fig, ax = new_figure(11.0, 6.2)
    ax.text(0.2, 5.95, "FlashAttention forward: the tiling", fontsize=12, weight="bold",
            va="center")

    # Global memory.
    box(ax, 0.2, 0.3, 4.6, 5.0, face=COLORS["global"], rounded=True)
    ax.text(2.5, 0.72, "global memory (HBM)", ha="center", fontsize=9, style="italic")
    ax.text(2.5, 0.42, "outer loop: Q blocks i, one thread block each (the grid)",
            ha="center", fontsize=8)
    qx = _matrix(ax, 0.45, 1.1, 0.7, 3.7, COLORS["q"], "Q", 6, 0, hl_label="Q_i")
    kx = _matrix(ax, 1.6, 1.1, 0.7, 3.7, COLORS["k"], "K", 8, 6, hl_label="K_j")
    vx = _matrix(ax, 2.6, 1.1, 0.7, 3.7, COLORS["v"], "V", 8, 6, hl_label="V_j")
    ox = _matrix(ax, 3.75, 1.1, 0.7, 3.7, COLORS["o"], "O", 6, 0, hl_label="O_i")
    ax.annotate("", xy=(1.45, 1.1), xytext=(1.45, 4.8),
                arrowprops=dict(arrowstyle="-|>", color=COLORS["k"], lw=1.0))
    ax.text(1.38, 2.95, "tiles j = 0, 1, ...", fontsize=7, color=COLORS["k"], ha="center",
            va="center", rotation=90)

    # On chip.
    box(ax, 5.4, 0.3, 5.4, 5.0, face=COLORS["onchip"], rounded=True)
    ax.text(5.6, 0.72, "on chip: one thread block, one Q block i", fontsize=9, style="italic")
    ax.text(5.6, 0.42, "S and P (Br x Bc) never reach global memory", fontsize=9,
            color=COLORS["s"], weight="bold")
    # Shared memory with the tiles.
    box(ax, 5.6, 1.05, 2.3, 1.25, face="white", rounded=True)
    ax.text(6.75, 2.12, "shared memory", ha="center", fontsize=8, style="italic")
    box(ax, 5.75, 1.2, 0.9, 0.75, face=COLORS["k"], text="K_j\nBc x d", fontsize=8,
        text_color="white")
    box(ax, 6.85, 1.2, 0.9, 0.75, face=COLORS["v"], text="V_j\nBc x d", fontsize=8,
        text_color="white")
    # Registers: Q_i, acc, S, P, m, l.
    box(ax, 8.15, 1.05, 2.5, 3.95, face="white", rounded=True)
    ax.text(9.4, 4.82, "registers", ha="center", fontsize=8, style="italic")
    box(ax, 8.3, 4.0, 2.2, 0.65, face=COLORS["q"], text="Q_i  (Br x d), loaded once",
        fontsize=8, text_color="white")
    box(ax, 8.3, 3.1, 2.2, 0.7, face=COLORS["o"],
        text="acc = acc * alpha + P V_j\n(Br x d)", fontsize=8, text_color="white")
    box(ax, 8.3, 2.35, 2.2, 0.55, face="#F2E4F5", edge=COLORS["o"],
        text="m, l  (one pair per row)", fontsize=8)
    box(ax, 8.3, 1.25, 2.2, 0.9, face=COLORS["s"],
        text="S = Q_i K_j^T  (Br x Bc)\nP = 2^(S - m_new)", fontsize=8, text_color="white")

    # Loads and the store.
    arrow(ax, qx[0] + qx[2] / 2, qx[1] + qx[3], 8.3, 4.32, color=COLORS["q"],
          connection="arc3,rad=-0.12")
    arrow(ax, kx[0] + kx[2], kx[1] + kx[3] / 2, 5.75, 1.62, color=COLORS["k"],
          connection="arc3,rad=0.15")
    arrow(ax, vx[0] + vx[2], vx[1] + vx[3] / 2, 6.85, 1.3, color=COLORS["v"],
          connection="arc3,rad=0.25")
    arrow(ax, 7.75, 1.6, 8.3, 1.7, color=COLORS["edge"], lw=1.0)
    arrow(ax, 8.3, 3.45, ox[0] + ox[2], ox[1] + ox[3] / 2, color=COLORS["o"],
          connection="arc3,rad=0.1")
    ax.text(6.55, 3.5, "after the last tile: O_i = acc / l, written once", fontsize=8,
            color=COLORS["o"], ha="center")

    # The inner loop.
    ax.text(5.6, 3.2, "inner loop, j = 0 .. N/Bc - 1:\n"
            "1. load K_j, V_j (all threads)\n2. S, then m, l, alpha\n3. acc rescaled, += P V_j",
            fontsize=8, va="top")

    return save(fig, out_dir, "fig_tiling.png")


# ---------------------------------------------------------------------------------------------
# (c) The online softmax rescale

# Scores in base-2 units (s * log2(e)), three tiles of four keys, and a one-dimensional V:
# the max rises in tile 1 (alpha < 1) and not in tile 2 (alpha = 1).
ONLINE_TILES = [[0.5, 1.2, -0.3, 0.8], [2.6, 1.9, 3.1, 0.4], [2.2, 3.0, 1.5, 2.8]]
ONLINE_V = [[0.2, -0.5, 0.9, 0.1], [-0.3, 0.7, 0.4, -0.8], [0.6, -0.1, 0.3, 0.5]]


def online_softmax_steps(tiles, values):
    """The recurrence, once per tile: returns one dict per tile and the final output."""
    m, l, acc = -math.inf, 0.0, 0.0
    steps = []
    for s, v in zip(tiles, values):
        m_new = max(m, max(s))
        alpha = 2.0 ** (m - m_new)  # 0 on the first tile: 2^-inf
        p = [2.0 ** (x - m_new) for x in s]
        l = l * alpha + sum(p)
        acc = acc * alpha + sum(pj * vj for pj, vj in zip(p, v))
        steps.append({"m_old": m, "m_new": m_new, "alpha": alpha, "p_sum": sum(p), "l": l,
                      "acc": acc})
        m = m_new
    return steps, acc / l


def fig_online_softmax(out_dir):
    steps, o = online_softmax_steps(ONLINE_TILES, ONLINE_V)
    flat_s = [x for t in ONLINE_TILES for x in t]
    flat_v = [x for t in ONLINE_V for x in t]
    m = max(flat_s)
    w = [2.0 ** (x - m) for x in flat_s]
    two_pass = sum(wi * vi for wi, vi in zip(w, flat_v)) / sum(w)

    fig = plt.figure(figsize=(10.0, 6.2))
    ax = fig.add_axes([0.08, 0.50, 0.88, 0.42])
    tile_colors = [COLORS["q"], COLORS["k"], COLORS["v"]]
    n = len(ONLINE_TILES[0])
    for t, tile in enumerate(ONLINE_TILES):
        xs = [t * n + j for j in range(n)]
        ax.bar(xs, tile, color=tile_colors[t], width=0.7, label=f"tile {t}", zorder=2)
        for x, sv, vv in zip(xs, tile, ONLINE_V[t]):
            ax.text(x, -0.62, f"v={vv:g}", ha="center", va="center", fontsize=7,
                    color="#555555")
        ax.axvspan(t * n - 0.5, t * n + n - 0.5, color=tile_colors[t], alpha=0.06, zorder=0)
        ax.hlines(steps[t]["m_new"], t * n - 0.5, t * n + n - 0.5, colors="black",
                  linestyles="--", lw=1.4, zorder=3)
        ax.text(t * n + n - 0.55, steps[t]["m_new"] + 0.12, f"m = {steps[t]['m_new']:g}",
                ha="right", fontsize=9)
    ax.axhline(0, color="#777777", lw=0.8)
    ax.set_xticks(range(len(flat_s)))
    ax.set_xticklabels([f"{j}" for j in range(len(flat_s))])
    ax.set_xlabel("key j")
    ax.set_ylabel("score s_j (base-2 units)")
    ax.set_ylim(-0.8, 3.8)
    ax.set_xlim(-0.6, len(flat_s) - 0.4)
    ax.set_title("Online softmax over three tiles of keys (scores times log2(e)): the running "
                 "max m after each tile, dashed")
    ax.legend(loc="upper left", ncol=3, frameon=False)
    for spine in ("top", "right"):
        ax.spines[spine].set_visible(False)

    # The table of the state after each tile.
    tab = fig.add_axes([0.02, 0.02, 0.96, 0.38])
    tab.axis("off")

    def fmt(x):
        return "-inf" if x == -math.inf else f"{x:.4f}".rstrip("0").rstrip(".")

    rows = []
    for t, st in enumerate(steps):
        rows.append([f"tile {t}", fmt(st["m_old"]), fmt(st["m_new"]),
                     f"2^({fmt(st['m_old'])} - {fmt(st['m_new'])}) = "
                     + ("0" if st["alpha"] == 0 else f"{st['alpha']:.4f}"),
                     f"{st['p_sum']:.4f}", f"{st['l']:.4f}", f"{st['acc']:.4f}"])
    header = ["", "m_old", "m_new", "alpha = 2^(m_old - m_new)", "sum_j 2^(s_j - m_new)",
              "l = l*alpha + sum", "acc*alpha + sum 2^(s-m) v"]
    table = tab.table(cellText=rows, colLabels=header, loc="upper center", cellLoc="center",
                      colWidths=[0.07, 0.08, 0.08, 0.24, 0.17, 0.15, 0.21])
    table.auto_set_font_size(False)
    table.set_fontsize(9)
    table.scale(1, 1.5)
    for (r, c), cell in table.get_celld().items():
        if r == 0:
            cell.set_facecolor("#EEEEEE")
        elif c == 0:
            cell.set_text_props(color=tile_colors[r - 1], weight="bold")
    tab.text(0.5, 0.26,
             f"o = acc / l = {steps[-1]['acc']:.4f} / {steps[-1]['l']:.4f} = {o:.6f};   "
             f"the two-pass softmax (max first) gives {two_pass:.6f}",
             ha="center", fontsize=10, weight="bold")
    tab.text(0.5, 0.13, "alpha rescales both l and acc; on tile 0, m_old = -inf gives alpha = 0",
             ha="center", fontsize=9)
    return save(fig, out_dir, "fig_online_softmax.png")


# ---------------------------------------------------------------------------------------------
# (d) The causal tile map


def causal_tile_class(q0, q1, k0, k1, shift):
    """Tile [q0, q1) x [k0, k1) under `key j visible to query i iff j <= i + shift`."""
    if k1 - 1 <= q0 + shift:
        return "visible"
    if k0 > q1 - 1 + shift:
        return "masked"
    return "partial"


def _causal_panel(ax, seq_q, seq_k, tile):
    shift = seq_k - seq_q
    fill = {"visible": COLORS["visible"], "partial": COLORS["partial"],
            "masked": COLORS["masked"]}
    for qb in range(0, seq_q, tile):
        for kb in range(0, seq_k, tile):
            q1, k1 = min(qb + tile, seq_q), min(kb + tile, seq_k)
            cls = causal_tile_class(qb, q1, kb, k1, shift)
            for i in range(qb, q1):
                for j in range(kb, k1):
                    seen = j <= i + shift
                    face = fill[cls] if (seen or cls == "masked") else "white"
                    alpha = 0.9 if seen else (0.9 if cls == "masked" else 1.0)
                    ax.add_patch(plt.Rectangle((j, seq_q - 1 - i), 1, 1, facecolor=face,
                                               edgecolor="#BBBBBB", lw=0.4, alpha=alpha))
            ax.add_patch(plt.Rectangle((kb, seq_q - q1), k1 - kb, q1 - qb, fill=False,
                                       edgecolor="black", lw=1.6))
            label = {"visible": "all", "partial": "mask", "masked": "skip"}[cls]
            ax.text((kb + k1) / 2, seq_q - (qb + q1) / 2, label, ha="center", va="center",
                    fontsize=8, weight="bold", color="black")
    # The diagonal j = i + shift (the last visible key of each row).
    xs = [max(0, shift), min(seq_k, seq_q + shift)]
    ax.plot([x + 1 for x in xs], [seq_q - (x - shift) for x in xs], color=COLORS["s"], lw=1.2,
            ls="--")
    ax.set_xlim(-0.3, seq_k + 0.3)
    ax.set_ylim(-0.3, seq_q + 0.3)
    ax.set_aspect("equal")
    ax.set_xticks([t + 0.5 for t in range(0, seq_k, tile)] + [seq_k - 0.5])
    ax.set_xticklabels([str(t) for t in range(0, seq_k, tile)] + [str(seq_k - 1)])
    ax.set_yticks([seq_q - t - 0.5 for t in range(0, seq_q, tile)] + [0.5])
    ax.set_yticklabels([str(t) for t in range(0, seq_q, tile)] + [str(seq_q - 1)])
    ax.set_xlabel("key j (tiles of 4)")
    ax.set_ylabel("query i (blocks of 4)")
    ax.set_title(f"seq_q = {seq_q}, seq_k = {seq_k}:  j <= i + {shift}" if shift >= 0 else
                 f"seq_q = {seq_q}, seq_k = {seq_k}:  j <= i - {-shift}", fontsize=10)
    for spine in ax.spines.values():
        spine.set_visible(False)
    ax.tick_params(length=0, labelsize=8)


def fig_causal_tiles(out_dir):
    fig, (a, b) = plt.subplots(1, 2, figsize=(11.0, 5.2),
                               gridspec_kw={"width_ratios": [18, 10]})
    _causal_panel(a, 10, 18, 4)
    _causal_panel(b, 18, 10, 4)
    b.text(5, -2.6, "queries 0-7 see no key: their rows are 0, not NaN", ha="center",
           fontsize=9, color=COLORS["s"])
    from matplotlib.patches import Patch
    handles = [Patch(facecolor=COLORS["visible"], edgecolor="black", label="all visible: no mask"),
               Patch(facecolor=COLORS["partial"], edgecolor="black",
                     label="partial: element mask (white = masked)"),
               Patch(facecolor=COLORS["masked"], edgecolor="black",
                     label="fully masked: tile skipped, never loaded")]
    fig.legend(handles=handles, loc="lower center", ncol=3, frameon=False, fontsize=9)
    fig.suptitle("Causal mask, bottom-right aligned: query i sees key j iff "
                 "j <= i + (seq_k - seq_q); dashed: the last visible key", fontsize=11)
    fig.subplots_adjust(left=0.06, right=0.98, top=0.88, bottom=0.2, wspace=0.25)
    return save(fig, out_dir, "fig_causal_tiles.png")


# ---------------------------------------------------------------------------------------------
# (e) The mma.sync m16n8k16 fragments

REG_COLORS = ["#4C72B0", "#8FB0DE", "#DD8452", "#F2B98F"]


def mma_a_owner(row, col):
    """(lane, register) holding A[row][col] of a 16x16 16-bit A fragment (PTX ISA layout)."""
    g, t = row % 8, (col % 8) // 2
    reg = (1 if row >= 8 else 0) + (2 if col >= 8 else 0)
    return 4 * g + t, reg


def mma_b_owner(k, n):
    """(lane, register) holding B[k][n] of a 16x8 16-bit B fragment."""
    return 4 * n + (k % 8) // 2, (1 if k >= 8 else 0)


def mma_c_owner(row, n):
    """(lane, register) holding C[row][n] of the 16x8 fp32 accumulator."""
    return 4 * (row % 8) + n // 2, (2 if row >= 8 else 0) + n % 2


def _fragment_panel(ax, rows, cols, owner, names, title, xlabel, ylabel):
    for r in range(rows):
        for c in range(cols):
            lane, reg = owner(r, c)
            ax.add_patch(plt.Rectangle((c, rows - 1 - r), 1, 1, facecolor=REG_COLORS[reg],
                                       edgecolor="white", lw=0.8))
            ax.text(c + 0.5, rows - 0.5 - r, str(lane), ha="center", va="center", fontsize=6.5,
                    color="black")
    ax.set_xlim(0, cols)
    ax.set_ylim(0, rows)
    ax.set_aspect("equal")
    ax.set_xticks([c + 0.5 for c in range(cols)])
    ax.set_xticklabels([str(c) for c in range(cols)], fontsize=7)
    ax.set_yticks([rows - 0.5 - r for r in range(rows)])
    ax.set_yticklabels([str(r) for r in range(rows)], fontsize=7)
    ax.set_xlabel(xlabel, fontsize=9)
    ax.set_ylabel(ylabel, fontsize=9)
    ax.xaxis.set_label_position("top")
    ax.xaxis.tick_top()
    ax.tick_params(length=0)
    for spine in ax.spines.values():
        spine.set_visible(False)
    ax.set_title(title, fontsize=10, pad=30)
    for n, name in enumerate(names):
        ax.text(0.3 + n * (cols / len(names)), -0.9, name, fontsize=9, va="top",
                color="black", weight="bold",
                bbox=dict(facecolor=REG_COLORS[n], edgecolor="none", pad=3))


def fig_mma_fragments(out_dir):
    fig = plt.figure(figsize=(11.0, 6.4))
    ax_a = fig.add_axes([0.04, 0.2, 0.42, 0.62])
    ax_b = fig.add_axes([0.50, 0.2, 0.21, 0.62])
    ax_c = fig.add_axes([0.76, 0.2, 0.21, 0.62])
    _fragment_panel(ax_a, 16, 16, mma_a_owner, ["a0", "a1", "a2", "a3"],
                    "A: 16 x 16, 16-bit (4 registers of 2)", "k", "row")
    _fragment_panel(ax_b, 16, 8, mma_b_owner, ["b0", "b1"],
                    "B: 16 x 8, 16-bit (2 registers of 2)", "n", "k")
    _fragment_panel(ax_c, 16, 8, mma_c_owner, ["c0", "c1", "c2", "c3"],
                    "C, D: 16 x 8, fp32 (4 registers)", "n", "row")
    fig.suptitle("mma.sync.aligned.m16n8k16: the lane that holds each element "
                 "(colour: the register)", fontsize=11, y=0.97)
    fig.text(0.5, 0.085,
             "g = lane / 4 (groupID), t = lane % 4.   "
             "a0: A[g][2t, 2t+1]   a1: A[g+8][2t, 2t+1]   a2: A[g][2t+8, 2t+9]   "
             "a3: A[g+8][2t+8, 2t+9]",
             ha="center", fontsize=9, family="DejaVu Sans Mono")
    fig.text(0.5, 0.035,
             "b0: B[2t, 2t+1][g]   b1: B[2t+8, 2t+9][g]   "
             "c0, c1: C[g][2t], C[g][2t+1]   c2, c3: C[g+8][2t], C[g+8][2t+1]",
             ha="center", fontsize=9, family="DejaVu Sans Mono")
    return save(fig, out_dir, "fig_mma_fragments.png")


# ---------------------------------------------------------------------------------------------

FIGURES = {
    "execution_model": fig_execution_model,
    "tiling": fig_tiling,
    "online_softmax": fig_online_softmax,
    "causal_tiles": fig_causal_tiles,
    "mma_fragments": fig_mma_fragments,
}


def lesson_figure_modules():
    """The scripts/figures_*.py files (each with make(out_dir)), by name, sorted."""
    found = {}
    for path in sorted(glob.glob(os.path.join(HERE, "figures_*.py"))):
        name = os.path.splitext(os.path.basename(path))[0]
        if name == "figures_common":
            continue
        found[name] = path
    return found


def run_lesson_figures(name, path, out_dir):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not hasattr(module, "make"):
        raise SystemExit(f"make_figures: {path} has no make(out_dir)")
    return module.make(out_dir)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", default=DEFAULT_OUT, help="where the PNGs go (docs/img)")
    parser.add_argument("--only", help="one figure (" + ", ".join(FIGURES) +
                        ") or one scripts/figures_*.py by its name, e.g. figures_02")
    parser.add_argument("--list", action="store_true", help="list the figure names and exit")
    args = parser.parse_args(argv)
    lessons = lesson_figure_modules()
    if args.list:
        print("\n".join(list(FIGURES) + list(lessons)))
        return 0
    if args.only and args.only not in FIGURES and args.only not in lessons:
        print(f"make_figures: no figure named {args.only!r}; known: " +
              ", ".join(list(FIGURES) + list(lessons)), file=sys.stderr)
        return 2
    for name, draw in FIGURES.items():
        if args.only in (None, name):
            print(draw(args.out_dir))
    for name, path in lessons.items():
        if args.only in (None, name):
            made = run_lesson_figures(name, path, args.out_dir)
            for p in made if isinstance(made, (list, tuple)) else ([made] if made else []):
                print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
