#!/usr/bin/env bash
# Pending device run 1 of bench/TUNING.md ("Pending device runs") in one device call: the
# winner check on four candidates (cuda/harness/check-top-draws.patch) against main. Here, before
# the call:
#   git checkout -b exp-check-top-draws main && git apply cuda/harness/check-top-draws.patch \
#     && git commit -qam "Check a flagged top-p row's four best candidates" && git checkout main
#   (the thirty-first session's checkout holds that branch already: exp-check-top-draws, d8f17e4)
#   npm install && npx tsc -p tsconfig.json
#   bash scripts/ab-build.sh m=main c=exp-check-top-draws d=exp-check-top-draws+FS_EXP_CHECK_256
#   bash ../shared/gpu/pack && rm -rf .gpu/build
# then with the device tool (carry [".gpu", "dist", "ab"], timeout ~540):
#   bash .gpu/on-gpu bash scripts/pending-check-draws.sh
# It runs c's own suite (its tests expect the four candidates), then model-like llama3-8b (flat
# rows: every 20th) at B = 64 / 128 / 256 with m, c and d (d: the check up to B = 256) alternated,
# then Gaussian top-p (no flat row: the check's cost where it finds nothing) with m and c.
# Output under $OUT: summary.txt and r.tar.xz (every log).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
t0=$SECONDS
top=${OUT:-pending-check-draws-out}; o=$top/r; mkdir -p "$o"; S=$top/summary.txt
echo "card: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); m: $(cat ab/m.ref); c: $(cat ab/c.ref); d: $(cat ab/d.ref)" > "$S"
SUITE_LIMIT=200 OUT=$o/suite bash scripts/ab-suite.sh c > "$o/suite.txt" 2>&1
{ tail -1 "$o/suite.txt"; grep '✕' "$o/suite.txt" | head -10; echo "suite $((SECONDS - t0)) s"; } >> "$S"
AB_ONLY=mcd REPS=2 OUT=$o/abm timeout 200 bash scripts/ab-addons.sh --preset llama3-8b --logits model --batch 64,128,256 \
  --iters 12 --warmup 3 --options plain,llama3,topp0.9 --samplers fused --no-baselines > "$o/ab-model.txt" 2>&1
echo "ab-model rc=$? $((SECONDS - t0)) s" >> "$S"
AB_ONLY=mc REPS=2 OUT=$o/abg timeout 100 bash scripts/ab-addons.sh --preset llama3-8b --batch 16,64,256 \
  --iters 15 --warmup 3 --options plain,topp0.9,llama3 --samplers fused --no-baselines > "$o/ab-gauss.txt" 2>&1
echo "ab-gauss rc=$? $((SECONDS - t0)) s" >> "$S"
tail -30 "$o/ab-model.txt" >> "$S"
tail -16 "$o/ab-gauss.txt" >> "$S"
cat "$S"
cp "$S" "$o/"
tar cJf "$top/r.tar.xz" -C "$top" r && rm -rf "$o"
