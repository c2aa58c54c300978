#!/usr/bin/env bash
# Device call 2 (2026-12-03, tenth session): the library with run 58/59's plan (whole super-steps at
# 1-8 tokens where k % 512 == 0: loads skipped past m at 1-5 tokens, the shared copy from 6; the
# 48-token tile written by TMA at every k), built on the CPU machine (setup.py, abi3) and carried
# with Humming's wheel: the whole tests/test_gpu.py, a memcheck of the new stream plans, then
# benchmarks/gpu.py on the seven heads of issue 22 at its 19 token counts.
#   OUT=... bash benchmarks/results/h200-2026-12-03-whole/run_call2.sh
#   (carry python/radiance/_C.abi3.so and .carry/whl)
# The steps are benchmarks/harness/library_call.sh's (written after this call, from it); this
# call's memcheck selection:
exec bash "$(dirname "$0")/../../harness/library_call.sh" \
    "stream_plans and (5120-128-1 or 5120-128-5 or 5120-128-6 or 5376-128-5 or 5376-128-8 or 2304-256-3)"
