#!/usr/bin/env bash
# Run 79 (2026-12-04, seventeenth session, issue 22): the stream kernels' rings in finer slots. B =
# the benchmark build of this tree (the library's kernels unchanged: their SASS is main's), with the
# variants of run 79 (variants.def: 2-step super-steps in 3 or 4 slots for split k at 9-16 tokens
# and the shared-activation kernel at 6-8; 3 slots of 4 steps or 4-6 of 2 for the one-unit kernel
# of 1-5 tokens). The new variants against float64 first, then B's plan against them in one timing
# loop per table, twice (A = B: the plan is unchanged); the second loop as far as the call's 600 s allow.
#   python3 benchmarks/harness/gpu_kernels.py build --lib $PWD/build/B/lib.so
#   tar -cf - build/B/lib.so | xz -T2 -3 > .carry/b_lib.tar.xz
#   device: bash benchmarks/results/h200-2026-12-04-ring-slots/run_call1.sh  (carry .carry/b_lib.tar.xz)
. "$(dirname "$0")/../../harness/call_preamble.sh"
tar -xJf .carry/b_lib.tar.xz || exit 1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv >"$OUT/gpu.txt"
NEW=streamsplitk2s3,streamsplitk2s4,streamxs2s4w,streamxs2s4t,streamxs2s3t,streamskip4s3w,streamskip4s3t,streamskip2s4w,streamskip2s6w,streamskip2s6t
logged check 200 python3 benchmarks/harness/gpu_kernels.py check --lib build/B/lib.so --variants "auto,streamsplitk,$NEW"
tail -3 "$OUT/check.log"
T=(python3 benchmarks/harness/ab_time.py --a build/B/lib.so --b build/B/lib.so)
HEADS=248320x5120,262144x5376,151936x5120,128256x4096,151936x1024,262144x640
for r in 1 2; do
    logged "ab_split_$r" 100 "${T[@]}" --heads $HEADS --m 9,12,16 --b-variants streamsplitk,streamsplitk2s3,streamsplitk2s4
    logged "ab_xs_$r" 60 "${T[@]}" --heads $HEADS --m 6,8 --b-variants streamxs2s4w,streamxs2s4t,streamxs2s3t
    logged "ab_one_$r" 90 "${T[@]}" --heads $HEADS --m 1,2,4,5 \
        --b-variants streamskip4s3w,streamskip4s3t,streamskip2s4w,streamskip2s6w,streamskip2s6t
done
for f in ab_split ab_xs ab_one; do for r in 1 2; do echo "== ${f}_$r"; grep -vE "^# |^$" "$OUT/${f}_$r.log" | sed -E 's/ {2,}/ /g'; done; done
