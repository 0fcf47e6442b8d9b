#!/usr/bin/env bash
# Scripted GPU sessions, so a lent GPU's time goes to measuring, not typing. Logs and JSON go
# to $OUT (default build/gpu_session). Works on any machine with a CUDA GPU.
#
#   scripts/gpu_session.sh check          build, attn info, CLI examples, .npy round trips
#                                         against NumPy, kernel resource usage, Nsight Compute
#                                         counters
#   scripts/gpu_session.sh verify         ./course verify (solutions pass, starters fail,
#                                         compute-sanitizer memcheck/racecheck/synccheck)
#   scripts/gpu_session.sh bench 2,3,4    the benchmark sweep for those modules, then PyTorch
#                                         SDPA (fp32, memory-efficient) on the same shapes
#   scripts/gpu_session.sh backward [N,N] module 11 alone: bench_11 and PyTorch's FLASH and
#                                         cuDNN backward on the same shapes (timed first, alone
#                                         on the GPU), then check_11, the untouched starter's
#                                         grade_11 and memcheck/racecheck/synccheck side by side
#                                         (ATTN_SANITIZER_SECONDS each, default 150; bench_11:
#                                         ATTN_BENCH_SECONDS, default 900); uses the binaries in
#                                         build/release when they are there
#   scripts/gpu_session.sh decode [B:N,..] module 10: decode beside PyTorch's cuDNN and FLASH backends
#                                         on the same tensors, bench_10 --quick, check_10, the
#                                         untouched starter's grade_10 and the three sanitizers;
#                                         binaries from build/release
#   scripts/gpu_session.sh cute           module 08 beside module 07 on the bf16 ladder, builds
#                                         alternating (ATTN_CUTE_BUILDS=label=attn,...), PyTorch's
#                                         FLASH and cuDNN backends, check_08, the starter's
#                                         grade_08 and the three sanitizers
#   scripts/gpu_session.sh modifiers      module 12: bench_12 of several builds alternating
#                                         (ATTN_MOD_BUILDS=label=bench_12,...), FlexAttention on
#                                         the same shapes, check_12, the starter's grade_12 and the
#                                         three sanitizers, then a table of each build's ratios
#   scripts/gpu_session.sh tf32           module 09's 3xTF32 rung: bench_09_tf32 and PyTorch's
#                                         fp32 SDPA (same shapes, same error inputs), the CLI on
#                                         fp32 tensors, check_09, the starter's fp32 cases and
#                                         the three sanitizers; binaries from build/release
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-build/gpu_session}"
mkdir -p "$OUT"
ATTN=./build/release/attn
step() { printf '\n== %s ==\n' "$*"; }
modules() { $ATTN list | awk '$3 == "GPU" {print $1 + 0}'; }

phase_check() {
  step "device"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv
  nvcc --version | tail -1
  step "build"
  ./course build release >"$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
  $ATTN info | tee "$OUT/info.txt"
  step "attn run examples"
  {
    $ATTN list
    for m in $(modules); do
      $ATTN run --module "$m" --impl solution --verify --time --seq 1024 --heads 8 --seed 7
      $ATTN run --module "$m" --impl exercise --verify --seq 1024 --heads 8 --seed 7
      $ATTN run --module "$m" --verify --batch 2 --heads 70000 --seq-q 3 --seq-k 5 --dim 16
      $ATTN run --module "$m" --verify --seq-q 1000 --seq-k 17 --dim 59 --layout bshd
    done
    $ATTN run --module 1 --heads 64 --seq 1000000 --dim 128
    $ATTN run --module 1 --dim 300
  } >"$OUT/run_examples.txt" 2>&1
  grep -E "^[0-9]|PASS|FAIL|attn:" "$OUT/run_examples.txt" | head -60
  step ".npy round trips against NumPy float64"
  for m in $(modules); do
    python3 scripts/npy_roundtrip_check.py --module "$m" 2>&1 | sed "s/^/module $m: /"
    if $ATTN run --module "$m" --causal --seq 8 >/dev/null 2>&1; then
      python3 scripts/npy_roundtrip_check.py --module "$m" --causal 2>&1 | sed "s/^/module $m: /"
    fi
  done | tee "$OUT/npy_checks.txt"
  step "resource usage (registers, shared memory, stack) of the solution kernels"
  cuobjdump -res-usage "$ATTN" 2>&1 | grep -B1 -E "REG:" | grep -A1 -E "solution" |
    sed -E 's/_ZN4attn//' | tee "$OUT/resources.txt" | head -40
  step "Nsight Compute: memory traffic per module (B=1 H=8 N=1024 d=64)"
  for m in $(modules); do
    ncu --metrics dram__bytes_read.sum,dram__bytes_write.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,sm__warps_active.avg.pct_of_peak_sustained_active,gpu__time_duration.sum \
      --csv --page raw -c 1 $ATTN run --module "$m" --seq 1024 --heads 8 --dim 64 \
      >"$OUT/ncu_module$m.csv" 2>&1 || echo "ncu failed for module $m"
  done
  python3 - "$OUT" <<'PY' | tee "$OUT/ncu_summary.txt"
import csv, glob, sys, os
for path in sorted(glob.glob(os.path.join(sys.argv[1], "ncu_module*.csv"))):
    lines = [l for l in open(path) if l.startswith('"')]
    if len(lines) < 3:
        print(os.path.basename(path), "no data"); continue
    rows = list(csv.reader(lines))
    head, units, vals = rows[0], rows[1], rows[2]
    want = [c for c in head if "__" in c]
    print(os.path.basename(path), vals[head.index("Kernel Name")][:40])
    for c in want:
        print(f"   {c:<62} {vals[head.index(c)]:>16} {units[head.index(c)]}")
PY
  # At most 8 files come back from the device: pack the logs.
  tar -C "$OUT" -czf "$OUT/check_logs.tar.gz" build.log run_examples.txt $(cd "$OUT" && ls ncu_module*.csv) &&
    rm -f "$OUT"/ncu_module*.csv "$OUT/build.log" "$OUT/run_examples.txt"
}

