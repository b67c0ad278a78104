#!/usr/bin/env bash
# Pending device run 2 of bench/TUNING.md in one device call, adapting to its card and time:
# 1. main's GPU suite (m): on an H200, the suite main still owes there;
# 2. on an H200, time left: RESULTS.md's tables on that build (model-like with PyTorch, Gaussian,
#    small heads), then the small-D chunks' A/B (m against p = d644a7d~1).
# On a card that is not an H200 it runs the suite only.
# Here, before the call:
#   npm install && npx tsc -p tsconfig.json
#   bash scripts/ab-build.sh m=main p=d644a7d~1
#   bash ../shared/gpu/pack && rm -rf .gpu/build
# then with the device tool (carry [".gpu", "dist", "ab"], timeout DEADLINE + 30; ask for nvidia-h200):
#   DEADLINE=540 bash .gpu/on-gpu bash scripts/pending-next.sh
# Output under $OUT: summary.txt (written as it goes: it survives a timeout) and r.tar.xz.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD; D=${DEADLINE:-540}; t0=$SECONDS
left() { echo $((D - (SECONDS - t0))); }
top=${OUT:-pending-next-out}; o=$top/r; mkdir -p "$o"; S=$top/summary.txt
card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "card: $card; $(for x in m p; do echo -n "$x: $(cat ab/$x.ref 2>/dev/null); "; done)" > "$S"
finish() { echo "total $((SECONDS - t0)) s" >> "$S"; cat "$S"; cp "$S" "$o/"; tar cJf "$top/r.tar.xz" -C "$top" r && rm -rf "$o"; }
SUITE_LIMIT=200 OUT=$o/suites timeout 210 bash scripts/ab-suite.sh m > "$o/suites.txt" 2>&1
{ tail -1 "$o/suites.txt"; grep '✕' "$o/suites.txt" | head -10; echo "suite of m at $((SECONDS - t0)) s"; } >> "$S"
if [[ $card != *H200* ]]; then echo "not an H200: no tables" >> "$S"; finish; exit 0; fi
step() {  # name, wanted seconds, command... (in the suite's tree of m: its dist and addon)
  local name=$1 want=$2; shift 2; local l; l=$(left)
  if [ "$l" -lt 40 ]; then echo "$name: skipped ($l s left)" >> "$S"; return; fi
  [ "$want" -gt $((l - 15)) ] && want=$((l - 15)); local t=$SECONDS
  (cd "$root/ab-suite/m" && timeout "$want" "$@") > "$o/$name.txt" 2>&1
  echo "$name: rc=$? $((SECONDS - t)) s" >> "$S"
}
step model 120 node dist/bench/cli.js --preset llama3-8b,qwen3-8b,llama3-70b --batch 1,16,64,128,256 --iters 15 \
  --warmup 3 --logits model --options plain,logprobs,llama3,qwen3,gemma3,topk50,minp0.05 --samplers fused
step gaussian 90 node dist/bench/cli.js --preset llama3-8b,qwen3-8b,llama3-70b --batch 1,16,64,128,256 --iters 15 \
  --warmup 3 --options plain,logprobs,topk50,topp0.9,minp0.05,llama3,qwen3 --samplers fused --no-baselines
step small-heads 90 node dist/bench/cli.js --preset llama3.2-1b,qwen3-0.6b,qwen3-4b,gemma3-1b,gpt2,llama3-8b \
  --batch 1,16,32,64,96,128,256 --iters 30 --warmup 5 --samplers fused
l=$(left)
if [ "$l" -gt 60 ] && [ -f ab/p.node.xz ]; then
  AB_ONLY=mp REPS=2 BENCH_LIMIT=60 OUT=$o/ab-small-d timeout $((l - 15)) bash scripts/ab-addons.sh \
    --preset qwen3-0.6b,gpt2,gemma3-1b,llama3.2-1b --batch 96,112,128,160,256 --iters 20 --warmup 3 \
    --samplers fused --no-baselines > "$o/ab-small-d.txt" 2>&1
  echo "ab-small-d: rc=$? at $((SECONDS - t0)) s" >> "$S"; python3 scripts/ab-pick.py "$o/ab-small-d" --paired --base m >> "$S" 2>&1
fi
finish
