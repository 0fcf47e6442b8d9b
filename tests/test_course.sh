#!/usr/bin/env bash
# Tests of the `course` driver's own logic, on the CPU: what it builds, which Python it picks
# for the plots, its exit codes and its messages. Each test runs the real `course` script in
# a sandbox folder whose tools are stand-ins (cmake, ctest, nvidia-smi, python3, attn) that
# record how they were called and answer as the test sets them up: no network, no GPU, a
# failing exercise. Run: bash tests/test_course.sh (CTest: test_course).
set -uo pipefail
SOURCE="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
FAILED=0 TESTS=0

fail() { printf 'FAIL %s: %s\n' "$CURRENT" "$*"; FAILED=$((FAILED + 1)); }
expect_contains() { [[ "$1" == *"$2"* ]] || fail "expected output containing '$2', got: $1"; }
expect_lacks() { [[ "$1" != *"$2"* ]] || fail "expected no '$2' in: $1"; }
expect_code() { [[ "$1" == "$2" ]] || fail "exit code $1, expected $2; output: ${OUT:-}"; }
# A line of $1 matches the extended regular expression $2 (for rows with timings in them).
expect_line() { grep -Eq -- "$2" <<<"$1" || fail "expected a line matching '$2', got: $1"; }

# A sandbox course tree with stand-in tools. Knobs (environment): FAKE_GPU=1 makes
# nvidia-smi find a GPU, an H100 unless FAKE_CC (its compute capability, e.g. 8.0) and
# FAKE_GPU_NAME say otherwise; FAKE_SYSTEM_PLOTS=1 gives the system python3 matplotlib and numpy;
# FAKE_PIP_WORKS=1 lets pip install them (else pip fails as without network);
# FAKE_EXERCISE_RC is the exit code of `attn run --impl exercise`; FAKE_SKIPS lists the tests
# the stand-in ctest reports as skipped; FAKE_CUTLASS_WHEEL is the wheel that `python3 -m pip
# download` gets (else it fails as without network). The sandbox starts with the CUTLASS headers
# in .deps/ (no_cutlass removes them); `python3 -` (the script that unpacks the wheel) is the
# real Python.
REAL_PYTHON=$(command -v python3)
make_sandbox() {
  BOX=$(mktemp -d)
  mkdir -p "$BOX/bin" "$BOX/modules/00_reference" "$BOX/modules/01_naive" \
           "$BOX/modules/05_batched_gemm" "$BOX/modules/09_hopper" "$BOX/scripts" \
           "$BOX/docs/results"
  cp "$SOURCE/course" "$BOX/course"
  touch "$BOX/modules/00_reference/exercise.cpp" "$BOX/modules/01_naive/exercise.cu" \
        "$BOX/modules/05_batched_gemm/exercise.cu" "$BOX/modules/09_hopper/exercise.cu"
  printf 'matplotlib>=3.6\nnumpy>=1.24\n' >"$BOX/requirements.txt"
  mkdir -p "$BOX/.deps/nvidia-cutlass-4.2.0.0/include/cute"
  touch "$BOX/.deps/nvidia-cutlass-4.2.0.0/include/cute/tensor.hpp"
  echo '{"schema": "attn-bench/1"}' >"$BOX/docs/results/a.json"
  echo '{"schema": "attn-gemm-bench/1"}' >"$BOX/docs/results/b.json"
  local log="$BOX/calls.log"
  cat >"$BOX/bin/cmake" <<EOF
#!/usr/bin/env bash
echo "cmake \$*" >>"$log"
case "\$1" in
  --version) echo "cmake version 3.25.1" ;;
  --preset) mkdir -p "$BOX/build/\$2"; touch "$BOX/build/\$2/build.ninja"
            echo "ATTN_PYTHON:FILEPATH=/cached/python" >"$BOX/build/\$2/CMakeCache.txt" ;;
  --build) mkdir -p "$BOX/build/release"; cp "$BOX/bin/attn" "$BOX/build/release/attn"
           cp "$BOX/bin/attn" "$BOX/build/release/attn_emu" ;;
esac
exit 0
EOF
  cat >"$BOX/bin/ctest" <<EOF
