#!/usr/bin/env bash
# Build (unless a prebuilt binary runs here) and run the CUDA harness: checks, then timings.
#   bash cuda/harness/run.sh                 # build (the launchers and the harness, in parallel), then run
#   USE_PREBUILT=1 bash cuda/harness/run.sh  # run cuda/harness/build/harness if it starts there
#   bash cuda/harness/run.sh --bench-only    # timings only
#   bash cuda/harness/run.sh --ws-only       # the sm_90a (wgmma) tiles only, checks and timings
#   bash cuda/harness/run.sh --profile NAME B  # NAME's kernel alone (split128, ws64c, tile8, ...; for
#                                            # ncu; PROFILE_GREEDY=1: every row greedy)
# The build log (with -Xptxas -v) is cuda/harness/build/ptxas.log, copied to $OUT when set.
set -euo pipefail
cd "$(dirname "$0")/../.."
B=cuda/harness/build
LOG=$B/ptxas.log
mkdir -p "$B"
FLAGS="-O3 -std=c++17 --expt-relaxed-constexpr -gencode arch=compute_90a,code=sm_90a -I cuda -Xptxas -v -cudart static"
SRCS="$(ls cuda/*.cu) cuda/harness/harness.cu"  # every launcher the production call reaches
build() {
  echo "building harness ($(nvcc --version | tail -1))"
  local t0=$SECONDS
  : > "$LOG"
  local pids=() objs=()
  for f in $SRCS; do
    o=$B/$(basename "$f" .cu).o
    objs+=("$o")
    rm -f "$o"  # a failed compile must not leave an earlier build's object to link
    (nvcc $FLAGS -c "$f" -o "$o" > "$o.log" 2>&1 || { cat "$o.log"; exit 1; }) &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p"; done  # set -e: a failed compile ends the build here
  for o in "${objs[@]}"; do cat "$o.log"; done >> "$LOG"
  nvcc $FLAGS "${objs[@]}" -o $B/harness
  echo "built in $((SECONDS - t0)) s"
}
if [ "${USE_PREBUILT:-0}" != 1 ] || ! [ -x $B/harness ] || ! $B/harness --probe; then
  build
fi
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv || true
if [ -n "${OUT:-}" ]; then cp "$LOG" "$OUT/ptxas.log" || true; fi
$B/harness "$@"
