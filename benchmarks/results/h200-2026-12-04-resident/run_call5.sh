#!/usr/bin/env bash
# Run 68 (2026-12-04, thirteenth session): the folding kernel's tiles written by TMA release their
# staging slot after the next tile's first wgmmas are queued, not before (thread 0 of each
# warpgroup waited for the engine to read the tile, and with it its warp and so the warpgroup's
# next wgmma). A = c70e44c's folding kernel (call 1's harness build), B = this tree; float64 check
# of every folding variant written by TMA and the plan first, then two timing loops.
#   python3 benchmarks/harness/gpu_kernels.py build --lib $PWD/build/B/lib.so
#   tar -cf - build/A/lib.so build/B/lib.so | xz -T2 -3 > .carry/ab_libs.tar.xz
#   device: OUT=... bash benchmarks/results/h200-2026-12-04-resident/run_call5.sh  (carry .carry/ab_libs.tar.xz)
. "$(dirname "$0")/../../harness/call_preamble.sh"
tar -xJf .carry/ab_libs.tar.xz || exit 1
logged check 200 python3 benchmarks/harness/gpu_kernels.py check --lib build/B/lib.so \
    --variants auto,fold3x32t,fold3x48t,fold3x64t,fold3x96t,fold2x128t,fold2x160t,fold2x192t,fold2x256t,fold1x128b2t,fold2x64b2t,fold2x48b2t
grep -E "ALL CHECKS|FAILED" "$OUT/check.log"; grep -A 8 FAILED "$OUT/check.log" | head -12
AB=(python3 benchmarks/harness/ab_time.py --a build/A/lib.so --b build/B/lib.so)
for r in 1 2; do
    logged "ab_tstore_$r" 150 "${AB[@]}" --m 48,128,192,256,384,1024,2048 \
        --heads 262144x640,49152x576,151936x1024,128256x4096,248320x5120,262144x5376,151936x5120
done
for f in ab_tstore_1 ab_tstore_2; do echo "== $f"; grep -vE "^# |^$" "$OUT/$f.log" | sed -E 's/ {2,}/ /g'; done
