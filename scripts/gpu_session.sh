#!/usr/bin/env bash
# One scripted GPU session: build, verify (solutions pass, starters fail, sanitizers clean),
# run the CLI on a few shapes and the benchmark sweep. Logs and JSON go to $OUT (default
# build/gpu_session). Used on the lent H100; works on any machine with a CUDA GPU.
#   scripts/gpu_session.sh [bench modules, default 1]
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-build/gpu_session}"
mkdir -p "$OUT"
MODULES="${1:-1}"
export ATTN_VERIFY_DIR="$OUT/verify"

step() { printf '\n== %s ==\n' "$*"; }
step "device"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv
nvcc --version | tail -1
step "build"
./course build release >"$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
./build/release/attn info | tee "$OUT/info.txt"
step "attn run examples"
{
  ./build/release/attn run --module 1 --impl solution --verify --time --seq 1024 --heads 8 --seed 7
  ./build/release/attn run --module 1 --impl exercise --verify --seq 1024 --heads 8 --seed 7
  ./build/release/attn run --module 1 --verify --batch 2 --heads 70000 --seq-q 3 --seq-k 5 --dim 16
  ./build/release/attn run --module 1 --verify --seq-q 1000 --seq-k 17 --dim 59 --layout bshd
  ./build/release/attn run --module 1 --heads 64 --seq 1000000 --dim 128
  ./build/release/attn run --module 1 --dim 300
} 2>&1 | tee "$OUT/run_examples.txt"
step "bench"
./build/release/attn bench --modules "$MODULES" --preset ladder --out "$OUT/bench.json" 2>&1 | tee "$OUT/bench.txt"
step "verify"
./course verify 2>&1 | tail -15
# At most 8 files come back from the device: pack the logs.
tar -C "$OUT" -czf "$OUT/verify_logs.tar.gz" verify && rm -rf "$OUT/verify"
