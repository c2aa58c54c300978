#!/usr/bin/env bash
# Run 72, the rule taken: A = run_call1.sh's build (main's planner: equal chunks in one launch) against
# B = this tree's benchmark build (fold_split_tokens), the heads of k >= 5120 at token counts the rule
# cuts (352-992, 1150) and some it does not (384, 1000), and 128256 x 4096, which it leaves alone; two
# loops. Then benchmarks/gpu.py on the library of call 2 (whose token counts the rule leaves alone).
#   tar -cf - build/A/lib.so build/B/lib.so | xz -T2 -3 > .carry/ab_libs.tar.xz
#   device: OUT=... bash benchmarks/results/h200-2026-12-04-split/run_call3.sh
#   (carry .carry/ab_libs.tar.xz, python/radiance/_C.abi3.so, .carry/whl)
. "$(dirname "$0")/../../harness/call_preamble.sh"
tar -xJf .carry/ab_libs.tar.xz || exit 1
T=(python3 benchmarks/harness/ab_time.py --a build/A/lib.so --b build/B/lib.so)
for r in 1 2; do
    logged "ab_split_$r" 150 "${T[@]}" --heads 248320x5120,262144x5376,151936x5120 \
        --m 352,384,400,416,464,480,608,640,700,736,928,992,1000,1150
    logged "ab_same_$r" 60 "${T[@]}" --heads 128256x4096 --m 416,640
done
for f in ab_split ab_same; do for r in 1 2; do echo "== ${f}_$r"; grep -vE "^# |^$" "$OUT/${f}_$r.log" | sed -E 's/ {2,}/ /g'; done; done
site=$(mktemp -d)
python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" .carry/whl/humming_kernels-*.whl || exit 1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv >"$OUT/bench_gpu.txt"
PYTHONPATH="$PWD/python:$site:$PWD/tests" logged bench $((590 - (SECONDS - call_started))) python3 benchmarks/gpu.py \
    --round-budget 0.07 --out "$OUT"
sed -n '/worst cell/,$p' "$OUT/bench.log"
