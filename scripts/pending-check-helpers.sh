#!/usr/bin/env bash
# Pending device run of bench/TUNING.md ("Pending device runs", the check's blocks past one wave):
# cuda/harness/check-helpers.patch (h: the rows' blocks take free check tasks once their row is
# done, and past one wave of rows only the check blocks that fit beside the second) against main
# (m), by the bench's means, in one device call. Here, before the call:
#   git checkout -b exp-check-helpers main && git apply cuda/harness/check-helpers.patch \
#     && git commit -qam "Let the rows' blocks take free check tasks" && git checkout main
#   npm install && npx tsc -p tsconfig.json
#   bash scripts/ab-build.sh m=main h=exp-check-helpers
#   bash ../shared/gpu/pack && rm -rf .gpu/build
# then with the device tool (carry [".gpu", "dist", "ab"], timeout ~330):
#   bash .gpu/on-gpu bash scripts/pending-check-helpers.sh
# Gaussian B = 64 / 128 / 256 (no row listed: what the helpers' presence and the missing third wave
# cost or save) and model-like llama3-8b B = 64 / 128 / 160 / 256 (8 / 12 flat rows at 160 / 256:
# fewer check blocks there); h's suite when scripts/ab-pick.py names it. Output: summary.txt, r.tar.xz.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
t0=$SECONDS; top=$OUT; o=$top/r; mkdir -p $o; S=$top/summary.txt
echo "card: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); $(for x in m h; do echo -n "$x: $(cat ab/$x.ref); "; done)" > $S
AB_ONLY=mh REPS=3 BENCH_LIMIT=60 OUT=$o/abg timeout 90 bash scripts/ab-addons.sh --preset llama3-8b --batch 64,128,256 \
  --iters 16 --warmup 3 --stat mean --options plain,topp0.9,llama3 --samplers fused --no-baselines > $o/ab-gauss.txt 2>&1
echo "ab-gauss (means) rc=$? $((SECONDS - t0)) s" >> $S; python3 scripts/ab-pick.py $o/abg --paired --base m >> $S 2>&1
AB_ONLY=mh REPS=3 BENCH_LIMIT=60 OUT=$o/abm timeout 100 bash scripts/ab-addons.sh --preset llama3-8b --logits model \
  --batch 64,128,160,256 --iters 16 --warmup 3 --stat mean --options plain,llama3,topp0.9 --samplers fused \
  --no-baselines > $o/ab-model.txt 2>&1
echo "ab-model (means) rc=$? $((SECONDS - t0)) s" >> $S; python3 scripts/ab-pick.py $o/abm --paired --base m >> $S 2>&1
pick=$(python3 scripts/ab-pick.py $o/abg --candidates h --base m --options llama3,topp0.9 --preset llama3-8b --batch 256 \
  --gain 1.0 --fb-slack 3 2>&1 | tail -1)
echo "pick (Gaussian B = 256): $pick" >> $S
if [ "$pick" = h ]; then
  SUITE_LIMIT=170 OUT=$o/suites timeout 180 bash scripts/ab-suite.sh h > $o/suites.txt 2>&1
  { tail -1 $o/suites.txt; grep '✕' $o/suites.txt | head -10; echo "suite $((SECONDS - t0)) s"; } >> $S
fi
cat $S
tar cJf $top/r.tar.xz -C $top r && rm -rf $o
