#!/usr/bin/env bash
# Device call 4 (2026-12-03, tenth session): the library with run 60's plan (1-8 tokens: whole
# super-steps but the last where k % 512 != 0, loads skipped past m at every count, the shared copy
# from 6 tokens at every k), built on the CPU machine and carried with Humming's wheel: the whole
# tests/test_gpu.py, a memcheck of the tail kernels, then benchmarks/gpu.py on the seven heads.
#   OUT=... bash benchmarks/results/h200-2026-12-03-whole/run_call4.sh
#   (carry python/radiance/_C.abi3.so and .carry/whl)
# The steps are benchmarks/harness/library_call.sh's (written after this call, from it); this
# call's memcheck selection:
exec bash "$(dirname "$0")/../../harness/library_call.sh" \
    "stream_plans and (640-128-1 or 5376-128-5 or 5376-128-6 or 2304-256-3 or 2304-256-8)"