phase_verify() {
  step "verify"
  ATTN_VERIFY_DIR="$OUT/verify" ./course verify 2>&1 | tail -12
  cp "$OUT/verify/verify_table.txt" "$OUT/" 2>/dev/null
  tar -C "$OUT" -czf "$OUT/verify_logs.tar.gz" verify && rm -rf "$OUT/verify"
}

phase_bench() {
  local list="${1:-}"
  ./course build release >"$OUT/build_bench.log" 2>&1 || { tail -30 "$OUT/build_bench.log"; exit 1; }
  step "bench modules ${list:-all}"
  $ATTN bench ${list:+--modules "$list"} --preset ladder --out "$OUT/bench.json" 2>&1 |
    tee "$OUT/bench.txt"
  step "PyTorch SDPA, fp32 memory-efficient backend, same shapes"
  PYTHONUNBUFFERED=1 python3 scripts/compare_torch.py --preset ladder --dtype float32 \
    --backends efficient --merge-into "$OUT/bench.json" 2>&1 | tee "$OUT/torch.txt"
}

# graders_and_sanitizers NN SECONDS [doctest filter...]: module NN's check_NN (the solution,
# every case) then grade_NN (the untouched starter), beside memcheck, racecheck and synccheck
# on check_NN, each command stopped after SECONDS; the filter (e.g. -tc="fp32*") narrows the
# starter's and the sanitizers' cases. Logs go to $OUT/logs.tar.gz, one summary block per
# command to $OUT/checks.txt (appended) and stdout. Binaries from build/release.
graders_and_sanitizers() {
  local m=$1 t=$2 bin=${ATTN_BIN:-build/release} sanitizer tool f
  shift 2
  sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  mkdir -p "$OUT/logs"
  ( timeout "$t" $bin/check_$m >"$OUT/logs/check_$m.txt" 2>&1
    echo "check_$m exit $?" >>"$OUT/logs/check_$m.txt"
    timeout "$t" $bin/grade_$m "$@" >"$OUT/logs/grade_$m.txt" 2>&1
    echo "grade_$m exit $?" >>"$OUT/logs/grade_$m.txt" ) &
  for tool in memcheck racecheck synccheck; do
    ( ATTN_SANITIZER_LIGHT=1 ATTN_SANITIZER_TOOL=$tool timeout "$t" \
        "$sanitizer" --tool $tool --error-exitcode 99 $bin/check_$m "$@" >"$OUT/logs/$tool.txt" 2>&1
      echo "$tool exit $? (124: stopped after $t s)" >>"$OUT/logs/$tool.txt" ) &
  done
  wait
  for f in check_$m grade_$m memcheck racecheck synccheck; do
    echo "--- $f"
    grep -E "test cases:|ERROR SUMMARY|RACECHECK SUMMARY|exit " "$OUT/logs/$f.txt" | tail -4
  done | tee -a "$OUT/checks.txt"
  tar -C "$OUT" -czf "$OUT/logs.tar.gz" logs && rm -rf "$OUT/logs"
}

