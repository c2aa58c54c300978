#!/usr/bin/env bash
# Twenty-fifth session, call 3: what the fix of call 2 costs, and whether it holds beyond groups of
# 256. Carries: .carry/c_lib.tar.xz (C: run 89's benchmark build), .carry/d_lib.tar.xz (D: C with
# the split-k pair's remote arrival released at cluster scope), .carry/d_C.abi3.so.xz (the library
# with D).
# 1. D against C at 9-16 tokens, where every head of gpu.py runs split k (ab_d.log);
# 2. split_k_repro.py in 6 processes at once on the library with D, every split-k case (stress_d).
. "$(dirname "$0")/../../harness/call_preamble.sh"
profile=benchmarks/results/h200-2026-12-06-profile
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
for v in c d; do tar -xJf .carry/${v}_lib.tar.xz || exit 1; done
logged ab_d 90 python3 benchmarks/harness/ab_time.py --a build/C/lib.so --b build/D/lib.so \
    --heads 248320x5120,262144x5376,128256x4096,151936x1024,262144x640 --m 9,12,16
tail -40 "$OUT/ab_d.log"
xz -dc .carry/d_C.abi3.so.xz >python/radiance/_C.abi3.so
cases=("16,1024,256" "16,2048,128" "16,768,128" "9,1024,256" "13,5376,128" "16,4096,128")
for p in 0 1 2 3 4 5; do
    OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 timeout 120 python3 $profile/split_k_repro.py --repeat 0 --fresh 40 \
        --tag "d$p" --cases "${cases[$p]}" >"$OUT/stress_d$p.log" 2>&1 &
done
wait
cat "$OUT"/stress_d?.log >"$OUT/stress_d.log"; rm -f "$OUT"/stress_d?.log
echo "stress d: $(grep -c ' bad of ' "$OUT/stress_d.log") failing of $(grep -c ' seed ' "$OUT/stress_d.log") calls"
grep -E " seed " "$OUT/stress_d.log" | sed 's/ seed .*: / /' | cut -c1-40 | sort | uniq -c
