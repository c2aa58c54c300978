#!/bin/bash
# H200 call 3: the fold kernel's new epilogue (one cvt per token pair, no per-element test inside
# n and m) and the next tile's scales requested during the last step: float64 tests of every fold
# tile, memcheck, gpu.py on the heads it should move, Nsight source counters; then the sm_80-only
# build's float64 tests at k = 5120 (the split-k probe fix).
set -uo pipefail
export PYTHONUNBUFFERED=1
start=$SECONDS
rm -f python/radiance/_C*.so
(RADIANCE_GPU=cuda RADIANCE_GPU_ARCHS=90 MAX_JOBS=12 python3 setup.py -q build_ext --inplace >"$OUT/build.log" 2>&1; echo $? >"$OUT/build.rc") &
python3 benchmarks/harness/gpu_kernels.py build --log "$OUT/nvcc.log" >/dev/null || { tail -30 "$OUT/nvcc.log"; exit 1; }
wait
echo "builds done rc=$(cat "$OUT/build.rc") ($((SECONDS - start)) s)"; [ "$(cat "$OUT/build.rc")" = 0 ] || { grep -v ptxas "$OUT/build.log" | tail; exit 1; }
export PYTHONPATH=$PWD/python:$PWD/tests
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py -k "every_tile or every_fold_tile or hand_made or any_m or matches_float64" >"$OUT/test.log" 2>&1
echo "fold tests rc=$? ($((SECONDS - start)) s) :: $(tail -1 "$OUT/test.log")"; grep -E "^FAILED" "$OUT/test.log" | head -5
timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py \
    -k "every_fold_tile and (1000 or 700 or 300)" >"$OUT/memcheck.log" 2>&1
echo "memcheck rc=$? :: $(grep -E 'ERROR SUMMARY|passed|failed' "$OUT/memcheck.log" | tail -2 | tr '\n' ' ')"
timeout 150 python3 benchmarks/gpu.py --heads 262144x640,151936x1024,49152x576,248320x5120 --m 64,128,256,512,1024,2048 \
    --round-budget 0.1 --out "$OUT" >"$OUT/bench.log" 2>&1
echo "gpu.py rc=$? ($((SECONDS - start)) s)"; grep -E "^ +[0-9]+ |^## |worst" "$OUT/bench.log" | head -40
timeout 100 ncu --clock-control none -k "regex:apply_wgmma_fold" --launch-count 1 --import-source yes \
    --section SourceCounters --section WarpStateStats --section SpeedOfLight -o "$OUT/src" \
    python3 benchmarks/harness/gpu_kernels.py profile --variants 2048:auto:262144x640 >"$OUT/ncu_src_run.log" 2>&1
echo "ncu rc=$? ($((SECONDS - start)) s)"
ncu -i "$OUT/src.ncu-rep" --page source --csv --print-source sass >"$OUT/src_sass.csv" 2>"$OUT/src_err.txt"
ncu -i "$OUT/src.ncu-rep" --page details --print-units base >"$OUT/src_details.txt" 2>&1
grep -E "Duration|Compute \(SM\) Throughput" "$OUT/src_details.txt" | head -3
rm -f python/radiance/_C*.so
RADIANCE_GPU=cuda RADIANCE_GPU_ARCHS=80 MAX_JOBS=16 timeout 100 python3 setup.py -q build_ext --inplace >"$OUT/build80.log" 2>&1
echo "sm_80 build rc=$? ($((SECONDS - start)) s)"
timeout 60 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py -k "matches_float64 and 5120 and not every" >"$OUT/test80_gpu.log" 2>&1
echo "sm_80 build on the H200, float64 at k = 5120 rc=$? ($((SECONDS - start)) s) :: $(tail -1 "$OUT/test80_gpu.log")"
grep -E "^FAILED" "$OUT/test80_gpu.log" | head -5
