#!/usr/bin/env bash
# Run 86, prepared in the twenty-second session (2026-12-05; docs/PERF_LOG.md, twenty-seventh
# round): the folding kernel's tiles of 128-256 tokens in cluster pairs that share each activation
# box by TMA multicast (fold2x128tm, fold2x192tm, fold2x256tm, all written by TMA), each beside
# the same tile without clusters. A tile reads its token chunk's activations from L2 once per 128 rows (86 %
# of the bytes it reads there at k = 5376, 192 tokens); a pair reads them once per 256 rows. Worth
# running where run 85 (run_call.sh) finds the long calls held by the power limit: fewer bytes
# from L2 per flop is fewer joules per flop. B = the benchmark build of the tree that adds them
# (CALLS.md: build and carry .carry/b_lib.tar.xz).
# 1. gpu_kernels.py check of the three against float64 (poisoned outputs, odd row blocks);
# 2. two A/B loops on five heads: at 128 tokens the 128-token tile, at 192-2048 the 192- and
#    256-token tiles, each beside its twin without clusters, and the plan (auto).
# Taking rule: a pair 3 % faster than its twin in both loops on a head, from 384 tokens, goes to
# the planner where it wins; else the variants and CLUSTER are deleted as after run 54.
# CALL_BUDGET (default 585): the seconds it may take; each A/B loop runs where 170 s are left.
. "$(dirname "$0")/../../harness/call_preamble.sh"
tar -xJf .carry/b_lib.tar.xz || exit 1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv >"$OUT/gpu86.txt"
pairs=fold2x128tm,fold2x192tm,fold2x256tm
logged check86 200 python3 benchmarks/harness/gpu_kernels.py check --lib build/B/lib.so --variants auto,$pairs
tail -3 "$OUT/check86.log"
heads=262144x5376,248320x5120,151936x5120,128256x4096,262144x640
budget=${CALL_BUDGET:-585}
for r in 1 2; do
    if [ $((SECONDS - call_started + 170)) -le "$budget" ]; then
        logged "ab86_${r}a" 60 python3 benchmarks/harness/ab_time.py --a build/B/lib.so --b build/B/lib.so \
            --heads $heads --m 128 --b-variants fold2x128t,fold2x128tm
        logged "ab86_${r}b" 110 python3 benchmarks/harness/ab_time.py --a build/B/lib.so --b build/B/lib.so \
            --heads $heads --m 192,256,384,512,2048 --b-variants fold2x192t,fold2x192tm,fold2x256t,fold2x256tm
    fi
done
for f in "$OUT"/ab86_*.log; do echo "== $f"; grep -vE "^# |^$" "$f" | sed -E 's/ {2,}/ /g'; done
