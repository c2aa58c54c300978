#!/usr/bin/env bash
# Run 65 (2026-12-03, twelfth session): the shared-activation kernel's last round split in k over
# pairs of warps where it is at most half full behind at least one full round (whole super-steps,
# k % 1024 == 0: 151936 x 5120 4 rounds + 1048 of 2112 units, 248320 x 5120 7 + 736, 151936 x 1024
# 4 + 1048 at 16 warps on 132 SMs), each pair meeting in the block (PairMeet,
# hip/apply_stream.hip). A = ec57d6b (the library's plan, the scales in the ring), B = this tree.
#   mv build/B/lib.so build/A/lib.so   (the ec57d6b build of call 1)
#   python3 benchmarks/harness/gpu_kernels.py build --lib $PWD/build/B/lib.so
#   tar -cf - build/A/lib.so build/B/lib.so | xz -T2 -3 > .carry/ab_libs.tar.xz
#   device: OUT=... bash benchmarks/results/h200-2026-12-03-ring/run_call3.sh  (carry .carry/ab_libs.tar.xz)
. "$(dirname "$0")/../../harness/call_preamble.sh"
tar -xJf .carry/ab_libs.tar.xz || exit 1
logged check 200 python3 benchmarks/harness/gpu_kernels.py check --lib build/B/lib.so \
    --variants auto,streamxswhole,streamxswholesr,streamxstail,streamxs,streamxsbal
grep -E "ALL CHECKS|FAILED" "$OUT/check.log"; grep -A 8 FAILED "$OUT/check.log" | head -10
AB=(python3 benchmarks/harness/ab_time.py --a build/A/lib.so --b build/B/lib.so --fastest)
for r in 1 2; do
    logged "ab_split_$r" 150 "${AB[@]}" --m 5,6,8 \
        --heads 248320x5120,151936x5120,128256x4096,128256x2048,151936x1024,262144x640
done
for f in ab_split_1 ab_split_2; do echo "== $f"; grep -vE "^# |^$" "$OUT/$f.log" | sed -E 's/ {2,}/ /g'; done
