#!/usr/bin/env bash
# Run 74 (2026-12-04, sixteenth session, issue 22): the folding kernel brings the next tile's scales
# into L1 kFoldPrefetchSteps (4) steps before a tile ends. A = the benchmark build of main (126e4d8),
# B = this tree's; B against float64 first, then A against B in one timing loop per table, twice,
# on the seven heads of issue 22 at the token counts the folding kernel serves.
#   (cd /tmp/A && python3 benchmarks/harness/gpu_kernels.py build --lib /work/main/build/A/lib.so)
#   (B's tree: main with the prefetch of docs/PERF_LOG.md, run 74, not kept)
#   python3 benchmarks/harness/gpu_kernels.py build --lib $PWD/build/B/lib.so
#   tar -cf - build/A/lib.so build/B/lib.so | xz -T2 -3 > .carry/ab_libs.tar.xz
#   device: OUT=... bash benchmarks/results/h200-2026-12-04-prefetch/run_call1.sh  (carry .carry/ab_libs.tar.xz)
. "$(dirname "$0")/../../harness/call_preamble.sh"
tar -xJf .carry/ab_libs.tar.xz || exit 1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv >"$OUT/gpu.txt"
logged check 240 python3 benchmarks/harness/gpu_kernels.py check --lib build/B/lib.so --variants auto
tail -3 "$OUT/check.log"
T=(python3 benchmarks/harness/ab_time.py --a build/A/lib.so --b build/B/lib.so)
for r in 1 2; do
    logged "ab_big_$r" 150 "${T[@]}" --heads 248320x5120,262144x5376,151936x5120,128256x4096 \
        --m 12,16,48,64,96,128,192,256,384,1024
    logged "ab_small_$r" 90 "${T[@]}" --heads 151936x1024,262144x640,49152x576 \
        --m 12,16,24,48,64,96,128,192,256,384,1024,2048
done
for f in ab_big ab_small; do for r in 1 2; do echo "== ${f}_$r"; grep -vE "^# |^$" "$OUT/${f}_$r.log" | sed -E 's/ {2,}/ /g'; done; done
