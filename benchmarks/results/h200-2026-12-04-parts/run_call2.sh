#!/usr/bin/env bash
# Run 69, the before and after in one loop: A = fa43aa7's harness build (the library's tree before
# this round), B = this tree (the 96-token tile of two blocks per SM in four parts a step, and the
# tiles of 64 and 96 tokens of two blocks per SM taken where the fill does not fall, or, for k <=
# 1024, falls by no more than 15 %). Float64 check of B's plan first, then two timing loops at
# 48-128 tokens on every head of benchmarks/gpu.py.
#   git archive fa43aa7 | tar -x -C /tmp/A; (cd /tmp/A && python3 benchmarks/harness/gpu_kernels.py build --lib $PWD/build/A0/lib.so)
#   python3 benchmarks/harness/gpu_kernels.py build --lib $PWD/build/B/lib.so
#   tar -cf - build/A0/lib.so build/B/lib.so | xz -T2 -3 > .carry/ab_libs.tar.xz
#   device: OUT=... bash benchmarks/results/h200-2026-12-04-parts/run_call2.sh  (carry .carry/ab_libs.tar.xz)
. "$(dirname "$0")/../../harness/call_preamble.sh"
tar -xJf .carry/ab_libs.tar.xz || exit 1
logged check 200 python3 benchmarks/harness/gpu_kernels.py check --lib build/B/lib.so --variants auto
grep -E "ALL CHECKS|FAILED" "$OUT/check.log"; grep -A 8 FAILED "$OUT/check.log" | head -12
AB=(python3 benchmarks/harness/ab_time.py --a build/A0/lib.so --b build/B/lib.so)
for r in 1 2; do
    logged "ab_rule_$r" 150 "${AB[@]}" --m 48,56,64,72,80,96,128 \
        --heads 128256x4096,262144x640,262144x5376,248320x5120,151936x5120,151936x1024,49152x576
done
for f in ab_rule_1 ab_rule_2; do echo "== $f"; grep -vE "^# |^$" "$OUT/$f.log" | sed -E 's/ {2,}/ /g'; done
