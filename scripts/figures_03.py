#!/usr/bin/env python3
"""Figures of lesson 03 (the online softmax), written to docs/img/03_*.png.

  03_row_split.png   how the fp32 tiling of common/device/fp32_tiles.cuh spreads a query row
                     over threads: at D = 128 two neighbouring threads share a row, float4
                     chunks of a K/V row dealt round-robin, their partial scores summed by one
                     shuffle
  03_measured.png    modules 02 and 03 and PyTorch's fp32 SDPA on the H100, TFLOP/s against
                     N, from the committed bench JSON

make(out_dir) writes them all (scripts/make_figures.py calls it); run alone:
python3 scripts/figures_03.py [OUT_DIR] (default docs/img).
"""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)
from matplotlib.patches import FancyArrowPatch, Rectangle  # noqa: E402

# The course's palette (one meaning per colour across the lessons): scripts/figures_common.py.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from figures_common import COLORS, RESULTS, ROOT, STYLE  # noqa: E402
from figures_common import save_full_colour as _save  # noqa: E402
PART_COLORS = ("#4C72B0", "#8172B3")  # the two threads of a row at D = 128



def _box(ax, x, y, w, h, face, text=None, fontsize=7.5, color="white", lw=0.6):
    ax.add_patch(Rectangle((x, y), w, h, facecolor=face, edgecolor=COLORS["edge"], lw=lw))
    if text is not None:
        ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=fontsize,
                color=color)


def _arrow(ax, x0, y0, x1, y1, color):
    ax.add_patch(FancyArrowPatch((x0, y0), (x1, y1), arrowstyle="-|>", mutation_scale=9,
                                 color=color, lw=0.9))


def fig_row_split(out_dir):
    """D = 128, kSplit = 2: thread part p of query q holds chunks p, p + 2, p + 4, ..."""
    with plt.rc_context(STYLE):
        width, height = 14.0, 6.6
        fig = plt.figure(figsize=(width, height))
        ax = fig.add_axes([0, 0, 1, 1])
        ax.set_xlim(0, width)
        ax.set_ylim(0, height)
        ax.axis("off")
        x0, cw, rw, xr = 0.4, 0.3, 0.6, 10.3  # left edge, chunk width, register box, notes
        # The block: threads -> (query, part).
        ax.text(x0, 6.25, "D = 128 (kSplit = 2): a block of 128 threads holds 64 queries; "
                "thread i holds query first + i / 2, part i % 2.   (D <= 64, kSplit = 1: "
                "thread i holds query first + i, its whole row.)", fontsize=9.5, va="center")
        for t in range(16):
            _box(ax, x0 + t * rw, 5.45, rw - 0.02, 0.5, PART_COLORS[t % 2],
                 f"i={t}\nq{t // 2} p{t % 2}", fontsize=6.5)
        ax.text(xr, 5.7, "... up to i = 127: query 63, part 1", fontsize=8.5, va="center")
        # The V (or K) row in shared memory: 32 float4 chunks.
        yrow = 4.1
        ax.text(x0, yrow + 0.75, "Row j of the K or V tile in shared memory: 128 floats = 32 "
                "float4 chunks of 16 bytes (chunk c = columns 4c .. 4c + 3)",
                fontsize=9.5, va="center")
        ax.add_patch(Rectangle((x0 - 0.08, yrow - 0.1), 32 * cw + 0.16, 0.6,
                               facecolor=COLORS["onchip"], edgecolor="none"))
        for c in range(32):
            _box(ax, x0 + c * cw, yrow, cw, 0.4, PART_COLORS[c % 2], str(c), fontsize=6)
        ax.text(xr, yrow + 0.2, "chunk c belongs to part c % 2,\nwhich holds it as its "
                "chunk t = c / 2", fontsize=8.5, va="center")
        # The registers of the two threads of query q.
        yreg = (2.2, 1.3)
        for part in range(2):
            y = yreg[part]
            for t in range(16):
                col = 4 * (2 * t + part)
                _box(ax, x0 + t * rw, y, rw - 0.02, 0.4, PART_COLORS[part],
                     f"{col}-{col + 3}", fontsize=6)
            ax.text(xr, y + 0.2, f"thread part {part} (i = 2q + {part}): acc[4t + e] and "
                    f"q_reg[4t + e]\nhold column 4 (2t + {part}) + e, t = 0 .. 15",
                    fontsize=8.5, va="center")
        for t in range(4):
            for part in range(2):
                c = 2 * t + part
                _arrow(ax, x0 + c * cw + cw / 2, yrow, x0 + t * rw + rw / 2,
                       yreg[part] + 0.42, PART_COLORS[part])
        ax.text(x0, 0.72, "Step t of a loop over chunks: part 0 reads chunk 2t and part 1 "
                "chunk 2t + 1, neighbouring 16-byte words in different banks (no conflict); "
                "all queries of a warp read the same row j (a broadcast).",
                fontsize=8.5, va="center")
        ax.text(x0, 0.3, "Score s_j = q . k_j: each part sums its 64 columns, then "
                "dot += __shfl_xor_sync(0xffffffff, dot, 1) adds the neighbour's half; both "
                "threads hold s_j and update their own half of acc.",
                fontsize=8.5, va="center", color=COLORS["s"])
        return _save(fig, out_dir, "03_row_split.png")


