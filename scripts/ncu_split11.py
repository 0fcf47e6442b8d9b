#!/usr/bin/env python3
"""The duration of each kernel of module 11's backward from scripts/ncu_split11.sh's CSVs.

    python3 scripts/ncu_split11.py docs/results/ncu11_split_shift_h200.csv.gz ...

One line per (file, kernel, grid size): how many launches Nsight Compute profiled, and the
min / median / max of gpu__time_duration in microseconds (under ncu's locked clocks). The grid
size tells the shapes apart: bench_11's own launches (--seqs 512 2048, d = 64 and 128) have
the large grids; the small grids are its checks against the double reference.
"""
import collections
import csv
import gzip
import io
import sys


def rows(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        lines = f.read().split("\n")
    start = next(i for i, line in enumerate(lines) if line.startswith('"ID"'))
    return csv.DictReader(io.StringIO("\n".join(lines[start:])))


def main(paths):
    for path in paths:
        times = collections.defaultdict(list)
        for r in rows(path):
            if r["Metric Name"] != "gpu__time_duration.sum":
                continue
            kernel = r["Kernel Name"].split("<")[0].replace("void ", "").replace("attn::m11::", "")
            times[(kernel, r["Grid Size"])].append(float(r["Metric Value"].replace(",", "")) / 1000)
        print(path)
        for (kernel, grid), t in sorted(times.items()):
            t.sort()
            print(f"  {kernel:28s} grid {grid:16s} {len(t):3d} launches  "
                  f"min {t[0]:8.1f}  median {t[len(t) // 2]:8.1f}  max {t[-1]:8.1f} us")


if __name__ == "__main__":
    main(sys.argv[1:])
