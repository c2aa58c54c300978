#!/usr/bin/env bash
# Run 79, second call: the planner takes split k in 2-step super-steps in 3 slots at 9-16 tokens
# where 16 warps' rings of 4-step slots do not fit (k > 5296 on an H200, groups of 128). B = the
# benchmark build of this tree; its plan ("auto") against the wgmma pipe kernel it replaces
# (wgquad16) and the other split-k rings, on heads of k = 5376 (Gemma 3 27B), 5632 (halves of 22
# whole 2-step super-steps) and 7168 (DeepSeek V3, Kimi K2: 129280 rows), in one timing loop per
# table, twice, after the float64 check of the new plan and variants.
#   python3 benchmarks/harness/gpu_kernels.py build --lib $PWD/build/B/lib.so
#   tar -cf - build/B/lib.so | xz -T2 -3 > .carry/b_lib.tar.xz
#   device: bash benchmarks/results/h200-2026-12-04-ring-slots/run_call2.sh  (carry .carry/b_lib.tar.xz)
. "$(dirname "$0")/../../harness/call_preamble.sh"
tar -xJf .carry/b_lib.tar.xz || exit 1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv >"$OUT/gpu.txt"
logged check 200 python3 benchmarks/harness/gpu_kernels.py check --lib build/B/lib.so \
    --variants auto,streamsplitk,streamsplitk2s3,streamsplitk2s4,wgquad16
tail -3 "$OUT/check.log"
T=(python3 benchmarks/harness/ab_time.py --a build/B/lib.so --b build/B/lib.so)
for r in 1 2; do
    logged "ab_fine_$r" 120 "${T[@]}" --heads 262144x5376,262144x5632,129280x7168,151936x5376 --m 9,12,16 \
        --b-variants wgquad16,streamsplitk2s3,streamsplitk2s4
done
for r in 1 2; do echo "== ab_fine_$r"; grep -vE "^# |^$" "$OUT/ab_fine_$r.log" | sed -E 's/ {2,}/ /g'; done
