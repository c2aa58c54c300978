#!/usr/bin/env bash
# device call 5 (2026-12-03): the rule taken from call 4 (group 32 from k = 2048: 2 steps ahead, 8 blocks
# per SM; the shape with registers unbounded deleted): B's automatic plan against main (A) on the
# group-32 heads, the library built fresh, the register-pipe tests and their memcheck.
#   OUT=... bash benchmarks/results/h200-2026-12-03-regpipe/run_call5.sh
set -uo pipefail
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/python:$PWD/tests"
. benchmarks/harness/out_files.sh
trap bundle_out EXIT
H=benchmarks/harness/gpu_kernels.py
start=$SECONDS
rm -rf /tmp/A build && mkdir -p /tmp/A && tar -xf .carry/main.tar -C /tmp/A
rm -f python/radiance/_C*.so
(RADIANCE_GPU=cuda RADIANCE_GPU_ARCHS=90 MAX_JOBS=8 python3 setup.py -q build_ext --inplace >"$OUT/build.log" 2>&1; echo $? >/tmp/build.rc) &
python3 /tmp/A/$H build --lib /tmp/A/lib.so --log /tmp/nvcc_A.log >/dev/null &
python3 $H build --lib "$PWD/build/B/lib.so" --log /tmp/nvcc_B.log >/dev/null || { tail -30 /tmp/nvcc_B.log; exit 1; }
wait
echo "builds ($((SECONDS - start)) s) setup.py rc=$(cat /tmp/build.rc)"
timeout 100 python3 $H check --lib build/B/lib.so --variants "auto,mma1x1,mma2b8" >"$OUT/check.log" 2>&1
echo "check rc=$? ($((SECONDS - start)) s) :: $(grep -E 'ALL CHECKS|FAILED' "$OUT/check.log")"
AB="timeout 100 python3 benchmarks/harness/ab_time.py --a /tmp/A/lib.so --b build/B/lib.so"
for r in 1; do
    $AB --heads 128256x4096:32,248320x5120:32,151936x1024:32,49152x576:32,128256x2048:32,128256x2048:64 \
        --m 1,8 --b-variants mma2b8 >"$OUT/ab$r.log" 2>&1
    echo "ab$r rc=$? ($((SECONDS - start)) s)"
done
for f in ab1; do echo "== $f"; grep -E "^##|^ +[0-9]+ " "$OUT/$f.log"; done
timeout 120 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py -k "register_pipe or matches_float64 and (1376 or 576)" >"$OUT/test.log" 2>&1
echo "tests rc=$? ($((SECONDS - start)) s) :: $(tail -1 "$OUT/test.log")"; grep -E "^FAILED|^E  " "$OUT/test.log" | head -12
RADIANCE_TEST_NO_PROFILER=1 timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest -q \
    -p no:cacheprovider tests/test_gpu.py -k "register_pipe and (2080-32 or 4096-32)" >"$OUT/memcheck.log" 2>&1
echo "memcheck rc=$? ($((SECONDS - start)) s) :: $(grep -E 'ERROR SUMMARY|passed|failed' "$OUT/memcheck.log" | tail -2 | tr '\n' ' ')"
