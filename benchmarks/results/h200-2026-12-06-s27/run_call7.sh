#!/usr/bin/env bash
# Twenty-seventh session, call 7: more plans that were chosen before run 89 made the folding
# kernel's one-block tiles 4-8 % faster, in ab_time.py's one timing loop (A = B = main's benchmark
# build O; the plan beside tiles as variants of B): at 17-32 tokens the wgmma pipe (the plan where
# k > 1024) against the folding kernel's 32-token tiles (ab_32.log); at 129-160 tokens the
# 160-token tile of 3 consumer warpgroups against 2 written by TMA (ab_160.log). Carry
# .carry/o_lib.tar.xz.
. "$(dirname "$0")/../../harness/call_preamble.sh"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader | tee "$OUT/gpu.txt"
tar -xJf .carry/o_lib.tar.xz || exit 1
ab() { # NAME SECONDS HEADS M VARIANTS
    logged "$1" "$2" python3 benchmarks/harness/ab_time.py --a build/B/lib.so --b build/B/lib.so --heads "$3" \
        --m "$4" --b-variants "$5" --fastest
}
big=248320x5120,262144x5376,151936x5120,128256x4096,128256x2048
ab ab_32 150 $big,151936x1024 20,24,32 fold3x32,fold3x32t,wgpipe32
ab ab_160 150 $big 144,160 fold3x160,fold2x160t
