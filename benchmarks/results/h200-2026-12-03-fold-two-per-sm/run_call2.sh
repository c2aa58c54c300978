#!/usr/bin/env bash
# device call 2 (2026-12-03): the library with the folding kernel's tiles of two blocks per SM where
# hip/dispatch.h's fold_tile_two_per_sm takes them (from call 1's timings), built on the CPU
# machine (setup.py, nvcc 13.0, sm_90a, abi3) and carried: the folding kernel's tests first (the
# new one, the TMA-store and every-tile ones), a memcheck of the new test, then the rest of
# tests/test_gpu.py.
#   OUT=... bash benchmarks/results/h200-2026-12-03-fold-two-per-sm/run_call2.sh
set -uo pipefail
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/python:$PWD/tests"
. benchmarks/harness/out_files.sh
trap bundle_out EXIT
start=$SECONDS
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu,power.draw --format=csv,noheader
ls python/radiance/_C*.so || exit 1
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py -k "two_blocks or tma_store or every_fold_tile" >"$OUT/test_fold.log" 2>&1
echo "fold tests rc=$? ($((SECONDS - start)) s) :: $(tail -1 "$OUT/test_fold.log")"; grep -E "^FAILED|^E  " "$OUT/test_fold.log" | head -12
RADIANCE_TEST_NO_PROFILER=1 timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest -q \
    -p no:cacheprovider tests/test_gpu.py -k "two_blocks and (67576-640 or 20000-576 or 33784-5120)" >"$OUT/memcheck.log" 2>&1
echo "memcheck rc=$? ($((SECONDS - start)) s) :: $(grep -E 'ERROR SUMMARY|passed|failed' "$OUT/memcheck.log" | tail -2 | tr '\n' ' ')"
timeout $((580 - (SECONDS - start))) python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py -k "not (two_blocks or tma_store or every_fold_tile)" >"$OUT/test.log" 2>&1
echo "GPU tests rc=$? ($((SECONDS - start)) s) :: $(tail -1 "$OUT/test.log")"; grep -E "^FAILED|^E  " "$OUT/test.log" | head -12
