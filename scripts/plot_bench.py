#!/usr/bin/env python3
"""Plot the JSON written by `attn bench` (schema attn-bench/1) as PNG files.

Usage: python scripts/plot_bench.py BENCH.json [MORE.json ...] --out-dir docs/img [--prefix NAME]

Writes <prefix>_tflops.png, <prefix>_memory.png and <prefix>_speedup.png (the last only
when at least two kernels are present). Only rows with status "ok" are plotted, and only dense
sweeps: rows with a "problem" other than "dense" (module 10's "decode" rows, whose lengths
differ per sequence) are left out.

Element types: each row's "dtype" ("f32", "f16", "bf16"; rows without one, written before
16-bit modules existed, are f32, and PyTorch rows' "float32" is f32 too). When the rows mix
dtypes, every (kernel, dtype) pair is its own series, labelled "kernel (bf16)": a bf16 run is
never joined to an fp32 run of the same kernel on one curve. With one dtype the labels are the
kernel names alone (and for f32 the plots are what they were before dtypes existed).

Modifiers: a row of module 12 run with score modifiers or masks (`attn bench --window 1024
--causal`) names them in "modifiers" ("window=1024"); its series is labelled
"kernel [window=1024]", apart from the plain rows ("modifiers": "none", or no such field).
"""
import argparse
import json
import math
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)

SCHEMA = "attn-bench/1"
REQUIRED = ("kernel", "seq_q", "head_dim", "median_ms", "tflops")
# Our dtype names and the other spellings found in bench files (compare_torch.py once wrote
# PyTorch's), in the order series are listed: fp32 first, then the 16-bit types.
DTYPE_NAMES = {"f32": "f32", "fp32": "f32", "float32": "f32", "f16": "f16", "fp16": "f16",
               "half": "f16", "float16": "f16", "bf16": "bf16", "bfloat16": "bf16"}
DTYPE_ORDER = ("f32", "f16", "bf16")


class PlotError(Exception):
    """An input problem, reported as one `plot_bench: <reason>` line."""


def load_benches(paths):
    """Read the bench files; return (device names, device peak TFLOP/s or None, ok rows)."""
    names, peak, rows = [], None, []
    for path in paths:
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except FileNotFoundError:
            raise PlotError(f"{path}: no such file") from None
        except json.JSONDecodeError as e:
            raise PlotError(f"{path}: not valid JSON ({e})") from None
        except (OSError, UnicodeDecodeError) as e:
            raise PlotError(f"{path}: cannot read ({e})") from None
        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            found = data.get("schema") if isinstance(data, dict) else type(data).__name__
            raise PlotError(f"{path}: schema is {found!r}, expected {SCHEMA!r}")
        device = data.get("device") or {}
        if device.get("name") and device["name"] not in names:
            names.append(device["name"])
        if peak is None and device.get("peak_fp32_tflops"):
            peak = float(device["peak_fp32_tflops"])
        results = data.get("results")
        if not isinstance(results, list):
            raise PlotError(f"{path}: 'results' is not a list")
        for i, row in enumerate(results):
            if not isinstance(row, dict) or row.get("status") != "ok":
                continue
            if row.get("problem", "dense") != "dense":
                continue
            missing = [key for key in REQUIRED if row.get(key) is None]
            if missing:
                raise PlotError(f"{path}: result {i} lacks {', '.join(missing)}")
            rows.append(row)
    if not rows:
        raise PlotError("no results with status 'ok' in " + ", ".join(paths))
    return names, peak, rows


def file_schema(path):
    """The "schema" field of a JSON file, or None when it cannot be read or has none."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return data.get("schema") if isinstance(data, dict) else None


def row_dtype(row):
    """The row's dtype as "f32", "f16" or "bf16" (no dtype: f32); an unknown one as written."""
    text = str(row.get("dtype") or "f32")
    return DTYPE_NAMES.get(text.lower(), text)


