#!/usr/bin/env bash
# Run 84, prepared in the twenty-first session (2026-12-05; docs/PERF_LOG.md, twenty-sixth round):
# the one-unit stream kernel of 1-8 tokens with run 81's biased codes (streamskipwholeb,
# streamskipwholesrb, streamskiptailb: the library's kernels without pairs, whole super-steps
# without / with the scales in the ring, and all but the last), each block's table of -24 sum x
# made from the activations in global memory. Their loops, a 4-step super-step of a warp: 536 /
# 551 / 555 instructions against the library's 607 / 604 / 635 (cuobjdump, sm_90a). B = the
# benchmark build of the tree that adds them (CALLS.md: build and carry .carry/b_lib.tar.xz).
# 1. gpu_kernels.py check of the six kernels against float64;
# 2. variant_error.py at 1 and 4 tokens (the biased codes' rounding against docs/FORMAT.md);
# 3. A/B in one timing loop per table at 1, 2 and 4 tokens on five heads, twice: each b variant
#    beside the same kernel without the biased codes, and the plan (auto: with pairs over halves
#    of k where stream_pair_block0 takes them, so compare a b variant with its twin first).
# Where the H200 gives the b variants 3 % in both loops on a head, run 81 on the H200
# (run_call2.sh) says whether split k should take them too; the library change, its tests and
# docs/FORMAT.md's bound for the biased sums would follow.
# CALL_BUDGET (default 585): the seconds it may take; each A/B loop runs where 150 s are left.
. "$(dirname "$0")/../../harness/call_preamble.sh"
tar -xJf .carry/b_lib.tar.xz || exit 1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv >"$OUT/gpu84.txt"
pairs=streamskipwhole,streamskipwholeb,streamskipwholesr,streamskipwholesrb,streamskiptail,streamskiptailb
logged check84 150 python3 benchmarks/harness/gpu_kernels.py check --lib build/B/lib.so --variants auto,$pairs
tail -3 "$OUT/check84.log"
logged error84 90 python3 benchmarks/harness/variant_error.py --lib build/B/lib.so --variants auto,$pairs --m 1,4
tail -1 "$OUT/error84.log"
budget=${CALL_BUDGET:-585}
for r in 1 2; do
    if [ $((SECONDS - call_started + 150)) -le "$budget" ]; then
        logged "ab84_$r" 150 python3 benchmarks/harness/ab_time.py --a build/B/lib.so --b build/B/lib.so \
            --heads 248320x5120,151936x5120,128256x4096,262144x5376,151936x1024 --m 1,2,4 --b-variants $pairs
    fi
done
for f in "$OUT"/ab84_*.log; do echo "== $f"; grep -vE "^# |^$" "$f" | sed -E 's/ {2,}/ /g'; done
