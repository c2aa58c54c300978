#!/usr/bin/env bash
# Twenty-sixth session, call 13: run 93 (lost; its variant splitk2s4 was deleted after), split k's
# whole 2-step halves with the scales in the ring and one mma chain in 4 ring slots a warp (3
# super-steps copied ahead, 15 warps at k = 5120 on an H100) instead of 3 (2 ahead, 16 warps),
# where call 12 found the ring's wait at 14 % of the samples. Carry .carry/n_lib.tar.xz (N: the
# library's plans, build/N/lib.so) and .carry/v_lib.tar.xz (V: with splitk2s4, build/V/lib.so):
# 1. the float64 error of splitk2s4 at 9 and 16 tokens (err.log);
# 2. N against V's splitk2s4 in two timing loops at 9, 12 and 16 tokens (ab_*.log).
. "$(dirname "$0")/../../harness/call_preamble.sh"
tar -xJf .carry/n_lib.tar.xz && tar -xJf .carry/v_lib.tar.xz || exit 1
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
logged err 100 python3 benchmarks/harness/variant_error.py --lib build/V/lib.so --variants auto,splitk2s4 \
    --shapes 17011x5120,1001x4096 --m 9,16
tail -4 "$OUT/err.log"
for loop in 1 2; do
    logged ab_$loop 100 python3 benchmarks/harness/ab_time.py --a build/N/lib.so --b build/V/lib.so \
        --heads 248320x5120,151936x5120,128256x4096 --m 9,12,16 --b-variants splitk2s4
done
tail -16 "$OUT/ab_1.log"; tail -16 "$OUT/ab_2.log"
