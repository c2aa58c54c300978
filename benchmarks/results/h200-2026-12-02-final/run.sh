#!/bin/bash
# The final H200 call of 2026-12-02: build main for sm_90a, the GPU tests, a memcheck of the new
# kernels, then benchmarks/gpu.py.
set -uo pipefail
export PYTHONUNBUFFERED=1
start=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .carry/whl/*.whl || exit 1
# the library build of this tree for sm_90a, on the machine's nvcc (the CUDA wheel was still building)
rm -f python/radiance/_C*.so
RADIANCE_GPU=cuda RADIANCE_GPU_ARCHS=90a MAX_JOBS=16 python3 setup.py -q build_ext --inplace >"$OUT/build.log" 2>&1 \
    || { grep -v ptxas "$OUT/build.log" | tail -30; exit 1; }
echo "built $((SECONDS - start)) s"
export PYTHONPATH=$PWD/python:$PWD/tests:/tmp/site
python3 -c 'import radiance, sys; print(radiance.__file__, radiance.gpu_backend(), radiance.gpu_device_count())'
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
timeout 250 python3 -m pytest -q -p no:cacheprovider --maxfail=20 -rfE tests/test_gpu.py tests/test_gpu_torch.py \
    tests/test_gpu_wmma.py tests/test_gpu_mfma.py tests/test_quantize_gpu.py tests/test_device_context.py \
    >"$OUT/test_gpu.log" 2>&1
echo "GPU tests rc=$? ($((SECONDS - start)) s) :: $(tail -1 "$OUT/test_gpu.log")"
grep -E "^(FAILED|ERROR|E  )" "$OUT/test_gpu.log" | head -30
timeout 30 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest -q -x -p no:cacheprovider \
    tests/test_gpu_mfma.py -k "float64" --maxfail=1 >"$OUT/memcheck.log" 2>&1
echo "memcheck rc=$? ($((SECONDS - start)) s) :: $(grep -E 'ERROR SUMMARY|passed|failed' "$OUT/memcheck.log" | tail -2 | tr '\n' ' ')"
timeout 120 python3 benchmarks/gpu.py --round-budget 0.1 --m 1,4,8,16,64,128,256,384,1024,2048 --out "$OUT" >"$OUT/bench.log" 2>&1
echo "bench rc=$? ($((SECONDS - start)) s)"
grep -v "^plot" "$OUT/bench.log" | tail -150
