# device call 5 (2026-12-02, fourth session): the GPU test files on the tree to land
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
timeout $((380 - (SECONDS - start))) python3 -m pytest -q -p no:cacheprovider -rfE tests/test_gpu.py tests/test_gpu_torch.py \
    tests/test_torch_ops.py tests/test_device_context.py tests/test_quantize_gpu.py tests/test_gpu_wmma.py tests/test_gpu_mfma.py >"$OUT/test_gpu.log" 2>&1
echo "GPU tests rc=$? ($((SECONDS - start)) s) :: $(tail -1 "$OUT/test_gpu.log")"; grep -E "^(FAILED|ERROR)" "$OUT/test_gpu.log" | head -10
