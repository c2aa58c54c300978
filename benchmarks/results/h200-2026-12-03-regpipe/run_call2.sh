#!/usr/bin/env bash
# device call 2 (2026-12-03): the tree to land (the register pipe's two shapes decided by plan_mma,
# the split-k kernel's CTA-scope release, the multicast variants deleted) against main at 7e0b93c
# (A = .carry/main.tar): the library built fresh by setup.py, every variant touched against float64,
# B's and A's automatic plans on the group-64 and group-32 heads at 1-8 tokens and the split-k
# heads at 9-16, then the whole tests/test_gpu.py and a memcheck of the register pipe and split-k.
#   OUT=... bash benchmarks/results/h200-2026-12-03-regpipe/run_call2.sh
set -uo pipefail
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/python:$PWD/tests"
. benchmarks/harness/out_files.sh
trap bundle_out EXIT
H=benchmarks/harness/gpu_kernels.py
start=$SECONDS
rm -rf /tmp/A build && mkdir -p /tmp/A && tar -xf .carry/main.tar -C /tmp/A
rm -f python/radiance/_C*.so
(RADIANCE_GPU=cuda RADIANCE_GPU_ARCHS=90 MAX_JOBS=10 python3 setup.py -q build_ext --inplace >"$OUT/build.log" 2>&1; echo $? >/tmp/build.rc) &
python3 /tmp/A/$H build --lib /tmp/A/lib.so --log /tmp/nvcc_A.log >/dev/null &
python3 $H build --lib "$PWD/build/B/lib.so" --log /tmp/nvcc_B.log >/dev/null || { tail -30 /tmp/nvcc_B.log; exit 1; }
wait
echo "builds ($((SECONDS - start)) s) setup.py rc=$(cat /tmp/build.rc)"
timeout 150 python3 $H check --lib build/B/lib.so \
    --variants "auto,mma1x1,mma3b6,mma2b8,streamsplitk,streamsplitk2c,fold3x96,fold3x160,fold2x256t" >"$OUT/check.log" 2>&1
echo "check rc=$? ($((SECONDS - start)) s) :: $(grep -E 'ALL CHECKS|FAILED' "$OUT/check.log")"
grep -A 8 FAILED "$OUT/check.log" | head -10
AB="timeout 100 python3 benchmarks/harness/ab_time.py --a /tmp/A/lib.so --b build/B/lib.so"
for r in 1 2; do
    $AB --heads 49152x576,49152x576:32,262144x640:64,151936x1024:32,128256x4096:64,128256x4096:32,248320x5120:64 \
        --m 1,2,4,8 >"$OUT/ab_mma$r.log" 2>&1
    echo "ab_mma$r rc=$? ($((SECONDS - start)) s)"
done
$AB --heads 248320x5120,151936x1024 --m 9,16 >"$OUT/ab_splitk.log" 2>&1
echo "ab_splitk rc=$? ($((SECONDS - start)) s)"
paste <(grep -E "^##|^ +[0-9]+ " "$OUT/ab_mma1.log" | awk '{print $1, $2, $3, $4, $NF}') <(grep -E "^##|^ +[0-9]+ " "$OUT/ab_mma2.log" | awk '{print $NF}')
grep -E "^##|^ +[0-9]+ " "$OUT/ab_splitk.log"
timeout 330 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py >"$OUT/test.log" 2>&1
echo "GPU tests rc=$? ($((SECONDS - start)) s) :: $(tail -1 "$OUT/test.log")"; grep -E "^FAILED|^E  " "$OUT/test.log" | head -12
RADIANCE_TEST_NO_PROFILER=1 timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest -q \
    -p no:cacheprovider tests/test_gpu.py -k "(register_pipe and (4160 or 576)) or (every_tile and (3001-5120-128-9-auto or 3001-5120-128-16-auto or 40001-640-128-12-auto))" >"$OUT/memcheck.log" 2>&1
echo "memcheck rc=$? ($((SECONDS - start)) s) :: $(grep -E 'ERROR SUMMARY|passed|failed' "$OUT/memcheck.log" | tail -2 | tr '\n' ' ')"
