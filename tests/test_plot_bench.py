#!/usr/bin/env python3
"""Tests of scripts/plot_bench.py on small synthetic bench JSON files, and of how it,
scripts/results_table.py and scripts/compare_torch.py keep element types (dtype) apart.

Run: python tests/test_plot_bench.py (from any folder). Exits 77 (skipped) when matplotlib
is not installed, 1 when a test fails.
"""
import importlib.util
import json
import os
import struct
import subprocess
import sys
import tempfile
import unittest

SCRIPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts")
SCRIPT = os.path.join(SCRIPTS, "plot_bench.py")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SEQS = (512, 1024, 2048)


def bench_row(kernel, module, seq, head_dim, ms, status="ok"):
    """One result row as `attn bench` writes it, for a 16k-token batch with heads*dim = 2048."""
    batch, heads = 16384 // seq, 2048 // head_dim
    flops = 4.0 * batch * heads * seq * seq * head_dim
    fused = 4.0 * 4 * batch * heads * seq * head_dim
    rate = 1e3 / ms if status == "ok" else 0.0  # per second; unsupported rows carry zeros
    return {"kernel": kernel, "module": module, "impl": "solution", "batch": batch,
            "heads": heads, "seq_q": seq, "seq_k": seq, "head_dim": head_dim, "causal": False,
            "status": status, "check": "pass" if seq <= 1024 else "-", "median_ms": ms,
            "min_ms": ms * 0.97, "iterations": 20, "flops": flops,
            "tflops": flops * rate / 1e12, "gbs": fused * rate / 1e9,
            "bytes_fused": fused, "bytes_unfused": fused + 16.0 * batch * heads * seq * seq,
            "device_bytes": fused}


def bench_doc(rows):
    """A whole bench document around `rows`."""
    return {"schema": "attn-bench/1", "created": "2024-01-01T00:00:00Z", "preset": "ladder",
            "device": {"name": "NVIDIA H100 80GB HBM3", "cc": "9.0", "sms": 132,
                       "peak_fp32_tflops": 66.9, "peak_bandwidth_gbs": 3352,
                       "measured_copy_gbs": 2900},
            "results": rows}


def two_kernel_rows():
    """Naive (module 1) and online softmax (module 3) at head dims 64 and 128, plus one
    unsupported row that the script must ignore."""
    rows = []
    for head_dim in (64, 128):
        for seq in SEQS:
            scale = seq / 512 * (0.8 + 0.2 * 512 / seq)  # throughput rises a little with seq
            rows.append(bench_row("01_naive/solution", 1, seq, head_dim, 40.0 * scale))
            rows.append(bench_row("03_online_softmax/solution", 3, seq, head_dim, 2.5 * scale))
    rows.append(bench_row("01_naive/solution", 1, 4096, 128, 0.0,
                          status="unsupported: head_dim 128 needs too many registers"))
    return rows


def mixed_dtype_rows():
    """Rows as a benchmark run over fp32 and 16-bit modules writes them: module 03 without a dtype
    field (bench files from before 16-bit modules), module 07 in bf16 and in f16 (same kernel
    name), PyTorch's fp32 rows with compare_torch's old "float32" and its flash rows in bf16."""
    rows = []
    for seq in SEQS:
        rows.append(bench_row("03_online_softmax/solution", 3, seq, 64, 2.0 * seq / 512))
        rows.append(dict(bench_row("07_tensor_cores/solution", 7, seq, 64, 0.4 * seq / 512),
                         dtype="bf16"))
        rows.append(dict(bench_row("07_tensor_cores/solution", 7, seq, 64, 0.3 * seq / 512),
                         dtype="f16"))
        rows.append(dict(bench_row("torch_sdpa_efficient", None, seq, 64, 1.5 * seq / 512),
                         dtype="float32"))
        rows.append(dict(bench_row("torch_sdpa_flash", None, seq, 64, 0.2 * seq / 512),
                         dtype="bf16"))
    return rows