# The names the lessons and the README give the kernels, for the legends (the JSON keeps the
# kernel's registry label, "03_online_softmax/solution"). A kernel not listed keeps its label.
DISPLAY_NAMES = {
    "01_naive": "01 naive",
    "02_smem_tiling": "02 shared-memory tiles",
    "03_online_softmax": "03 online softmax",
    "04_causal": "04 causal",
    "05_batched_gemm": "05 unfused: batched GEMMs + softmax",
    "06_multi_head": "06 fused multi-head, register-tiled",
    "07_tensor_cores": "07 tensor cores",
    "08_cute": "08 CuTe (the 07 kernel with layouts)",
    "09_hopper": "09 Hopper: wgmma, TMA, warp specialization",
    "12_modifiers": "12 modifiers",
    "torch_sdpa_efficient": "PyTorch SDPA, memory-efficient",
    "torch_sdpa_flash": "PyTorch SDPA, FlashAttention-2 backend",
    "torch_sdpa_math": "PyTorch SDPA, math backend",
    "torch_sdpa_cudnn": "PyTorch SDPA, cuDNN backend",
}

# One marker and line style per series, in order, so that series with equal numbers stay
# visible: a later series is drawn hollow and dashed over an earlier filled one (modules 03
# and 04 run the same kernel without the mask, and their lines coincide).
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "<", ">", "*"]
LINESTYLES = ["-", "--", "-.", ":"]


def display_name(series):
    """The legend label of a series: "03_online_softmax/solution" -> "03 online softmax";
    another impl is named ("... (exercise)"); a dtype suffix (" (bf16)") and a modifiers
    suffix (" [window=1024]") are kept."""
    base, suffix = series, ""
    if series.endswith("]") and " [" in series:
        cut = series.rindex(" [")
        base, suffix = series[:cut], series[cut:]
    if base.endswith(")") and " (" in base:
        cut = base.rindex(" (")
        base, suffix = base[:cut], base[cut:] + suffix
    kernel, _, impl = base.partition("/")
    if kernel not in DISPLAY_NAMES:
        return series
    name = DISPLAY_NAMES[kernel]
    if impl and impl != "solution":
        name += f" ({impl})"
    return name + suffix


def series_style(index):
    """Marker, line style, marker size and fill of the series at `index` of the order."""
    return {"marker": MARKERS[index % len(MARKERS)],
            "linestyle": LINESTYLES[index % len(LINESTYLES)],
            "markersize": 7 if index % 2 == 0 else 9,
            "fillstyle": "full" if index % 2 == 0 else "none"}


def dtypes_of(rows):
    """The dtypes present, fp32 first."""
    found = {row_dtype(r) for r in rows}
    return sorted(found, key=lambda d: (DTYPE_ORDER.index(d) if d in DTYPE_ORDER else 9, d))


def row_modifiers(row):
    """Module 12's modifiers of a row ("window=1024"), or "" for a plain row."""
    modifiers = row.get("modifiers") or "none"
    return "" if modifiers == "none" else modifiers


def label_series(rows):
    """Give each row its series label: the kernel name, plus " (dtype)" when the rows mix
    dtypes, so that runs of one kernel in two dtypes are two series, plus " [modifiers]" for a
    row with modifiers, so that a masked run is never joined to a plain one."""
    mixed = len(dtypes_of(rows)) > 1
    for row in rows:
        series = f"{row['kernel']} ({row_dtype(row)})" if mixed else row["kernel"]
        modifiers = row_modifiers(row)
        row["series"] = f"{series} [{modifiers}]" if modifiers else series
    return rows


def kernel_order(rows):
    """Series labels sorted by module number (missing/null modules last), then by kernel name,
    then by dtype (f32, f16, bf16)."""
    keys = {}
    for row in rows:
        dtype = row_dtype(row)
        rank = DTYPE_ORDER.index(dtype) if dtype in DTYPE_ORDER else len(DTYPE_ORDER)
        module = row.get("module")
        keys.setdefault(row.get("series", row["kernel"]),
                        (module is None, module or 0, row["kernel"], rank))
    return sorted(keys, key=lambda s: keys[s] + (s,))


def group_rows(rows):
    """Map (head_dim, causal) -> {series: {seq_q: row}}; a later duplicate replaces an earlier one."""
    groups = {}
    for row in rows:
        key = (int(row["head_dim"]), bool(row.get("causal", False)))
        series = row.get("series", row["kernel"])
        groups.setdefault(key, {}).setdefault(series, {})[int(row["seq_q"])] = row
    return dict(sorted(groups.items(), key=lambda item: (item[0][1], item[0][0])))


