#!/usr/bin/env bash
# A/B two (or more) builds of the addon on one GPU machine, alternated, in one device call (machine and
# clock state shared, so a 1-2 % difference is visible). Here, before the call:
#   git stash / checkout A; npx cmake-js compile; mkdir -p ab; xz -T0 -c build/Release/flashsample.node > ab/a.node.xz
#   checkout B;             npx cmake-js compile;             xz -T0 -c build/Release/flashsample.node > ab/b.node.xz
#   (any letters: every ab/<letter>.node.xz is a build; at least two), or from committed refs without
#   touching the checkout: bash scripts/ab-build.sh a=main b=my-branch c=my-branch+SOME_MACRO
#   bash ../shared/gpu/pack && rm -rf .gpu/build        # .gpu without an addon: ab/ carries both
# then with the device tool (carry [".gpu", "dist", "ab"]; ab/ is git-ignored, about 4.5 MB a build):
#   bash .gpu/on-gpu bash scripts/ab-addons.sh [bench arguments]
# Default bench arguments: llama3-8b and qwen3-8b, B 1, 16, 64, fused, the option costs (top-k 1000:
# a k above a tile's 128 takes another path to its threshold). Each build
# runs REPS (2) times, A B A B; every table goes to $OUT/bench-{a,b}-{rep}.txt and the summary
# lines (B, plain µs, cost of each option set) are printed; the floor's ceilings are given, not
# measured (below). AB_ONLY=LETTERS (e.g. AB_ONLY=at) takes
# only those builds of ab/, so that one call can run A/Bs of different bench arguments in turn (give
# each its own OUT).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out=${OUT:-ab-logs}
mkdir -p "$out" build/Release
builds=()  # every ab/<letter>.node.xz (a, b, c, ...), alternated in that order
for f in ab/?.node.xz; do
  [ -s "$f" ] || continue
  which=$(basename "$f" .node.xz)
  [[ -z "${AB_ONLY:-}" || "$AB_ONLY" == *"$which"* ]] || continue
  xz -dc "$f" > "/tmp/ab-$which.node" || exit 2
  builds+=("$which")
done
[ ${#builds[@]} -ge 2 ] || { echo "ab-addons: at least two builds are needed as ab/<letter>.node.xz, found: ${builds[*]:-none}" >&2; exit 2; }
args=("$@")
[ ${#args[@]} -eq 0 ] && args=(--preset llama3-8b,qwen3-8b --batch 1,16,64 --iters 20 --warmup 3
  --options plain,logprobs,topk50,topk1000,topp0.9,minp0.05,llama3,qwen3 --samplers fused --no-baselines)
# The A/B reads costs over plain, not the floor: the ceilings are given (the H200's, measured
# 4.5-4.6 TB/s and 761-813 TFLOP/s), not measured, which took 5-8 s of each ~13 s bench run
# (2026-12-05 logs). Pass --read-bw / --matrix-rate to override, MEASURE_CEILINGS=1 to measure.
if [ -z "${MEASURE_CEILINGS:-}" ]; then
  [[ " ${args[*]} " == *" --read-bw "* ]] || args+=(--read-bw 4.6)
  [[ " ${args[*]} " == *" --matrix-rate "* ]] || args+=(--matrix-rate 770)
fi
# A build whose bench ran past BENCH_LIMIT (a hang: an experiment's barrier protocol, say) is left
# out of the later reps, so that it costs the call one limit, not one a rep.
declare -A stuck=()
for rep in $(seq 1 "${REPS:-2}"); do
  for which in "${builds[@]}"; do
    if [ -n "${stuck[$which]:-}" ]; then
      echo "== $which rep $rep skipped: its bench ran past ${BENCH_LIMIT:-150} s in rep ${stuck[$which]}"
      continue
    fi
    cp "/tmp/ab-$which.node" build/Release/flashsample.node
    timeout "${BENCH_LIMIT:-150}" node dist/bench/cli.js "${args[@]}" > "$out/bench-$which-$rep.txt" 2>&1
    rc=$?
    echo "== $which rep $rep rc=$rc"
    [ "$rc" -eq 124 ] && stuck[$which]=$rep
    grep -E '^ +[0-9]+ +[0-9.]+ ' "$out/bench-$which-$rep.txt" |
      awk '{printf "%s %s", $1, $2; for (i = 3; i <= NF; i++) if ($i ~ /%$/) printf " %s", $i; print ""}'
  done
done
