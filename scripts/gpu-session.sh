#!/usr/bin/env bash
# Everything a session needs from the H200, in one device call, so that the 30-minute device budget
# is spent on measurements and not on machine starts. Run here first:
#   npm install && npx tsc -p . && ../shared/gpu/pack
# then with the device tool (carry [".gpu", "dist"]):
#   STEPS="tests" bash .gpu/on-gpu bash scripts/gpu-session.sh          # the suite: ~1 min
#   STEPS="bench sanitize" bash .gpu/on-gpu bash scripts/gpu-session.sh # ~5 min
#   STEPS="step" bash .gpu/on-gpu bash scripts/gpu-session.sh           # the engine step, ~1 min
# (the three steps fit one call of the device tool's 600 s: the suite took 51 s on 2026-12-02,
# test/cuda.test.ts 41 s of it)
# Steps (STEPS, default "tests bench sanitize"; also "step"), each with its own time limit so that one stuck step
# cannot eat the call; logs under $OUT (or ./gpu-session-logs), a summary table printed last.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/nccl-env.sh  # test/nccl.test.ts
out=${OUT:-gpu-session-logs}
mkdir -p "$out"
steps=${STEPS:-tests bench sanitize}
summary=()

run_step() {  # name, limit in seconds, command...
  local name=$1 limit=$2
  shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" > "$out/$name.log" 2>&1
  local rc=$?
  local last
  last=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$out/$name.log" | tail -1)
  summary+=("$(printf '%-10s rc=%-3s %4ss  %s' "$name" "$rc" "$((SECONDS - t0))" "${last:-}")")
}

for step in $steps; do
  case $step in
    tests) FLASHSAMPLE_TEST_TIMING=1 run_step tests "${TESTS_LIMIT:-240}" npx jest --ci ;;
    bench) run_step bench "${BENCH_LIMIT:-200}" node dist/bench/cli.js \
             --preset llama3-8b,qwen3-8b,llama3-70b --batch 1,8,32,64,128,256 --iters 30 --warmup 5 \
             --options plain,topk50,topp0.9,minp0.05,logprobs,mask \
             --json "$out/bench.json" --plot "$out/bench.svg" ;;
    sanitize) run_step sanitize "${SANITIZE_LIMIT:-150}" bash scripts/sanitize-gpu.sh memcheck test/cuda.test.ts ;;
    step) run_step step "${STEP_LIMIT:-120}" node dist/bench/cli.js --mode step \
             --preset llama3-8b,qwen3-0.6b --batch 1,64,256 --iters 100 --warmup 10 \
             --options plain,topk50,llama3,llama3+logprobs --json "$out/step.json" ;;
    *) summary+=("$step: unknown step") ;;
  esac
done

echo "gpu-session: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null)"
tail -40 "$out/bench.log" 2>/dev/null || true
tail -30 "$out/step.log" 2>/dev/null || true
grep -E '✕|●' "$out/tests.log" 2>/dev/null | head -40 || true
printf '%s\n' "${summary[@]}"