def dtype_note(rows):
    """"" for fp32-only rows (titles as before dtypes existed), else " (bf16)" or " (f32, bf16)"."""
    dtypes = dtypes_of(rows)
    return "" if dtypes == ["f32"] else f" ({', '.join(dtypes)})"


def seq_label(n):
    """512 -> '512', 1024 -> '1k', 16384 -> '16k'."""
    return f"{n // 1024}k" if n >= 1024 and n % 1024 == 0 else str(n)


def group_title(key):
    """Subplot title for a (head_dim, causal) group."""
    head_dim, causal = key
    return f"head_dim {head_dim}, {'causal' if causal else 'non-causal'}"


def make_figure(groups, title):
    """A figure with one subplot per group (two columns at most); returns (fig, axes list)."""
    n = len(groups)
    cols = min(2, n)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6.5 * cols, 4.6 * rows), squeeze=False)
    flat = list(axes.flat)
    for ax in flat[n:]:
        ax.set_visible(False)
    fig.suptitle(title)
    return fig, flat[:n]


def seq_axis(ax, seqs):
    """Log2 x axis over the sequence lengths, ticks labeled 512, 1k, 2k, ..."""
    ax.set_xscale("log", base=2)
    ax.set_xticks(seqs)
    ax.set_xticklabels([seq_label(s) for s in seqs])
    ax.minorticks_off()
    ax.set_xlabel("sequence length (seq_q)")
    ax.grid(True, which="major", alpha=0.3)


def save(fig, path):
    """Write the figure as PNG, close it and print the path."""
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"wrote {path}")


def plot_tflops(groups, order, colors, device, peak, path, note=""):
    """TFLOP/s vs seq_q, one line per series, with the FP32 peak when it is in range and some
    series in the subplot is fp32 (the 16-bit tensor cores' peak is another, higher one)."""
    fig, axes = make_figure(groups, f"Attention forward throughput on {device}{note}")
    for ax, (key, by_kernel) in zip(axes, groups.items()):
        peak_here = peak if any(row_dtype(r) == "f32" for rows in by_kernel.values()
                                for r in rows.values()) else None
        seqs, largest = set(), 0.0
        for kernel in [k for k in order if k in by_kernel]:
            points = sorted(by_kernel[kernel].items())
            seqs.update(s for s, _ in points)
            values = [float(r["tflops"]) for _, r in points]
            largest = max(largest, max(values))
            ax.plot([s for s, _ in points], values, color=colors[kernel],
                    label=display_name(kernel), **series_style(order.index(kernel)))
        title = group_title(key)
        if peak_here and peak_here <= 3 * largest:
            ax.axhline(peak_here, color="gray", linestyle="--", label=f"FP32 peak {peak_here:.1f}")
        elif peak_here:
            title += f" (FP32 peak {peak_here:.1f} TFLOP/s)"
        ax.set_title(title)
        seq_axis(ax, sorted(seqs))
        ax.set_ylabel("TFLOP/s")
        # Headroom above the lines (and the peak) for the legend, so that it hides no point.
        top = max(largest, peak_here if peak_here and peak_here <= 3 * largest else 0.0)
        ax.set_ylim(bottom=0, top=1.1 * top + 0.07 * top * (len(by_kernel) + 1))
        ax.legend(fontsize="small", loc="upper left")
    save(fig, path)


def plot_memory(groups, order, colors, device, path, note=""):
    """Device buffer bytes vs seq_q per series, against the unfused (scores in memory) bytes."""
    fig, axes = make_figure(groups, f"Memory: fused buffers vs unfused scores ({device}){note}")
    for ax, (key, by_kernel) in zip(axes, groups.items()):
        seqs, unfused = set(), {}
        for kernel in [k for k in order if k in by_kernel]:
            points = [(s, r) for s, r in sorted(by_kernel[kernel].items()) if r.get("device_bytes")]
            for s, r in by_kernel[kernel].items():
                if r.get("bytes_unfused"):
                    unfused.setdefault(s, float(r["bytes_unfused"]))
            if points:
                seqs.update(s for s, _ in points)
                ax.plot([s for s, _ in points], [float(r["device_bytes"]) / 2**30 for _, r in points],
                        color=colors[kernel], label=display_name(kernel),
                        **series_style(order.index(kernel)))
        if unfused:
            xs = sorted(unfused)
            seqs.update(xs)
            ax.plot(xs, [unfused[s] / 2**30 for s in xs], color="black", linestyle="--",
                    label="unfused, scores in memory (bytes_unfused)")
        ax.set_title(group_title(key))
        seq_axis(ax, sorted(seqs))
        ax.set_yscale("log")
        ax.set_ylabel("GiB")
        ax.legend(fontsize="small")
    save(fig, path)


