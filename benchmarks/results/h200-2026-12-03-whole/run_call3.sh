#!/usr/bin/env bash
# Run 60 (2026-12-03, tenth session): whole super-steps but the last, whose steps are tested
# against k, for any k (TAIL in stream_warp_rows), in the three stream kernels of 1-16 tokens:
# does 262144 x 5376 (10.5 super-steps, so none of run 58's whole kernels) gain what the heads of
# k % 512 == 0 gained, and does TAIL cost anything against WHOLE where both apply?
#   python3 benchmarks/harness/gpu_kernels.py build --lib $PWD/build/B/lib.so     # about 2 minutes
#   device: OUT=... bash benchmarks/results/h200-2026-12-03-whole/run_call3.sh  (carry build/B/lib.so)
. "$(dirname "$0")/../../harness/call_preamble.sh"
ls -l build/B/lib.so || exit 1
logged check 150 python3 benchmarks/harness/gpu_kernels.py check --lib build/B/lib.so \
    --variants auto,streamskiptail,streamxstail,streamsplitktail,streamsplitk
grep -E "ALL CHECKS|FAILED" "$OUT/check.log"; grep -A 8 FAILED "$OUT/check.log" | head -10
AB=(python3 benchmarks/harness/ab_time.py --a build/B/lib.so --b build/B/lib.so --fastest)
for r in 1 2; do
    logged "ab_few_$r" 150 "${AB[@]}" --heads 262144x5376,262144x640,248320x5120,151936x5120 --m 1,2,4,5,6,8 \
        --b-variants streamskipx,streamskiptail,streamskipwhole,streamxs,streamxstail,streamxswhole
    logged "ab_splitk_$r" 100 "${AB[@]}" --heads 262144x5376,248320x5120,151936x5120 --m 9,12,16 \
        --b-variants streamsplitk,streamsplitktail
done
for f in ab_few_1 ab_few_2 ab_splitk_1 ab_splitk_2; do
    echo "== $f"; grep -vE "^# |^$" "$OUT/$f.log" | sed -E 's/ {2,}/ /g'
done