#!/usr/bin/env bash
echo "ctest \$*" >>"$log"
n=0
for t in \${FAKE_SKIPS:-}; do n=\$((n + 1)); echo "\$n/9 Test  #\$n: \$t ..........***Skipped   0.01 sec"; done
echo "100% tests passed, 0 tests failed out of 9"
for t in \${FAKE_SKIPS:-}; do echo "	  1 - \$t (Skipped)"; done
exit 0
EOF
  cat >"$BOX/bin/nvidia-smi" <<'EOF'
#!/usr/bin/env bash
[[ "${FAKE_GPU:-0}" == 1 ]] || { echo "NVIDIA-SMI has failed" >&2; exit 9; }
case "$*" in
  *compute_cap*) echo "${FAKE_CC:-9.0}" ;;
  *--query-gpu=name*) echo "${FAKE_GPU_NAME:-NVIDIA H100 80GB HBM3}" ;;
  *) echo "GPU 0: ${FAKE_GPU_NAME:-NVIDIA H100 80GB HBM3}" ;;
esac
EOF
  # python3: imports of matplotlib/numpy work only with FAKE_SYSTEM_PLOTS=1; `-m venv DIR`
  # makes DIR/bin/python, a python whose pip works only with FAKE_PIP_WORKS=1.
  cat >"$BOX/bin/python3" <<EOF
#!/usr/bin/env bash
echo "python3 \$*" >>"$log"
if [[ "\$1" == -m && "\$2" == venv ]]; then
  dir="\${@: -1}"; mkdir -p "\$dir/bin"
  cat >"\$dir/bin/python" <<'PY'
#!/usr/bin/env bash
echo "venv-python \$*" >>"$log"
if [[ "\$1" == -m && "\$2" == pip ]]; then
  [[ "\${FAKE_PIP_WORKS:-0}" == 1 ]] || exit 1
  touch "\$(dirname "\$0")/../plots-installed"; exit 0
fi
if [[ "\$1" == -c ]]; then [[ -f "\$(dirname "\$0")/../plots-installed" ]]; exit; fi
exit 0
PY
  chmod +x "\$dir/bin/python"; exit 0
fi
if [[ "\$1" == -c ]]; then
  [[ "\$2" == *matplotlib* ]] && { [[ "\${FAKE_SYSTEM_PLOTS:-0}" == 1 ]]; exit; }
  exit 0
