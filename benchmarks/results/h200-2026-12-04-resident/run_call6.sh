#!/usr/bin/env bash
# The library with run 68's late release where k <= 1024 (kFoldLateReleaseMaxK), built by setup.py
# on the CPU machine and carried: the tests of tests/test_gpu.py that run the folding kernel (every
# tile against float64, the tiles written by TMA against the stores from the registers bit for bit,
# two blocks per SM, CUDA graphs), then memcheck of two tiles written by TMA at k <= 1024 with several
# tiles per persistent block. (The session's device time did not leave room for the whole file and
# gpu.py after this change.)
#   device: OUT=... bash benchmarks/results/h200-2026-12-04-resident/run_call6.sh  (carry python/radiance/_C.abi3.so)
. "$(dirname "$0")/../../harness/call_preamble.sh"
ls python/radiance/_C*.so || exit 1
logged test 300 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py \
    -k "tile or tma_store or two_blocks or test_apply_gpu_matches_float64 or hand_made or captured or any_m"
tail -1 "$OUT/test.log"; grep -E "^FAILED|^E  " "$OUT/test.log" | head -12
RADIANCE_TEST_NO_PROFILER=1 logged memcheck 120 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest \
    -q -p no:cacheprovider tests/test_gpu.py -k "tma_store and (700-3000-1024 or 384-20000-576)"
grep -E "ERROR SUMMARY|passed|failed" "$OUT/memcheck.log" | tail -2
