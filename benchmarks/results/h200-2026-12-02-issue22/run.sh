#!/bin/bash
# call 1 of issue 22 (helper gpu3): link the prebuilt objects, the fold tests, a short benchmark
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/python:$PWD/tests"
start=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site dev/*.whl \
    && export PYTHONPATH="$PYTHONPATH:/tmp/site"
REAL_NVCC=$(command -v nvcc); export REAL_NVCC
export PREBUILT="$PWD/dev/obj" CUDA_PATH=$(dirname "$(dirname "$(readlink -f "$REAL_NVCC")")")
mkdir -p /tmp/shim/bin && cp dev/nvcc /tmp/shim/bin/nvcc && export CUDA_HOME=/tmp/shim
rm -f python/radiance/_C*.so
RADIANCE_GPU=cuda RADIANCE_GPU_ARCHS=90 python3 setup.py -q build_ext --inplace >"$OUT/build.log" 2>&1 \
    || { grep -v ptxas "$OUT/build.log" | tail -30; exit 1; }
echo "built $((SECONDS - start)) s :: $(python3 -c 'import radiance; print(radiance.gpu_backend())')"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
timeout ${TEST_S:-170} python3 -m pytest -q -p no:cacheprovider --maxfail=15 tests/test_gpu.py \
    -k "${TESTS:-every_fold_tile or every_tile or hand_made or (matches_float64 and not fallback and not vector and not shared)}" \
    >"$OUT/test.log" 2>&1
echo "tests rc=$? ($((SECONDS - start)) s) :: $(tail -1 "$OUT/test.log")"
grep -E "^(FAILED|E  )" "$OUT/test.log" | head -24
timeout ${MEMCHECK_S:-90} compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest -q -x -p no:cacheprovider \
    tests/test_gpu.py -k "${MEMCHECK:-every_fold_tile and (13 or 300)}" >"$OUT/memcheck.log" 2>&1
echo "memcheck rc=$? ($((SECONDS - start)) s) :: $(grep -E 'ERROR SUMMARY|passed|failed' "$OUT/memcheck.log" | tail -2 | tr '\n' ' ')"
timeout ${BENCH_S:-200} python3 benchmarks/gpu.py --heads "${HEADS:-248320x5120,151936x1024,49152x576}" --round-budget ${ROUND_S:-0.25} \
    --m "${MS:-16,64,128,256,384,1024,2048}" --out "$OUT" >"$OUT/bench.log" 2>&1
echo "bench rc=$? ($((SECONDS - start)) s)"
grep -v "^#\|^plot" "$OUT/bench.log" | tail -130
