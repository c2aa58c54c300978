#!/usr/bin/env bash
# Twenty-sixth session, calls 8 and 10 (run 92, branch rotated-halves, since deleted): split k's
# halves of k / 256 steps each where that is odd, block 1's first step run last so that both
# halves' whole super-steps start on 128-byte boundaries (splitkrot), against run 90's halves of
# 20 and 22 steps (the library's since 8034a4c). Carry .carry/n_lib.tar.xz (N: run 90's benchmark
# build) and .carry/r_lib.tar.xz (R: run 92's, build/R/lib.so; its auto is still run 90's plan):
# 1. the float64 error of R's plan and splitkrot at 9 and 16 tokens, k / 256 = 5, 9 and 21 (err.log);
# 2. N against R's splitkrot in two timing loops at 9, 12 and 16 tokens (ab_*.log).
. "$(dirname "$0")/../../harness/call_preamble.sh"
tar -xJf .carry/n_lib.tar.xz && tar -xJf .carry/r_lib.tar.xz || exit 1
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
logged err 150 python3 benchmarks/harness/variant_error.py --lib build/R/lib.so --variants auto,splitkrot \
    --shapes 17011x5376,1001x5376,2001x1280,3001x2304 --m 9,16
tail -8 "$OUT/err.log"
for loop in 1 2; do
    logged ab_$loop 150 python3 benchmarks/harness/ab_time.py --a build/N/lib.so --b build/R/lib.so \
        --heads 262144x5376,151936x5376 --m 9,12,16 --b-variants splitkrot
done
tail -12 "$OUT/ab_1.log"; tail -12 "$OUT/ab_2.log"
