#!/usr/bin/env bash
# Pending device runs 2 and 13 of bench/TUNING.md in one device call, adapting to its card and time.
# On an H200: main's GPU suite (m; owed there), RESULTS.md's option tables (model-like with PyTorch,
# Gaussian), then with time left item 13, the small heads' table and the small-D chunks' A/B (m
# against p = d644a7d~1). On any other card: item 13 alone, m against x (exp-fills-per-chunk: a
# CTA's slice fills published once a chunk) by the means at Gaussian and model-like llama3-8b
# B = 64-256 and qwen3-0.6b, x's suite (a winner lands with it) and ncu of both split kernels at
# top-p 0.9 B = 256.
# Here, before the call:
#   npm install && npx tsc -p tsconfig.json
#   bash scripts/ab-build.sh m=main x=exp-fills-per-chunk p=d644a7d~1
#   bash ../shared/gpu/pack && rm -rf .gpu/build
# then with the device tool (carry [".gpu", "dist", "ab"], timeout DEADLINE + 30; ask for nvidia-h200):
#   DEADLINE=540 bash .gpu/on-gpu bash scripts/pending-next.sh
# Output under $OUT: summary.txt (written as it goes: it survives a timeout) and r.tar.xz.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD; t0=$SECONDS; D=${DEADLINE:-540}; top=${OUT:-pending-next-out}; o=$top/r; mkdir -p "$o"; S=$top/summary.txt
card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "card: $card; $(for x in m x p; do echo -n "$x: $(cat ab/$x.ref 2>/dev/null); "; done)" > "$S"
finish() { echo "total $((SECONDS - t0)) s" >> "$S"; cat "$S"; cp "$S" "$o/"; tar cJf "$top/r.tar.xz" -C "$top" r && rm -rf "$o"; }
left() { echo $((D - (SECONDS - t0))); }
abc() {  # name, builds (AB_ONLY), reps, seconds at most, bench arguments...
  local name=$1 builds=$2 reps=$3 lim=$4; shift 4; local l; l=$(left)
  [ "$l" -lt 60 ] && { echo "ab $name skipped ($l s left)" >> "$S"; return; }
  [ "$lim" -gt $((l - 10)) ] && lim=$((l - 10))
  AB_ONLY=$builds REPS=$reps BENCH_LIMIT=60 OUT=$o/$name timeout $lim bash scripts/ab-addons.sh "$@" > "$o/$name.txt" 2>&1
  echo "ab $name rc=$? at $((SECONDS - t0)) s" >> "$S"; python3 scripts/ab-pick.py "$o/$name" --paired --base m >> "$S" 2>&1; }
prof() { local l; l=$(left); [ "$l" -lt 60 ] && { echo "ncu skipped" >> "$S"; return; }
  for x in m x; do xz -dc ab/$x.node.xz > build/Release/flashsample.node
    LOGITS=gaussian OPTIONS="topp0.9" BATCHES="256" OUT=$o/ncu-$x timeout 40 bash scripts/profile-filtered.sh > "$o/ncu-$x.txt" 2>&1
    { echo "== ncu $x"; grep -E "^  void|gpu__time_duration" "$o/ncu-$x/topp0.9-b256.txt" | paste - - | grep -E "split|decide" | sed -E 's/\(.*Invocations/ calls/; s/gpu__time_duration.sum *us//; s/ +/ /g'; } >> "$S"; done; }
suites() {  # letters...: their suites side by side, each in its own tree
  local l; l=$(left); [ "$l" -lt 150 ] && { echo "suites of $* skipped ($l s left)" >> "$S"; return; }
  [ "$l" -gt 260 ] && l=260
  for x in "$@"; do SUITE_LIMIT=$((l - 20)) OUT=$o/suite-$x timeout $((l - 10)) bash scripts/ab-suite.sh $x > "$o/suite-$x.txt" 2>&1 & done; wait
  { for x in "$@"; do tail -1 "$o/suite-$x.txt"; grep '✕' -r "$o/suite-$x" | head -10; done; echo "suites of $* at $((SECONDS - t0)) s"; } >> "$S"; }
step() {  # name, wanted seconds, command... (in the suite's tree of m)
  local name=$1 want=$2; shift 2; local l; l=$(left)
  if [ "$l" -lt 40 ]; then echo "$name: skipped ($l s left)" >> "$S"; return; fi
  [ "$want" -gt $((l - 15)) ] && want=$((l - 15)); local t=$SECONDS
  (cd "$root/ab-suite/m" && timeout "$want" "$@") > "$o/$name.txt" 2>&1
  echo "$name: rc=$? $((SECONDS - t)) s" >> "$S"; }
item13() {  # m against x, x's suite, ncu
  abc gauss mx 3 70 --preset llama3-8b --batch 64,128,256 --iters 16 --warmup 3 --stat mean \
    --options plain,topp0.9,llama3,topk50,topk1024,logprobs --samplers fused --no-baselines
  abc model mx 3 50 --preset llama3-8b --logits model --batch 128,256 --iters 16 --warmup 3 --stat mean \
    --options plain,topp0.9,llama3,gemma3 --samplers fused --no-baselines
  abc small mx 3 40 --preset qwen3-0.6b --batch 64,256 --iters 20 --warmup 3 --stat mean \
    --options plain,topp0.9,llama3,topk50 --samplers fused --no-baselines
  suites x; prof; }
mkdir -p build/Release
if [[ $card != *H200* ]]; then item13; finish; exit 0; fi
suites m
if [ -d ab-suite/m ]; then
  step model 120 node dist/bench/cli.js --preset llama3-8b,qwen3-8b,llama3-70b --batch 1,16,64,128,256 --iters 15 \
    --warmup 3 --logits model --options plain,logprobs,llama3,qwen3,gemma3,topk50,minp0.05 --samplers fused
  step gaussian 90 node dist/bench/cli.js --preset llama3-8b,qwen3-8b,llama3-70b --batch 1,16,64,128,256 --iters 15 \
    --warmup 3 --options plain,logprobs,topk50,topp0.9,minp0.05,llama3,qwen3 --samplers fused --no-baselines
fi
item13
if [ -d ab-suite/m ]; then
  step small-heads 90 node dist/bench/cli.js --preset llama3.2-1b,qwen3-0.6b,qwen3-4b,gemma3-1b,gpt2,llama3-8b \
    --batch 1,16,32,64,96,128,256 --iters 30 --warmup 5 --samplers fused
  abc small-d mp 2 600 --preset qwen3-0.6b,gpt2,gemma3-1b,llama3.2-1b --batch 96,112,128,160,256 --iters 20 \
    --warmup 3 --samplers fused --no-baselines
fi
finish
