#!/usr/bin/env python3
"""Backward TFLOP/s of several bench_11 builds timed alternately in one call (files
bench11_<build>_r<round>[_<gpu>].json in a folder), one row per shape: each build's rounds, then
each build's mean over the first build's mean (builds in the order of --builds, else sorted).
Used for the A/B measurements in docs/worklog/11_backward.md (the device side:
scripts/ab_bench11.sh). Standard library only.

  python3 scripts/ab_bench11.py FOLDER [--rung wgmma] [--builds a,b,c]
  e.g. python3 scripts/ab_bench11.py docs/results --builds stsm_before,stsm_stmatrix,stsm_split_waits
"""
import argparse
import glob
import json
import os
import re
from collections import defaultdict


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("folder")
    ap.add_argument("--rung", default="wgmma")
    ap.add_argument("--builds", default="", help="comma list: these builds, in this order")
    args = ap.parse_args()
    runs = defaultdict(dict)  # build -> round -> records
    for path in sorted(glob.glob(os.path.join(args.folder, "bench11_*_r*.json"))):
        m = re.match(r"bench11_(.+)_r(\d+)(_[a-z0-9]+)?\.json$", os.path.basename(path))
        if m:
            runs[m.group(1)][int(m.group(2))] = json.load(open(path))["records"]
    builds = [b for b in args.builds.split(",") if b in runs] if args.builds else sorted(runs)
    if not builds:
        print("no bench11_<build>_r<round>.json files")
        return 1
    shapes = sorted({(r["head_dim"], r["seq"], r["causal"]) for b in builds for recs in
                     runs[b].values() for r in recs if r["rung"] == args.rung})
    print("d N causal | " + " | ".join(f"{b} (rounds)" for b in builds) + " | " +
          " | ".join(f"{b}/{builds[0]}" for b in builds[1:]))
    for d, n, causal in shapes:
        means, cells = {}, []
        for b in builds:
            tf = [r["bwd_tflops"] for recs in runs[b].values() for r in recs
                  if r["rung"] == args.rung and (r["head_dim"], r["seq"], r["causal"]) == (d, n, causal)]
            means[b] = sum(tf) / len(tf) if tf else None
            cells.append(" / ".join(f"{x:.1f}" for x in tf) or "-")
        ratios = [f"{means[b] / means[builds[0]]:.3f}" if means[b] and means[builds[0]] else "-"
                  for b in builds[1:]]
        print(f"{d} {n} {'yes' if causal else 'no'} | " + " | ".join(cells) + " | " + " | ".join(ratios))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
