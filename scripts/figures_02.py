#!/usr/bin/env python3
"""Figures of lesson 02 (shared-memory tiling), written to docs/img/02_*.png.

  02_bank_conflicts.png   which bank each lane of a warp reads or writes, for the tile copy,
                          the compute loop's broadcast, a row per thread (a 32-way conflict)
                          and the same rows padded by one float
  02_tile_copy.png        the cooperative copy of one 32 x 64 tile: which warp and lane
                          copies which element, against a chunk per thread
  02_measured.png         module 01 and module 02 on the H100, TFLOP/s against N, from the
                          committed bench JSON

make(out_dir) writes them all (scripts/make_figures.py calls it); run alone:
python3 scripts/figures_02.py [OUT_DIR] (default docs/img).
"""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)
from matplotlib.patches import Rectangle  # noqa: E402

# The course's palette (one meaning per colour across the lessons): scripts/figures_common.py.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from figures_common import COLORS, RESULTS, ROOT, STYLE  # noqa: E402
from figures_common import save_full_colour as _save  # noqa: E402



def _lane_bank_panel(ax, title, lanes_to_cells, verdict, color, note=None):
    """A 32 x 32 grid: row = lane of the warp, column = shared-memory bank. A filled cell is
    the bank the lane touches in one instruction."""
    ax.set_xlim(0, 32)
    ax.set_ylim(32, 0)
    ax.set_aspect("equal")
    for lane, bank in lanes_to_cells:
        ax.add_patch(Rectangle((bank, lane), 1, 1, facecolor=color, edgecolor="none"))
    for x in range(0, 33, 8):
        ax.axvline(x, color="#dddddd", lw=0.6, zorder=0)
    for y in range(0, 33, 8):
        ax.axhline(y, color="#dddddd", lw=0.6, zorder=0)
    ax.set_xticks([0, 8, 16, 24, 31.5])
    ax.set_xticklabels(["0", "8", "16", "24", "31"])
    ax.set_yticks([0.5, 8.5, 16.5, 24.5, 31.5])
    ax.set_yticklabels(["0", "8", "16", "24", "31"])
    ax.set_xlabel("bank")
    ax.set_ylabel("lane")
    ax.set_title(title, fontsize=9.5)
    ax.text(16, 39.5, verdict, ha="center", va="top", fontsize=9, weight="bold",
            color=COLORS["s"] if "conflict" in verdict else COLORS["edge"])
    if note:
        ax.text(19.5, 16, note, ha="center", va="center", fontsize=8, color=COLORS["edge"],
                bbox={"facecolor": "white", "edgecolor": "#cccccc", "pad": 2})


def fig_bank_conflicts(out_dir):
    """Bank of lane L's word in four access patterns (D = 64, banks of 4 bytes, 32 banks)."""
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(1, 4, figsize=(11.5, 3.9))
        d, c = 64, 5  # head dim, and one column c the compute loop is at
        # 1. The copy's store: lane L writes tile[row][32m + L] -> word row*D + 32m + L.
        copy = [(lane, (3 * d + 32 + lane) % 32) for lane in range(32)]
        _lane_bank_panel(axes[0], "copy: lane L stores\ntile[row][32m + L]", copy,
                         "32 banks: 1 wavefront", COLORS["k"])
        # 2. The compute loop: every lane reads k_tile[j][c], the same word.
        bcast = [(lane, (7 * d + c) % 32) for lane in range(32)]
        _lane_bank_panel(axes[1], "compute: every lane reads\nk_tile[j][c]", bcast,
                         "one word, broadcast: 1 wavefront", COLORS["k"],
                         note="all lanes:\nthe SAME word\nj*64 + 5")
        # 3. A row per thread, rows of D floats: lane t reads word t*D + c -> bank c.
        own = [(lane, (lane * d + c) % 32) for lane in range(32)]
        _lane_bank_panel(axes[2], "a row per thread: lane t reads\nq_tile[t][c], rows of 64",
                         own, "32-way conflict: 32 wavefronts", COLORS["q"],
                         note="lane t: word\nt*64 + 5, 32\nDIFFERENT words")
        # 4. The same, rows padded to D + 1 floats: bank (t + c) % 32.
        pad = [(lane, (lane * (d + 1) + c) % 32) for lane in range(32)]
        _lane_bank_panel(axes[3], "padded rows: lane t reads\nq_tile[t][c], rows of 65", pad,
                         "32 banks: 1 wavefront", COLORS["q"])
        fig.suptitle("Shared-memory banks hit by the 32 lanes of one warp in one instruction "
                     "(word w is in bank w mod 32; c = 5 here)", fontsize=10.5)
        fig.subplots_adjust(left=0.05, right=0.99, top=0.80, bottom=0.2, wspace=0.35)
        return _save(fig, out_dir, "02_bank_conflicts.png")


