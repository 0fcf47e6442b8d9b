"""The shared style of the course's figures (scripts/make_figures.py and scripts/figures_*.py).

White background, 150 dpi, labels readable at the width of a lesson page, and a palette
that keeps one meaning per colour across the lessons:

  Q and query blocks        blue          K and key tiles       orange
  V                         green         O and accumulators    purple
  on-chip (shared memory, registers)      light yellow
  global memory (DRAM, L2)                light grey

Deterministic output: no random numbers, no timestamps in the PNG metadata, so running the
script twice writes the same bytes and `git status` stays clean.
"""
import io
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Rectangle  # noqa: E402
from PIL import Image  # noqa: E402  (a dependency of matplotlib)

DPI = 150
COLORS = {
    "q": "#4C72B0",
    "k": "#DD8452",
    "v": "#55A868",
    "o": "#8172B3",
    "s": "#C44E52",
    "onchip": "#FFF4C2",
    "global": "#E8E8E8",
    "edge": "#333333",
    "muted": "#999999",
    "visible": "#55A868",
    "partial": "#F2C14E",
    "masked": "#D9D9D9",
}

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository
RESULTS = os.path.join(ROOT, "docs", "results")  # the committed result files plots read

# White background, one font and its sizes: every figure of the course.
STYLE = {
    "figure.facecolor": "white",
    "axes.facecolor": "white",
    "savefig.facecolor": "white",
    "font.size": 10,
    "axes.titlesize": 11,
    "axes.labelsize": 10,
    "legend.fontsize": 9,
    "font.family": "DejaVu Sans",
}
plt.rcParams.update({**STYLE, "svg.hashsalt": "attn-course"})


def new_figure(width, height):
    """A figure with one axes in data units = inches-like boxes, no ticks, no frame."""
    fig = plt.figure(figsize=(width, height))
    ax = fig.add_axes([0, 0, 1, 1])
    ax.set_xlim(0, width)
    ax.set_ylim(0, height)
    ax.set_aspect("equal")
    ax.axis("off")
    return fig, ax


def box(ax, x, y, w, h, face="white", edge=None, lw=1.0, text=None, fontsize=9, rounded=False,
        text_color="black", weight="normal", alpha=1.0, ha="center", va="center", zorder=1):
    """A rectangle (optionally rounded) with centred text."""
    edge = edge or COLORS["edge"]
    if rounded:
        patch = FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.02,rounding_size=0.08",
                               facecolor=face, edgecolor=edge, linewidth=lw, alpha=alpha,
                               zorder=zorder)
    else:
        patch = Rectangle((x, y), w, h, facecolor=face, edgecolor=edge, linewidth=lw,
                          alpha=alpha, zorder=zorder)
    ax.add_patch(patch)
    if text is not None:
        tx = x + w / 2 if ha == "center" else (x + 0.08 if ha == "left" else x + w - 0.08)
        ty = y + h / 2 if va == "center" else (y + h - 0.08 if va == "top" else y + 0.08)
        ax.text(tx, ty, text, ha=ha, va=va, fontsize=fontsize, color=text_color,
                weight=weight, zorder=zorder + 1)
    return patch


def arrow(ax, x0, y0, x1, y1, color=None, lw=1.4, style="-|>", text=None, fontsize=8,
          text_offset=(0, 0.12), connection="arc3", zorder=5):
    """An arrow from (x0, y0) to (x1, y1) with an optional label at its middle."""
    color = color or COLORS["edge"]
    ax.add_patch(FancyArrowPatch((x0, y0), (x1, y1), arrowstyle=style, mutation_scale=12,
                                 color=color, linewidth=lw, connectionstyle=connection,
                                 zorder=zorder))
    if text:
        ax.text((x0 + x1) / 2 + text_offset[0], (y0 + y1) / 2 + text_offset[1], text,
                ha="center", va="bottom", fontsize=fontsize, color=color, zorder=zorder)


def save(fig, out_dir, name):
    """Write `name` (e.g. fig_tiling.png) into out_dir; return the path.

    The RGBA image is reduced to a 128-colour palette (Pillow, which matplotlib depends on):
    flat-colour drawings lose nothing visible and the files shrink about threefold. No
    Software or date metadata: the bytes depend only on the drawing."""
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, name)
    buffer = io.BytesIO()
    fig.savefig(buffer, dpi=DPI, format="png", metadata={"Software": None})
    plt.close(fig)
    buffer.seek(0)
    image = Image.open(buffer).convert("RGB")
    image = image.quantize(colors=128, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    image.save(path, format="PNG", optimize=True)
    return path


def save_full_colour(fig, out_dir, name):
    """Write `name` into out_dir as matplotlib draws it (no palette reduction: for plots with
    gradients or many colours, e.g. the lane/bank grids and measured curves); return the path.
    No Software metadata, so the bytes depend only on the drawing."""
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, name)
    fig.savefig(path, dpi=DPI, metadata={"Software": None})
    plt.close(fig)
    return path


LADDER_SERIES = [(64, False, "d = 64"), (128, False, "d = 128"), (64, True, "d = 64 causal"),
                 (128, True, "d = 128 causal")]


def ladder_bars(results_name, title, out_dir, name, figsize=(10.5, 4.4)):
    """Bars of TFLOP/s per rung for the four ladder shapes, from docs/results/<results_name>
    (rows with rung, head_dim, causal, tflops, status, as bench_07 and bench_09 write them;
    rungs in file order). A rung whose check failed gets an x instead of a bar; rung names
    lean when the longest would not fit its slot."""
    with open(os.path.join(RESULTS, results_name)) as f:
        rows = json.load(f)["rows"]
    rungs = []
    for r in rows:
        if r["rung"] not in rungs:
            rungs.append(r["rung"])
    fig, ax = plt.subplots(figsize=figsize)
    width = 0.2
    colors = [COLORS["q"], COLORS["k"], "#93ADD8", "#EDB48D"]
    top = max([r["tflops"] for r in rows if r.get("status") == "ok"] + [1.0])
    for i, (d, causal, label) in enumerate(LADDER_SERIES):
        vals, failed = [], []
        for k, rung in enumerate(rungs):
            match = [r for r in rows if r["rung"] == rung and r["head_dim"] == d and
                     r["causal"] == causal]
            ok = [r["tflops"] for r in match if r.get("status") == "ok"]
            vals.append(ok[0] if ok else 0.0)
            if match and not ok:
                failed.append(k)
        xs = [k + (i - 1.5) * width for k in range(len(rungs))]
        ax.bar(xs, vals, width, label=label, color=colors[i])
        for k in failed:
            ax.text(xs[k], top * 0.02, "x", ha="center", va="bottom", fontsize=9,
                    color=COLORS["s"])
    ax.set_xticks(range(len(rungs)))
    # About 0.065 inch a character against the slot's width.
    crowded = max(len(r) for r in rungs) * 0.065 > 0.9 * (figsize[0] - 1.2) / len(rungs)
    ax.set_xticklabels(rungs, fontsize=8.5 if crowded else 9, rotation=20 if crowded else 0,
                       ha="right" if crowded else "center")
    ax.set_ylabel("TFLOP/s (bf16)")
    ax.set_ylim(0, top * 1.15)
    ax.set_title(title, fontsize=10)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8, ncol=4, loc="upper left")
    fig.tight_layout()
    return save(fig, out_dir, name)
