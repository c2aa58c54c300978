#!/usr/bin/env bash
# Twenty-seventh session, call 4: run 94 (hip/dispatch.h, fold_tile_two_per_sm: the tiles of two
# blocks per SM at 49-96 tokens only where their fill rises by 5 %, or by no more than 5 % less at
# k <= 1024; the 128-token one at k <= 1024 only where one block's tiles take at most 4 rounds)
# against main, A = main's benchmark build (O), B = run 94's (F), one timing loop per group, on
# every head family the rule moves (Gemma 2 / 3's 256000 and 262144 rows at k = 2304-5376, 163840
# x 5120, the heads of k <= 1024) and on two it keeps (49152 x 576 at 112-128, 128256 x 4096 at
# 64-96). Carry .carry/o_lib.tar.xz and .carry/f_lib.tar.xz.
. "$(dirname "$0")/../../harness/call_preamble.sh"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader | tee "$OUT/gpu.txt"
tar -xJf .carry/o_lib.tar.xz && tar -xJf .carry/f_lib.tar.xz || exit 1
ab() { # NAME SECONDS HEADS M
    logged "$1" "$2" python3 benchmarks/harness/ab_time.py --a build/B/lib.so --b build/F/lib.so --heads "$3" --m "$4"
}
for pass in 1 2; do
    ab big_$pass 120 262144x2560,262144x3840,256000x2304,256000x3584,163840x5120,262144x5376,128256x4096 48,64,80,96
    ab small_$pass 120 152064x896,248320x1024,128256x1024,256000x640,151936x1024,262144x640,131072x768,49152x576:64 \
        64,96,112,128
done