fi
[[ "\$1" == - ]] && exec "$REAL_PYTHON" "\$@"
if [[ "\$1" == -m && "\$2" == pip && "\$3" == download ]]; then
  [[ -n "\${FAKE_CUTLASS_WHEEL:-}" ]] || exit 1
  while [[ \$# -gt 0 && "\$1" != -d ]]; do shift; done
  cp "\$FAKE_CUTLASS_WHEEL" "\$2/nvidia_cutlass-4.2.0.0-py3-none-any.whl"; exit 0
fi
exit 0
EOF
  cat >"$BOX/bin/attn" <<EOF
#!/usr/bin/env bash
echo "\$(basename "\$0") \$*" >>"$log"
for a in "\$@"; do
  [[ "\$a" == --frob ]] && { echo "attn: The following argument was not expected: --frob" >&2; exit 2; }
done
[[ " \$* " == *" --impl exercise "* ]] && exit "\${FAKE_EXERCISE_RC:-0}"
exit 0
EOF
  # compute-sanitizer --tool T --error-exitcode N program args: runs the program.
  printf '#!/usr/bin/env bash\nshift 4\nexec "$@"\n' >"$BOX/bin/compute-sanitizer"
  for tool in nvcc ninja; do printf '#!/usr/bin/env bash\nexit 0\n' >"$BOX/bin/$tool"; done
  chmod +x "$BOX/bin/"*
}

# Runs the sandbox's course with the stand-in tools first on PATH; sets OUT and CODE.
course() {
  OUT=$(cd "$BOX" && PATH="$BOX/bin:$PATH" ATTN_JOBS=1 ./course "$@" 2>&1)
  CODE=$?
}
calls() { cat "$BOX/calls.log" 2>/dev/null; }

run_test() {
  CURRENT=$1; TESTS=$((TESTS + 1))
  make_sandbox
  # The test runs in a subshell (its knobs stay local); it exits with its failed checks.
  (unset FAKE_GPU FAKE_CC FAKE_GPU_NAME FAKE_SYSTEM_PLOTS FAKE_PIP_WORKS FAKE_EXERCISE_RC FAKE_SKIPS \
         FAKE_CUTLASS_WHEEL ATTN_CUTLASS_WHEEL CUTLASS_DIR CUTLASS_PATH
   FAILED=0; "$1"; exit "$FAILED")
  FAILED=$((FAILED + $?))
  rm -rf "$BOX"
}

# --- the tests --------------------------------------------------------------------------------

# Without network and without a plotting stack, `course test` still runs the tests: only the
# plots are given up, in one line.
test_offline_test_runs_the_tests() {
  FAKE_GPU=1 course test
  expect_code "$CODE" 0
  expect_contains "$OUT" "pip could not install them"
  expect_contains "$(calls)" "ctest"
  [[ ! -e "$BOX/.venv" ]] || fail "a half-made .venv was left behind"
}

# A system python3 with matplotlib is used as it is: no venv, no pip.
test_system_python_with_plots_needs_no_venv() {
  FAKE_SYSTEM_PLOTS=1 course test
  expect_code "$CODE" 0
  [[ ! -e "$BOX/.venv" ]] || fail ".venv created although python3 has matplotlib"
  expect_lacks "$(calls)" "-m venv"
}

# With network the venv sees the system's packages and gets requirements.txt.
test_venv_made_when_pip_works() {
  FAKE_PIP_WORKS=1 course test
  expect_code "$CODE" 0
  expect_contains "$(calls)" "-m venv --system-site-packages"
  [[ -x "$BOX/.venv/bin/python" ]] || fail "no .venv/bin/python"
}

# A build configured before the plotting Python existed is re-configured with it, so the
# plot test runs instead of being skipped.
test_configure_gets_the_plot_python() {
  FAKE_SYSTEM_PLOTS=1 course run 00           # first configure
  FAKE_SYSTEM_PLOTS=1 course test
  expect_contains "$(calls)" "-DATTN_PYTHON=$BOX/bin/python3"
}

# A cached plotting Python that no longer exists (the venv was deleted, the network is gone)
# is replaced by python3 at the next configure: the plot test then skips instead of failing
# as "Not Run".
test_deleted_venv_is_dropped() {
  FAKE_PIP_WORKS=1 course test
  [[ -x "$BOX/.venv/bin/python" ]] || fail "no .venv made"
  echo "ATTN_PYTHON:FILEPATH=$BOX/.venv/bin/python" >"$BOX/build/release/CMakeCache.txt"
  rm -rf "$BOX/.venv"
  : >"$BOX/calls.log"
  course test
  expect_code "$CODE" 0
  expect_contains "$(calls)" "cmake $BOX/build/release -DATTN_PYTHON=$BOX/bin/python3"
}

# Skips are reported with their real reasons.
test_skip_reasons() {
  FAKE_SKIPS="test_plot check_01" course test
  expect_code "$CODE" 0
  expect_contains "$OUT" "test_plot was skipped, not passed: no Python with matplotlib"
  expect_contains "$OUT" "1 test program(s) were skipped, not passed: they need a CUDA GPU (check_01)"
}

# On a GPU that is not a Hopper, module 09's graders are skipped for that reason.
test_skip_reasons_hopper() {
  FAKE_GPU=1 FAKE_CC=8.9 FAKE_SKIPS="check_09" course test
  expect_code "$CODE" 0
  expect_contains "$OUT" "1 test program(s) were skipped, not passed: they need a Hopper GPU, compute capability 9.x (check_09)"
  expect_lacks "$OUT" "need a CUDA GPU"
  FAKE_SKIPS="check_05 check_09" course test
  expect_contains "$OUT" "2 test program(s) were skipped, not passed: they need a CUDA GPU (check_05 check_09)"
}

# `course run` exits 1 when the exercise fails, 0 when it passes.
test_run_exit_code_follows_the_exercise() {
  FAKE_EXERCISE_RC=1 course run 00
  expect_code "$CODE" 1
  expect_contains "$OUT" "does not pass yet"
  FAKE_EXERCISE_RC=0 course run 00
  expect_code "$CODE" 0
  expect_contains "$OUT" "passed on this shape"
}

# A flag attn does not know is a usage error (2), not a failed exercise.
test_run_usage_error() {
  course run 00 --frob
  expect_code "$CODE" 2
  expect_contains "$OUT" "refused them"
  expect_lacks "$OUT" "does not pass yet"
  expect_lacks "$OUT" "== your exercise =="
}

# Without a GPU, a GPU module that the CPU emulation does not cover (05 on) says so, names
# what runs here, compiles the exercise only, and runs nothing.
test_run_gpu_module_without_gpu() {
  course run 05
  expect_code "$CODE" 1
  expect_contains "$OUT" "No NVIDIA GPU here"
  expect_contains "$OUT" "./course run 00"
  expect_lacks "$(calls)" "attn run"
  expect_lacks "$(calls)" "attn_emu run"
  expect_contains "$(calls)" "--target m05_exercise"
  expect_lacks "$(calls)" "--target attn"
}

# Without a GPU, modules 01-04 run in the CPU emulation (attn_emu), say so in one line, and
# are not timed; the exit code still follows the exercise.
test_run_emulated_without_gpu() {
  FAKE_EXERCISE_RC=1 course run 01 --seq 100
  expect_code "$CODE" 1
  expect_contains "$OUT" "emulated on the CPU: correctness only, no timing"
  expect_contains "$(calls)" "--target attn_emu"
  expect_contains "$(calls)" "attn_emu run --module 1 --impl solution --verify --seq 100"
  expect_contains "$(calls)" "attn_emu run --module 1 --impl exercise --verify --seq 100"
  expect_lacks "$(calls)" "--time"
  FAKE_EXERCISE_RC=0 course run 01
  expect_code "$CODE" 0
  expect_contains "$OUT" "passed on this shape"
}

# With a GPU, the same command runs the real kernels and times them.
test_run_with_gpu_is_not_emulated() {
  FAKE_GPU=1 course run 01
  expect_lacks "$OUT" "emulated"
  expect_contains "$(calls)" "attn run --module 1 --impl solution --verify --time"
  expect_lacks "$(calls)" "attn_emu"
}

# Without a GPU, `grade 01` builds and runs the emulated grader, and says so.
test_grade_emulated_without_gpu() {
  mkdir -p "$BOX/build/release"
  printf '#!/usr/bin/env bash\necho "[doctest] test cases: 3 | 3 passed"\nexit 0\n' \
    >"$BOX/build/release/grade_01_cpu"
  chmod +x "$BOX/build/release/grade_01_cpu"
  course grade 01
  expect_code "$CODE" 0
  expect_contains "$(calls)" "--target grade_01_cpu"
  expect_contains "$OUT" "emulated on the CPU: correctness only, no timing"
  expect_contains "$OUT" "module 01: PASS (emulated on the CPU"
  expect_contains "$(cat "$BOX/build/grades/01")" "pass (emulated)"
}

# What a command builds, and the first build's note.
test_builds_what_the_command_needs() {
  FAKE_GPU=1 course run 01
  expect_contains "$OUT" "first build"
  expect_contains "$(calls)" "--build $BOX/build/release --target attn"
  : >"$BOX/calls.log"
  FAKE_GPU=1 course run 01
  expect_lacks "$OUT" "first build"
  mkdir -p "$BOX/build/release"; printf '#!/usr/bin/env bash\nexit 0\n' >"$BOX/build/release/grade_00"
  chmod +x "$BOX/build/release/grade_00"
  course grade 00
  expect_contains "$(calls)" "--target grade_00"
}

# A plain grade leaves the going-further checks out; --extra runs only them.
test_grade_extra() {
  mkdir -p "$BOX/build/release"
  printf '#!/usr/bin/env bash\necho "grade_00 $*" >>"%s"\necho "[doctest] test cases: 3 | 3 passed"\n' \
    "$BOX/calls.log" >"$BOX/build/release/grade_00"
  chmod +x "$BOX/build/release/grade_00"
  course grade 00
  expect_code "$CODE" 0
  expect_contains "$(calls)" "grade_00 --test-suite-exclude=extra"
  course grade 00 --extra
  expect_code "$CODE" 0
  expect_contains "$(calls)" "grade_00 --test-suite=extra"
  expect_contains "$OUT" "going further: PASS"
  course grade 00 --bogus
  expect_code "$CODE" 1
  expect_contains "$OUT" "optionally --extra"
}

# `course plot` with no files plots what is a sweep and names the rest (plot_bench's
# --only-sweeps), without dying on the first file of another schema.
test_plot_defaults_to_only_sweeps() {
  FAKE_SYSTEM_PLOTS=1 course plot
  expect_code "$CODE" 0
  expect_contains "$(calls)" "docs/results/b.json --out-dir docs/img --only-sweeps"
}

# status names the next module.
test_status_names_the_next_module() {
  mkdir -p "$BOX/build/grades"; echo "pass 2026-01-01T00:00:00Z" >"$BOX/build/grades/00"
  FAKE_GPU=1 course status
  expect_contains "$OUT" "Next: module 01 (01_naive)"
  course status
  expect_contains "$OUT" "Next: module 01 (01_naive)"
  expect_contains "$OUT" "emulated"
  echo "pass (emulated) 2026-01-01T00:00:00Z" >"$BOX/build/grades/01"
  course status
  expect_contains "$OUT" "Next: module 05 (05_batched_gemm) needs a GPU, and none is here"
}

# A stand-in grader or check program in the sandbox's build: prints $2 and exits with $3.
fake_program() {  # $1 = build/<preset>/<name>
  mkdir -p "$BOX/$(dirname "$1")"
  printf '#!/usr/bin/env bash\necho "%s"\nexit %s\n' "$2" "$3" >"$BOX/$1"
  chmod +x "$BOX/$1"
}
HOPPER_SKIP="skipped: needs a Hopper GPU (compute capability 9.x): module 09 runs wgmma and TMA, which only sm_90 has; this GPU is NVIDIA A100-SXM4-80GB (compute capability 8.0)"

# Module 09 on a GPU that is not a Hopper: `run` compiles the exercise and runs nothing;
# `grade` reports the grader's skip (never a pass, never a FAIL) and records "not graded".
test_hopper_module_on_another_gpu() {
  export FAKE_GPU=1 FAKE_CC=8.0 FAKE_GPU_NAME="NVIDIA A100-SXM4-80GB"
  course run 09
  expect_code "$CODE" 1
  expect_contains "$OUT" "module 09's exercise compiles"
  expect_contains "$OUT" "module 09 needs a Hopper GPU (compute capability 9.x); this GPU is NVIDIA A100-SXM4-80GB (compute capability 8.0)"
  expect_contains "$(calls)" "--target m09_exercise"
  expect_lacks "$(calls)" "attn run"
  fake_program build/release/grade_09 "$HOPPER_SKIP" 77
  course grade 09
  expect_code "$CODE" 1
  expect_contains "$OUT" "module 09: NOT graded, skipped: needs a Hopper GPU (compute capability 9.x)"
  expect_lacks "$OUT" "PASS"
  expect_lacks "$OUT" "FAIL"
  expect_contains "$(cat "$BOX/build/grades/09")" "not graded (skipped: needs a Hopper GPU (compute capability 9.x))"
  # On a Hopper the same commands run the module.
  FAKE_CC=9.0 FAKE_GPU_NAME="NVIDIA H100 80GB HBM3" course run 09
  expect_contains "$(calls)" "attn run --module 9 --impl solution --verify --time"
}

# Without a GPU, module 09 is a GPU module like 05: compiled, not run, not graded.
test_hopper_module_without_gpu() {
  course run 09
  expect_code "$CODE" 1
  expect_contains "$OUT" "No NVIDIA GPU here"
  expect_contains "$(calls)" "--target m09_exercise"
  fake_program build/release/grade_09 "should not run" 0
  course grade 09
  expect_code "$CODE" 1
  expect_contains "$OUT" "module 09: NOT graded: its checks need a CUDA GPU"
  expect_lacks "$OUT" "should not run"
}

# A module number with no folder (11 is planned) is refused in one line; a folder without its
# exercise yet too.
test_missing_module_number() {
  course grade 11
  expect_code "$CODE" 1
  expect_contains "$OUT" "no module 11"
  rm "$BOX/modules/09_hopper/exercise.cu"
  course run 09
  expect_code "$CODE" 1
  expect_contains "$OUT" "module 09 has no exercise yet"
}

# verify on a GPU that is not a Hopper: module 09's graders skip; the row says so, the other
# modules are verified as usual, and the skip alone does not fail the run.
test_verify_reports_a_skipped_module() {
  export FAKE_GPU=1 FAKE_CC=8.0 FAKE_GPU_NAME="NVIDIA A100-SXM4-80GB"
  fake_program build/release/check_05 "[doctest] test cases: 3 | 3 passed" 0
  fake_program build/release/grade_05 "[doctest] test cases: 3 | 0 passed | 3 failed" 1
  fake_program build/sanitize/check_05 "[doctest] test cases: 3 | 3 passed" 0
  for p in release/check_09 release/grade_09 sanitize/check_09; do
    fake_program "build/$p" "$HOPPER_SKIP" 77
  done
  course verify
  expect_code "$CODE" 0
  expect_contains "$OUT" "05_batched_gemm    pass"
  expect_contains "$OUT" "09_hopper          skipped"
  expect_contains "$OUT" "not verified on this GPU: module(s) 09, whose graders skipped (needs a Hopper GPU (compute capability 9.x)"
  expect_contains "$OUT" "verify: OK"
  # A module that fails still fails the run.
  fake_program build/release/check_05 "[doctest] test cases: 3 | 2 passed | 1 failed" 1
  course verify
  expect_code "$CODE" 1
  expect_contains "$OUT" "verify: FAILED"
}

# status says where module 09 runs and, on another GPU, why it is the end of the road here.
test_status_hopper_module() {
  mkdir -p "$BOX/build/grades"
  for nn in 00 01 05; do echo "pass 2026-01-01T00:00:00Z" >"$BOX/build/grades/$nn"; done
  FAKE_GPU=1 FAKE_CC=8.6 FAKE_GPU_NAME="NVIDIA GeForce RTX 3090" course status
  expect_contains "$OUT" "Hopper"
  expect_contains "$OUT" "Next: module 09 (09_hopper) needs a Hopper GPU (compute capability 9.x), and this GPU (NVIDIA GeForce RTX 3090) is not one"
  FAKE_GPU=1 course status
  expect_contains "$OUT" "Next: module 09 (09_hopper): read modules/09_hopper/README.md"
}

# --- module 08: the CUTLASS headers and the host grader ---------------------------------------

no_cutlass() { rm -rf "$BOX/.deps"; }
# A wheel laid out as nvidia-cutlass's: the headers under cutlass_library/source/include/.
make_wheel() {  # $1 = path
  "$REAL_PYTHON" - "$1" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1], "w") as z:
    z.writestr("nvidia_cutlass-4.2.0.0.dist-info/METADATA", "Name: nvidia-cutlass\n")
    z.writestr("cutlass_library/__init__.py", "")
    z.writestr("cutlass_library/source/include/cute/tensor.hpp", "// cute\n")
    z.writestr("cutlass_library/source/include/cutlass/version.h", "#define CUTLASS_MAJOR 4\n")
    z.writestr("cutlass_library/source/tools/other.h", "")
