#!/usr/bin/env bash
# Nsight Compute's duration of each kernel of module 11's backward (row preparation, the
# backward kernel, dQ's store) for the bench_11 builds named in BUILDS, on the SEQS given, one
# CSV per build under $OUT: where the backward's time goes at short and long sequences.
#   BUILDS=before,after SEQS="512 2048" scripts/ncu_split11.sh
set -u
cd "$(dirname "$0")/.."
OUT="${OUT:-build/ab_out}"
BUILDS=${BUILDS:-before,after}
mkdir -p "$OUT"
for b in ${BUILDS//,/ }; do
  timeout 200 ncu --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
    -k regex:"prepare_rows|flash_bwd|store_dq" --csv "build/ab/bench_11_$b" --seqs ${SEQS:-512 2048} \
    --dims 64 128 --rungs wgmma --warmup 1 --iters 1 --rows-max-seq 0 \
    >"$OUT/ncu_split_$b.csv" 2>"$OUT/ncu_split_$b.err"
  echo "$b rc $?"
done
