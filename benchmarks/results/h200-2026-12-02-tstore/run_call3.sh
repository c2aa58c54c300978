#!/usr/bin/env bash
# device call 3 (2026-12-02, fifth session): the tree with tiles written by TMA against main in one
# timing loop (every head, 48-2048 tokens), the candidate tiles at 12-160 tokens on a k = 2048 head
# and on SmolLM2's, every fold variant against float64, the library's fold and TMA-store tests and
# their memcheck, then gpu.py on every head at all 19 token counts of issue 22, Humming beside it.
#   OUT=... bash benchmarks/results/h200-2026-12-02-tstore/run_call3.sh   (A: .carry/main.tar)
set -uo pipefail
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/python:$PWD/tests"
. benchmarks/harness/out_files.sh
trap bundle_out EXIT
H=benchmarks/harness/gpu_kernels.py
start=$SECONDS
rm -rf /tmp/A && mkdir -p /tmp/A && tar -xf .carry/main.tar -C /tmp/A
rm -f python/radiance/_C*.so
(RADIANCE_GPU=cuda RADIANCE_GPU_ARCHS=90 MAX_JOBS=10 python3 setup.py -q build_ext --inplace >"$OUT/build.log" 2>&1; echo $? >/tmp/build.rc) &
python3 /tmp/A/$H build --lib /tmp/A/lib.so --log /tmp/nvcc_A.log >/dev/null &
python3 $H build --lib "$PWD/build/B/lib.so" --log /tmp/nvcc_B.log >/dev/null || { tail -30 /tmp/nvcc_B.log; exit 1; }
wait
echo "builds ($((SECONDS - start)) s) setup.py rc=$(cat /tmp/build.rc)"
FOLD=$(python3 -c "import sys; sys.path.insert(0, 'benchmarks/harness'); from gpu_kernels import VARIANTS; print(','.join(v for v in VARIANTS if v.startswith('fold')))")
timeout 120 python3 $H check --lib build/B/lib.so --variants "auto,$FOLD" >"$OUT/check.log" 2>&1
echo "check rc=$? ($((SECONDS - start)) s) :: $(grep -E 'ALL CHECKS|FAILED' "$OUT/check.log")"
grep -A 8 FAILED "$OUT/check.log" | head -10
A="python3 benchmarks/harness/ab_time.py --a /tmp/A/lib.so --b build/B/lib.so"
for r in 1 2; do
    timeout 100 $A --m 48,64,96,128,160,192,256,320,384,1024,2048 >"$OUT/ab$r.log" 2>&1
    echo "ab$r rc=$? ($((SECONDS - start)) s)"
    timeout 100 $A --heads 128256x2048,49152x576 --m 12,16,24,32,48,64,96,128,160 \
        --b-variants fold3x16t,fold3x32t,fold3x48t,fold3x64t,fold3x96t,fold3x128,fold2x128t,fold3x160,fold2x160t \
        >"$OUT/tiles$r.log" 2>&1
    echo "tiles$r rc=$? ($((SECONDS - start)) s)"
done
paste <(grep -E "^##|^ +[0-9]+ " "$OUT/ab1.log" | awk '{print $1, $2, $3, $4, $NF}') <(grep -E "^##|^ +[0-9]+ " "$OUT/ab2.log" | awk '{print $NF}')
cat "$OUT/tiles1.log"
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py \
    -k "tma_store or every_tile or every_fold_tile or hand_made or any_m or fallback" >"$OUT/test.log" 2>&1
echo "fold tests rc=$? ($((SECONDS - start)) s) :: $(tail -1 "$OUT/test.log")"; grep -E "^FAILED|^E  " "$OUT/test.log" | head -12
timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py \
    -k "tma_store and (700 or 40008-640)" >"$OUT/memcheck.log" 2>&1
echo "memcheck rc=$? ($((SECONDS - start)) s) :: $(grep -E 'ERROR SUMMARY|passed|failed' "$OUT/memcheck.log" | tail -2 | tr '\n' ' ')"
python3 -m pip install -q --no-index --no-deps .carry/whl/humming_kernels-*.whl 2>&1 | tail -1
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
  timeout $((580 - (SECONDS - start))) python3 benchmarks/gpu.py --round-budget 0.07 --out "$OUT/g"; } >"$OUT/bench.log" 2>&1
echo "gpu.py rc=$? ($((SECONDS - start)) s)"; grep -iE "worst" -A 9 "$OUT/bench.log" | tail -10
