#!/usr/bin/env bash
# Twenty-seventh session, call 13: call 7 had the folding kernel's 32-token tile 3-5 % ahead of the
# plan (the wgmma pipe kernel where k > 1024) at 20-32 tokens on 151936 x 5120 only, a head whose
# 192-row tiles fill whole rounds of 132 SMs (792 tiles, 6 rounds). The Qwen heads of 151936 and
# 152064 rows at other k, and 100000 x 4096 (fill 0.99), in one loop (A = B = O, the tiles as
# variants of B). Carry .carry/o_lib.tar.xz.
. "$(dirname "$0")/../../harness/call_preamble.sh"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader | tee "$OUT/gpu.txt"
tar -xJf .carry/o_lib.tar.xz || exit 1
logged ab_32_full 100 python3 benchmarks/harness/ab_time.py --a build/B/lib.so --b build/B/lib.so \
    --heads 152064x3584,151936x4096,152064x5120,151936x2560,100000x4096 --m 20,24,32 \
    --b-variants fold3x32,fold3x32t --fastest
