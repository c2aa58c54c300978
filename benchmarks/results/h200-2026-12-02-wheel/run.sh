#!/bin/bash
# H200 call 1 (2026-12-02, third session): the CI wheel (issue 23) with the GPU tests and gpu.py,
# and, built from source beside it, an sm_80-only build whose WMMA/MFMA layer tests must skip.
set -uo pipefail
export PYTHONUNBUFFERED=1
start=$SECONDS
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
( rm -f python/radiance/_C*.so
  RADIANCE_GPU=cuda RADIANCE_GPU_ARCHS=80 MAX_JOBS=14 python3 setup.py -q build_ext --inplace >"$OUT/build80.log" 2>&1
  echo $? >"$OUT/build80.rc" ) &
site=$(mktemp -d)
python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" .carry/wheel/radiance-*.whl .carry/whl/humming_kernels-*.whl || exit 1
( export PYTHONPATH="$site:$PWD/tests"
  python3 -c 'import radiance; print(radiance.__file__, radiance.gpu_backend(), radiance.gpu_device_count())'
  timeout 300 python3 -m pytest -q -p no:cacheprovider -rfE tests/test_gpu.py tests/test_gpu_torch.py \
      tests/test_gpu_wmma.py tests/test_gpu_mfma.py tests/test_quantize_gpu.py tests/test_device_context.py \
      tests/test_torch_ops.py >"$OUT/test_gpu_wheel.log" 2>&1
  echo "GPU tests with the wheel rc=$? ($((SECONDS - start)) s) :: $(tail -1 "$OUT/test_gpu_wheel.log")"
  grep -E "^(FAILED|ERROR)" "$OUT/test_gpu_wheel.log" | head -20 )
wait
echo "sm_80 build rc=$(cat "$OUT/build80.rc") ($((SECONDS - start)) s)"; grep -v ptxas "$OUT/build80.log" | grep -iE "error|warning" | head -5
( export PYTHONPATH=$PWD/python:$PWD/tests
  python3 -c 'import radiance; print(radiance.__file__, radiance.gpu_backend())'
  timeout 60 python3 -m pytest -q -p no:cacheprovider -rs tests/test_gpu_wmma.py tests/test_gpu_mfma.py >"$OUT/test80.log" 2>&1
  echo "sm_80 build, wmma/mfma tests rc=$? :: $(tail -1 "$OUT/test80.log")"
  grep -E "^(FAILED|SKIPPED)" "$OUT/test80.log" | cut -c1-160 | sort | uniq -c | head -6
  timeout 60 python3 -m pytest -q -p no:cacheprovider -x tests/test_gpu.py -k "matches_float64 and 5120" >"$OUT/test80_gpu.log" 2>&1
  echo "sm_80 build, test_gpu subset rc=$? :: $(tail -1 "$OUT/test80_gpu.log")" )
( export PYTHONPATH="$site:$PWD/tests"
  { nvidia-smi; timeout $((570 - (SECONDS - start))) python3 benchmarks/gpu.py --round-budget 0.1 --out "$OUT"; } >"$OUT/bench.log" 2>&1
  echo "gpu.py with the wheel rc=$? ($((SECONDS - start)) s)"
  grep -v "^plot" "$OUT/bench.log" | grep -E "worst|^#|ceilings" | head -30 )
