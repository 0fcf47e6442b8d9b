#!/usr/bin/env python3
"""Figures of lesson 04 (the causal mask), written to docs/img/04_*.png.

  04_measured.png   module 04 on the H100: the time of a causal run over the time of the same
                    non-causal run, against N, beside the fraction of key tiles a block runs
                    (computed: 1/2 + Q / (2N), Q queries per block), from the committed bench
                    JSON; and the TFLOP/s of both runs (causal counts only visible pairs)

make(out_dir) writes them all (scripts/make_figures.py calls it); run alone:
python3 scripts/figures_04.py [OUT_DIR] (default docs/img).
"""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)

BENCH = "bench_h100_modules03_06_torch.json"
# The course's palette (one meaning per colour across the lessons): scripts/figures_common.py.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from figures_common import COLORS, RESULTS, ROOT, STYLE  # noqa: E402
from figures_common import save_full_colour as _save  # noqa: E402
# Queries per block of the fp32 tiling (common/device/fp32_tiles.cuh): 128 threads, one per
# row at D <= 64, two per row at D = 96 and 128.
QUERIES_PER_BLOCK = {64: 128, 128: 64}



def _rows():
    with open(os.path.join(RESULTS, BENCH), encoding="utf-8") as f:
        data = json.load(f)
    return [r for r in data["results"]
            if r.get("kernel") == "04_causal/solution" and r.get("status") == "ok"]


def fig_measured(out_dir):
    rows = _rows()
    by = {(r["head_dim"], r["seq_q"], bool(r["causal"])): r for r in rows}
    ns = sorted({r["seq_q"] for r in rows})
    with plt.rc_context(STYLE):
        fig, (left, right) = plt.subplots(1, 2, figsize=(10.5, 3.9))
        for d, color in ((64, COLORS["q"]), (128, COLORS["o"])):
            ratio = [by[(d, n, True)]["median_ms"] / by[(d, n, False)]["median_ms"] for n in ns]
            q = QUERIES_PER_BLOCK[d]
            ideal = [0.5 + q / (2.0 * n) for n in ns]
            left.plot(ns, ratio, marker="o", color=color, label=f"measured, d = {d}")
            left.plot(ns, ideal, linestyle="--", color=color,
                      label=f"tiles run / all tiles, Q = {q}")
            right.plot(ns, [by[(d, n, False)]["tflops"] for n in ns], marker="o", color=color,
                       linestyle="--", label=f"d = {d}, non-causal")
            right.plot(ns, [by[(d, n, True)]["tflops"] for n in ns], marker="s", color=color,
                       label=f"d = {d}, causal")
        left.axhline(0.5, color=COLORS["muted"], lw=0.8)
        left.set_ylabel("time causal / time non-causal")
        left.set_title("causal run time over non-causal run time")
        left.set_ylim(0.4, 0.8)
        right.set_ylabel("TFLOP/s (causal: visible pairs only)")
        right.set_title("module 04, fp32, H100 80GB HBM3")
        right.set_ylim(0, 32)
        for ax in (left, right):
            ax.set_xscale("log", base=2)
            ax.set_xticks(ns)
            ax.set_xticklabels(["512", "1k", "2k", "4k", "8k", "16k"][:len(ns)])
            ax.set_xlabel("N = seq_q = seq_k (16k tokens per batch)")
            ax.grid(True, color="#eeeeee")
            ax.legend(fontsize=7.5, loc="upper right" if ax is left else "lower right")
        fig.tight_layout()
        return _save(fig, out_dir, "04_measured.png")


def make(out_dir):
    """Write every figure of lesson 04 into out_dir; return their paths."""
    return [fig_measured(out_dir)]


if __name__ == "__main__":
    for written in make(sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "docs", "img")):
        print(written)
