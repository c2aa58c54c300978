#!/usr/bin/env bash
# Run 69 (2026-12-04, fourteenth session): the folding kernel's 96-token tile of two blocks per SM
# (2 consumer warpgroups, 104 registers a consumer thread) builds and queues each 128-column step
# in four parts of 2 slices (8 fragment registers a set) instead of two halves of 4 (16), where the
# halves left ptxas too few registers and it waited for every wgmma before the next (C7512, a
# 16-32-byte spill). A = the thirteenth session's last harness build (build/B of 03:52, run 68's,
# whose folding kernels written by TMA are not fa43aa7's SASS: call 2 compares with fa43aa7 itself),
# B = this tree. Float64 check of the
# tiles of two blocks per SM and the plan first, then two timing loops over every head at 56-96
# tokens with the tiles of 64 and 96 tokens of one and two blocks per SM side by side, for the rule
# that picks between them (dispatch.h, fold_tile_two_per_sm).
#   python3 benchmarks/harness/gpu_kernels.py build --lib $PWD/build/B/lib.so
#   tar -cf - build/A/lib.so build/B/lib.so | xz -T2 -3 > .carry/ab_libs.tar.xz
#   device: OUT=... bash benchmarks/results/h200-2026-12-04-parts/run_call1.sh  (carry .carry/ab_libs.tar.xz)
. "$(dirname "$0")/../../harness/call_preamble.sh"
tar -xJf .carry/ab_libs.tar.xz || exit 1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv >"$OUT/gpu.txt"
logged check 200 python3 benchmarks/harness/gpu_kernels.py check --lib build/B/lib.so \
    --variants auto,fold2x96b2t,fold2x96b2,fold3x96t,fold2x64b2t,fold2x48b2t,fold1x128b2t
grep -E "ALL CHECKS|FAILED" "$OUT/check.log"; grep -A 8 FAILED "$OUT/check.log" | head -12
AB=(python3 benchmarks/harness/ab_time.py --a build/A/lib.so --b build/B/lib.so)
for r in 1 2; do
    logged "ab_parts_$r" 220 "${AB[@]}" --m 56,64,72,80,96 --b-variants fold3x64t,fold2x64b2t,fold3x96t,fold2x96b2t \
        --heads 128256x4096,262144x640,262144x5376,248320x5120,151936x5120,151936x1024,49152x576
done
for f in ab_parts_1 ab_parts_2; do echo "== $f"; grep -vE "^# |^$" "$OUT/$f.log" | sed -E 's/ {2,}/ /g'; done
