#!/usr/bin/env bash
# Run 78 (2026-12-04, sixteenth session, issue 22): the cut of the last round as a second launch of
# a unit kernel after main's kernel on the whole rounds (its SASS main's but for the parameters' offsets), and the
# planner's fill of one block per SM counting the cut (dispatch.h, fold_fill_one_block). A = the
# benchmark build of main (126e4d8), B = this tree's; B's folding tiles against float64 first, then
# A against B in one timing loop per table, twice, with B's one-block tiles of 3 consumer warpgroups
# (fold3x48/64/96/128, cut where their last round is) beside its plan.
#   git apply benchmarks/results/h200-2026-12-04-prefetch/run78_fold_tail_cut_second_launch.patch   # B's tree: main with this run's change
#   python3 benchmarks/harness/gpu_kernels.py build --lib $PWD/build/B/lib.so
#   tar -cf - build/A/lib.so build/B/lib.so | xz -T2 -3 > .carry/ab_libs.tar.xz
#   device: OUT=... bash benchmarks/results/h200-2026-12-04-prefetch/run_call5.sh  (carry .carry/ab_libs.tar.xz)
. "$(dirname "$0")/../../harness/call_preamble.sh"
tar -xJf .carry/ab_libs.tar.xz || exit 1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv >"$OUT/gpu.txt"
logged check 240 python3 benchmarks/harness/gpu_kernels.py check --lib build/B/lib.so \
    --variants auto,fold3x48,fold3x64t,fold3x96,fold3x128,fold3x160,fold2x128t,fold2x192,fold2x256t,fold1x128b2t
tail -3 "$OUT/check.log"
T=(python3 benchmarks/harness/ab_time.py --a build/A/lib.so --b build/B/lib.so)
for r in 1 2; do
    logged "ab_big_$r" 150 "${T[@]}" --heads 248320x5120,262144x5376,151936x5120,128256x4096 \
        --m 40,48,64,96,112,128,160,192,256
    logged "ab_one_$r" 100 "${T[@]}" --heads 128256x4096,262144x5376,128256x2048 --m 40,48,64,80,96,100,128 \
        --b-variants fold3x48,fold3x64,fold3x96,fold3x128
    logged "ab_small_$r" 40 "${T[@]}" --heads 151936x1024,262144x640,49152x576 --m 96,128
done
for f in ab_big ab_one ab_small; do for r in 1 2; do echo "== ${f}_$r"; grep -vE "^# |^$" "$OUT/${f}_$r.log" | sed -E 's/ {2,}/ /g'; done; done
