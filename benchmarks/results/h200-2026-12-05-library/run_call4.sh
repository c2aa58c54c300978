#!/usr/bin/env bash
# Run 80 taken (the nineteenth session's fourth device call, 2026-12-05): split k at 9-16 tokens in
# 2-step super-steps in 3 ring slots with the scales in the ring, the library's plan from k = 4096
# to 5120 (hip/dispatch.h, kSplitKFineScalesMinK). Carry python/radiance/_C.abi3.so (setup.py of
# this tree), .carry/ab_libs.tar.xz (build/A/lib.so: the benchmark build of 1d9b91d, the plan before;
# build/B/lib.so: this tree's) and .carry/whl:
#   cp build/B/lib.so build/A/lib.so    # before the change
#   python3 benchmarks/harness/gpu_kernels.py build --lib $PWD/build/B/lib.so
#   tar -cf - build/A/lib.so build/B/lib.so | xz -T2 -3 > .carry/ab_libs.tar.xz
#   device: bash benchmarks/results/h200-2026-12-05-library/run_call4.sh
# 1. the library's tests of the split-k and persistent stream kernels (every plan of 9-16 tokens
#    against float64, which kernel ran read from the profiler), memcheck of two of the new ones;
# 2. gpu.py on the library (bench/);
# 3. A's plan against B's and the ring forced, at 9 and 16 tokens on heads of k = 1024 .. 6144,
#    twice where the time allows (the ring's float64 check at any k is call 2's).
. "$(dirname "$0")/../../harness/call_preamble.sh"
tar -xJf .carry/ab_libs.tar.xz || exit 1
ls python/radiance/_C*.so || exit 1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv >"$OUT/gpu.txt"
logged test 150 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py -k "split_k or persistent_stream"
tail -1 "$OUT/test.log"; grep -E "^FAILED|^E  " "$OUT/test.log" | head -12
RADIANCE_TEST_NO_PROFILER=1 logged memcheck 60 compute-sanitizer --tool memcheck --error-exitcode 9 \
    python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py -k "split_k_fine and partial and (4096 or 5120) and 13"
grep -E "ERROR SUMMARY|passed|failed" "$OUT/memcheck.log" | tail -2
OUT=$OUT/bench bash benchmarks/harness/library_call.sh bench
T=(python3 benchmarks/harness/ab_time.py --a build/A/lib.so --b build/B/lib.so)
heads=151936x1024,128256x2048,151936x3072,151936x3584,128256x4096,151936x4608,248320x5120,151936x6144
logged ab_1 110 "${T[@]}" --heads $heads --m 9,16 --b-variants streamsplitk2s3sr
# the rest only where the call's time allows (the session's device time ran short)
if [ $((SECONDS - call_started)) -lt 400 ]; then
    logged ab_2 110 "${T[@]}" --heads $heads --m 9,16 --b-variants streamsplitk2s3sr
fi
for f in "$OUT"/ab_*.log; do echo "== $f"; grep -vE "^# |^$" "$f" | sed -E 's/ {2,}/ /g'; done
