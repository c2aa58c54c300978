#!/usr/bin/env bash
# Prepared by the twenty-seventh session for an H200 (exits 3 at once on any other GPU), on branch
# fold-32-full-rounds: at 17-32 tokens with k > 1024, the folding kernel's 32-token tile instead of
# the wgmma pipe kernel where its 192-row tiles fill their last round to 0.99 (hip/dispatch.h,
# fold_32_fills_rounds; on the H100 4-7.5 % faster on the Qwen heads, calls 7 and 13).
# 1. ab.log: main's benchmark build against itself with the 32-token tiles as variants of B, at
#    20-32 tokens on the Qwen heads (151936 / 152064 rows: the rule takes them) and on heads it
#    leaves (248320 x 5120, 100000 x 4096, 262144 x 5376, 128256 x 4096);
# 2. t/: the branch's library, the tests of 17-32 tokens and of every tile, memcheck of the new
#    test's folding case (its ids: [extra_rows-m]).
# Carry .carry/o_lib.tar.xz (main's `make_carries.sh bench`, renamed), python/radiance/_C.abi3.so
# built on this branch (`make_carries.sh library`) and .carry/whl. Take the branch where the
# folding tile leads on the Qwen heads and is within 1 % on the others; else delete it.
. "$(dirname "$0")/../../harness/call_preamble.sh"
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/gpu.txt" | grep -q H200 || exit 3
tar -xJf .carry/o_lib.tar.xz || exit 1
logged ab 150 python3 benchmarks/harness/ab_time.py --a build/B/lib.so --b build/B/lib.so \
    --heads 151936x5120,151936x4096,152064x3584,151936x2560,248320x5120,100000x4096,262144x5376,128256x4096 \
    --m 20,24,32 --b-variants fold3x32,fold3x32t --fastest
OUT=$OUT/t TESTS_K="17_to_32 or every_tile or every_fold_tile" bash benchmarks/harness/library_call.sh tests \
    "17_to_32 and 0-32"
