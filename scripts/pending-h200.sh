#!/usr/bin/env bash
# Pending device run 2 of bench/TUNING.md ("Pending device runs") in one device call: on an H200,
# main's GPU suite, the small-D chunks' A/B (d644a7d, chosen on an H100) and RESULTS.md's H200
# tables again. On any other card it runs the suite only (the H100 tables of 2026-12-07 are current).
# Here, before the call:
#   npm install && npx tsc -p tsconfig.json
#   bash scripts/ab-build.sh m=main p=d644a7d~1     # main, and main before the small-D chunks
#   bash ../shared/gpu/pack && rm -rf .gpu/build
# then with the device tool (carry [".gpu", "dist", "ab"], timeout ~DEADLINE + 40):
#   DEADLINE=540 bash .gpu/on-gpu bash scripts/pending-h200.sh
# Output under $OUT: summary.txt (the card, each step's rc and seconds, the suite's count) and
# r.tar.xz (every log; the device tool brings back few files).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD
D=${DEADLINE:-540}; t0=$SECONDS
left() { echo $((D - (SECONDS - t0))); }
top=${OUT:-pending-h200-out}; out=$top/r; mkdir -p "$out"; S=$top/summary.txt
card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "card: $card ($(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)); m: $(cat ab/m.ref 2>/dev/null); p: $(cat ab/p.ref 2>/dev/null)" > "$S"
finish() {
  echo "total $((SECONDS - t0)) s" >> "$S"
  cat "$S"
  cp "$S" "$out/"
  tar cJf "$top/r.tar.xz" -C "$top" r && rm -rf "$out"
}
# 1. main's suite (its own tree and addon: ab/m)
SUITE_LIMIT=240 OUT=$out/suite bash scripts/ab-suite.sh m > "$out/suite.txt" 2>&1
tail -1 "$out/suite.txt" >> "$S"
grep '✕' "$out/suite.txt" | head -10 >> "$S"
if [[ $card != *H200* ]]; then
  echo "not an H200: the suite only" >> "$S"
  finish
  exit 0
fi
step() {  # name, wanted seconds, command... (run in main's tree, ab-suite/m, with its dist and addon)
  local name=$1 want=$2
  shift 2
  local l
  l=$(left)
  if [ "$l" -lt 40 ]; then echo "$name: skipped ($l s left)" >> "$S"; return; fi
  [ "$want" -gt $((l - 20)) ] && want=$((l - 20))
  local t=$SECONDS
  (cd "$root/ab-suite/m" && timeout "$want" "$@") > "$out/$name.txt" 2>&1
  echo "$name: rc=$? $((SECONDS - t)) s" >> "$S"
}
# 2. the small-D chunks: main (m) against main before them (p), alternated
l=$(left)
AB_ONLY=mp REPS=3 BENCH_LIMIT=60 OUT=$out/ab timeout $((l < 120 ? l - 20 : 100)) bash scripts/ab-addons.sh \
  --preset qwen3-0.6b,gpt2,gemma3-1b,llama3.2-1b --batch 96,112,128,160,256 --iters 20 --warmup 3 \
  --samplers fused --no-baselines > "$out/ab-small-d.txt" 2>&1
echo "ab-small-d: rc=$? at $((SECONDS - t0)) s" >> "$S"
# 3. RESULTS.md's H200 tables on main
step model 120 node dist/bench/cli.js --preset llama3-8b,qwen3-8b,llama3-70b --batch 1,16,64,128,256 --iters 15 \
  --warmup 3 --logits model --options plain,logprobs,llama3,qwen3,gemma3,topk50,minp0.05 --samplers fused
step gaussian 90 node dist/bench/cli.js --preset llama3-8b,qwen3-8b,llama3-70b --batch 1,16,64,128,256 --iters 15 \
  --warmup 3 --options plain,logprobs,topk50,topp0.9,minp0.05,llama3,qwen3 --samplers fused --no-baselines
step small-heads 90 node dist/bench/cli.js --preset llama3.2-1b,qwen3-0.6b,qwen3-4b,gemma3-1b,gpt2,llama3-8b \
  --batch 1,16,32,64,96,128,256 --iters 30 --warmup 5 --samplers fused
finish
