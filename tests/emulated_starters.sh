#!/usr/bin/env bash
# The graders' teeth without a GPU: the untouched starter of every emulated module must FAIL
# its grader in the CPU emulation (grade_NN_cpu), as `./course verify` checks on a GPU; the
# solutions passing is check_NN_cpu's job. A starter that differs from the last commit (a
# learner at work) is skipped with one line: grading it is `./course grade NN`.
# usage: emulated_starters.sh SOURCE_DIR BUILD_DIR NN... (CTest: test_emulated_starters)
set -uo pipefail
src=$1 build=$2
shift 2
checked=0 failed=0
if ! git -C "$src" rev-parse --verify -q HEAD >/dev/null 2>&1; then
  echo "skipped: $src is not a git checkout, so an untouched starter cannot be told from an edited one"
  exit 77
fi
for nn in "$@"; do
  dir=$(cd "$src" && compgen -G "modules/${nn}_*" | head -1)
  if [[ -z "$dir" ]]; then echo "no module $nn"; failed=1; continue; fi
  if ! git -C "$src" diff --quiet HEAD -- "$dir" ||
     [[ -n "$(git -C "$src" ls-files --others --exclude-standard -- "$dir")" ]]; then
    echo "$dir: edited since the last commit: not checked (grade it with ./course grade $nn)"
    continue
  fi
  checked=$((checked + 1))
  "$build/grade_${nn}_cpu" >"$build/emulated_starter_$nn.log" 2>&1
  rc=$?
  summary=$(grep -E 'test cases:' "$build/emulated_starter_$nn.log" | tail -1)
  if [[ $rc -eq 1 ]]; then
    echo "$dir: the untouched starter fails, as it must: $summary"
  elif [[ $rc -eq 0 ]]; then
    echo "$dir: the untouched starter PASSES its grader: the grader has no teeth ($summary)"
    failed=1
  else
    echo "$dir: grade_${nn}_cpu ended with code $rc (a crash?): see $build/emulated_starter_$nn.log"
    failed=1
  fi
done
[[ $checked -gt 0 || $failed -ne 0 ]] || { echo "skipped: every starter is edited"; exit 77; }
exit $failed
