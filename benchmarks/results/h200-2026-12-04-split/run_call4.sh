#!/usr/bin/env bash
# Run 73 (2026-12-04, fifteenth session, issue 22): the tile of 192 tokens with 3 consumer
# warpgroups (192 rows, stored from the registers, each step built in four parts: 0 spills at the
# 128 registers of its launch bound; benchmark build only, fold3x192) against the library's of 2
# (fold2x192t, written by TMA) where m runs as chunks of 192 (161-192, 321-384, 513-576 tokens),
# the seven heads of issue 22, after a float64 check; two loops.
# fold3x192 lost and was deleted after this run; its tile is kept as run73_fold3x192.patch beside this
# script (applies to 11e792d):
#   git apply benchmarks/results/h200-2026-12-04-split/run73_fold3x192.patch
#   python3 benchmarks/harness/gpu_kernels.py build --lib $PWD/build/B/lib.so
#   tar -cf - build/B/lib.so | xz -T2 -3 > .carry/b_lib.tar.xz
#   device: OUT=... bash benchmarks/results/h200-2026-12-04-split/run_call4.sh  (carry .carry/b_lib.tar.xz)
. "$(dirname "$0")/../../harness/call_preamble.sh"
tar -xJf .carry/b_lib.tar.xz || exit 1
logged check 150 python3 benchmarks/harness/gpu_kernels.py check --lib build/B/lib.so --variants auto,fold3x192,split256
tail -3 "$OUT/check.log"
T=(python3 benchmarks/harness/ab_time.py --a build/B/lib.so --b build/B/lib.so)
for r in 1 2; do
    logged "t192_$r" 150 "${T[@]}" --heads 248320x5120,262144x5376,151936x5120,128256x4096,151936x1024,262144x640,49152x576 \
        --m 176,192,352,384,544,576 --b-variants fold2x192t,fold3x192
done
for r in 1 2; do echo "== t192_$r"; grep -vE "^# |^$" "$OUT/t192_$r.log" | sed -E 's/ {2,}/ /g'; done