def load_script(name):
    """Import scripts/<name>.py as a module (its functions, without running main)."""
    spec = importlib.util.spec_from_file_location(name, os.path.join(SCRIPTS, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def png_size(path):
    """(width, height) from the IHDR chunk; fails the caller's test if the magic is wrong."""
    with open(path, "rb") as f:
        head = f.read(24)
    if head[:8] != PNG_MAGIC or head[12:16] != b"IHDR":
        raise AssertionError(f"{path} is not a PNG")
    return struct.unpack(">II", head[16:24])


class PlotBenchTest(unittest.TestCase):
    """Runs the script as a subprocess on files in a temporary folder."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name
        self.out_dir = os.path.join(self.dir, "img")

    def tearDown(self):
        self.tmp.cleanup()

    def write(self, name, content):
        """Write `content` (a str as is, anything else as JSON) to the temp folder."""
        path = os.path.join(self.dir, name)
        with open(path, "w", encoding="utf-8") as f:
            f.write(content if isinstance(content, str) else json.dumps(content))
        return path

    def run_script(self, *args):
        """Run plot_bench.py with `args` and --out-dir; returns the CompletedProcess."""
        return subprocess.run([sys.executable, SCRIPT, *args, "--out-dir", self.out_dir],
                              capture_output=True, text=True, timeout=120)

    def assert_png(self, path):
        """`path` is a PNG larger than 100x100 pixels."""
        self.assertTrue(os.path.isfile(path), f"{path} not written")
        width, height = png_size(path)
        self.assertGreater(width, 100)
        self.assertGreater(height, 100)

    def test_repository_results_plot_one_by_one(self):
        """`./course plot` with no arguments: every committed docs/results/*.json, one call
        each with --only-sweeps. Sweeps are plotted; a module's own benchmark or ladder (another
        schema) is named and skipped, and no file stops the others."""
        results = os.path.join(SCRIPTS, "..", "docs", "results")
        paths = sorted(os.path.join(results, f) for f in os.listdir(results)
                       if f.endswith(".json"))
        self.assertTrue(paths, "no JSON in docs/results")
        skipped = 0
        for path in paths:
            r = self.run_script(path, "--only-sweeps")
            self.assertEqual(r.returncode, 0, f"{path}: {r.stdout}{r.stderr}")
            skipped += "skipped" in r.stdout
        self.assertGreater(skipped, 0, "expected the module 05 benchmark to be skipped")
        pngs = [f for f in os.listdir(self.out_dir) if f.endswith(".png")]
        self.assertGreater(len(pngs), 0, "no sweep was plotted")

    def test_other_schema_named_without_only_sweeps(self):
        path = self.write("gemm.json", {"schema": "attn-gemm-bench/1", "results": []})
        r = self.run_script(path)
        self.assertEqual(r.returncode, 1)
        self.assertIn("attn-gemm-bench/1", r.stderr)
        r = self.run_script(path, "--only-sweeps")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("skipped", r.stdout)

    def test_two_kernels_three_plots(self):
        path = self.write("ladder.json", bench_doc(two_kernel_rows()))
        r = self.run_script(path)
        self.assertEqual(r.returncode, 0, r.stderr)
        for kind in ("tflops", "memory", "speedup"):
            png = os.path.join(self.out_dir, f"ladder_{kind}.png")
            self.assert_png(png)
            self.assertIn(png, r.stdout)

    def test_prefix_and_merged_files(self):
        rows = two_kernel_rows()
        first = self.write("a.json", bench_doc(rows[:6]))
        second = self.write("b.json", bench_doc(rows[6:]))
        r = self.run_script(first, second)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assert_png(os.path.join(self.out_dir, "bench_speedup.png"))
        r = self.run_script(first, "--prefix", "mine")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assert_png(os.path.join(self.out_dir, "mine_tflops.png"))

    def test_one_kernel_skips_speedup(self):
        rows = [row for row in two_kernel_rows() if row["kernel"].startswith("03")]
        rows.append(dict(rows[0], kernel="torch_sdpa_efficient", module=None, status="unsupported: x"))
        path = self.write("one.json", bench_doc(rows))
        r = self.run_script(path)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assert_png(os.path.join(self.out_dir, "one_tflops.png"))
        self.assert_png(os.path.join(self.out_dir, "one_memory.png"))
        self.assertFalse(os.path.exists(os.path.join(self.out_dir, "one_speedup.png")))
        self.assertIn("skipped", r.stdout)

    def test_null_module_kernel(self):
        rows = two_kernel_rows()
        rows += [dict(row, kernel="torch_sdpa_efficient", module=None)
                 for row in rows if row["kernel"].startswith("03")]
        for row in rows[-3:]:
            del row["module"]
        r = self.run_script(self.write("torch.json", bench_doc(rows)))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assert_png(os.path.join(self.out_dir, "torch_speedup.png"))

    def test_mixed_dtypes_three_plots(self):
        path = self.write("mixed.json", bench_doc(mixed_dtype_rows()))
        r = self.run_script(path)
        self.assertEqual(r.returncode, 0, r.stderr)
        for kind in ("tflops", "memory", "speedup"):
            self.assert_png(os.path.join(self.out_dir, f"mixed_{kind}.png"))

    def test_mixed_dtypes_are_separate_series(self):
        plot = load_script("plot_bench")
        rows = plot.label_series(mixed_dtype_rows())
        groups = plot.group_rows(rows)
        self.assertEqual(list(groups), [(64, False)])
        series = groups[(64, False)]
        # One series per (kernel, dtype): bf16 and f16 runs of module 07 are two curves, and
        # rows without a dtype or with "float32" are f32.
        self.assertEqual(plot.kernel_order(rows), [
            "03_online_softmax/solution (f32)", "07_tensor_cores/solution (f16)",
            "07_tensor_cores/solution (bf16)", "torch_sdpa_efficient (f32)",
            "torch_sdpa_flash (bf16)"])
        for label, by_seq in series.items():
            self.assertEqual(sorted(by_seq), list(SEQS), label)
            dtypes = {plot.row_dtype(row) for row in by_seq.values()}
            self.assertEqual(dtypes, {label[label.rindex("(") + 1:-1]}, label)
        self.assertEqual(plot.dtype_note(rows), " (f32, f16, bf16)")

    def test_one_dtype_keeps_plain_kernel_labels(self):
        plot = load_script("plot_bench")
        fp32 = plot.label_series(two_kernel_rows()[:-1])
        self.assertEqual(plot.kernel_order(fp32), ["01_naive/solution", "03_online_softmax/solution"])
        self.assertEqual(plot.dtype_note(fp32), "")
        bf16 = plot.label_series([row for row in mixed_dtype_rows() if row.get("dtype") == "bf16"])
        self.assertEqual(plot.kernel_order(bf16), ["07_tensor_cores/solution", "torch_sdpa_flash"])
        self.assertEqual(plot.dtype_note(bf16), " (bf16)")

    def test_modifier_rows_are_their_own_series(self):
        # `attn bench --modules 7,12 --causal --window 1024`: module 07's plain rows and module
        # 12's windowed rows; a plain module 12 run in another file stays a third series.
        plot = load_script("plot_bench")
        rows = []
        for seq in SEQS:
            for kernel, module, modifiers in (("07_tensor_cores/solution", 7, "none"),
                                              ("12_modifiers/solution", 12, "window=1024"),
                                              ("12_modifiers/solution", 12, None)):
                row = dict(bench_row(kernel, module, seq, 64, 1.0), dtype="bf16", causal=True)
                if modifiers is not None:
                    row["modifiers"] = modifiers
                rows.append(row)
        rows = plot.label_series(rows)
        self.assertEqual(plot.kernel_order(rows), [
            "07_tensor_cores/solution", "12_modifiers/solution",
            "12_modifiers/solution [window=1024]"])
        series = plot.group_rows(rows)[(64, True)]
        for label, by_seq in series.items():
            self.assertEqual(sorted(by_seq), list(SEQS), label)
            self.assertEqual({plot.row_modifiers(r) for r in by_seq.values()},
                             {"window=1024" if "[" in label else ""}, label)
        self.assertEqual(plot.display_name("12_modifiers/solution [window=1024]"),
                         "12 modifiers [window=1024]")
        self.assertEqual(plot.display_name("12_modifiers/exercise (f16) [alibi]"),
                         "12 modifiers (exercise) (f16) [alibi]")
        path = self.write("modifiers.json", bench_doc(rows))
        r = self.run_script(path)
        self.assertEqual(r.returncode, 0, r.stderr)
        # The results table keeps them apart the same way.
        r = subprocess.run([sys.executable, os.path.join(SCRIPTS, "results_table.py"), path],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        labels = [line.split("|")[1].strip() for line in r.stdout.splitlines()
                  if line.startswith("| ") and not line.startswith("| kernel")]
        self.assertEqual(labels, ["07_tensor_cores/solution", "12_modifiers/solution",
                                  "12_modifiers/solution [window=1024]"])

    def test_decode_rows_are_left_out(self):
        # Module 10's decode rows (one length per sequence, "problem": "decode") are no point of
        # a dense sweep: the plots keep the dense rows and say nothing of the decode ones.
        plot = load_script("plot_bench")
        decode = dict(bench_row("10_decoding/solution", 10, 512, 128, 0.05), problem="decode",
                      seqlens_k={"count": 8, "min": 1, "mean": 300.5, "max": 512, "total": 2404},
                      page_size=16, dtype="bf16")
        dense = two_kernel_rows()
        path = self.write("with_decode.json", bench_doc(dense + [decode]))
        _, _, rows = plot.load_benches([path])
        self.assertEqual(len(rows), len([r for r in dense if r["status"] == "ok"]))
        self.assertNotIn("10_decoding/solution", {r["kernel"] for r in rows})
        r = self.run_script(self.write("only_decode.json", bench_doc([decode])))
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("no results with status 'ok'", r.stderr)

    def test_legends_use_the_lessons_names(self):
        # Legends name the kernels as the lessons do; the series keys stay the registry labels.
        plot = load_script("plot_bench")
        self.assertEqual(plot.display_name("03_online_softmax/solution"), "03 online softmax")
        self.assertEqual(plot.display_name("06_multi_head/exercise"),
                         "06 fused multi-head, register-tiled (exercise)")
        self.assertEqual(plot.display_name("07_tensor_cores/solution (bf16)"),
                         "07 tensor cores (bf16)")
        self.assertEqual(plot.display_name("torch_sdpa_efficient"), "PyTorch SDPA, memory-efficient")
        self.assertEqual(plot.display_name("my_kernel/solution"), "my_kernel/solution")
        # Neighbouring series differ in marker, line style and fill, so equal lines stay visible.
        first, second = plot.series_style(0), plot.series_style(1)
        self.assertNotEqual(first["marker"], second["marker"])
        self.assertNotEqual(first["linestyle"], second["linestyle"])
        self.assertNotEqual(first["fillstyle"], second["fillstyle"])

    def test_results_table_rows_per_dtype(self):
        table = os.path.join(SCRIPTS, "results_table.py")
        mixed = self.write("mixed.json", bench_doc(mixed_dtype_rows()))
        r = subprocess.run([sys.executable, table, mixed], capture_output=True, text=True,
                           timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        labels = [line.split("|")[1].strip() for line in r.stdout.splitlines()
                  if line.startswith("| ") and not line.startswith("| kernel")]
        self.assertEqual(labels, [
            "03_online_softmax/solution (f32)", "07_tensor_cores/solution (f16)",
            "07_tensor_cores/solution (bf16)", "torch_sdpa_efficient (f32)",
            "torch_sdpa_flash (bf16)"])
        # 07 in bf16 at N=512 took 0.4 ms, in f16 0.3 ms: each row shows its own run.
        self.assertIn("| 07_tensor_cores/solution (bf16) | ", r.stdout)
        bf16_line = next(l for l in r.stdout.splitlines() if "solution (bf16)" in l)
        f16_line = next(l for l in r.stdout.splitlines() if "solution (f16)" in l)
        self.assertIn("(0.4 ms)", bf16_line)
        self.assertIn("(0.3 ms)", f16_line)
        # One dtype: plain kernel names, as before dtypes existed.
        fp32 = self.write("fp32.json", bench_doc(two_kernel_rows()))
        r = subprocess.run([sys.executable, table, fp32], capture_output=True, text=True,
                           timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("| 01_naive/solution | ", r.stdout)
        self.assertNotIn("(f32)", r.stdout)

    def test_results_table_decode(self):
        # Module 10: bench_10's and compare_torch_decode.py's files, by schema; the first
        # decode row of a shape is the one shown; PyTorch's layouts are columns of their own.
        def ours(kernel, batch, seq, ms, gbs):
            return {"kernel": kernel, "batch": batch, "seq_k": seq, "median_ms": ms, "gbs": gbs,
                    "fraction_of_hbm_read": gbs / 3000.0}

        bench = {"schema": "attn-decode-bench/1", "device": {"measured_hbm_read_gbs": 3000.0},
                 "decode": [ours("decode", 32, 4096, 0.2, 2700.0),
                            ours("decode_splits", 32, 4096, 0.3, 1800.0),
                            ours("decode", 1, 4096, 0.05, 900.0),
                            ours("decode", 32, 4096, 0.21, 2600.0)],
                 "prefill": [{"kernel": "prefill_varlen_1024", "sequences": 16, "heads": 32,
                              "head_dim": 64, "causal": True, "median_ms": 0.29,
                              "tflops": 236.6}]}
        torch_rows = [{"kernel": "torch_sdpa_cudnn", "layout": layout, "batch": b,
                       "seq_k": 4096, "status": "ok", "gbs": gbs}
                      for layout, b, gbs in (("bhsd", 32, 2950.0), ("bshd", 32, 2960.0),
                                             ("bshd", 1, 1000.0))]
        torch_rows.append({"kernel": "torch_sdpa_flash", "layout": "bshd", "batch": 1,
                           "seq_k": 4096, "status": "unsupported: x", "gbs": 0.0})
        paths = [self.write("bench10.json", bench),
                 self.write("torch10.json", {"schema": "attn-decode-torch/1",
                                             "rows": torch_rows})]
        r = subprocess.run([sys.executable, os.path.join(SCRIPTS, "results_table.py"), *paths],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("| keys | ours, ms | ours, GB/s | of HBM read | cudnn bhsd, GB/s | "
                      "cudnn bshd, GB/s |", r.stdout)
        self.assertIn("| 4096 | 0.2000 | 2700 | 90% | 2950 | 2960 |", r.stdout)
        self.assertIn("| 1 | 0.0500 | 900 | 30% | - | 1000 |", r.stdout)
        self.assertNotIn("flash", r.stdout)  # only an unsupported row
        self.assertIn("| prefill_varlen_1024 | 16 | 32 x 64 | yes | 0.2900 | 236.6 |", r.stdout)

    def test_compare_torch_decode_arguments(self):
        # --ours takes several [label=]library builds and --page-size several sizes; bad ones
        # are refused with one line before PyTorch is imported.
        decode = load_script("compare_torch_decode")  # imports torch only inside main()
        self.assertEqual(decode.parse_ours("lib.so"), [("", "lib.so")])
        self.assertEqual(decode.parse_ours("old=a.so,new=b.so"), [("old", "a.so"), ("new", "b.so")])
        self.assertEqual(decode.parse_ours(""), [])
        for bad in ("x=a.so,x=b.so", "a.so,b.so", "old="):
            with self.assertRaises(ValueError, msg=bad):
                decode.parse_ours(bad)
        self.assertEqual(decode.parse_page_sizes("16,64"), [16, 64])
        for bad in ("16,x", "12", "0", "2048"):
            with self.assertRaises(ValueError, msg=bad):
                decode.parse_page_sizes(bad)
        script = os.path.join(SCRIPTS, "compare_torch_decode.py")
        for args, want in ((["--page-size", "16,x"], "--page-size takes powers of two"),
                           (["--ours", "x=a.so,x=b.so"], "two builds labelled 'x'"),
                           (["--ours", "a.so", "--shapes", "32:100", "--page-size", "64"],
                            "every seq_k must be a multiple")):
            r = subprocess.run([sys.executable, script, "--out", self.write("unused.json", {}),
                                *args], capture_output=True, text=True, timeout=60)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn(want, r.stderr)
            self.assertNotIn("Traceback", r.stderr)

    def test_compare_torch_dtypes_and_merge(self):
        torch_script = load_script("compare_torch")  # imports torch only inside main()
        for text, want in (("f32", "f32"), ("float32", "f32"), ("FP16", "f16"), ("half", "f16"),
                           ("bfloat16", "bf16"), ("bf16", "bf16")):
            self.assertEqual(torch_script.parse_dtype(text), want)
        with self.assertRaises(ValueError):
            torch_script.parse_dtype("fp8")
        old = [dict(bench_row("torch_sdpa_efficient", None, 512, 64, 1.0), dtype="float32"),
               bench_row("03_online_softmax/solution", 3, 512, 64, 2.0)]
        # A bf16 run of the same kernel and shape is a new row; an fp32 rerun replaces the old.
        bf16 = dict(bench_row("torch_sdpa_efficient", None, 512, 64, 0.5), dtype="bf16")
        rerun = dict(bench_row("torch_sdpa_efficient", None, 512, 64, 0.9), dtype="f32")
        merged = torch_script.merge_rows(old, [bf16, rerun])
        self.assertEqual(len(merged), 3)
        self.assertIs(merged[0], rerun)  # in the old row's place
        self.assertIs(merged[1], old[1])
        self.assertIs(merged[2], bf16)

    def test_invalid_inputs_exit_1(self):
        no_ok = bench_doc([bench_row("01_naive/solution", 1, 512, 64, 0.0, status="unsupported: y")])
        cases = {
            "missing file": os.path.join(self.dir, "does_not_exist.json"),
            "not JSON": self.write("garbage.json", "this is { not json"),
            "wrong schema": self.write("schema.json", dict(bench_doc(two_kernel_rows()), schema="other/2")),
            "no ok rows": self.write("none_ok.json", no_ok),
        }
        for what, path in cases.items():
            with self.subTest(what):
                r = self.run_script(path)
                self.assertEqual(r.returncode, 1, f"{what}: {r.stdout}{r.stderr}")
                lines = r.stderr.strip().splitlines()
                self.assertTrue(lines and lines[-1].startswith("plot_bench:"), f"{what}: {r.stderr!r}")
                self.assertNotIn("Traceback", r.stderr)


def main():
    """Skip (77) without matplotlib, else run the tests; exit 1 when any fails."""
    if importlib.util.find_spec("matplotlib") is None:
        print("skipped: matplotlib not installed (./course setup makes .venv)")
        sys.exit(77)
    suite = unittest.defaultTestLoader.loadTestsFromTestCase(PlotBenchTest)
    result = unittest.TextTestRunner(verbosity=2).run(suite)
    sys.exit(0 if result.wasSuccessful() else 1)


if __name__ == "__main__":
    main()
