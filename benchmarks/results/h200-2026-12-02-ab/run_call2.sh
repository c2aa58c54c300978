# device call 2 (2026-12-02, fourth session): the library with the staggered start, the 48-token
# tile and the skipped dead half-step: float64 tests of every fold tile, memcheck, gpu.py on every
# head at all 19 token counts of issue 22
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
. benchmarks/harness/out_files.sh
trap bundle_out EXIT
start=$SECONDS
rm -f python/radiance/_C*.so
RADIANCE_GPU=cuda RADIANCE_GPU_ARCHS=90 MAX_JOBS=16 python3 setup.py -q build_ext --inplace >"$OUT/build.log" 2>&1
rc=$?; echo "build rc=$rc ($((SECONDS - start)) s)"; [ $rc = 0 ] || { grep -v ptxas "$OUT/build.log" | tail; exit 1; }
export PYTHONPATH=$PWD/python:$PWD/tests
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py -k "every_tile or every_fold_tile or hand_made or any_m or matches_float64" >"$OUT/test.log" 2>&1
echo "fold tests rc=$? ($((SECONDS - start)) s) :: $(tail -1 "$OUT/test.log")"; grep -E "^FAILED" "$OUT/test.log" | head -8
timeout 70 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py \
    -k "every_fold_tile and (1000 or 700 or 300 or 1312)" >"$OUT/memcheck.log" 2>&1
echo "memcheck rc=$? ($((SECONDS - start)) s) :: $(grep -E 'ERROR SUMMARY|passed|failed' "$OUT/memcheck.log" | tail -2 | tr '\n' ' ')"
python3 -m pip install -q --no-index --no-deps .carry/whl/humming_kernels-*.whl 2>&1 | tail -1
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
  timeout $((575 - (SECONDS - start))) python3 benchmarks/gpu.py --round-budget 0.07 --out "$OUT/g"; } >"$OUT/bench.log" 2>&1
echo "gpu.py rc=$? ($((SECONDS - start)) s)"; grep -iE "worst" -A 12 "$OUT/bench.log" | head -30
