#!/usr/bin/env bash
# Run 58 (prepared 2026-12-03, ninth session, on the CPU machine; see CALLS.md): which tile serves
# more than 256 tokens best on each head, and whether the one-block 48-token tile should be written
# by TMA at every k. The benchmark build of this tree, made on the CPU machine and carried:
#   python3 benchmarks/harness/gpu_kernels.py build --lib $PWD/build/B/lib.so     # about 2 minutes
#   device: OUT=... bash benchmarks/results/h200-2026-12-03-large-m/run_call1.sh  (carry build/B/lib.so)
# About 5 minutes. A variant runs m as chunks of its own token count (launch_fold), so fold2x128t
# serves 384 tokens as three chunks of 128, and fold2x192t (the library's plan there) as two of 192.
. "$(dirname "$0")/../../harness/call_preamble.sh"
ls -l build/B/lib.so || exit 1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
# the two new tiles (two blocks per SM, 1 consumer warpgroup, 160 and 192 tokens) against float64
new=fold1x160b2t,fold1x192b2t
logged check 150 python3 benchmarks/harness/gpu_kernels.py check --lib build/B/lib.so --variants "auto,$new" ||
    new=   # wrong or hung: time the others without them (ab_time.py drops the empty name)
grep -E "ALL CHECKS|FAILED" "$OUT/check.log"; grep -A 8 FAILED "$OUT/check.log" | head -10
AB=(python3 benchmarks/harness/ab_time.py --a build/B/lib.so --b build/B/lib.so --fastest)
# 1. more than 256 tokens, k <= 2048 (the heads furthest behind bf16 there: 0.85-0.92x)
logged ab_small_k 240 "${AB[@]}" --heads 262144x640,151936x1024,49152x576:64,128256x2048 \
    --m 288,384,512,768,1024,2048 \
    --b-variants fold2x128t,fold1x128b2t,fold2x160t,fold2x192t,fold2x224t,fold2x256t,$new
# 2. more than 256 tokens, the big heads (0.93-0.98x bf16)
logged ab_big_k 300 "${AB[@]}" --heads 128256x4096,248320x5120,262144x5376 --m 288,384,512,1024,2048 \
    --b-variants fold3x128,fold2x128t,fold1x128b2t,fold3x160,fold2x160t,fold2x192t,fold2x256t,$new
# 3. 33-48 tokens on the heads that keep the one-block tile: stored from the registers (the library
#    at k > 1024) or written by TMA; three loops, run 57 saw 1-4 % in one
for r in 1 2 3; do
    logged "ab48_$r" 120 "${AB[@]}" --heads 248320x5120,151936x5120,262144x5376 --m 36,40,48 \
        --b-variants fold3x48,fold3x48t
done
for f in ab_small_k ab_big_k ab48_1 ab48_2 ab48_3; do
    echo "== $f"; grep -vE "^# |^$" "$OUT/$f.log" | sed -E 's/ {2,}/ /g'
done