PY
}
CUTLASS_HEADERS=.deps/nvidia-cutlass-4.2.0.0/include

# Without network and without a wheel, setup says what to do in one line and goes on.
test_cutlass_offline_is_one_line() {
  no_cutlass
  course setup
  expect_code "$CODE" 0
  expect_contains "$OUT" "pip could not download nvidia-cutlass 4.2.0.0 (no network?): module 08 (CuTe) is skipped, every other module builds"
  expect_contains "$OUT" "ATTN_CUTLASS_WHEEL=/path/to/nvidia_cutlass-4.2.0.0-py3-none-any.whl ./course setup"
  [[ $(grep -c CUTLASS <<<"$OUT") == 1 ]] || fail "more than one line about CUTLASS: $OUT"
  [[ ! -e "$BOX/.deps" ]] || fail ".deps left behind"
  ATTN_CUTLASS_WHEEL=/nowhere/x.whl course setup
  expect_code "$CODE" 0
  expect_contains "$OUT" "ATTN_CUTLASS_WHEEL=/nowhere/x.whl: no such file"
}

# pip's wheel, or the one ATTN_CUTLASS_WHEEL names, is unpacked: its headers only.
test_cutlass_headers_unpacked() {
  no_cutlass
  make_wheel "$BOX/w.whl"
  FAKE_CUTLASS_WHEEL="$BOX/w.whl" course setup
  expect_code "$CODE" 0
  expect_contains "$(calls)" "-m pip download"
  expect_contains "$OUT" "CUTLASS/CuTe headers for module 08 (nvidia-cutlass 4.2.0.0 from PyPI) in $CUTLASS_HEADERS"
  [[ -f "$BOX/$CUTLASS_HEADERS/cute/tensor.hpp" && -f "$BOX/$CUTLASS_HEADERS/cutlass/version.h" ]] ||
    fail "headers not unpacked"
  [[ $(find "$BOX/.deps" -type f | wc -l) == 2 ]] || fail "more than the headers unpacked: $(find "$BOX/.deps")"
  : >"$BOX/calls.log"
  course setup  # already there: no download
  expect_lacks "$(calls)" "pip download"
  no_cutlass
  ATTN_CUTLASS_WHEEL="$BOX/w.whl" course setup
  expect_lacks "$(calls)" "pip download"
  [[ -f "$BOX/$CUTLASS_HEADERS/cute/tensor.hpp" ]] || fail "headers not unpacked from ATTN_CUTLASS_WHEEL"
}

