#!/usr/bin/env python3
"""Figures of module 05's lesson (modules/05_batched_gemm/README.md), called by
scripts/make_figures.py through make(out_dir); runnable alone:
python3 scripts/figures_05.py [out_dir].

  05_unfused_vs_fused.png   the three kernels and the bytes of S and P that go through DRAM,
                            beside one fused kernel (arithmetic for one benchmark shape)
  05_scores_memory.png      the scores' memory against N (computed) and the measured largest
                            N that runs on the H100 (docs/results/bench05_h100.json)
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
REPO = os.path.dirname(HERE)

from figures_common import COLORS, arrow, box, new_figure, plt, save  # noqa: E402

GIB = float(1 << 30)


def unfused_vs_fused(out_dir):
    # One benchmark shape: 16k tokens (B = 2, N = 8192), H = 32, d = 64, fp32.
    B, H, N, d = 2, 32, 8192, 64
    s_gib = 4.0 * B * H * N * N / GIB          # S (and P: the same size)
    t_gib = 4.0 * B * H * N * d / GIB          # each of Q, K, V, O
    fig, ax = new_figure(11.0, 5.45)
    ax.text(0.2, 5.25, f"Unfused (module 05): three kernels, S and P in DRAM "
            f"(B = {B}, H = {H}, N = {N}, d = {d}, fp32)", fontsize=11, weight="bold",
            va="center")
    g = COLORS["global"]
    mib = t_gib * 1024
    y = 3.55
    box(ax, 0.2, y, 1.4, 0.9, face=g, text=f"Q, K\n{mib:.0f} MiB each", fontsize=8.5)
    box(ax, 2.1, y, 1.7, 0.9, face="white", edge=COLORS["s"], lw=2,
        text="kernel 1: S = scale·QKᵀ\n(batched GEMM)", fontsize=8.5, rounded=True)
    box(ax, 4.9, y, 1.7, 0.9, face="white", edge=COLORS["s"], lw=2,
        text="kernel 2: P = softmax(S)\n(row softmax, in place)", fontsize=8.5, rounded=True)
    box(ax, 7.7, y, 1.5, 0.9, face="white", edge=COLORS["s"], lw=2,
        text="kernel 3: O = P V\n(batched GEMM)", fontsize=8.5, rounded=True)
    box(ax, 9.7, y, 1.1, 0.9, face=g, text=f"O\n{mib:.0f} MiB", fontsize=8.5)
    box(ax, 7.7, y + 1.0, 1.5, 0.35, face=g, text=f"V, {mib:.0f} MiB", fontsize=8)
    arrow(ax, 8.45, y + 1.0, 8.45, y + 0.9, lw=1.0)
    arrow(ax, 1.6, y + 0.45, 2.1, y + 0.45)
    arrow(ax, 9.2, y + 0.45, 9.7, y + 0.45)
    box(ax, 2.1, 2.55, 7.1, 0.6, face=g,
        text=f"the scores in DRAM: S, then P over it: {s_gib:.0f} GiB (B·H·N² floats)",
        fontsize=9.5)
    arrow(ax, 2.95, y, 2.95, 3.15, text="write S  (1)", fontsize=8, text_offset=(0.55, -0.1))
    arrow(ax, 5.4, 3.15, 5.4, y, text="read S twice  (2)", fontsize=8,
          text_offset=(-0.6, -0.1), color=COLORS["edge"])
    arrow(ax, 6.1, y, 6.1, 3.15, text="write P  (1)", fontsize=8, text_offset=(0.55, -0.1))
    arrow(ax, 8.45, 3.15, 8.45, y, text="read P  (1)", fontsize=8, text_offset=(0.55, -0.1))
    ax.text(0.2, 2.3 - 0.05, f"5 passes over the scores = {5 * s_gib:.0f} GiB of DRAM traffic "
            f"beyond Q, K, V, O, and {s_gib:.0f} GiB of memory: O(N²).", fontsize=9.5,
            va="center")

    ax.text(0.2, 1.75, "Fused (modules 03, 04, 06, 07): one kernel, S and P never leave the SM",
            fontsize=11, weight="bold", va="center")
    y = 0.3
    box(ax, 0.2, y, 1.4, 1.0, face=g, text=f"Q, K, V\n{mib:.0f} MiB each", fontsize=8.5)
    box(ax, 2.0, y - 0.1, 5.4, 1.2, face=COLORS["onchip"], rounded=True)
    ax.text(4.7, y + 0.85, "one kernel: tiles of K, V in shared memory", fontsize=9,
            ha="center", va="center")
    for i, (label, col) in enumerate([("S tile", COLORS["s"]), ("softmax", COLORS["edge"]),
                                      ("P tile", COLORS["s"]), ("O += P V", COLORS["o"])]):
        box(ax, 2.2 + i * 1.3, y + 0.05, 1.1, 0.5, face="white", edge=col, text=label,
            fontsize=8.5)
        if i:
            arrow(ax, 2.2 + i * 1.3 - 0.2, y + 0.3, 2.2 + i * 1.3, y + 0.3, lw=1.0)
    box(ax, 7.9, y, 1.4, 1.0, face=g, text=f"O\n{mib:.0f} MiB", fontsize=8.5)
    arrow(ax, 1.6, y + 0.5, 2.0, y + 0.5)
    arrow(ax, 7.4, y + 0.5, 7.9, y + 0.5)
    ax.text(9.5, y + 0.5, "no N x N\nbuffer at all", fontsize=9, va="center")
    return save(fig, out_dir, "05_unfused_vs_fused.png")


def scores_memory(out_dir):
    with open(os.path.join(REPO, "docs", "results", "bench05_h100.json")) as f:
        data = json.load(f)
    probe = data["oom_probe"][0]
    total_gib = data["device"]["total_memory_bytes"] / GIB
    H = probe["heads"]
    ns = [1024 * 2 ** (k / 4) for k in range(0, 29)]
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    ax.plot(ns, [4.0 * H * n * n / GIB for n in ns], color=COLORS["s"],
            label=f"scores S: 4·H·N² bytes (B = 1, H = {H}, fp32)")
    ax.plot(ns, [4.0 * 4 * H * n * probe["head_dim"] / GIB for n in ns], color=COLORS["q"],
            label=f"Q, K, V, O at d = {probe['head_dim']}")
    ax.axhline(total_gib, color=COLORS["edge"], ls="--", lw=1)
    ax.text(1100, total_gib * 1.15, f"H100 memory: {total_gib:.1f} GiB", fontsize=9)
    ax.plot([probe["largest_seq"]], [probe["scores_bytes"] / GIB], "o", color=COLORS["v"],
            label=f"measured: largest N that runs, {probe['largest_seq']:,}")
    ax.plot([probe["first_failing_seq"]], [probe["failing_scores_bytes"] / GIB], "x",
            color=COLORS["s"], ms=9, mew=2,
            label=f"measured: N = {probe['first_failing_seq']:,} fails with a clear error")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xlabel("sequence length N")
    ax.set_ylabel("GiB")
    ax.set_title("Module 05 keeps the scores in memory: O(N²)")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    return save(fig, out_dir, "05_scores_memory.png")


def make(out_dir):
    return [unfused_vs_fused(out_dir), scores_memory(out_dir)]


if __name__ == "__main__":
    for path in make(sys.argv[1] if len(sys.argv) > 1 else os.path.join(REPO, "docs", "img")):
        print(path)
