#!/usr/bin/env bash
# Twenty-seventh session, call 12: the library with runs 94-96 (run 96: the 128-token folding tile
# of 2 consumer warpgroups where k > 2048, 3's tiles take at most 3 rounds and 2's fill the last
# round 4 % better; hip/dispatch.h fold_tile_rows): the whole tests/test_gpu.py in 8 processes,
# then memcheck of the two-blocks cases at 128 tokens whose tile moved or is new (t/). Carry
# python/radiance/_C.abi3.so and .carry/whl.
. "$(dirname "$0")/../../harness/call_preamble.sh"
OUT=$OUT/t bash benchmarks/harness/library_call.sh tests \
    "two_blocks_per_sm and (128-76040-2304 or 128-33784-5120)"
