#!/usr/bin/env bash
# Per-kernel times of one filtered call, for finding what bounds the one-pass filtered path
# (bench/TUNING.md, "The filtered path"). On the GPU machine, after the addon and dist/ are built:
#   bash .gpu/on-gpu bash scripts/profile-filtered.sh                       # defaults below
#   OPTIONS=topk50 BATCHES="1 64" bash .gpu/on-gpu bash scripts/profile-filtered.sh
#   LOGITS=gaussian OPTIONS="logprobs+raw" BATCHES="1 64" bash .gpu/on-gpu bash scripts/profile-filtered.sh
# For each option set and batch, ncu (--clock-control none) times every launch of the kernels a
# filtered call makes (the split kernel with the filtered epilogue, the per-row decision, the
# extra pass) over the bench's calls, and prints a per-kernel summary (gpu__time_duration: min /
# max / average); the full reports go to $OUT (or ./profile-filtered).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out=${OUT:-profile-filtered}
mkdir -p "$out"
NCU=${NCU:-$(command -v ncu || echo /usr/local/cuda/bin/ncu)}
options=${OPTIONS:-"logprobs topk50 topp0.9 minp0.05 llama3"}
batches=${BATCHES:-"1 64 256"}
logits=${LOGITS:-model}
# the kernels of a filtered call (the zeroing kernel, the listed tokens' table, the split kernel,
# the decision, the winner check's kernel where it has one, the extra pass's five, the raw logprobs
# of logprobsMode 'raw'), the chunked path's (init_state, fold_chunk, decide_candidates) and the
# plain call's (clear_winners, finalize)
kernels='clear_one_pass|build_listed|listed_winners|wgmma_split|decide_one_pass|check_winners|whole_rows|flagged_rows|flagged_logits|histogram_kernel|cut_kernel|sample_kernel|raw_slice_stats|raw_logprobs|raw_from_tiles|init_state|fold_chunk|decide_candidates|clear_winners|finalize'
for opt in $options; do
  for b in $batches; do
    name="${opt//+/_}-b$b"  # (the device tool brings back no file whose name holds a '+')
    # every launch of the matching kernels in a warm-up and a timed call; per-kernel min / max / avg
    timeout 300 "$NCU" --clock-control none --metrics gpu__time_duration.sum --print-summary per-kernel \
      --kernel-name regex:"$kernels" \
      node dist/bench/cli.js --preset "${PRESET:-llama3-8b}" --logits "$logits" --batch "$b" --iters 1 --warmup 1 \
      --options "$opt" --samplers fused --no-baselines --read-bw 4.5 --matrix-rate 770 \
      > "$out/$name.txt" 2>&1
    echo "== $name"
    grep -E "$kernels|gpu__time_duration" "$out/$name.txt" | head -40
  done
done
