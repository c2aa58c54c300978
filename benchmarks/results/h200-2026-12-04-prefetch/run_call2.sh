#!/usr/bin/env bash
# Run 75 (2026-12-04, sixteenth session, issue 22): the folding kernel's last round of tiles cut
# along k where it would leave at least half of the blocks idle (dispatch.h, fold_tail_parts).
# A = the benchmark build of main (126e4d8, as in call 1), B = this tree's; B against float64
# first (auto, and the folding tiles forced), then A against B in one timing loop per table, twice.
#   git apply benchmarks/results/h200-2026-12-04-prefetch/run75_fold_tail_cut.patch   # B's tree: main with this run's change
#   python3 benchmarks/harness/gpu_kernels.py build --lib $PWD/build/B/lib.so
#   tar -cf - build/A/lib.so build/B/lib.so | xz -T2 -3 > .carry/ab_libs.tar.xz
#   device: OUT=... bash benchmarks/results/h200-2026-12-04-prefetch/run_call2.sh  (carry .carry/ab_libs.tar.xz)
. "$(dirname "$0")/../../harness/call_preamble.sh"
tar -xJf .carry/ab_libs.tar.xz || exit 1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv >"$OUT/gpu.txt"
logged check 240 python3 benchmarks/harness/gpu_kernels.py check --lib build/B/lib.so
tail -3 "$OUT/check.log"
T=(python3 benchmarks/harness/ab_time.py --a build/A/lib.so --b build/B/lib.so)
for r in 1 2; do
    logged "ab_big_$r" 150 "${T[@]}" --heads 248320x5120,262144x5376,151936x5120,128256x4096,128256x2048 \
        --m 40,48,64,80,96,112,128,160,192,256,384,512,1024
    logged "ab_small_$r" 60 "${T[@]}" --heads 151936x1024,262144x640,49152x576 --m 48,96,128,256,384
done
for f in ab_big ab_small; do for r in 1 2; do echo "== ${f}_$r"; grep -vE "^# |^$" "$OUT/${f}_$r.log" | sed -E 's/ {2,}/ /g'; done; done