# A build configured without the headers is configured again once setup installed them, and
# one whose headers were deleted (offline: setup cannot bring them back) too.
test_cutlass_reconfigures() {
  course run 00
  local cache="$BOX/build/release/CMakeCache.txt" configured
  echo "ATTN_PYTHON:FILEPATH=$BOX/bin/python3" >"$cache.orig"  # the plot Python: as configured
  { cat "$cache.orig"; echo "ATTN_CUTLASS_INCLUDE_DIR:PATH=ATTN_CUTLASS_INCLUDE_DIR-NOTFOUND"; } >"$cache"
  : >"$BOX/calls.log"
  course run 00
  configured="cmake $BOX/build/release -DATTN_PYTHON="
  expect_contains "$(calls)" "$configured"
  { cat "$cache.orig"; echo "ATTN_CUTLASS_INCLUDE_DIR:PATH=$BOX/$CUTLASS_HEADERS"
    echo "_ATTN_CUTLASS_SEARCHED:INTERNAL=$BOX/$CUTLASS_HEADERS"; } >"$cache"
  : >"$BOX/calls.log"
  course run 00
  expect_lacks "$(calls)" "$configured"
  no_cutlass
  : >"$BOX/calls.log"
  course run 00
  expect_contains "$(calls)" "$configured"
  { cat "$cache.orig"; echo "ATTN_CUTLASS_INCLUDE_DIR:PATH=ATTN_CUTLASS_INCLUDE_DIR-NOTFOUND"; } >"$cache"
  : >"$BOX/calls.log"
  course run 00  # still none: nothing to configure again
  expect_lacks "$(calls)" "$configured"
  # A directory given with -D is left as it is: CMake skips module 08 with its line.
  { cat "$cache.orig"; echo "ATTN_CUTLASS_INCLUDE_DIR:PATH=/nonexistent"; } >"$cache"
  : >"$BOX/calls.log"
  course run 00
  expect_lacks "$(calls)" "$configured"
}

