#!/usr/bin/env bash
# device call 3 (2026-12-03): benchmarks/gpu.py on call 2's library (the extension carried from the
# CPU machine), on the heads of issue 22 whose plan changed and Llama 3.2 1B's 128256 x 2048, at
# issue 22's token counts, beside bf16, fp8 and Humming 0.1.19
# (vLLM's W4A16 kernel, installed from its wheel: the device has no internet).
#   OUT=... bash benchmarks/results/h200-2026-12-03-fold-two-per-sm/run_call3.sh
set -uo pipefail
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1
start=$SECONDS
site=$(mktemp -d)
python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" .carry/whl/humming_kernels-*.whl || exit 1
export PYTHONPATH="$PWD/python:$site:$PWD/tests"
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
  timeout $((570 - (SECONDS - start))) python3 benchmarks/gpu.py --round-budget 0.07 --out "$OUT" \
      --heads 128256x4096,262144x640,151936x1024,49152x576,128256x2048; } >"$OUT/bench.log" 2>&1
echo "gpu.py rc=$? ($((SECONDS - start)) s)"
grep -v "^plot" "$OUT/bench.log" | grep -E "worst|^#|ceilings" -A 8 | head -40