phase_backward() {
  local seqs="${1:-1024,4096,16384}" bin=build/release
  if [[ ! -x $bin/bench_11 || ! -x $bin/check_11 || ! -x $bin/grade_11 ]]; then
    ./course build release >"$OUT/build11.log" 2>&1 || { tail -30 "$OUT/build11.log"; exit 1; }
  fi
  {
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv
    python3 -c 'import torch; print("torch", torch.__version__, "cudnn", torch.backends.cudnn.version())'
  } >"$OUT/checks.txt" 2>&1
  step "bench_11 (seqs $seqs)"
  # ATTN_BWD_RUNGS: time only these rungs (comma list; default all)
  timeout "${ATTN_BENCH_SECONDS:-900}" $bin/bench_11 --seqs "$seqs" --dims 64,128 --rows-max-seq 0 \
    ${ATTN_BWD_RUNGS:+--rungs "$ATTN_BWD_RUNGS"} --out "$OUT/bench11.json" 2>&1 | tee "$OUT/bench11.txt"
  step "PyTorch SDPA backward, FLASH and cuDNN, same shapes"
  PYTHONUNBUFFERED=1 python3 scripts/compare_torch_backward.py --seqs ${seqs//,/ } --dims 64 128 \
    --backends flash,cudnn --out "$OUT/torch11.json" >"$OUT/torch11.txt" 2>&1
  tail -30 "$OUT/torch11.txt"
  step "grader, starter, sanitizers"
  graders_and_sanitizers 11 "${ATTN_SANITIZER_SECONDS:-150}"
}

phase_tf32() {
  # Module 09's 3xTF32 rung: bench_09_tf32 and PyTorch's fp32 SDPA on the same shapes and error
  # inputs (timed first, alone on the GPU), the CLI on fp32 tensors (.npy too), then check_09,
  # the untouched starter's fp32 cases and memcheck/racecheck/synccheck side by side; uses the
  # binaries in build/release.
  local bin=build/release inputs="$OUT/err_inputs"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader \
    >"$OUT/device.txt"
  python3 -c "import torch; print('torch', torch.__version__)" >>"$OUT/device.txt" 2>&1
  timeout 220 $bin/bench_09_tf32 --iters 10 --json "$OUT/bench09_tf32.json" \
    --inputs "$inputs" >"$OUT/bench09_tf32.txt" 2>&1
  echo "bench_09_tf32 exit $?"
  PYTHONUNBUFFERED=1 timeout 150 python3 scripts/compare_torch.py --dtype f32 \
    --backend efficient --errors "$inputs" --out "$OUT/torch09_tf32.json" \
    >"$OUT/torch09_tf32.txt" 2>&1
  echo "compare_torch exit $?"
  {
    $ATTN run --module 9 --dtype f32 --verify --seq 1000 --heads 4 --dim 128 --causal --time
    $ATTN run --module 9 --dtype f32 --verify --seq-q 65 --seq-k 1000 --heads 8 --kv-heads 2 \
      --dim 64 --layout bshd
    $ATTN run --module 9 --dtype f32 --verify --q "$inputs/d128_range4_q.npy" \
      --k "$inputs/d128_range4_k.npy" --v "$inputs/d128_range4_v.npy"
    $ATTN run --module 9 --impl exercise --dtype f32 --verify --seq 1000 --heads 4 --dim 64
    $ATTN run --module 9 --dtype f32 --dim 96
    echo "last exit $?"
  } >"$OUT/cli09_f32.txt" 2>&1
  rm -rf "$inputs"
  : >"$OUT/checks.txt"
  graders_and_sanitizers 09 300 -tc="fp32*"
  grep -E "^3xtf32|^tf32" "$OUT/bench09_tf32.txt"
  grep -E "8192|Sq=512 " "$OUT/bench09_tf32.txt"
  grep -E "N=512 |N=8192" "$OUT/torch09_tf32.txt" | grep -v errors
  grep -E "PASS|FAIL|attn:" "$OUT/cli09_f32.txt"
}

phase_decode() {
  # Module 10: our decode and PyTorch's cuDNN and FLASH backends on the same tensors
  # (compare_torch_decode.py --ours, timed first, alone on the GPU; ATTN_DECODE_OURS may name
  # several label=library builds, ATTN_DECODE_PAGES several page sizes; shapes "all": the whole
  # sweep), then bench_10 --quick (ATTN_DECODE_BENCH=full: all of it, 0: none), check_10, the
  # untouched starter's grade_10 and memcheck/racecheck/synccheck side by side; uses the
  # binaries in build/release.
  local bin=build/release shapes="${1:-32:4096,32:32768,16:4096,1:4096}"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader \
    >"$OUT/device.txt"
  python3 -c "import torch; print('torch', torch.__version__, 'cudnn', torch.backends.cudnn.version())" \
    >>"$OUT/device.txt" 2>&1
  local only=(--shapes "$shapes")
  [[ $shapes == all ]] && only=()  # the script's whole sweep
  PYTHONUNBUFFERED=1 timeout 400 python3 scripts/compare_torch_decode.py --backends cudnn,flash \
    --layouts "${ATTN_DECODE_LAYOUTS:-bshd}" "${only[@]}" --placements "${ATTN_DECODE_PLACEMENTS:-3}" \
    --page-size "${ATTN_DECODE_PAGES:-16}" --ours "${ATTN_DECODE_OURS:-$bin/libdecode_capi_10.so}" \
    --out "$OUT/decode10_torch.json" >"$OUT/decode10_torch.txt" 2>&1
  echo "compare_torch_decode exit $?"
  if [[ ${ATTN_DECODE_BENCH:-quick} != 0 ]]; then
    local quick=(--quick)
    [[ ${ATTN_DECODE_BENCH:-quick} == full ]] && quick=()
    timeout 400 $bin/bench_10 "${quick[@]}" --out "$OUT/bench10.json" >"$OUT/bench10.txt" 2>&1
    echo "bench_10 exit $?"
  fi
  : >"$OUT/checks.txt"
  graders_and_sanitizers 10 300
  grep -E "^decode |HBM" "$OUT/bench10.txt" 2>/dev/null
  grep -E "^(torch|ours)" "$OUT/decode10_torch.txt"
}

phase_cute() {
  # Module 08 beside module 07 on the bf16 ladder, several builds alternating: ATTN_CUTE_BUILDS
  # names label=attn-binary pairs (default cur=build/release/attn), ATTN_CUTE_ROUNDS rounds
  # (default 2). PyTorch's FLASH and cuDNN backends are merged into the last ladder
  # (ATTN_CUTE_TORCH=0: not). Then check_08, the untouched starter's grade_08 and the three
  # sanitizers (ATTN_CUTE_CHECKS=0: not); binaries from build/release. Last, module 07's time
  # over module 08's per shape.
  local builds="${ATTN_CUTE_BUILDS:-cur=build/release/attn}" rounds=${ATTN_CUTE_ROUNDS:-2}
  local r pair last=
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader \
    >"$OUT/device.txt"
  for ((r = 1; r <= rounds; r++)); do
    for pair in ${builds//,/ }; do
      last="$OUT/cute08_${pair%%=*}_$r.json"
      timeout 300 "${pair#*=}" bench --modules 7,8 --preset ladder --dtype bf16 --out "$last" \
        >"$OUT/cute08_${pair%%=*}_$r.txt" 2>&1
      echo "ladder ${pair%%=*} round $r exit $?"
    done
  done
  if [[ -n $last && ${ATTN_CUTE_TORCH:-1} != 0 ]]; then
    PYTHONUNBUFFERED=1 timeout 300 python3 scripts/compare_torch.py --preset ladder --dtype bf16 \
      --backends flash,cudnn --merge-into "$last" >"$OUT/torch08.txt" 2>&1
    echo "compare_torch exit $?"
  fi
  : >"$OUT/checks.txt"
  if [[ ${ATTN_CUTE_CHECKS:-1} != 0 ]]; then
    graders_and_sanitizers 08 "${ATTN_SANITIZER_SECONDS:-330}"
  fi
  [[ -n $last ]] || return 0
  python3 - "$OUT"/cute08_*.json <<'PY'
import json, sys
for path in sys.argv[1:]:
    rows = json.load(open(path))["results"]
    ms = {(r["kernel"][:2], r["head_dim"], r["causal"], r["seq_q"]): r["median_ms"]
          for r in rows if r.get("status") == "ok"}
    ratio = {k[1:]: ms[("07",) + k[1:]] / v for k, v in ms.items()
             if k[0] == "08" and ("07",) + k[1:] in ms}
    for d in (64, 128):
        for c in (False, True):
            v = [ratio[(d, c, n)] for n in sorted(n for (dd, cc, n) in ratio if (dd, cc) == (d, c))]
            print(f"{path.split('/')[-1]:24s} d={d:3d} causal={int(c)} 07/08:",
                  " ".join(f"{x:.3f}" for x in v))
PY
}

phase_modifiers() {
  # Module 12: bench_12 of several builds alternating, ATTN_MOD_BUILDS naming label=bench_12
  # pairs (default cur=build/release/bench_12), ATTN_MOD_ROUNDS rounds (default 1), extra
  # bench_12 options in ATTN_MOD_BENCH_ARGS; FlexAttention on the same shapes
  # (compare_torch_modifiers.py; ATTN_MOD_TORCH=0: not, ATTN_MOD_SEQS its sequence lengths);
  # then check_12, the untouched starter's grade_12 and the three sanitizers (ATTN_MOD_CHECKS=0:
  # not); check_12 and grade_12 from ATTN_BIN (default build/release). Last, each variant's
  # ratio per build and engine.
  local builds="${ATTN_MOD_BUILDS:-cur=build/release/bench_12}" rounds=${ATTN_MOD_ROUNDS:-1}
  local r pair
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader \
    >"$OUT/device.txt"
  python3 -c "import torch; print('torch', torch.__version__)" >>"$OUT/device.txt" 2>&1
  for ((r = 1; r <= rounds; r++)); do
    for pair in ${builds//,/ }; do
      timeout "${ATTN_MOD_BENCH_SECONDS:-400}" "${pair#*=}" ${ATTN_MOD_BENCH_ARGS:-} \
        --out "$OUT/bench12_${pair%%=*}_$r.json" \
        >"$OUT/bench12_${pair%%=*}_$r.txt" 2>&1
      echo "bench_12 ${pair%%=*} round $r exit $?"
    done
  done
  if [[ ${ATTN_MOD_TORCH:-1} != 0 ]]; then
    PYTHONUNBUFFERED=1 timeout 400 python3 scripts/compare_torch_modifiers.py \
      --seqs ${ATTN_MOD_SEQS:-1024 4096 16384} --out "$OUT/torch12.json" >"$OUT/torch12.txt" 2>&1
    echo "compare_torch_modifiers exit $?"
  fi
  : >"$OUT/checks.txt"
  if [[ ${ATTN_MOD_CHECKS:-1} != 0 ]]; then
    graders_and_sanitizers 12 "${ATTN_SANITIZER_SECONDS:-300}"
  fi
  python3 - "$OUT"/bench12_*.json <<'PY'
import json, os, sys
runs = {os.path.basename(p)[8:-5]: json.load(open(p)) for p in sys.argv[1:] if os.path.exists(p)}
keys = []
for run in runs.values():
    for r in run["records"]:
        k = (r.get("engine", "mma"), r["variant"], r["head_dim"], r["seq"])
        if k not in keys:
            keys.append(k)
print("ratio (time / the engine's kernel without modifiers, masks: / a perfect skip); checks:",
      " ".join(f"{n}={'ok' if run['checks_passed'] else 'FAILED'}" for n, run in runs.items()))
print(f"{'engine':6s} {'variant':28s} {'d':>3s} {'N':>5s} " + " ".join(f"{n:>8s}" for n in runs))
for k in keys:
    cells = []
    for run in runs.values():
        m = [r["ratio"] for r in run["records"]
             if (r.get("engine", "mma"), r["variant"], r["head_dim"], r["seq"]) == k]
        cells.append(f"{m[0]:8.3f}" if m else f"{'-':>8s}")
    print(f"{k[0]:6s} {k[1]:28s} {k[2]:3d} {k[3]:5d} " + " ".join(cells))
PY
}

case "${1:-check}" in
  check) phase_check ;;
  verify) phase_verify ;;
  bench) phase_bench "${2:-}" ;;
  backward) phase_backward "${2:-}" ;;
  tf32) phase_tf32 ;;
  decode) phase_decode "${2:-}" ;;
  cute) phase_cute ;;
  modifiers) phase_modifiers ;;
  *) echo "usage: $0 check | verify | bench [modules] | backward [seqs] | tf32 | decode [shapes] | cute | modifiers" >&2
     exit 2 ;;
esac
