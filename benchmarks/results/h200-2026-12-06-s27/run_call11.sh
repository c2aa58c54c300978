#!/usr/bin/env bash
# Twenty-seventh session, call 11: at 97-128 tokens (k > 2048) the 128-token folding tile of 2
# consumer warpgroups won in call 9 only on heads whose 3-warpgroup tiles take 1-3 rounds (32000 x
# 4096 0.77, 65536 x 4096 0.87-0.98). More such heads, in one loop (A = B = O, the tiles as
# variants of B): Llama 2 13B's 32000 x 5120, Mistral's 32768 x 4096, 65536 x 5120, and 49152 x
# 4096 (fills equal) at 100-128 tokens. Carry .carry/o_lib.tar.xz.
. "$(dirname "$0")/../../harness/call_preamble.sh"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader | tee "$OUT/gpu.txt"
tar -xJf .carry/o_lib.tar.xz || exit 1
logged ab_128_few 120 python3 benchmarks/harness/ab_time.py --a build/B/lib.so --b build/B/lib.so \
    --heads 32000x5120,32768x4096,65536x5120,49152x4096,32000x4096 --m 100,112,128 \
    --b-variants fold3x128,fold2x128t,fold1x128b2t --fastest
