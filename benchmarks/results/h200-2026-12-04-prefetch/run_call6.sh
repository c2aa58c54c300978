#!/usr/bin/env bash
# The library with run 78 (the last round cut along k as a second launch; at 112-128 tokens one
# block's fill counting it), built on the CPU machine by setup.py (RADIANCE_GPU=cuda
# RADIANCE_GPU_ARCHS=90) and carried: the whole tests/test_gpu.py, then compute-sanitizer's memcheck
# of two of the new cut tests (tiles stored from the registers in four parts, and two token chunks
# in three) and of the two-blocks-per-SM test whose head now takes one block, cut.
#   device: OUT=... bash benchmarks/results/h200-2026-12-04-prefetch/run_call6.sh  (carry python/radiance/_C.abi3.so)
. "$(dirname "$0")/../../harness/call_preamble.sh"
ls python/radiance/_C*.so || exit 1
logged test 420 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py
tail -1 "$OUT/test.log"; grep -E "^FAILED|^E  " "$OUT/test.log" | head -12
RADIANCE_TEST_NO_PROFILER=1 logged memcheck 110 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest \
    -q -p no:cacheprovider tests/test_gpu.py \
    -k "last_round_cut and (128-26003 or 280-16000) or one_block_bit_for_bit and 128-33784"
grep -E "ERROR SUMMARY|passed|failed" "$OUT/memcheck.log" | tail -2
