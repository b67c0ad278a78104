#!/usr/bin/env bash
# Build (unless a prebuilt binary runs here) and run the CUDA harness: checks, then timings.
#   bash cuda/harness/run.sh                 # build (about 46 s on the H200 machine), then run
#   USE_PREBUILT=1 bash cuda/harness/run.sh  # run cuda/harness/build/harness if it starts there
#   bash cuda/harness/run.sh --bench-only    # timings only
#   QUICK=1 bash cuda/harness/run.sh --ws-only  # build only the newest ws section (-DHARNESS_QUICK)
# The build log (with -Xptxas -v) is cuda/harness/build/ptxas.log, copied to $OUT when set.
set -euo pipefail
cd "$(dirname "$0")/../.."
B=cuda/harness/build
LOG=$B/ptxas.log
mkdir -p "$B"
FLAGS="-O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -I cuda -Xptxas -v -cudart static"
if [ "${QUICK:-0}" = 1 ]; then FLAGS="$FLAGS -DHARNESS_QUICK"; fi
build() {
  echo "building harness ($(nvcc --version | tail -1))"
  local t0=$SECONDS
  : > "$LOG"
  local pids=()
  for f in cuda/fused_sample.cu cuda/reference.cu cuda/filters.cu cuda/bench_kernels.cu cuda/harness/harness.cu; do
    o=$B/$(basename "$f" .cu).o
    extra=""
    # the v19 cycle probe (WsProbe) is compiled into the harness's own tiles only
    if [ "$f" = cuda/harness/harness.cu ]; then extra=-DFLASHSAMPLE_WS_PROBE; fi
    rm -f "$o"  # a failed compile must not leave an earlier build's object to link
    (nvcc $FLAGS $extra -c "$f" -o "$o" > "$o.log" 2>&1 || { cat "$o.log"; exit 1; }) &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p"; done  # set -e: a failed compile ends the build here
  cat $B/*.o.log >> "$LOG"
  nvcc $FLAGS $B/fused_sample.o $B/reference.o $B/filters.o $B/bench_kernels.o $B/harness.o -o $B/harness
  echo "built in $((SECONDS - t0)) s"
}
if [ "${USE_PREBUILT:-0}" != 1 ] || ! [ -x $B/harness ] || ! $B/harness --probe; then
  build
fi
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv || true
if [ -n "${OUT:-}" ]; then cp "$LOG" "$OUT/ptxas.log" || true; fi
$B/harness "$@"
