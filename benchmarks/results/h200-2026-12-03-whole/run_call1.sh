#!/usr/bin/env bash
# Run 59 (2026-12-03, tenth session): after run 58 (benchmarks/results/h200-2026-12-03-large-m),
# the benchmark build of the tree whose planner takes whole super-steps at 2-8 tokens where
# k % 512 == 0 (auto). Asks: the loads skipped past m at one token too? 32 rows per warp in the
# shared-activation kernel (streamxsM2w, 8 warps) against 16 (streamxswhole)? The 48-token tile
# written by TMA at k = 2048 and 4096 too (run 58 measured k = 5120 and 5376)?
#   python3 benchmarks/harness/gpu_kernels.py build --lib $PWD/build/B/lib.so     # about 2 minutes
#   device: OUT=... bash benchmarks/results/h200-2026-12-03-whole/run_call1.sh  (carry build/B/lib.so)
. "$(dirname "$0")/../../harness/call_preamble.sh"
ls -l build/B/lib.so || exit 1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
logged check 150 python3 benchmarks/harness/gpu_kernels.py check --lib build/B/lib.so \
    --variants auto,streamskipwhole,streamxswhole,streamxsM2w
grep -E "ALL CHECKS|FAILED" "$OUT/check.log"; grep -A 8 FAILED "$OUT/check.log" | head -10
AB=(python3 benchmarks/harness/ab_time.py --a build/B/lib.so --b build/B/lib.so --fastest)
heads=248320x5120,151936x5120,128256x4096,128256x2048,151936x1024
for r in 1 2; do
    logged "ab_one_$r" 100 "${AB[@]}" --heads $heads --m 1,2 --b-variants streamwhole,streamskipwhole
    logged "ab_xs_$r" 150 "${AB[@]}" --heads $heads --m 5,6,7,8 --b-variants streamskipwhole,streamxswhole,streamxsM2w
    logged "ab48_$r" 100 "${AB[@]}" --heads 128256x4096,128256x2048 --m 36,40,48 \
        --b-variants fold3x48,fold3x48t,fold2x48b2,fold2x48b2t
done
for f in ab_one_1 ab_one_2 ab_xs_1 ab_xs_2 ab48_1 ab48_2; do
    echo "== $f"; grep -vE "^# |^$" "$OUT/$f.log" | sed -E 's/ {2,}/ /g'
done
