#!/usr/bin/env bash
# Prepared after run 79, not yet run (no device was lent for it): split k in 2-step super-steps in 3
# slots with each super-step's scales in the ring (streamsplitk2s3sr), where 4-step slots with them
# fit only 15 warps (k = 5120: the plan runs 16 warps without them). B = the benchmark build of the
# tree that adds the variant; its float64 check first, then the plan against it and the ring
# without the scales, in one timing loop per table, twice.
#   python3 benchmarks/harness/gpu_kernels.py build --lib $PWD/build/B/lib.so
#   tar -cf - build/B/lib.so | xz -T2 -3 > .carry/b_lib.tar.xz
#   device: bash benchmarks/results/h200-2026-12-04-ring-slots/run_call5.sh  (carry .carry/b_lib.tar.xz)
. "$(dirname "$0")/../../harness/call_preamble.sh"
tar -xJf .carry/b_lib.tar.xz || exit 1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv >"$OUT/gpu.txt"
logged check 200 python3 benchmarks/harness/gpu_kernels.py check --lib build/B/lib.so \
    --variants auto,streamsplitk2s3,streamsplitk2s3sr
tail -3 "$OUT/check.log"
T=(python3 benchmarks/harness/ab_time.py --a build/B/lib.so --b build/B/lib.so)
for r in 1 2; do
    logged "ab_sr_$r" 120 "${T[@]}" --heads 248320x5120,151936x5120,128256x4096,128256x2048 --m 9,12,16 \
        --b-variants streamsplitk2s3,streamsplitk2s3sr
done
for r in 1 2; do echo "== ab_sr_$r"; grep -vE "^# |^$" "$OUT/ab_sr_$r.log" | sed -E 's/ {2,}/ /g'; done
