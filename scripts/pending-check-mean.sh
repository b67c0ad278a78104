#!/usr/bin/env bash
# Pending device run 3 of bench/TUNING.md ("Pending device runs"): the four-candidate winner check
# (g) against main (m) by the bench's means, in one device call. Here, before the call:
#   git checkout -b exp-check-top-draws-batch main && git apply cuda/harness/check-top-draws.patch \
#     && git commit -qam "Check four candidates with batched weighs" && git checkout main
#   (the thirty-third session's checkout holds that branch at 77900fe, and ab/m (main ee8bd58, whose
#   device code main still has) and ab/g built, .gpu packed and dist with --stat: the call can run as is)
#   npm install && npx tsc -p tsconfig.json
#   bash scripts/ab-build.sh m=main g=exp-check-top-draws-batch
#   bash ../shared/gpu/pack && rm -rf .gpu/build
# then with the device tool (carry [".gpu", "dist", "ab"], timeout ~330):
#   bash .gpu/on-gpu bash scripts/pending-check-mean.sh
# Model-like llama3-8b B = 64 / 128 and Gaussian B = 16 / 64 with --stat mean --iters 16 (each of
# the 8 rotation inputs twice, so the extra pass that 3 / 8 and 4 / 8 of main's calls pay counts as
# it would for an engine); g's suite when scripts/ab-pick.py names it by the model-like means.
# Output under $OUT: summary.txt, r.tar.xz.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
t0=$SECONDS; top=$OUT; o=$top/r; mkdir -p $o; S=$top/summary.txt
echo "card: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); $(for x in m g; do echo -n "$x: $(cat ab/$x.ref); "; done)" > $S
AB_ONLY=mg REPS=3 OUT=$o/abm timeout 80 bash scripts/ab-addons.sh --preset llama3-8b --logits model --batch 64,128 \
  --iters 16 --warmup 3 --stat mean --options plain,llama3,topp0.9 --samplers fused --no-baselines > $o/ab-model.txt 2>&1
echo "ab-model (means) rc=$? $((SECONDS - t0)) s" >> $S; python3 scripts/ab-pick.py $o/abm --paired --base m >> $S 2>&1
AB_ONLY=mg REPS=2 OUT=$o/abg timeout 50 bash scripts/ab-addons.sh --preset llama3-8b --batch 16,64 \
  --iters 16 --warmup 3 --stat mean --options plain,topp0.9,llama3 --samplers fused --no-baselines > $o/ab-gauss.txt 2>&1
echo "ab-gauss (means) rc=$? $((SECONDS - t0)) s" >> $S; python3 scripts/ab-pick.py $o/abg --paired --base m >> $S 2>&1
pick=$(python3 scripts/ab-pick.py $o/abm --candidates g --base m --options llama3,topp0.9 --preset llama3-8b --batch 64,128 \
  --gain 1.0 --fb-slack 3 2>&1 | tail -1)
echo "pick: $pick" >> $S
if [ "$pick" = g ]; then
  SUITE_LIMIT=170 OUT=$o/suites timeout 180 bash scripts/ab-suite.sh g > $o/suites.txt 2>&1
  { tail -1 $o/suites.txt; grep '✕' $o/suites.txt | head -10; echo "suite $((SECONDS - t0)) s"; } >> $S
fi
cat $S
tar cJf $top/r.tar.xz -C $top r && rm -rf $o
