#!/usr/bin/env bash
# Run 71 (2026-12-04, fourteenth session): call 4 found the 128-token tile of two blocks per SM (1
# consumer warpgroup, 64 rows) 60 % slower at 97 tokens than at 128 on 128256 x 4096 (354 against
# 231 us; the one-block tiles 221-227 at 97). The library takes it at 97-128 tokens wherever the
# fill allows; here every head that takes it (and 262144 x 5376, which does not) at 97-128 tokens
# with the tiles of 128 tokens side by side, twice. ab_time.py with A and B the same build: the
# variants' columns compare among themselves (A's column, first in each round after bf16, reads the
# head from DRAM where it fits in L2 and the others partly from L2: 49152 x 576).
#   device: OUT=... bash benchmarks/results/h200-2026-12-04-parts/run_call5.sh  (carry .carry/b_lib.tar.xz)
. "$(dirname "$0")/../../harness/call_preamble.sh"
tar -xJf .carry/b_lib.tar.xz || exit 1
T=(python3 benchmarks/harness/ab_time.py --a build/B/lib.so --b build/B/lib.so)
for r in 1 2; do
    logged "t128_$r" 150 "${T[@]}" --heads 128256x4096,262144x640,151936x1024,49152x576,262144x5376 \
        --m 97,104,112,120,128 --b-variants fold1x128b2t,fold2x128t,fold3x128,fold2x128
done
for r in 1 2; do echo "== t128_$r"; grep -vE "^# |^$" "$OUT/t128_$r.log" | sed -E 's/ {2,}/ /g'; done