# A module the build skipped (no CUTLASS headers for 08) is refused with CMake's line, not
# a build error.
SKIP_08="module 08_cute skipped: CUTLASS/CuTe headers not found; ./course setup installs them"
test_skipped_module_is_named() {
  mkdir -p "$BOX/modules/08_cute" "$BOX/tests"
  touch "$BOX/modules/08_cute/exercise.cu" "$BOX/tests/test_08_cute_host.cpp"
  course run 00
  echo "08 $SKIP_08 (nvidia-cutlass from PyPI)" >"$BOX/build/release/attn_skipped_modules.txt"
  : >"$BOX/calls.log"
  course grade 08
  expect_code "$CODE" 1
  expect_contains "$OUT" "course: $SKIP_08"
  expect_lacks "$(calls)" "--build"
  FAKE_GPU=1 course run 08
  expect_code "$CODE" 1
  expect_contains "$OUT" "course: $SKIP_08"
  expect_lacks "$(calls)" "attn run"
  course test
  expect_contains "$OUT" "course: not tested: $SKIP_08"
}

# Module 08's host checks run first, on any machine; without a GPU the GPU checks are not
# graded, and the grade says so.
test_grade_with_host_checks() {
  mkdir -p "$BOX/modules/08_cute" "$BOX/tests"
  touch "$BOX/modules/08_cute/exercise.cu" "$BOX/tests/test_08_cute_host.cpp"
  fake_program build/release/grade_08_host "[doctest] test cases: 4 | 4 passed | 0 failed" 0
  fake_program build/release/grade_08 "[doctest] test cases: 9 | 9 passed | 0 failed" 0
  course grade 08
  expect_code "$CODE" 1
  expect_contains "$(calls)" "--target grade_08_host --target grade_08"
  expect_contains "$OUT" "module 08: host checks PASS (test cases: 4 | 4 passed | 0 failed); the GPU checks were NOT graded: they need a CUDA GPU"
  expect_contains "$(cat "$BOX/build/grades/08")" "not graded (no GPU; host checks pass)"
  FAKE_GPU=1 course grade 08
  expect_code "$CODE" 0
  expect_contains "$OUT" "module 08: PASS: host checks PASS (test cases: 4 | 4 passed | 0 failed); GPU checks PASS (test cases: 9 | 9 passed | 0 failed)"
  fake_program build/release/grade_08_host "[doctest] test cases: 4 | 1 passed | 3 failed" 1
  FAKE_GPU=1 course grade 08
  expect_code "$CODE" 1
  expect_contains "$OUT" "module 08: FAIL: host checks FAIL"
  expect_contains "$(cat "$BOX/build/grades/08")" "fail"
  course grade 08 --extra  # the host grader has no going-further checks
  expect_lacks "$OUT" "host checks"
}

