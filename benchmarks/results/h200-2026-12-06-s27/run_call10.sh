#!/usr/bin/env bash
# Twenty-seventh session, call 10: the library with runs 94-95 (run 95: the 160-token folding tile
# of 2 consumer warpgroups where k > 2048 and its 128-row tiles fill the last round 4 % better,
# hip/dispatch.h fold_tile_rows): the whole tests/test_gpu.py in 8 processes, then memcheck of the
# new cases (the 2-warpgroup tile written by TMA at k = 4096, the cut of its last round at k =
# 8192; t/). Carry python/radiance/_C.abi3.so and .carry/whl.
. "$(dirname "$0")/../../harness/call_preamble.sh"
OUT=$OUT/t bash benchmarks/harness/library_call.sh tests \
    "(tma_store and 150-2048-4096) or (last_round_cut and 280-)"
