#!/usr/bin/env bash
# Run 72 (2026-12-04, fifteenth session, issue 22), benchmark build of this tree (B; its planner as
# before, so B's plan is main's):
# - the new variants against float64 first (split256: whole chunks of 256 as one call and the rest
#   as another; mma3b6t2 / mma2b8t2 / mma3b4t2: the register pipe with 16 tokens a warp);
# - more than 256 tokens, the library's equal chunks in one launch (B) against split256, all
#   seven heads of issue 22 and 128256 x 2048, two loops;
# - 9-16 tokens with groups under 128, the library's 16-token folding tile (B) against the register
#   pipe over two 8-token chunks (mma3b6, mma2b8) and with 16 tokens a warp, two loops.
#   python3 benchmarks/harness/gpu_kernels.py build --lib $PWD/build/B/lib.so
#   tar -cf - build/B/lib.so | xz -T2 -3 > .carry/b_lib.tar.xz
#   device: OUT=... bash benchmarks/results/h200-2026-12-04-split/run_call1.sh  (carry .carry/b_lib.tar.xz)
# The three register-pipe variants lost and were deleted from variants.def after this run (docs/PERF_LOG.md,
# twentieth round); to run this again, drop them from the two lists below.
. "$(dirname "$0")/../../harness/call_preamble.sh"
tar -xJf .carry/b_lib.tar.xz || exit 1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv >"$OUT/gpu.txt"
logged check 200 python3 benchmarks/harness/gpu_kernels.py check --lib build/B/lib.so \
    --variants auto,split256,mma3b6,mma2b8,mma3b6t2,mma2b8t2,mma3b4t2
tail -3 "$OUT/check.log"
T=(python3 benchmarks/harness/ab_time.py --a build/B/lib.so --b build/B/lib.so)
for r in 1 2; do
    logged "split_$r" 150 "${T[@]}" --heads 248320x5120,262144x5376,151936x5120,128256x4096,128256x2048,151936x1024,262144x640,49152x576 \
        --m 288,320,352,384,416,448,480,544,640,896 --b-variants split256
    logged "pipe16_$r" 90 "${T[@]}" \
        --heads 49152x576:64,151936x1024:64,128256x2048:64,128256x4096:64,49152x576:32,128256x2048:32 \
        --m 9,12,16 --b-variants mma3b6,mma2b8,mma3b6t2,mma2b8t2,mma3b4t2
done
for f in split pipe16; do for r in 1 2; do echo "== ${f}_$r"; grep -vE "^# |^$" "$OUT/${f}_$r.log" | sed -E 's/ {2,}/ /g'; done; done
