#!/usr/bin/env bash
# Twenty-seventh session, call 9: call 7 found the 160-token folding tile of 2 consumer warpgroups
# (128-row tiles, written by TMA) 6 % ahead of the plan's 3 (192 rows) on 128256 x 4096, a head
# whose 192-row tiles fill their last round badly (fill 0.84 against 0.95), and 2-4 % behind on
# heads whose tiles fill it. Here more heads on both sides of a fill rule (2 warpgroups where their
# fill is 8 % better: 65536, 128256, 131072 and 32000 rows; 102400, 163840, 256000 below it), at
# 112-160 tokens, in ab_time.py's one loop (A = B = O, the tiles as variants of B). Carry
# .carry/o_lib.tar.xz.
. "$(dirname "$0")/../../harness/call_preamble.sh"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader | tee "$OUT/gpu.txt"
tar -xJf .carry/o_lib.tar.xz || exit 1
ab() { # NAME SECONDS HEADS M VARIANTS
    logged "$1" "$2" python3 benchmarks/harness/ab_time.py --a build/B/lib.so --b build/B/lib.so --heads "$3" \
        --m "$4" --b-variants "$5" --fastest
}
heads=65536x4096,131072x5120,32000x4096,128256x5120,102400x5120,163840x5120,256000x3584
ab ab_160 150 $heads 136,160 fold3x160,fold2x160t
ab ab_128 150 $heads 112,128 fold3x128,fold2x128t
