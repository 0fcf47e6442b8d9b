#!/usr/bin/env bash
# Times two builds of `attn` side by side on the same GPU, in one run: before and after a
# change that must not slow any kernel down (moving code into shared headers, say).
#
#   scripts/compare_builds.sh OLD_ATTN NEW_ATTN OUT_DIR [MODULES]
#
# For every module (default 3 4 5 6 7) and ladder shape (16k tokens, heads*dim = 2048, d 64
# and 128, causal or not, seq 1024 and 4096) it runs the solution with --time, alternating
# old, new, old, new so that clock or thermal drift hits both alike, and takes each build's
# faster median. Writes OUT_DIR/compare_builds.json and .txt (the table), and the kernels'
# registers, shared memory and spills from both binaries (cuobjdump -res-usage).
set -uo pipefail
OLD=${1:?old attn}; NEW=${2:?new attn}; OUT=${3:?output folder}
MODULES=${4:-"3 4 5 6 7"}
mkdir -p "$OUT"
time_of() {  # attn binary, args...: prints the median ms, or the first error line
  local line
  line=$("$@" 2>&1 | grep -E "^  time |^attn:" | head -1)
  if [[ $line =~ time\ ([0-9.]+)\ ms ]]; then echo "${BASH_REMATCH[1]}"; else echo "error: ${line#attn: }"; fi
}
rows=()
printf '%-7s %-34s %10s %10s %8s\n' module shape old_ms new_ms new/old | tee "$OUT/compare_builds.txt"
for m in $MODULES; do
  for hd in "32 64" "16 128"; do
    read -r heads dim <<<"$hd"
    for causal in "" "--causal"; do
      for seq in 1024 4096; do
        args=(run --module "$m" --impl solution --batch $((16384 / seq)) --heads "$heads"
              --seq "$seq" --dim "$dim" $causal --time --warmup 5 --iters 20 --seed 1)
        o1=$(time_of "$OLD" "${args[@]}"); n1=$(time_of "$NEW" "${args[@]}")
        o2=$(time_of "$OLD" "${args[@]}"); n2=$(time_of "$NEW" "${args[@]}")
        shape="B=$((16384 / seq)) H=$heads S=$seq D=$dim${causal:+ causal}"
        if [[ $o1 == error* || $n1 == error* ]]; then
          printf '%-7s %-34s %s | %s\n' "$m" "$shape" "$o1" "$n1" | tee -a "$OUT/compare_builds.txt"
          rows+=("{\"module\": $m, \"shape\": \"$shape\", \"old\": \"${o1//\"/}\", \"new\": \"${n1//\"/}\"}")
          continue
        fi
        read -r old new ratio < <(python3 -c "o=min($o1,$o2); n=min($n1,$n2); print(o, n, '%.3f' % (n/o))")
        printf '%-7s %-34s %10.4f %10.4f %8s\n' "$m" "$shape" "$old" "$new" "$ratio" | tee -a "$OUT/compare_builds.txt"
        rows+=("{\"module\": $m, \"shape\": \"$shape\", \"old_ms\": [$o1, $o2], \"new_ms\": [$n1, $n2], \"old_best_ms\": $old, \"new_best_ms\": $new, \"new_over_old\": $ratio}")
      done
    done
  done
done
{
  printf '{\n  "schema": "attn-compare-builds/1",\n  "device": "%s",\n  "method": "solution, --time --warmup 5 --iters 20 (median), runs alternate old/new/old/new, best median of each",\n  "results": [\n' \
    "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
  for i in "${!rows[@]}"; do printf '    %s%s\n' "${rows[i]}" "$([[ $i -lt $((${#rows[@]} - 1)) ]] && echo ,)"; done
  printf '  ]\n}\n'
} >"$OUT/compare_builds.json"
# Registers, shared memory and stack of every solution kernel. Kernel names change when code
# moves between headers (namespaces, template arguments), so the comparison is of the sorted
# resource lines, which must match one for one.
for which in OLD NEW; do
  bin=${!which}
  cuobjdump -res-usage "$bin" 2>/dev/null |
    awk '/Function/ {name = $2} /REG:/ && name ~ /solution/ {print $1, $2, $3, $4, name}' |
    sort >"$OUT/resources_${which,,}.txt"
done
echo "registers/stack/shared/local per solution kernel: $OUT/resources_old.txt, resources_new.txt"
if diff <(cut -d' ' -f1-4 "$OUT/resources_old.txt") <(cut -d' ' -f1-4 "$OUT/resources_new.txt") >"$OUT/resources_diff.txt"; then
  echo "resources: the same multiset of (registers, stack, shared, local) over the solution kernels"
else
  echo "resources differ:"; cat "$OUT/resources_diff.txt"
fi
