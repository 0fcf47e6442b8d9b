#!/usr/bin/env python3
"""End-to-end check from outside the harness: NumPy writes Q, K, V as .npy, `attn run`
computes O with a module, NumPy recomputes attention in float64 and compares.

    python scripts/npy_roundtrip_check.py --module 1 [--attn build/release/attn]

It uses shapes none of the tests use, a BSHD variant, and the module's own .npy path, so it
exercises the course the way a learner with their own tensors would. Exit 0 when every case
matches (relative L2 error < 1e-4), 1 otherwise.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np


def attention(q, k, v, causal):
    """float64 attention over the last two axes, [..., S, D], bottom-right causal mask."""
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    if causal:
        sq, sk = s.shape[-2], s.shape[-1]
        visible = np.arange(sk)[None, :] <= np.arange(sq)[:, None] + (sk - sq)
        s = np.where(visible, s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    p = np.exp(s - m)
    l = p.sum(axis=-1, keepdims=True)
    return np.where(l > 0, (p @ v) / np.where(l > 0, l, 1.0), 0.0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--module", type=int, required=True)
    ap.add_argument("--attn", default="build/release/attn")
    ap.add_argument("--causal", action="store_true")
    args = ap.parse_args()
    rng = np.random.default_rng(2026)
    cases = [((3, 5, 77, 129, 48), "bhsd"), ((2, 3, 200, 31, 72), "bhsd"),
             ((1, 1, 513, 513, 64), "bhsd"), ((2, 7, 45, 90, 40), "bshd")]
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for (b, h, sq, sk, d), layout in cases:
            q = rng.standard_normal((b, h, sq, d)).astype(np.float32)
            k = rng.standard_normal((b, h, sk, d)).astype(np.float32)
            v = rng.standard_normal((b, h, sk, d)).astype(np.float32)
            want = attention(q, k, v, args.causal)
            files = {}
            for name, x in (("q", q), ("k", k), ("v", v)):
                files[name] = os.path.join(tmp, f"{name}.npy")
                # BSHD files hold [B, S, H, D]; the math is the same after a transpose.
                np.save(files[name], np.ascontiguousarray(x.transpose(0, 2, 1, 3))
                        if layout == "bshd" else x)
            out = os.path.join(tmp, "o.npy")
            cmd = [args.attn, "run", "--module", str(args.module), "--layout", layout,
                   "--q", files["q"], "--k", files["k"], "--v", files["v"], "--out", out]
            if args.causal:
                cmd.append("--causal")
            run = subprocess.run(cmd, capture_output=True, text=True)
            label = f"B={b} H={h} Sq={sq} Sk={sk} D={d} {layout}{' causal' if args.causal else ''}"
            if run.returncode != 0:
                print(f"FAIL {label}: attn exited {run.returncode}: {run.stderr.strip()}")
                failed += 1
                continue
            got = np.load(out)
            if layout == "bshd":
                got = got.transpose(0, 2, 1, 3)
            err = np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30)
            ok = np.isfinite(got).all() and err < 1e-4
            failed += not ok
            print(f"{'PASS' if ok else 'FAIL'} {label}: rel err {err:.2e} vs NumPy float64")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