# verify runs the host grader's pair too, in a row of its own.
test_verify_host_rows() {
  export FAKE_GPU=1
  mkdir -p "$BOX/modules/08_cute" "$BOX/tests"
  touch "$BOX/modules/08_cute/exercise.cu" "$BOX/tests/test_08_cute_host.cpp"
  rm -rf "$BOX/modules/05_batched_gemm" "$BOX/modules/09_hopper"
  fake_program build/release/check_08 "[doctest] test cases: 3 | 3 passed" 0
  fake_program build/release/grade_08 "[doctest] test cases: 3 | 0 passed | 3 failed" 1
  fake_program build/sanitize/check_08 "[doctest] test cases: 3 | 3 passed" 0
  fake_program build/release/check_08_host "[doctest] test cases: 2 | 2 passed" 0
  fake_program build/release/grade_08_host "[doctest] test cases: 2 | 0 passed | 2 failed" 1
  course verify
  expect_code "$CODE" 0
  expect_contains "$OUT" "08_cute            pass"
  # A step's seconds depend on the machine's load: any number of them.
  expect_line "$OUT" '^08_cute/host +pass [0-9]+s +fails [0-9]+s '
  expect_contains "$OUT" "verify: OK"
  fake_program build/release/grade_08_host "[doctest] test cases: 2 | 2 passed" 0
  course verify
  expect_code "$CODE" 1
  expect_line "$OUT" '^08_cute/host +pass [0-9]+s +PASSES\(no-teeth\) [0-9]+s '
}

for t in $(declare -F | awk '{print $3}' | grep '^test_'); do run_test "$t"; done
echo "test_course: $TESTS tests, $FAILED failed checks"
[[ $FAILED -eq 0 ]]
