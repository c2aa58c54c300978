#!/usr/bin/env bash
# The library of this tree (setup.py build_ext --inplace, RADIANCE_GPU=cuda RADIANCE_GPU_ARCHS=90,
# carried as python/radiance/_C.abi3.so) with the planner's new rule (hip/dispatch.h,
# fold_split_tokens: more than 256 tokens where k >= 5120 in two calls where the equal chunks would
# hold tokens past m): the whole tests/test_gpu.py, then compute-sanitizer's memcheck of two of the
# new split tests.
#   device: OUT=... bash benchmarks/results/h200-2026-12-04-split/run_call2.sh  (carry python/radiance/_C.abi3.so)
. "$(dirname "$0")/../../harness/call_preamble.sh"
ls python/radiance/_C*.so || exit 1
logged test 430 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py
tail -1 "$OUT/test.log"; grep -E "^FAILED|^E  " "$OUT/test.log" | head -12
RADIANCE_TEST_NO_PROFILER=1 logged memcheck 140 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest \
    -q -p no:cacheprovider tests/test_gpu.py -k "fold_split and (352-3001 or 416-2048-5376)"
grep -E "ERROR SUMMARY|passed|failed" "$OUT/memcheck.log" | tail -2
