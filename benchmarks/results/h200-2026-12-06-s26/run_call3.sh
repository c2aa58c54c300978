#!/usr/bin/env bash
# Twenty-sixth session, call 3 (docs/PERF_LOG.md, thirty-first round): run 90, split k's halves one
# step apart where k / 256 is odd (k = 5376: 20 and 22 steps, whole 2-step super-steps in each,
# block 1's rows read from 128-byte boundaries) against the tail kernel with the scales' windows
# and the biased codes. Carry .carry/o_lib.tar.xz (O: main's benchmark build, build/B/lib.so),
# .carry/n_lib.tar.xz (N: run 90's, build/N/lib.so; auto takes block 1's half the longer,
# splitkshift0 block 0's), python/radiance/_C.abi3.so (the library with run 90) and .carry/whl:
# 1. the float64 error of N's three at 9-16 tokens (err.log);
# 2. O against N in two timing loops at 9, 12 and 16 tokens (ab_*.log);
# 3. the library's split-k tests in 8 processes, memcheck of a k = 5376 case (t/);
# 4. Nsight Compute's source counters of N's plan at 16 tokens on 262144 x 5376 (src_*).
. "$(dirname "$0")/../../harness/call_preamble.sh"
tar -xJf .carry/o_lib.tar.xz && tar -xJf .carry/n_lib.tar.xz || exit 1
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
logged err 120 python3 benchmarks/harness/variant_error.py --lib build/N/lib.so \
    --variants auto,splitkshift0,splitkshift1 --shapes 4099x5376,17011x5376,1001x5376 --m 9,12,16
tail -24 "$OUT/err.log"
for loop in 1 2; do
    logged ab_$loop 150 python3 benchmarks/harness/ab_time.py --a build/B/lib.so --b build/N/lib.so \
        --heads 262144x5376,151936x5376,248320x5120 --m 9,12,16 --b-variants splitkshift0
done
tail -16 "$OUT/ab_1.log"; tail -16 "$OUT/ab_2.log"
mkdir -p "$OUT/t"
OUT=$OUT/t TESTS_K="split_k or persistent_stream or stream_plans" bash benchmarks/harness/library_call.sh tests \
    "fine_ring and 5376-second_unit-16" | tail -4
timeout 100 ncu --clock-control none --profile-from-start off -k regex:split_k --section SourceCounters \
    --section WarpStateStats --section SpeedOfLight -o "$OUT/src_16" python3 benchmarks/harness/gpu_kernels.py \
    profile --lib build/N/lib.so --variants 16:auto:262144x5376 >"$OUT/src_16_run.log" 2>&1
echo "ncu rc=$?"
ncu -i "$OUT/src_16.ncu-rep" --page source --csv --print-source sass >"$OUT/src_16_sass.csv" 2>&1
