#!/usr/bin/env bash
# Run 62b (2026-12-03, eleventh session): call 2 again after two fixes. The copy cursor of
# stream_warp_rows advances one pointer per super-step (call 2's computed each copy's address from
# the unit's row and set its row tests at every super-step: the one-unit kernels, 1-5 tokens, ran
# 0.5-4.7 % slower than A); the persistent 1-5-token variant (streamskipwholep) loads the next
# unit's scales too (call 2's used the last unit's past the first: wrong from row 33792 on, which
# the check caught) and is offered only for one 8-token chunk.
#   python3 benchmarks/harness/gpu_kernels.py build --lib $PWD/build/B/lib.so
#   tar -cf - build/A/lib.so build/B/lib.so | xz -T2 -6 > .carry/ab_libs.tar.xz
#   device: OUT=... bash benchmarks/results/h200-2026-12-03-chain/run_call3.sh  (carry .carry/ab_libs.tar.xz)
. "$(dirname "$0")/../../harness/call_preamble.sh"
tar -xJf .carry/ab_libs.tar.xz || exit 1
logged check 200 python3 benchmarks/harness/gpu_kernels.py check --lib build/B/lib.so \
    --variants auto,streamskipwhole,streamskipwholep,streamskiptail,streamxs,streamxsbal,streamxswhole,streamxstail,streamsplitk,streamsplitk2c
grep -E "ALL CHECKS|FAILED" "$OUT/check.log"; grep -A 8 FAILED "$OUT/check.log" | head -10
AB=(python3 benchmarks/harness/ab_time.py --a build/A/lib.so --b build/B/lib.so --fastest)
for r in 1 2; do
    logged "ab_few_$r" 150 "${AB[@]}" --m 1,2,4,5,6,8 --b-variants streamskipwholep,streamxswhole,streamxstail \
        --heads 248320x5120,262144x5376,151936x5120,128256x4096,128256x2048,151936x1024,262144x640
    logged "ab_splitk_$r" 120 "${AB[@]}" --m 9,12,16 \
        --heads 248320x5120,262144x5376,151936x5120,128256x4096,128256x2048,151936x1024
done
for f in ab_few_1 ab_few_2 ab_splitk_1 ab_splitk_2; do
    echo "== $f"; grep -vE "^# |^$" "$OUT/$f.log" | sed -E 's/ {2,}/ /g'
done
