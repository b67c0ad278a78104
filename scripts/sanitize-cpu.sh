#!/usr/bin/env bash
# Runs the CPU test suites against an AddressSanitizer + UndefinedBehaviorSanitizer build of the
# addon (issue 6, "Reliability").
#
#   scripts/sanitize-cpu.sh                 # build build-asan/ (if stale) and run the default suites
#   scripts/sanitize-cpu.sh test/fuzz.test.ts test/api.test.ts   # chosen suites
#   SANITIZE_REBUILD=1 scripts/sanitize-cpu.sh                   # force a clean rebuild
#   SANITIZE_VALGRIND=1 scripts/sanitize-cpu.sh                  # also: valgrind memcheck on the
#                                                                #   plain Release addon (slow)
#
# How the instrumented addon is found, without touching lib/: node-gyp-build honours
# <PACKAGE NAME>_PREBUILD, i.e. FLASHSAMPLE_PREBUILD=<dir>, and then loads
# <dir>/build/Release/flashsample.node. So the addon is built into build-asan/build/Release.
#
# Node itself is not instrumented, so the ASan runtime has to be the first library loaded:
# LD_PRELOAD=libasan.so. detect_leaks=0: V8 and Node keep allocations alive at exit by design,
# and LeakSanitizer would drown real findings in those. Leaks of the addon are covered instead
# by the stress script (bench/stress.ts: RSS before/after) and by valgrind (below).
#
# Exit status: 0 when the suites pass and the sanitizers report nothing; nonzero otherwise.
# Sanitizer reports go to build-asan/logs/asan.<pid> (one file per process; jest runs workers).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
OUT="$ROOT/build-asan"
ADDON="$OUT/build/Release/flashsample.node"
LOGS="$OUT/logs"

CXX_BIN="${CXX:-g++}"
LIBASAN="$("$CXX_BIN" -print-file-name=libasan.so)"
if [[ ! -e "$LIBASAN" || "$LIBASAN" == "libasan.so" ]]; then
  echo "sanitize-cpu: libasan.so not found for $CXX_BIN (install libasan / gcc with sanitizers)" >&2
  exit 2
fi
LIBASAN="$(readlink -f "$LIBASAN")"

# ---- 1. build (CPU backend only: the CUDA runtime and ASan do not mix well, and there is no GPU
#         code to check here; the GPU side is scripts/sanitize-gpu.sh). ----------------------------
SAN_FLAGS="-O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize=vptr"
newest_source="$(find binding cpu cuda/include CMakeLists.txt -type f -newer "$ADDON" 2>/dev/null | head -1 || true)"
if [[ -n "${SANITIZE_REBUILD:-}" || ! -f "$ADDON" || -n "$newest_source" ]]; then
  echo "sanitize-cpu: building the ASan/UBSan addon into $OUT/build ..."
  [[ -n "${SANITIZE_REBUILD:-}" ]] && rm -rf "$OUT/build"
  # cmake-js sets CMAKE_CXX_FLAGS itself (-DBUILDING_NODE_EXTENSION): put ours in the Release flags.
  # -O1 keeps the stacks readable; the CPU sources add -O3 (CMakeLists), which is fine for ASan.
  # No -DNDEBUG: assert() is live in this build.
  npx cmake-js compile --out "$OUT/build" --config Release \
    --CDFLASHSAMPLE_CPU_ONLY=ON \
    --CDCMAKE_CXX_FLAGS_RELEASE="$SAN_FLAGS" \
    --CDCMAKE_SHARED_LINKER_FLAGS_RELEASE="-fsanitize=address,undefined"
fi
if ! ldd "$ADDON" | grep -q libasan; then
  echo "sanitize-cpu: $ADDON is not linked against libasan; rebuild with SANITIZE_REBUILD=1" >&2
  exit 2
fi

