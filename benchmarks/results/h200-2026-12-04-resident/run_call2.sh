#!/usr/bin/env bash
# Run 67 (2026-12-04, thirteenth session): the one-unit stream kernel of 1-5 tokens with its last
# wave of blocks in pairs of warps over halves of k (hip/dispatch.h, stream_pair_block0;
# apply_stream_kernel), where the last wave is at most half full behind a full one and k % 1024 == 0
# (H200: 248320 x 5120 7 waves + 736 units, 151936 x 5120 and 151936 x 1024 4 + 1048).
# A = c70e44c's kernels and plan (the harness build of call 1, whose foldres variants B lacks),
# B = the tree of that call (its first version, which also took the pairs at k = 1024 and held
# the branch in every instance; the commit takes them from k = 4096 in an instance of their own);
# float64 check of B's plan first, then two timing loops.
#   mv build/B/lib.so build/A/lib.so   (call 1's build)
#   python3 benchmarks/harness/gpu_kernels.py build --lib $PWD/build/B/lib.so
#   tar -cf - build/A/lib.so build/B/lib.so | xz -T2 -3 > .carry/ab_libs.tar.xz
#   device: OUT=... bash benchmarks/results/h200-2026-12-04-resident/run_call2.sh  (carry .carry/ab_libs.tar.xz)
. "$(dirname "$0")/../../harness/call_preamble.sh"
tar -xJf .carry/ab_libs.tar.xz || exit 1
logged check 150 python3 benchmarks/harness/gpu_kernels.py check --lib build/B/lib.so --variants auto,streamwhole
grep -E "ALL CHECKS|FAILED" "$OUT/check.log"; grep -A 8 FAILED "$OUT/check.log" | head -12
AB=(python3 benchmarks/harness/ab_time.py --a build/A/lib.so --b build/B/lib.so)
for r in 1 2; do
    logged "ab_pairs_$r" 120 "${AB[@]}" --m 1,2,3,4,5 \
        --heads 248320x5120,151936x5120,151936x1024,128256x4096,262144x5376,128256x2048
done
for f in ab_pairs_1 ab_pairs_2; do echo "== $f"; grep -vE "^# |^$" "$OUT/$f.log" | sed -E 's/ {2,}/ /g'; done
