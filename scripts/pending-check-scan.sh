#!/usr/bin/env bash
# Pending device run 1 of bench/TUNING.md ("Pending device runs"): the winner check's scans with
# their loads in flight, in one device call. Here, before the call:
#   git checkout -b exp-check-scan-batch main && git apply cuda/harness/check-scan-batch.patch \
#     && git commit -qam "Keep eight loads in flight in each winner-check scan" && git checkout main
#   git checkout -b exp-check-top-draws-batch main && git apply cuda/harness/check-top-draws.patch \
#     && git apply cuda/harness/check-top-draws-batch.patch \
#     && git commit -qam "Check four candidates with batched scans" && git checkout main
#   (the thirty-second session's checkout holds both branches already)
#   npm install && npx tsc -p tsconfig.json
#   bash scripts/ab-build.sh m=main f=exp-check-scan-batch g=exp-check-top-draws-batch
#   bash ../shared/gpu/pack && rm -rf .gpu/build
# then with the device tool (carry [".gpu", "dist", "ab"], timeout ~300):
#   bash .gpu/on-gpu bash scripts/pending-check-scan.sh
# m main, f main's check with eight loads a thread in flight in each scan, g the four-candidate
# check with its weigh's loads batched. Model-like llama3-8b (flat rows: every 20th) and Gaussian
# A/B first, then f's and g's suites side by side (~4 min). Output under $OUT: summary.txt, r.tar.xz.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
t0=$SECONDS
top=$OUT; o=$top/r; mkdir -p $o; S=$top/summary.txt
echo "card: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); $(for x in m f g; do echo -n "$x: $(cat ab/$x.ref); "; done)" > $S
AB_ONLY=mfg REPS=2 OUT=$o/abm timeout 60 bash scripts/ab-addons.sh --preset llama3-8b --logits model --batch 64,128 \
  --iters 15 --warmup 3 --options plain,llama3,topp0.9 --samplers fused --no-baselines > $o/ab-model.txt 2>&1
echo "ab-model rc=$? $((SECONDS - t0)) s" >> $S; tail -18 $o/ab-model.txt >> $S
AB_ONLY=mfg REPS=2 OUT=$o/abg timeout 45 bash scripts/ab-addons.sh --preset llama3-8b --batch 16,64 \
  --iters 15 --warmup 3 --options plain,topp0.9,llama3 --samplers fused --no-baselines > $o/ab-gauss.txt 2>&1
echo "ab-gauss rc=$? $((SECONDS - t0)) s" >> $S; tail -18 $o/ab-gauss.txt >> $S
SUITE_LIMIT=160 OUT=$o/suites timeout 175 bash scripts/ab-suite.sh f g > $o/suites.txt 2>&1
{ grep -E "passed|failed" $o/suites.txt | tail -4; grep '✕' $o/suites.txt | head -10; echo "suites $((SECONDS - t0)) s"; } >> $S
cat $S
tar cJf $top/r.tar.xz -C $top r && rm -rf $o
