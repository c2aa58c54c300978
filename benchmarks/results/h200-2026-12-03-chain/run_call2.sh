#!/usr/bin/env bash
# Run 62 (2026-12-03, eleventh session, issue 22): the persistent stream kernels (6-8 tokens with
# the activations in shared memory, 9-16 with k split over a cluster pair) chain their ring from one
# 16-row unit into the next: the next unit's first super-step is copied, and its scales loaded,
# while the last of this one is worked on (stream_warp_rows, CHAIN). Run 61's profile: the 8-token
# kernel issues fewer instructions than the 1-token one but waits 2.4x as long on long-scoreboard
# dependencies, and reads DRAM at 3.45 against 4.05 TB/s. Also streamskipwholep: the 1-5-token
# kernel (whole super-steps) made persistent, 4 blocks of 4 warps per SM, its rings chained too. A: the tree before (build/A/lib.so, made
# from 3cbb488), B: this tree; both made on the CPU machine:
#   python3 benchmarks/harness/gpu_kernels.py build --lib $PWD/build/B/lib.so     # about 2 minutes
#   device: OUT=... bash benchmarks/results/h200-2026-12-03-chain/run_call2.sh
#           (carry .carry/ab_libs.tar.xz: both libraries, 93 MB, over the 64 MiB a call carries as they are;
#            tar -cf - build/A/lib.so build/B/lib.so | xz -T2 -6 > .carry/ab_libs.tar.xz)
. "$(dirname "$0")/../../harness/call_preamble.sh"
tar -xJf .carry/ab_libs.tar.xz || exit 1
ls -l build/A/lib.so build/B/lib.so || exit 1
logged check 240 python3 benchmarks/harness/gpu_kernels.py check --lib build/B/lib.so \
    --variants auto,streamskipwhole,streamskipwholep,streamskiptail,streamxs,streamxsbal,streamxswhole,streamxstail,streamsplitk,streamsplitk2c,fold3x16,fold3x16t
grep -E "ALL CHECKS|FAILED" "$OUT/check.log"; grep -A 8 FAILED "$OUT/check.log" | head -10
AB=(python3 benchmarks/harness/ab_time.py --a build/A/lib.so --b build/B/lib.so --fastest)
for r in 1 2; do
    logged "ab_few_$r" 150 "${AB[@]}" --m 1,4,6,8 --b-variants streamskipwholep \
        --heads 248320x5120,262144x5376,151936x5120,128256x4096,128256x2048,151936x1024,262144x640
    logged "ab_splitk_$r" 120 "${AB[@]}" --m 9,12,16 \
        --heads 248320x5120,262144x5376,151936x5120,128256x4096,128256x2048,151936x1024
    logged "ab_small16_$r" 60 "${AB[@]}" --m 9,12,16 --heads 262144x640,151936x1024 --b-variants fold3x16,fold3x16t
done
for f in ab_few_1 ab_few_2 ab_splitk_1 ab_splitk_2 ab_small16_1 ab_small16_2; do
    echo "== $f"; grep -vE "^# |^$" "$OUT/$f.log" | sed -E 's/ {2,}/ /g'
done
