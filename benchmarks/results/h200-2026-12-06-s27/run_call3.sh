#!/usr/bin/env bash
# Twenty-seventh session, call 3: call 2's sweep (gpu_kernels.py time, a loop per variant) put the
# folding kernel's tiles of one block per SM ahead of the plan's tiles of two blocks per SM on the
# heads of small k at 80-128 tokens and on 262144 x 5376 at 64, by 3-12 %. Here the same in
# ab_time.py's one timing loop (the plan, A = B = main's benchmark build, beside each tile as a
# variant of B, and bf16), per tile size at the token counts it serves (ab_<tokens>_<heads>.log).
# Carry .carry/o_lib.tar.xz.
. "$(dirname "$0")/../../harness/call_preamble.sh"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader | tee "$OUT/gpu.txt"
tar -xJf .carry/o_lib.tar.xz || exit 1
small=151936x1024,262144x640,49152x576:64,131072x768,128256x2048
big=262144x5376,128256x4096,151936x5120
ab() { # NAME SECONDS HEADS M VARIANTS
    logged "$1" "$2" python3 benchmarks/harness/ab_time.py --a build/B/lib.so --b build/B/lib.so --heads "$3" \
        --m "$4" --b-variants "$5" --fastest
}
ab ab_128_small 110 $small 112,128 fold2x128t,fold1x128b2t
ab ab_96_small 90 $small 80,96 fold3x96t,fold2x96b2t
ab ab_64_small 70 $small 64 fold3x64t,fold2x64b2t
ab ab_64_big 70 $big 64 fold3x64,fold2x64b2t
ab ab_96_big 100 $big 80,96 fold3x96,fold2x96b2t
ab ab_128_big 110 $big 112,128 fold3x128,fold2x128t
