#!/usr/bin/env python3
"""Code lines of module 07's and module 08's kernels, the comparison of module 08's README.

A code line is a line with something besides comments and whitespace (C++ `//` and `/* */`
comments removed first). Counted for each module: everything a kernel needs that the module
itself writes, the given part and the solution's part, not the shared device layer
(common/device/*, used by both):

  module 07: tensor_core_kernel.cuh (kernel, launch), mma_primitives.cuh, the solution's
             warp step (solutions/07_tensor_cores/warp_mma.cuh);
  module 08: cute_kernel.cuh (kernel), entry_points.cuh up to the host probes (launch), the
             solution's recipe (solutions/08_cute/recipe.cuh).

    python3 scripts/code_lines.py            # the table
    python3 scripts/code_lines.py --check    # exit 1 unless module 08's README states these counts
"""
import argparse
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# (label, path, text up to this marker or None for the whole file)
MODULE_07 = [
    ("kernel and launch", "modules/07_tensor_cores/tensor_core_kernel.cuh", None),
    ("primitives", "modules/07_tensor_cores/mma_primitives.cuh", None),
    ("warp step (solution)", "solutions/07_tensor_cores/warp_mma.cuh", None),
]
MODULE_08 = [
    ("kernel", "modules/08_cute/cute_kernel.cuh", None),
    ("recipe (solution)", "solutions/08_cute/recipe.cuh", None),
    ("launch", "modules/08_cute/entry_points.cuh", "namespace probe"),
]


def code_lines(text):
    """Lines that hold code once comments are removed (string literals are not parsed: none of
    the counted files has // or /* inside a string)."""
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    return sum(1 for line in text.splitlines() if line.strip())


def count(parts, root=ROOT):
    out = []
    for label, rel, stop in parts:
        with open(os.path.join(root, rel)) as f:
            text = f.read()
        if stop is not None:
            if stop not in text:
                raise SystemExit(f"code_lines: '{stop}' not found in {rel}")
            text = text[: text.index(stop)]
        out.append((label, rel, code_lines(text)))
    return out


def readme_sentence(m08, total07):
    """The numbers module 08's README states, in its words: the three counts and their sum,
    module 07's total, and the ratio."""
    n = [c for _, _, c in m08]
    return (f"{n[0]} + {n[1]} + {n[2]} = {sum(n)} lines", f"are {total07}",
            f"{sum(n) / total07:.2f} of it")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="fail unless modules/08_cute/README.md states the current counts")
    args = parser.parse_args(argv)
    m07, m08 = count(MODULE_07), count(MODULE_08)
    t07, t08 = sum(c for *_, c in m07), sum(c for *_, c in m08)
    for name, rows, total in (("module 07", m07, t07), ("module 08", m08, t08)):
        for label, rel, c in rows:
            print(f"{name}  {label:22s} {c:4d}  {rel}")
        print(f"{name}  {'total':22s} {total:4d}")
    print(f"module 08 / module 07 = {t08 / t07:.2f} (half: {t07 // 2} lines)")
    if args.check:
        with open(os.path.join(ROOT, "modules/08_cute/README.md")) as f:
            readme = " ".join(f.read().split())
        missing = [s for s in readme_sentence(m08, t07) if s not in readme]
        if missing:
            print("code_lines: modules/08_cute/README.md does not state the current counts: "
                  + "; ".join(f"'{s}' missing" for s in missing))
            return 1
        print("code_lines: README counts match")
    return 0


if __name__ == "__main__":
    sys.exit(main())
