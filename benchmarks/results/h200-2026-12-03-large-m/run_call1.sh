#!/usr/bin/env bash
# Run 58 (prepared 2026-12-03, ninth session, on the CPU machine; see CALLS.md): which tile serves
# more than 256 tokens best on each head, whether the one-block 48-token tile should be written by
# TMA at every k, and whether whole super-steps pay in the stream kernels at 3-8 tokens. The
# benchmark build of this tree, made on the CPU machine and carried:
#   python3 benchmarks/harness/gpu_kernels.py build --lib $PWD/build/B/lib.so     # about 2 minutes
#   device: OUT=... bash benchmarks/results/h200-2026-12-03-large-m/run_call1.sh  (carry build/B/lib.so)
# About 6 minutes. A variant runs m as chunks of its own token count (launch_fold), so fold2x128t
# serves 384 tokens as three chunks of 128, and fold2x192t (the library's plan there) as two of 192.
. "$(dirname "$0")/../../harness/call_preamble.sh"
ls -l build/B/lib.so || exit 1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
# the new variants against float64: the two tiles (two blocks per SM, 1 consumer warpgroup, 160 and
# 192 tokens) and the stream kernels with whole super-steps at 3-8 tokens; where a check fails or
# hangs, the timings below go on without those variants (ab_time.py drops the empty name)
new=fold1x160b2t,fold1x192b2t
logged check_fold 150 python3 benchmarks/harness/gpu_kernels.py check --lib build/B/lib.so --variants "auto,$new" ||
    new=
few=streamskipwhole,streamxswhole
logged check_stream 150 python3 benchmarks/harness/gpu_kernels.py check --lib build/B/lib.so --variants "$few" ||
    few=
for f in check_fold check_stream; do
    grep -E "ALL CHECKS|FAILED" "$OUT/$f.log"; grep -A 8 FAILED "$OUT/$f.log" | head -10
done
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
# 4. 2-8 tokens on the heads with group 128 and k % 512 == 0: the stream kernels with whole 4-step
#    super-steps (as the library's 1-2 tokens since run 37) against the library's plan (3-4 tokens:
#    loads skipped past m; 5-8: the activations in shared memory, 16 warps); twice
for r in 1 2; do
    logged "ab_few_$r" 150 "${AB[@]}" --heads 248320x5120,151936x5120,128256x4096,128256x2048,151936x1024 \
        --m 2,3,4,5,6,8 --b-variants "streamwhole,streamskipx,$few"
done
for f in ab_small_k ab_big_k ab48_1 ab48_2 ab48_3 ab_few_1 ab_few_2; do
    echo "== $f"; grep -vE "^# |^$" "$OUT/$f.log" | sed -E 's/ {2,}/ /g'
done
