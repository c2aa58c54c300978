#!/usr/bin/env bash
# Run 64 (2026-12-03, twelfth session): run 63's scales in the ring promoted to the library's plan
# (hip/dispatch.h, kRingScalesFewTokensMaxK: the shared-activation kernel's whole super-steps with
# them at every k % 512 == 0 from 6 tokens, from 5 where k <= 4096; the one-unit kernel's at 1-4
# tokens where k <= 4096), and split k's halves with them too where whole (k % 1024 == 0). A =
# 5ae8f06 (the library's plan before), B = this tree; B's streamsplitknr is split k without them,
# its streamsplitk split k as the library's but from 8 warps per block (where the scales in the
# ring leave room for only 15, k = 5120 groups of 128, and where 16 never fit, k = 5376).
#   (cd <A tree> && python3 benchmarks/harness/gpu_kernels.py build --lib $PWD/build/A/lib.so)
#   python3 benchmarks/harness/gpu_kernels.py build --lib $PWD/build/B/lib.so
#   tar -cf - build/A/lib.so build/B/lib.so | xz -T2 -3 > .carry/ab_libs.tar.xz
#   device: OUT=... bash benchmarks/results/h200-2026-12-03-ring/run_call1.sh  (carry .carry/ab_libs.tar.xz)
. "$(dirname "$0")/../../harness/call_preamble.sh"
tar -xJf .carry/ab_libs.tar.xz || exit 1
logged check 200 python3 benchmarks/harness/gpu_kernels.py check --lib build/B/lib.so \
    --variants auto,streamskipwhole,streamskipwholesr,streamxswhole,streamxswholesr,streamxstail,streamsplitk,streamsplitk2c,streamsplitknr
grep -E "ALL CHECKS|FAILED" "$OUT/check.log"; grep -A 8 FAILED "$OUT/check.log" | head -10
AB=(python3 benchmarks/harness/ab_time.py --a build/A/lib.so --b build/B/lib.so --fastest)
for r in 1 2; do
    logged "ab_few_$r" 150 "${AB[@]}" --m 1,2,3,4,5,6,8 \
        --heads 248320x5120,262144x5376,151936x5120,128256x4096,128256x2048,151936x1024,262144x640
    logged "ab_splitk_$r" 120 "${AB[@]}" --m 9,12,16 --b-variants streamsplitk,streamsplitknr \
        --heads 248320x5120,262144x5376,151936x5120,128256x4096,128256x2048,151936x1024
done
for f in ab_few_1 ab_few_2 ab_splitk_1 ab_splitk_2; do
    echo "== $f"; grep -vE "^# |^$" "$OUT/$f.log" | sed -E 's/ {2,}/ /g'
done
