#!/usr/bin/env bash
# Issue 19's run, in one device call, on a machine with several GPUs (nvidia-h200-x2, x4 or x8;
# ask the device tool's status which kinds are lent). Run here first:
#   npm install && npx tsc -p . && ../shared/gpu/pack
# then with the device tool (kind nvidia-h200-x2/x4/x8, carry [".gpu", "dist"]):
#   bash .gpu/on-gpu bash scripts/tp-session.sh          # ~5-8 min
# On one GPU it runs what one GPU allows (the suites skip their multi-GPU cases, the bench its
# step and exchange columns). Logs under $OUT (or ./tp-session-logs), a summary printed last:
#   topo.txt      nvidia-smi topo -m; nccl.txt: the NCCL library and version
#   tests.log     test/nccl-multi.test.ts and test/nccl.test.ts
#   tp.log/json   bench --mode tp on llama3-70b's head, B = 1, 16, 64, 256, TP 1 .. the GPUs (with
#                 the graph µs of a sharded sampler's captured step, one process per GPU)
#   torch-tpN.json  the all-gather-of-logits baseline (bench/baselines/torch_tp.py) at TP N
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out=${OUT:-tp-session-logs}
mkdir -p "$out"
source scripts/nccl-env.sh
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
degrees=1
for n in 2 4 8; do [ "$n" -le "$gpus" ] && degrees="$degrees,$n"; done
nvidia-smi topo -m > "$out/topo.txt" 2>&1
node -e "console.log(JSON.stringify(require('./dist/lib/index.js').nccl.status()))" > "$out/nccl.txt" 2>&1
summary=("gpus=$gpus degrees=$degrees nccl=$(cat "$out/nccl.txt")")

t0=$SECONDS
timeout 420 npx jest --ci test/nccl-multi.test.ts test/nccl.test.ts > "$out/tests.log" 2>&1
summary+=("tests rc=$? $((SECONDS - t0))s $(grep -E '^[0-9]+ passed, [0-9]+ failed' "$out/tests.log" | tail -1)")

t0=$SECONDS
timeout 300 node dist/bench/cli.js --mode tp --tp "$degrees" --preset llama3-70b --batch 1,16,64,256 \
  --iters 30 --warmup 5 --logits model --options plain,topp0.9,llama3+logprobs,llama3+logprobs+raw,qwen3 --json "$out/tp.json" > "$out/tp.log" 2>&1
summary+=("bench rc=$? $((SECONDS - t0))s")

for n in ${degrees//,/ }; do
  t0=$SECONDS
  timeout 200 python3 -m torch.distributed.run --standalone --nproc_per_node "$n" bench/baselines/torch_tp.py \
    --vocab 128256 --hidden 8192 --batches 1,16,64,256 > "$out/torch-tp$n.json" 2> "$out/torch-tp$n.err"
  summary+=("torch TP-$n rc=$? $((SECONDS - t0))s")
done

grep -E '✕|●' "$out/tests.log" | head -30 || true
grep -E '^\s+(shape|llama3-70b)' "$out/tp.log" || tail -20 "$out/tp.log"
cat "$out"/torch-tp*.json 2>/dev/null
printf '%s\n' "${summary[@]}"
