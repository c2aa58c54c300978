#!/usr/bin/env bash
# device call 5 (2026-12-03): the library with the 48-token tile of two blocks per SM too (run 57
# in call 4), built on the CPU machine (setup.py, abi3) and carried: the folding kernel's GPU tests,
# a memcheck of the 48-token cases, then benchmarks/gpu.py on the heads whose plan at 33-48 tokens
# changed (Humming 0.1.19 from its wheel).
#   OUT=... bash benchmarks/results/h200-2026-12-03-fold-two-per-sm/run_call5.sh
set -uo pipefail
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/python:$PWD/tests"
. benchmarks/harness/out_files.sh
trap bundle_out EXIT
start=$SECONDS
ls python/radiance/_C*.so || exit 1
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py -k "two_blocks or tma_store or every_fold_tile or every_tile" >"$OUT/test_fold.log" 2>&1
echo "fold tests rc=$? ($((SECONDS - start)) s) :: $(tail -1 "$OUT/test_fold.log")"; grep -E "^FAILED|^E  " "$OUT/test_fold.log" | head -12
RADIANCE_TEST_NO_PROFILER=1 timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest -q \
    -p no:cacheprovider tests/test_gpu.py -k "two_blocks and (40-33784 or 48-67576)" >"$OUT/memcheck.log" 2>&1
echo "memcheck rc=$? ($((SECONDS - start)) s) :: $(grep -E 'ERROR SUMMARY|passed|failed' "$OUT/memcheck.log" | tail -2 | tr '\n' ' ')"
site=$(mktemp -d)
python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" .carry/whl/humming_kernels-*.whl || exit 1
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
  PYTHONPATH="$PWD/python:$site:$PWD/tests" timeout $((570 - (SECONDS - start))) python3 benchmarks/gpu.py \
      --round-budget 0.07 --out "$OUT" --heads 128256x4096,262144x640,128256x2048; } >"$OUT/bench.log" 2>&1
echo "gpu.py rc=$? ($((SECONDS - start)) s)"
sed -n '/worst cell/,$p' "$OUT/bench.log"
