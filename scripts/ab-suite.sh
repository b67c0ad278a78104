#!/usr/bin/env bash
# The GPU suite of committed refs, several in one device call: each ref's own tree and tests with its
# own addon, so that a branch's suite needs no device call of its own (a call that starts a machine
# costs ~140 s of the session's device time; between calls the machine is given back after 30 s
# idle). Here, before the call:
#   bash scripts/ab-build.sh r=feat-x i=exp-y+SOME_MACRO   # ab/<letter>.node.xz and ab/<letter>.tree.tar.xz
#   bash ../shared/gpu/pack && rm -rf .gpu/build
# then with the device tool (carry [".gpu", "dist", "ab"]):
#   bash .gpu/on-gpu bash scripts/ab-suite.sh r i
# Each letter's tree (`git archive` of the ref, bench/results left out) is unpacked under
# ab-suite/<letter> (git-ignored) with the checkout's node_modules, its TypeScript compiled there,
# its addon put in its build/Release, and its scripts/gpu-session.sh run with STEPS=tests (its own
# jest config and limits; SUITE_LIMIT, default 300 s, bounds the whole step). Logs go to
# $OUT/suite-<letter>/; the last lines printed are one per letter: the ref, rc, seconds and jest's
# `N passed, N failed, N skipped`.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD
out=${OUT:-ab-logs}
mkdir -p "$out"
out=$(cd "$out" && pwd)
if [ $# -lt 1 ]; then
  echo "usage: bash scripts/ab-suite.sh <letter>... (ab/<letter>.node.xz and ab/<letter>.tree.tar.xz)" >&2
  exit 2
fi
lines=()
for letter in "$@"; do
  addon=ab/$letter.node.xz tree=ab/$letter.tree.tar.xz
  what=$(cat "ab/$letter.ref" 2>/dev/null || echo "$letter")
  if [ ! -s "$addon" ] || [ ! -s "$tree" ]; then
    lines+=("$(printf '%s  missing %s or %s (bash scripts/ab-build.sh %s=<ref>)' "$letter" "$addon" "$tree" "$letter")")
    continue
  fi
  dir=$root/ab-suite/$letter
  logs=$out/suite-$letter
  rm -rf "$dir" "$logs"
  mkdir -p "$dir/build/Release" "$logs"
  xz -dc "$tree" | tar x -C "$dir"
  ln -s "$root/node_modules" "$dir/node_modules"
  xz -dc "$addon" > "$dir/build/Release/flashsample.node"
  t0=$SECONDS
  (cd "$dir" && npx tsc -p . > "$logs/tsc.log" 2>&1 &&
     OUT="$logs" STEPS=tests timeout "${SUITE_LIMIT:-300}" bash scripts/gpu-session.sh > "$logs/session.log" 2>&1)
  rc=$?
  last=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$logs/tests.log" 2>/dev/null | tail -1)
  grep -E '✕' "$logs/tests.log" 2>/dev/null | head -20
  lines+=("$(printf '%s  %s  rc=%s %ss  %s' "$letter" "$what" "$rc" "$((SECONDS - t0))" "${last:-no jest summary (see $logs/)}")")
done
printf '%s\n' "${lines[@]}"
