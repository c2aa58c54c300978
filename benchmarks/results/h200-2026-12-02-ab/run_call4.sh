# device call 4 (2026-12-02, fourth session): the tree to land (the dead half-step skipped, the
# 48-token tile; the staggered start removed) against main in one timing loop, its fold variants
# against float64, the library's fold tests and memcheck, then gpu.py on every head at all 19
# token counts of issue 22
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/python:$PWD/tests"
. benchmarks/harness/out_files.sh
trap bundle_out EXIT
H=benchmarks/harness/gpu_kernels.py
start=$SECONDS
rm -rf /tmp/A && mkdir -p /tmp/A && tar -xf .carry/head.tar -C /tmp/A
rm -f python/radiance/_C*.so
(RADIANCE_GPU=cuda RADIANCE_GPU_ARCHS=90 MAX_JOBS=10 python3 setup.py -q build_ext --inplace >"$OUT/build.log" 2>&1; echo $? >/tmp/build.rc) &
python3 /tmp/A/$H build --lib /tmp/A/lib.so --log /tmp/nvcc_A.log >/dev/null &
python3 $H build --lib "$PWD/build/B/lib.so" --log /tmp/nvcc_B.log >/dev/null || { tail -30 /tmp/nvcc_B.log; exit 1; }
wait
echo "builds ($((SECONDS - start)) s) setup.py rc=$(cat /tmp/build.rc)"
timeout 100 python3 $H check --lib build/B/lib.so --variants auto,fold3x16,fold3x32,fold3x48,fold3x64,fold3x96,fold3x128,fold3x160,fold2x192,fold2x224,fold2x256 >"$OUT/check.log" 2>&1
echo "check rc=$? ($((SECONDS - start)) s) :: $(grep -E 'ALL CHECKS|FAILED' "$OUT/check.log")"
grep -A 8 FAILED "$OUT/check.log" | head -10
A="python3 benchmarks/harness/ab_time.py --a /tmp/A/lib.so --b build/B/lib.so --round-budget 0.1"
for r in 1 2; do timeout 100 $A >"$OUT/ab$r.log" 2>&1; echo "ab$r rc=$? ($((SECONDS - start)) s)"; done
paste <(grep -E "^ +[0-9]+ " "$OUT/ab1.log" | awk '{print $1, $2, $3, $NF}') <(grep -E "^ +[0-9]+ " "$OUT/ab2.log" | awk '{print $NF}')
timeout 160 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py -k "every_tile or every_fold_tile or hand_made or any_m or matches_float64" >"$OUT/test.log" 2>&1
echo "fold tests rc=$? ($((SECONDS - start)) s) :: $(tail -1 "$OUT/test.log")"; grep -E "^FAILED" "$OUT/test.log" | head -8
timeout 40 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py \
    -k "every_fold_tile and (1000 or 700 or 300 or 1312 or 576)" >"$OUT/memcheck.log" 2>&1
echo "memcheck rc=$? ($((SECONDS - start)) s) :: $(grep -E 'ERROR SUMMARY|passed|failed' "$OUT/memcheck.log" | tail -2 | tr '\n' ' ')"
python3 -m pip install -q --no-index --no-deps .carry/whl/humming_kernels-*.whl 2>&1 | tail -1
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
  timeout $((550 - (SECONDS - start))) python3 benchmarks/gpu.py --round-budget 0.07 --out "$OUT/g"; } >"$OUT/bench.log" 2>&1
echo "gpu.py rc=$? ($((SECONDS - start)) s)"; grep -iE "worst" -A 9 "$OUT/bench.log" | tail -10