# ---- 2. run the suites ------------------------------------------------------------------------
SUITES=("$@")
if [[ ${#SUITES[@]} -eq 0 ]]; then
  # Every suite: the CUDA and NCCL cases skip themselves without a GPU. UBSan's alignment check
  # stands in for the GPU's on the layouts both backends share (an odd rows-pass pitch misaligned
  # the segment headers: partial.h, caught here and by the GPU alone otherwise). The distribution
  # suites draw millions of samples: FS_TEST_SCALE shrinks them (ASan costs ~2-3x).
  SUITES=(test/*.test.ts)
  for s in "${SUITES[@]}"; do [[ -f "$s" ]] || { echo "sanitize-cpu: missing $s" >&2; exit 2; }; done
fi

rm -rf "$LOGS"
mkdir -p "$LOGS"
export FLASHSAMPLE_PREBUILD="$OUT"
# allocator_may_return_null=1: test/errors.test.ts asks for a 4 PiB host tensor and expects the
# library's "out of host memory" error; by default ASan reports any allocation above its maximum and
# aborts instead of returning null as malloc does.
export ASAN_OPTIONS="detect_leaks=0:allocator_may_return_null=1:abort_on_error=1:halt_on_error=1:detect_stack_use_after_return=0:strict_string_checks=1:check_initialization_order=1:log_path=$LOGS/asan:${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:log_path=$LOGS/ubsan:${UBSAN_OPTIONS:-}"
export FS_TEST_SCALE="${FS_TEST_SCALE:-0.25}"

# Check that the instrumented addon is the one the library loads.
LD_PRELOAD="$LIBASAN" node -e "
  const p = require('node-gyp-build').path('$ROOT');
  if (p !== '$ADDON') { console.error('sanitize-cpu: the library would load ' + p); process.exit(3); }
  require('$ROOT/dist/lib/index.js');
  console.log('sanitize-cpu: library loads ' + p);
" || { echo "sanitize-cpu: run 'npx tsc -p .' first, or the addon override failed" >&2; exit 2; }

status=0
# --runInBand: one process, so a sanitizer abort names the suite it happened in.
LD_PRELOAD="$LIBASAN" npx jest --runInBand "${SUITES[@]}" || status=$?

# With allocator_may_return_null=1, ASan still logs "WARNING: AddressSanitizer failed to allocate
# 0x... bytes" for the deliberate 4 PiB request (errors.test.ts); a log holding only such lines is not
# a finding. Anything else in a log is.
OOM_WARNING='^==[0-9]+==WARNING: AddressSanitizer failed to allocate 0x[0-9a-f]+ bytes$'
reports=0
for f in "$LOGS"/*; do
  [[ -f "$f" ]] || continue
  if grep -qvE "$OOM_WARNING" "$f"; then
    reports=$((reports + 1))
  else
    echo "sanitize-cpu: expected (the 4 PiB request of errors.test.ts): $(head -1 "$f")"
  fi
done
if [[ "$reports" -gt 0 ]]; then
  echo "sanitize-cpu: sanitizer reports:" >&2
  for f in "$LOGS"/*; do grep -qvE "$OOM_WARNING" "$f" || continue; echo "=== $f" >&2; head -60 "$f" >&2; done
  status=${status:-1}; [[ $status -eq 0 ]] && status=1
fi

# ---- 3. optional: valgrind memcheck on the plain Release addon (no ASan) ----------------------
# A small run of the stress script (every sampler, dtype and option, tensors disposed in flight).
# V8's JIT confuses memcheck: --jitless. Only errors whose stack goes through flashsample.node are
# counted (Node and V8 themselves are not what is under test).
if [[ -n "${SANITIZE_VALGRIND:-}" ]]; then
  command -v valgrind >/dev/null || { echo "sanitize-cpu: valgrind not installed" >&2; exit 2; }
  [[ -f dist/bench/stress.js ]] || { echo "sanitize-cpu: run 'npx tsc -p .' first" >&2; exit 2; }
  echo "sanitize-cpu: valgrind memcheck on dist/bench/stress.js (Release addon) ..."
  VLOG="$LOGS/valgrind.txt"
  env -u FLASHSAMPLE_PREBUILD -u LD_PRELOAD valgrind --tool=memcheck --leak-check=no --num-callers=40 \
    --log-file="$VLOG" node --jitless dist/bench/stress.js --calls "${VALGRIND_CALLS:-60}" \
    --concurrency 8 --device cpu --problems 12 --max-lag-ms 100000 --p99-lag-ms 100000 --max-rss-growth-mb 100000 \
    || { echo "sanitize-cpu: the stress script failed under valgrind" >&2; status=1; }
  ours=$(awk '/^==[0-9]+== [A-Z]/{blk=$0; next} /flashsample\.node/{if (blk!="") {print blk; blk=""}}' "$VLOG" | sort | uniq -c)
  grep -E "ERROR SUMMARY" "$VLOG" | tail -1
  if [[ -n "$ours" ]]; then
    echo "sanitize-cpu: valgrind errors in flashsample.node (see $VLOG):" >&2; echo "$ours" >&2; status=1
  else
    echo "sanitize-cpu: valgrind: no error with flashsample.node on its stack"
  fi
fi

if [[ $status -eq 0 ]]; then echo "sanitize-cpu: clean"; else echo "sanitize-cpu: FAILED ($status)"; fi
exit $status