def _bench_rows(name, kernel):
    with open(os.path.join(RESULTS, name), encoding="utf-8") as f:
        data = json.load(f)
    return [r for r in data["results"]
            if r.get("kernel") == kernel and r.get("status") == "ok" and not r.get("causal")]


def fig_measured(out_dir):
    """TFLOP/s of module 02, module 03 and PyTorch against N, d = 64 and 128."""
    series = [("02 shared-memory tiles, three passes", "bench_h100_module02_torch.json",
               "02_smem_tiling/solution", COLORS["k"], "o"),
              ("03 online softmax, one pass", "bench_h100_modules03_06_torch.json",
               "03_online_softmax/solution", COLORS["q"], "o"),
              ("PyTorch SDPA, memory-efficient, fp32", "bench_h100_modules03_06_torch.json",
               "torch_sdpa_efficient", COLORS["muted"], "s")]
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(1, 2, figsize=(10, 3.9), sharey=True)
        for ax, d in zip(axes, (64, 128)):
            for label, path, kernel, color, marker in series:
                rows = sorted((r for r in _bench_rows(path, kernel) if r["head_dim"] == d),
                              key=lambda r: r["seq_q"])
                xs = [r["seq_q"] for r in rows]
                ys = [r["tflops"] for r in rows]
                ax.plot(xs, ys, marker=marker, color=color, label=label,
                        linestyle="--" if kernel.startswith("torch") else "-")
                ax.annotate(f"{ys[-2]:.2f}", (xs[-2], ys[-2]), textcoords="offset points",
                            xytext=(0, 6), ha="center", fontsize=8, color=color)
            ax.set_xscale("log", base=2)
            ax.set_xticks([512, 1024, 2048, 4096, 8192, 16384])
            ax.set_xticklabels(["512", "1k", "2k", "4k", "8k", "16k"])
            ax.set_ylim(0, 52)
            ax.set_xlabel("N = seq_q = seq_k (16k tokens per batch)")
            ax.set_title(f"head_dim {d}, fp32, H100 80GB HBM3")
            ax.grid(True, color="#eeeeee")
        axes[0].set_ylabel("TFLOP/s")
        handles, labels = axes[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="lower center", ncol=3, frameon=False)
        fig.tight_layout(rect=(0, 0.08, 1, 1))
        return _save(fig, out_dir, "03_measured.png")


def make(out_dir):
    """Write every figure of lesson 03 into out_dir; return their paths."""
    return [fig_row_split(out_dir), fig_measured(out_dir)]


if __name__ == "__main__":
    for written in make(sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "docs", "img")):
        print(written)