def fig_tile_copy(out_dir):
    """Who copies which element of a 32-key x 64-column tile (64 threads = 2 warps)."""
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(1, 2, figsize=(11, 4.3))
        rows, d, threads = 32, 64, 64
        warp_colors = [COLORS["k"], COLORS["q"]]
        for ax, mode in zip(axes, ("coalesced", "chunked")):
            ax.set_xlim(0, d)
            ax.set_ylim(rows, 0)
            ax.set_aspect("equal")
            for r in range(rows):
                for col in range(d):
                    e = r * d + col
                    if mode == "coalesced":
                        t = e % threads           # element e -> thread e % 64
                    else:
                        t = e // (rows * d // threads)  # thread t: 32 consecutive elements
                    warp = t // 32
                    shade = 0.55 + 0.45 * ((t % 32) / 31.0) if mode == "chunked" else 1.0
                    ax.add_patch(Rectangle((col, r), 1, 1, facecolor=warp_colors[warp],
                                           alpha=shade, edgecolor="none"))
            for x in range(0, d + 1, 32):
                ax.axvline(x, color="white", lw=1.5)
            ax.set_xticks([0, 16, 32, 48, 63.5])
            ax.set_xticklabels(["0", "16", "32", "48", "63"])
            ax.set_yticks([0.5, 8.5, 16.5, 24.5, 31.5])
            ax.set_yticklabels(["0", "8", "16", "24", "31"])
            ax.set_xlabel("column of the tile (head dim)")
            ax.set_ylabel("row of the tile (key)")
        axes[0].set_title("element e = row*64 + col copied by thread e % 64\n"
                          "one instruction of a warp = 32 neighbouring floats of a row: "
                          "4 sectors", fontsize=9.5)
        axes[1].set_title("thread t copies elements 32t .. 32t+31 (a chunk each)\n"
                          "one instruction of a warp = 32 floats 128 B apart: 32 sectors",
                          fontsize=9.5)
        # Mark one warp instruction in each panel: the first element of every lane of warp 0.
        for lane in range(32):
            e = lane  # coalesced: step 0 of warp 0 = elements 0..31
            axes[0].add_patch(Rectangle((e % d, e // d), 1, 1, fill=False,
                                        edgecolor=COLORS["edge"], lw=0.8))
            e2 = lane * 32  # chunked: step 0 of warp 0 = element 32 * lane
            axes[1].add_patch(Rectangle((e2 % d, e2 // d), 1, 1, fill=False,
                                        edgecolor=COLORS["edge"], lw=0.8))
        handles = [Rectangle((0, 0), 1, 1, facecolor=warp_colors[0]),
                   Rectangle((0, 0), 1, 1, facecolor=warp_colors[1]),
                   Rectangle((0, 0), 1, 1, fill=False, edgecolor=COLORS["edge"])]
        fig.legend(handles, ["warp 0 (threads 0-31)", "warp 1 (threads 32-63)",
                             "what warp 0 loads in its first instruction"],
                   loc="lower center", ncol=3, frameon=False)
        fig.subplots_adjust(left=0.05, right=0.99, top=0.86, bottom=0.2, wspace=0.15)
        return _save(fig, out_dir, "02_tile_copy.png")


def _bench_rows(name, kernel):
    with open(os.path.join(RESULTS, name), encoding="utf-8") as f:
        data = json.load(f)
    return [r for r in data["results"]
            if r.get("kernel") == kernel and r.get("status") == "ok" and not r.get("causal")]


def fig_measured(out_dir):
    """TFLOP/s of modules 01 and 02 against N, d = 64 and 128, from docs/results/*.json."""
    series = [("01 naive", "bench_h100_module01.json", "01_naive/solution", COLORS["muted"]),
              ("02 shared-memory tiles", "bench_h100_module02_torch.json",
               "02_smem_tiling/solution", COLORS["k"])]
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), sharey=True)
        for ax, d in zip(axes, (64, 128)):
            for label, path, kernel, color in series:
                rows = sorted((r for r in _bench_rows(path, kernel) if r["head_dim"] == d),
                              key=lambda r: r["seq_q"])
                xs = [r["seq_q"] for r in rows]
                ys = [r["tflops"] for r in rows]
                ax.plot(xs, ys, marker="o", color=color, label=label)
                ax.annotate(f"{ys[-2]:.2f}", (xs[-2], ys[-2]), textcoords="offset points",
                            xytext=(0, 6), ha="center", fontsize=8, color=color)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_ylim(0.1, 20)
            ax.set_xticks([512, 1024, 2048, 4096, 8192, 16384])
            ax.set_xticklabels(["512", "1k", "2k", "4k", "8k", "16k"])
            ax.set_xlabel("N = seq_q = seq_k (16k tokens per batch)")
            ax.set_title(f"head_dim {d}, fp32, H100 80GB HBM3")
            ax.grid(True, which="both", color="#eeeeee")
        axes[0].set_ylabel("TFLOP/s (log scale)")
        axes[0].legend(loc="center right")
        fig.tight_layout()
        return _save(fig, out_dir, "02_measured.png")


def make(out_dir):
    """Write every figure of lesson 02 into out_dir; return their paths."""
    return [fig_bank_conflicts(out_dir), fig_tile_copy(out_dir), fig_measured(out_dir)]


if __name__ == "__main__":
    for written in make(sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "docs", "img")):
        print(written)