def plot_speedup(groups, order, colors, device, path, note=""):
    """Bars of each series' speedup over the lowest-numbered module, grouped by seq_q."""
    fig, axes = make_figure(groups, f"Speedup over the first module on {device}{note}")
    for ax, (key, by_kernel) in zip(axes, groups.items()):
        kernels = [k for k in order if k in by_kernel]
        base = by_kernel[kernels[0]]
        seqs = sorted(base)
        width, tallest = 0.8 / len(kernels), 1.0
        for i, kernel in enumerate(kernels):
            xs, ys = [], []
            for j, s in enumerate(seqs):
                row = by_kernel[kernel].get(s)
                if row and float(row["median_ms"]) > 0:
                    xs.append(j + (i - (len(kernels) - 1) / 2) * width)
                    ys.append(float(base[s]["median_ms"]) / float(row["median_ms"]))
            ax.bar(xs, ys, width=width, color=colors[kernel], label=display_name(kernel))
            tallest = max([tallest] + ys)
        ax.axhline(1.0, color="gray", linewidth=0.8)
        ax.set_yscale("log")
        ax.set_ylim(top=tallest * 6)  # headroom for the legend
        ax.set_xticks(range(len(seqs)))
        ax.set_xticklabels([seq_label(s) for s in seqs])
        ax.set_xlabel("sequence length (seq_q)")
        ax.set_ylabel(f"speedup over {display_name(kernels[0])} (x)")
        ax.set_title(group_title(key))
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize="small")
    save(fig, path)


def main(argv):
    """Parse the arguments, load the files and write the plots; returns the exit code."""
    parser = argparse.ArgumentParser(description="Plot `attn bench` JSON as PNG files.")
    parser.add_argument("files", nargs="+", help="bench JSON files (schema attn-bench/1)")
    parser.add_argument("--out-dir", required=True, help="folder for the PNG files")
    parser.add_argument("--prefix", help="file name prefix (default: the JSON stem, or 'bench')")
    parser.add_argument("--only-sweeps", action="store_true",
                        help="skip, with a note, files of another schema (a module's own "
                             "benchmark or ladder) instead of failing on them")
    args = parser.parse_args(argv)
    files = args.files
    if args.only_sweeps:
        files = []
        for path in args.files:
            found = file_schema(path)
            if found == SCHEMA:
                files.append(path)
            else:
                print(f"plot_bench: skipped {path}: schema {found!r} is not an `attn bench` "
                      f"sweep ({SCHEMA!r}); its numbers are tabled in docs/results.md")
        if not files:
            return 0
    try:
        names, peak, rows = load_benches(files)
    except PlotError as e:
        print(f"plot_bench: {e}", file=sys.stderr)
        return 1
    prefix = args.prefix or (os.path.splitext(os.path.basename(files[0]))[0]
                             if len(files) == 1 else "bench")
    os.makedirs(args.out_dir, exist_ok=True)
    out = os.path.join(args.out_dir, prefix)
    device = " / ".join(names) or "unknown device"
    label_series(rows)
    note = dtype_note(rows)
    order = kernel_order(rows)
    palette = plt.get_cmap("tab10" if len(order) <= 10 else "tab20")
    colors = {k: palette(i % palette.N) for i, k in enumerate(order)}
    groups = group_rows(rows)
    plot_tflops(groups, order, colors, device, peak, out + "_tflops.png", note)
    plot_memory(groups, order, colors, device, out + "_memory.png", note)
    if len(order) < 2:
        print("note: one kernel only, speedup plot skipped")
    else:
        plot_speedup(groups, order, colors, device, out + "_speedup.png", note)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
