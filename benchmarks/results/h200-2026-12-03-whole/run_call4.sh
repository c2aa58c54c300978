#!/usr/bin/env bash
# Device call 4 (2026-12-03, tenth session): the library with run 60's plan (1-8 tokens: whole
# super-steps but the last where k % 512 != 0, loads skipped past m at every count, the shared copy
# from 6 tokens at every k), built on the CPU machine and carried with Humming's wheel: the whole
# tests/test_gpu.py, a memcheck of the tail kernels, then benchmarks/gpu.py on the seven heads.
#   OUT=... bash benchmarks/results/h200-2026-12-03-whole/run_call4.sh
#   (carry python/radiance/_C.abi3.so and .carry/whl)
. "$(dirname "$0")/../../harness/call_preamble.sh"
ls python/radiance/_C*.so || exit 1
logged test 330 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py
tail -1 "$OUT/test.log"; grep -E "^FAILED|^E  " "$OUT/test.log" | head -12
RADIANCE_TEST_NO_PROFILER=1 logged memcheck 120 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest \
    -q -p no:cacheprovider tests/test_gpu.py -k "stream_plans and (640-128-1 or 5376-128-5 or 5376-128-6 or 2304-256-3 or 2304-256-8)"
grep -E "ERROR SUMMARY|passed|failed" "$OUT/memcheck.log" | tail -2
site=$(mktemp -d)
python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" .carry/whl/humming_kernels-*.whl || exit 1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv >"$OUT/bench_gpu.txt"
PYTHONPATH="$PWD/python:$site:$PWD/tests" logged bench $((580 - (SECONDS - call_started))) python3 benchmarks/gpu.py \
    --round-budget 0.07 --out "$OUT"
sed -n '/worst cell/,$p' "$OUT/bench.log"
