#!/usr/bin/env bash
# Twenty-seventh session, call 5: the library with run 94 (the folding tiles of two blocks per SM
# taken less often; hip/dispatch.h fold_tile_two_per_sm): the whole tests/test_gpu.py in 8
# processes, then memcheck of two of the fold tests whose rule changed (t/). Carry
# python/radiance/_C.abi3.so and .carry/whl.
. "$(dirname "$0")/../../harness/call_preamble.sh"
OUT=$OUT/t bash benchmarks/harness/library_call.sh tests \
    "two_blocks_per_sm and (128-84480-640 or 128-67576-640 or 64-76168-4096)"
