#!/usr/bin/env bash
# Run 63 (2026-12-03, eleventh session): the scales in the ring. Run 62's accident (the persistent
# variant loaded its first unit's scales for every later one, all L1 hits, and ran 2-9 % faster at
# 1-6 tokens) says the scale loads weigh. Here each super-step's scales of a warp's 16 rows (8
# bytes a row for groups of 128, 4 for 256) are copied by cp.async into the ring slot beside the
# weights, as far ahead, and read from shared memory (streamskipwholesr at 1-5 tokens,
# streamxswholesr at 6-8; whole super-steps only), against the library's plan of this tree.
#   python3 benchmarks/harness/gpu_kernels.py build --lib $PWD/build/B/lib.so
#   device: OUT=... bash benchmarks/results/h200-2026-12-03-chain/run_call5.sh  (carry build/B/lib.so)
. "$(dirname "$0")/../../harness/call_preamble.sh"
ls -l build/B/lib.so || exit 1
logged check 150 python3 benchmarks/harness/gpu_kernels.py check --lib build/B/lib.so \
    --variants auto,streamskipwhole,streamskipwholesr,streamxswhole,streamxswholesr
grep -E "ALL CHECKS|FAILED" "$OUT/check.log"; grep -A 8 FAILED "$OUT/check.log" | head -10
AB=(python3 benchmarks/harness/ab_time.py --a build/B/lib.so --b build/B/lib.so --fastest)
for r in 1 2; do
    logged "ab_sr_$r" 120 "${AB[@]}" --m 1,2,4,5,6,8 \
        --b-variants streamskipwhole,streamskipwholesr,streamxswhole,streamxswholesr,streamxstail \
        --heads 248320x5120,151936x5120,128256x4096,128256x2048,151936x1024
done
for f in ab_sr_1 ab_sr_2; do echo "== $f"; grep -vE "^# |^$" "$OUT/$f.log" | sed -E 's/ {2,}/ /g'; done
