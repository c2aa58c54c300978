#!/bin/bash
# H200 call 2 (2026-12-02, third session): the sm_80-only build on the H200 after the split-k
# probe fix (every M of test_apply_gpu_matches_float64 at k = 5120 must write its outputs), and
# Nsight Compute on the worst cells of issue 22 (the benchmark build, sm_90a).
set -uo pipefail
export PYTHONUNBUFFERED=1
start=$SECONDS
( rm -f python/radiance/_C*.so
  RADIANCE_GPU=cuda RADIANCE_GPU_ARCHS=80 MAX_JOBS=8 python3 setup.py -q build_ext --inplace >"$OUT/build80.log" 2>&1
  echo "sm_80 build rc=$? ($((SECONDS - start)) s)"
  export PYTHONPATH=$PWD/python:$PWD/tests
  timeout 120 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py -k "matches_float64 or split_k or shared_x" >"$OUT/test80_gpu.log" 2>&1
  echo "sm_80 build on the H200, test_gpu float64/split_k/shared_x rc=$? ($((SECONDS - start)) s) :: $(tail -1 "$OUT/test80_gpu.log")"
  grep -E "^FAILED" "$OUT/test80_gpu.log" | head -5 ) > "$OUT/sm80.txt" 2>&1 &
KERNELS=apply timeout 480 bash benchmarks/harness/ncu_profile.sh \
    2048:auto:262144x640,2048:auto:248320x5120,256:auto:151936x1024,128:auto:128256x4096,8:auto:248320x5120
echo "ncu done ($((SECONDS - start)) s)"
wait
cat "$OUT/sm80.txt"
