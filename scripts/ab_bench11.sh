#!/usr/bin/env bash
# bench_11 builds timed alternately in one call on a GPU machine, for the A/B tables of
# docs/worklog/11_backward.md (read them with scripts/ab_bench11.py). Each build is a binary
# build/ab/bench_11_<label> (copied there from build/release after building each variant; on a
# lent machine they travel in a tarball, unpacked first when BINS names it). Writes
# $OUT/bench11_<TAG>_<label>_r<round>_h200.json per build and round, then runs build/ab/check_11
# (the last variant's grader) and, unless TORCH=0, PyTorch's FLASH and cuDNN backward on the
# same shapes; NCU=<label> adds Nsight Compute's DRAM bytes and L2 hit rate for that build.
#
#   BUILDS=before,after ROUNDS=2 RUNGS=wgmma TAG=name scripts/ab_bench11.sh
set -u
cd "$(dirname "$0")/.."
OUT="${OUT:-build/ab_out}"
mkdir -p "$OUT"
if [[ -n ${BINS:-} ]]; then tar -xJf "$BINS" -C . || exit 1; fi
BUILDS=${BUILDS:-before,after}; ROUNDS=${ROUNDS:-2}; RUNGS=${RUNGS:-wgmma}
SEQS=${SEQS:-512,1024,2048,4096,8192,16384}; TAG=${TAG:-ab}
for r in $(seq 1 "$ROUNDS"); do
  for b in ${BUILDS//,/ }; do
    echo "== $b round $r"
    timeout 200 "build/ab/bench_11_$b" --seqs ${SEQS//,/ } --dims 64 128 --rows-max-seq 0 \
      --rungs ${RUNGS//,/ } --out "$OUT/bench11_${TAG}_${b}_r${r}_h200.json" \
      >"$OUT/log_${b}_r${r}.txt" 2>&1
    echo "rc $?"; grep -E "checks|FAIL" "$OUT/log_${b}_r${r}.txt" | head -5
  done
done
if [[ -x build/ab/check_11 ]]; then echo "== check_11"; timeout 120 build/ab/check_11 2>&1 | tail -3; fi
if [[ ${TORCH:-1} != 0 ]]; then
  echo "== PyTorch"
  PYTHONUNBUFFERED=1 timeout 200 python3 scripts/compare_torch_backward.py --seqs ${SEQS//,/ } \
    --dims 64 128 --backends flash,cudnn --out "$OUT/torch11_${TAG}_h200.json" \
    >"$OUT/log_torch.txt" 2>&1
  echo "rc $?"
fi
if [[ -n ${NCU:-} ]]; then
  echo "== ncu"
  timeout 240 ncu --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct \
    -k regex:flash_bwd_producer --csv "build/ab/bench_11_$NCU" --seqs ${NCU_SEQS:-2048 16384} --dims 128 \
    --rungs wgmma --warmup 1 --iters 1 >"$OUT/ncu_${TAG}.csv" 2>"$OUT/log_ncu.txt"
  echo "rc $?"
fi
# Logs in one file: a lent machine returns only a few files.
(cd "$OUT" && tar czf logs.tar.gz log_*.txt && rm -f log_*.txt)
python3 scripts/ab_bench11.py "$OUT" --rung "${RUNGS%%,*}" --builds "$(echo "$BUILDS" | sed "s/[^,]*/${TAG}_&/g")"
