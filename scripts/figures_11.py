#!/usr/bin/env python3
"""Figure of module 11's lesson (modules/11_backward/README.md), called by
scripts/make_figures.py through make(out_dir); runnable alone:
python3 scripts/figures_11.py [out_dir] [--bench11 FILE] [--torch11 FILE].

  11_backward.png   measured: TFLOP/s of the backward alone against N on the H200, bf16, batch
                    x N = 16384 tokens: ours (bench_11's wgmma and mma_sync rungs,
                    docs/results/bench11_h200.json) beside PyTorch SDPA's FLASH_ATTENTION and
                    CUDNN_ATTENTION backends (scripts/compare_torch_backward.py,
                    docs/results/torch11_h200.json); one panel per head dim, causal dashed.
                    Not drawn, with one line, while either file does not exist (run alone,
                    the script then exits 1).
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
REPO = os.path.dirname(HERE)

from figures_common import COLORS, RESULTS, plt, save_full_colour  # noqa: E402

BENCH11 = os.path.join(RESULTS, "bench11_h200.json")
TORCH11 = os.path.join(RESULTS, "torch11_h200.json")

# (rung, label, colour): one colour per implementation in both panels.
SERIES = [("wgmma", "module 11, wgmma (Hopper)", COLORS["o"]),
          ("mma_sync", "module 11, mma.sync", COLORS["q"]),
          ("torch_flash", "PyTorch FLASH_ATTENTION", COLORS["k"]),
          ("torch_cudnn", "PyTorch CUDNN_ATTENTION", COLORS["v"])]


def shown(path):
    rel = os.path.relpath(os.path.abspath(path), REPO)
    return path if rel.startswith("..") else rel


def device_name(doc):
    dev = doc.get("device", "?")
    return dev.get("name", "?") if isinstance(dev, dict) else str(dev)


def backward_tflops(out_dir, bench_path=BENCH11, torch_path=TORCH11):
    missing = [shown(p) for p in (bench_path, torch_path) if not os.path.exists(p)]
    if missing:
        print(f"figures_11: {' and '.join(missing)} not found: 11_backward.png not drawn")
        return None
    with open(bench_path) as f:
        bench = json.load(f)
    with open(torch_path) as f:
        theirs = json.load(f)
    rows = bench["records"] + theirs["records"]
    dims = sorted({r["head_dim"] for r in bench["records"] if r.get("rung") in ("wgmma", "mma_sync")})
    fig, axes = plt.subplots(1, len(dims), figsize=(6.2 * len(dims), 5.0), squeeze=False)
    top = max([r.get("bwd_tflops") or 0.0 for r in rows] + [1.0])
    seqs = sorted({r["seq"] for r in rows})
    for ax, d in zip(axes[0], dims):
        for rung, label, color in SERIES:
            for causal in (False, True):
                pts = sorted((r["seq"], r["bwd_tflops"]) for r in rows
                             if r.get("rung") == rung and r["head_dim"] == d and
                             bool(r.get("causal")) == causal and r.get("bwd_tflops"))
                if not pts:
                    continue
                ax.plot([p[0] for p in pts], [p[1] for p in pts], color=color, marker="o",
                        ms=4, lw=1.6, ls="--" if causal else "-",
                        label=f"{label}{', causal' if causal else ''}")
        heads = sorted({r["heads"] for r in rows if r["head_dim"] == d and "heads" in r})
        ax.set_xscale("log", base=2)
        ax.set_xticks(seqs)
        ax.set_xticklabels([str(n) for n in seqs], fontsize=8.5)
        ax.set_ylim(0, top * 1.12)
        ax.set_xlabel("sequence length N (batch = 16384 / N)")
        ax.set_title(f"d = {d}" + (f", {heads[0]} heads" if len(heads) == 1 else ""),
                     fontsize=10)
        ax.grid(True, alpha=0.3)
        if ax is axes[0][0]:
            ax.set_ylabel("backward TFLOP/s (bf16; 2.5 x the forward's FLOPs)")
    # One legend under both panels: inside a panel it would hide points wherever they lie.
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=8.5, frameon=False)
    fig.suptitle(f"The backward pass alone (dQ, dK, dV from the saved log-sum-exp) on the "
                 f"{device_name(bench)}, bf16, batch x N = 16384 tokens; dashed: causal",
                 fontsize=10.5)
    fig.tight_layout(rect=(0, 0.1, 1, 0.95))
    return save_full_colour(fig, out_dir, "11_backward.png")


def make(out_dir, bench11=BENCH11, torch11=TORCH11):
    path = backward_tflops(out_dir, bench11, torch11)
    return [path] if path else []


if __name__ == "__main__":
    args = sys.argv[1:]
    files = {"--bench11": BENCH11, "--torch11": TORCH11}
    for flag in list(files):
        if flag in args:  # another file of the same schema (a run not committed yet)
            i = args.index(flag)
            files[flag] = args[i + 1]
            del args[i:i + 2]
    made = make(args[0] if args else os.path.join(REPO, "docs", "img"), files["--bench11"],
                files["--torch11"])
    for path in made:
        print(path)
    sys.exit(0 if made else 1)
