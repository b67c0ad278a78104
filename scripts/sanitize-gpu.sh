#!/usr/bin/env bash
# Runs the GPU test suites under NVIDIA compute-sanitizer (issue 6, "Reliability"). For the GPU
# machine: the addon must have been built there with the CUDA backend (npx cmake-js compile;
# node -p "require('./dist/lib').gpuStatus()" says usable: true) and the TypeScript compiled.
#
#   bash scripts/sanitize-gpu.sh                       # memcheck, racecheck, initcheck, synccheck
#   bash scripts/sanitize-gpu.sh memcheck              # one tool
#   bash scripts/sanitize-gpu.sh racecheck test/cuda.test.ts test/fuzz.test.ts
#   LEAK_CHECK=1 bash scripts/sanitize-gpu.sh memcheck # also report device allocations never freed
#   (through the repo's GPU wrappers: bash .gpu/on-gpu bash scripts/sanitize-gpu.sh memcheck)
#
# Problem sizes: the sanitizers slow kernels down 10-100x (racecheck most), so the runs are kept
# small: FS_TEST_SCALE scales the sample counts of the distribution suites (default here 0.05),
# FLASHSAMPLE_FUZZ_RUNS the CUDA fuzz cases (default here 150). Override either in the environment.
#
# racecheck's host memory grows with the problem (38 GB at B 64 × V 32000): the suites' largest
# cases (test/filters-one-sample.test.ts, B 2048 × V 128256) end with rc 9 and no summary on a
# 125 GB machine. For those kernels run scripts/sanitize-probe.js under the tool instead.
#
# Node is the target: `npx` and jest start child processes, so --target-processes all, and jest
# runs --runInBand (one worker) so that a report is attributable to the suite that produced it.
# Exit status: nonzero if any tool reports an error (--error-exitcode) or a suite fails. Logs:
# sanitize-gpu-logs/<tool>.log (or $OUT/sanitize-gpu/ when $OUT is set, for the device runner).
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

CS="${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || true)}"
if [[ -z "$CS" ]]; then
  for c in /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda/compute-sanitizer/compute-sanitizer; do
    [[ -x "$c" ]] && CS="$c" && break
  done
fi
[[ -n "$CS" ]] || { echo "sanitize-gpu: compute-sanitizer not found (set COMPUTE_SANITIZER=path)" >&2; exit 2; }

TOOLS=(memcheck racecheck initcheck synccheck)
if [[ $# -gt 0 && "$1" =~ ^(memcheck|racecheck|initcheck|synccheck)$ ]]; then TOOLS=("$1"); shift; fi
SUITES=("$@")
[[ ${#SUITES[@]} -gt 0 ]] || SUITES=(test/cuda.test.ts test/fuzz.test.ts test/nonfinite.test.ts)

if [[ ! -f dist/lib/index.js ]]; then npx tsc -p . || exit 2; fi
if ! node -e "process.exit(require('./dist/lib/index.js').gpuStatus().usable ? 0 : 1)"; then
  echo "sanitize-gpu: no usable GPU here: $(node -p "require('./dist/lib/index.js').gpuStatus().reason")" >&2
  exit 2
fi

LOGDIR="${OUT:+$OUT/sanitize-gpu}"
LOGDIR="${LOGDIR:-$ROOT/sanitize-gpu-logs}"
mkdir -p "$LOGDIR"

export FS_TEST_SCALE="${FS_TEST_SCALE:-0.05}"
export FLASHSAMPLE_FUZZ_RUNS="${FLASHSAMPLE_FUZZ_RUNS:-150}"
export FLASHSAMPLE_FUZZ_CPU_RUNS="${FLASHSAMPLE_FUZZ_CPU_RUNS:-50}"   # the CPU half is not under test here
JEST="$ROOT/node_modules/.bin/jest"

overall=0
summary=()
for tool in "${TOOLS[@]}"; do
  opts=(--tool "$tool" --target-processes all --error-exitcode 86 --print-limit 200
        --launch-timeout 120 --log-file "$LOGDIR/$tool.log")
  case "$tool" in
    memcheck)
      # leak check: off by default (Node may exit with tensors the GC never finalized)
      [[ -n "${LEAK_CHECK:-}" ]] && opts+=(--leak-check full)
      opts+=(--check-device-heap yes) ;;
    racecheck) opts+=(--racecheck-report all) ;;     # shared-memory hazards, with warnings
    initcheck) ;;                                    # reads of uninitialized global memory
    synccheck) ;;                                    # illegal __syncthreads / warp syncs
  esac
  echo "=== compute-sanitizer --tool $tool: ${SUITES[*]} (log: $LOGDIR/$tool.log)"
  t0=$SECONDS
  "$CS" "${opts[@]}" node "$JEST" --runInBand --ci "${SUITES[@]}"
  rc=$?
  errors=$(grep -Eo "ERROR SUMMARY: [0-9]+ error" "$LOGDIR/$tool.log" | awk '{s += $3} END {print s + 0}')
  summary+=("$(printf '%-10s rc=%-3s errors=%-5s %ss' "$tool" "$rc" "$errors" "$((SECONDS - t0))")")
  if [[ $rc -ne 0 || "$errors" -ne 0 ]]; then
    overall=1
    echo "--- $tool: first reports" >&2
    grep -E -m 40 "=========  (Invalid|Race|Uninitialized|Barrier|Program hit|Error|Leaked)|at .*\(|by thread" "$LOGDIR/$tool.log" >&2 || true
  fi
done

echo
echo "sanitize-gpu summary (FS_TEST_SCALE=$FS_TEST_SCALE, FLASHSAMPLE_FUZZ_RUNS=$FLASHSAMPLE_FUZZ_RUNS):"
printf '  %s\n' "${summary[@]}"
[[ $overall -eq 0 ]] && echo "sanitize-gpu: clean" || echo "sanitize-gpu: FAILED"
exit $overall
