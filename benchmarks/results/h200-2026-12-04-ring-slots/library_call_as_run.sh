#!/usr/bin/env bash
# One lent-GPU call for the library as users build it (setup.py build_ext --inplace on the CPU
# machine, RADIANCE_GPU=cuda RADIANCE_GPU_ARCHS=90), carried as python/radiance/_C.abi3.so with
# .carry/whl (Humming's wheel, vLLM's W4A16 kernel, for benchmarks/gpu.py): the whole
# tests/test_gpu.py, compute-sanitizer's memcheck of the tests that the first argument selects
# (pytest -k, without the profiler), then benchmarks/gpu.py on its seven heads. About 9 minutes.
#   device: OUT=... bash benchmarks/harness/library_call.sh "stream_plans and (640-128-1 or 5376-128-6)"
#   (carry python/radiance/_C.abi3.so and .carry/whl)
. "$(dirname "$0")/call_preamble.sh"
selection=${1:?"the tests to run under memcheck (pytest -k)"}
ls python/radiance/_C*.so || exit 1
# the whole file took 296 s on one H200 and more than 330 on another (2026-12-03); 2026-12-04 added
# the last-wave tests (heads of 34000-38000 rows of k = 4096 and 5120)
logged test 420 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py
tail -1 "$OUT/test.log"; grep -E "^FAILED|^E  " "$OUT/test.log" | head -12
RADIANCE_TEST_NO_PROFILER=1 logged memcheck 120 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest \
    -q -p no:cacheprovider tests/test_gpu.py -k "$selection"
grep -E "ERROR SUMMARY|passed|failed" "$OUT/memcheck.log" | tail -2
site=$(mktemp -d)
python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" .carry/whl/humming_kernels-*.whl || exit 1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv >"$OUT/bench_gpu.txt"
PYTHONPATH="$PWD/python:$site:$PWD/tests" logged bench $((580 - (SECONDS - call_started))) python3 benchmarks/gpu.py \
    --round-budget 0.07 --out "$OUT"
sed -n '/worst cell/,$p' "$OUT/bench.log"
