#!/usr/bin/env bash
# Twenty-fifth session, call 2 (carries as run_call1.sh's, less the benchmark builds):
# 1. benchmarks/gpu.py on the library with C (run 89) beside bf16, fp8 and Humming (b/);
# 2. split_k_repro.py in 6 processes at once on the library with C (fresh seeds only): the failure
#    of the twenty-fourth session came in a run of 8 test processes sharing the GPU, and one
#    process replaying it found none in call 1 (stress_c*); where one fails, the same on D.
. "$(dirname "$0")/../../harness/call_preamble.sh"
profile=benchmarks/results/h200-2026-12-06-profile
mkdir -p "$OUT/b"
OUT=$OUT/b bash benchmarks/harness/library_call.sh bench | tail -12
stress() {
    for p in 1 2 3 4 5 6; do
        OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 timeout 110 python3 $profile/split_k_repro.py --repeat 0 \
            --fresh 40 --tag "$1$p" >"$OUT/stress_$1$p.log" 2>&1 &
    done
    wait
    cat "$OUT"/stress_$1?.log >"$OUT/stress_$1.log"; rm -f "$OUT"/stress_$1?.log
    echo "stress $1: $(grep -c ' bad of ' "$OUT/stress_$1.log") failing calls, $(grep -c 'n [0-9]*: ok\|fresh seeds failed' "$OUT/stress_$1.log") case lines ($((SECONDS - call_started)) s)"
    grep -E "fresh seeds failed|bad of|Error" "$OUT/stress_$1.log" | sort | uniq -c | head -20
}
stress c
if grep -q " bad of " "$OUT/stress_c.log"; then
    xz -dc .carry/d_C.abi3.so.xz >python/radiance/_C.abi3.so
    stress d
fi
