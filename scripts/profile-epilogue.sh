#!/usr/bin/env bash
# Where the filtered split kernel spends its time at B >= 64 (bench/TUNING.md, "The filtered path":
# the filtered epilogue is on the K loop's critical path there). For each option set, ncu samples
# the warps' program counters in one launch of wgmma_split_filtered_kernel (SourceCounters,
# WarpStateStats) and scripts/ncu-sass-summary.py prints the stall reasons over the kernel, the
# basic blocks that execute the most instructions, and the instructions that hold the most samples.
# On the GPU machine, after the addon and dist/ are built (build with line info to see the CUDA
# lines too; it does not change the SASS: npx cmake-js compile --CDCMAKE_CUDA_FLAGS=-lineinfo):
#   bash .gpu/on-gpu bash scripts/profile-epilogue.sh                    # logprobs and topk50 at B 64
#   OPTIONS="topp0.9" B=128 bash .gpu/on-gpu bash scripts/profile-epilogue.sh
#   KERNEL=decide_one_pass B=1 OPTIONS="topp0.9" NCU_ARGS="--warp-sampling-interval 0" \
#     bash .gpu/on-gpu bash scripts/profile-epilogue.sh
#   KERNEL=wgmma_split_kernel LAUNCH_SKIP=5 OPTIONS=plain B=128 bash .gpu/on-gpu bash scripts/profile-epilogue.sh
# (KERNEL: a regex of the kernel profiled, default the filtered split kernel; NCU_ARGS: more ncu
# flags, here the finest PC sampling, which a one-block-per-row decision at B = 1 needs;
# LAUNCH_SKIP: the matching launches skipped, default 1, the bench's warm-up. The plain kernel needs
# 5: the bench first times a plain call on a 128 x 64 head at B = 1 (bench/run.ts, measureLaunch:
# with --warmup 1 --iters 3, four launches of a 16-column tile), then the asked B's warm-up; skip 3
# caught the probe (2026-12-06), skip 5 the asked B's first timed call.)
# The reports (.ncu-rep, open them in the Nsight Compute UI) and CSVs go to $OUT (or ./profile-epilogue).
# Where cuobjdump and nvdisasm are on the PATH, scripts/ncu-lines.py also prints the samples per CUDA
# source line (the addon's sm_90a code disassembled with its line info; LINES_NAME: a substring of
# the profiled kernel's mangled name when KERNEL is a regex that is not one).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out=${OUT:-profile-epilogue}
mkdir -p "$out"
NCU=${NCU:-$(command -v ncu || echo /usr/local/cuda/bin/ncu)}
batch=${B:-64}
disasm=""
if command -v cuobjdump > /dev/null && command -v nvdisasm > /dev/null; then
  mkdir -p "$out/elf"
  (cd "$out/elf" && cuobjdump -xelf all "$OLDPWD/build/Release/flashsample.node" > /dev/null 2>&1)
  disasm="$out/elf/sm_90a.sass"
  for cubin in "$out"/elf/*sm_90a*.cubin; do nvdisasm -g -c "$cubin" 2> /dev/null; done > "$disasm"
fi
for opt in ${OPTIONS:-logprobs topk50}; do
  rep="$out/${opt//+/_}-b$batch-${KERNEL:-split}"  # (the device tool brings back no file whose name holds a '+')
  # the bench's warm-up launch is skipped (LAUNCH_SKIP); the next matching launch is profiled
  timeout 300 "$NCU" ${NCU_ARGS:-} --clock-control none --section SourceCounters --section WarpStateStats \
    --kernel-name regex:"${KERNEL:-wgmma_split_filtered}" --launch-skip "${LAUNCH_SKIP:-1}" --launch-count 1 -f -o "$rep" \
    node dist/bench/cli.js --preset "${PRESET:-llama3-8b}" --logits "${LOGITS:-gaussian}" --batch "$batch" \
    --iters 3 --warmup 1 --options "$opt" --samplers fused --no-baselines > "$rep.log" 2>&1
  "$NCU" -i "$rep.ncu-rep" --page source --csv --print-source sass > "$rep-sass.csv" 2>> "$rep.log"
  "$NCU" -i "$rep.ncu-rep" --page details --section WarpStateStats > "$rep-warp-state.txt" 2>> "$rep.log"
  echo "== $opt, B = $batch"
  grep -E "Warp Cycles Per Issued Instruction|Avg. Active Threads" "$rep-warp-state.txt" | head -3
  python3 scripts/ncu-sass-summary.py "$rep-sass.csv"
  [ -n "$disasm" ] && python3 scripts/ncu-lines.py "$rep-sass.csv" "$disasm" "${LINES_NAME:-${KERNEL:-wgmma_split_filtered}}" 30
done
