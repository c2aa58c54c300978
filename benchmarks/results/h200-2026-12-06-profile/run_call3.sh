#!/usr/bin/env bash
# Twenty-fourth session, call 3. Carry .carry/{a,c,d}_lib.tar.xz, .carry/whl and
# python/radiance/_C.abi3.so (the library with C).
# 1. The split-k failure of call 2 (tests/test_gpu.py's persistent_stream_units[1024-256-16] on an
#    H100, seed 2494947757) taken apart by split_k_repro.py: its seed 6 times and 16 fresh seeds in
#    one process (repro_1.log), then 8 processes at once, as the tests run (repro_p*.log).
# 2. tests/test_gpu.py -k fold on the library with C, in 8 processes, and memcheck of the new fold
#    cases of 1-3 steps per tile and a last round cut along k (t/).
# 3. Run 89: the folding kernel's scales loaded straight into the registers the fragments read
#    (C; D: the same, two steps ahead for 2 consumer warpgroups) against A, the benchmark build
#    before (ab_c.log, ab_d.log).
. "$(dirname "$0")/../../harness/call_preamble.sh"
here=benchmarks/results/h200-2026-12-06-profile
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
for v in a c d; do tar -xJf .carry/${v}_lib.tar.xz || exit 1; done
logged repro_1 100 python3 $here/split_k_repro.py --repeat 6 --fresh 16 --tag single
grep -E "failed|repeat 0|bad" "$OUT/repro_1.log" | head -30
for p in 0 1 2 3 4 5 6 7; do
    timeout 80 python3 $here/split_k_repro.py --repeat 2 --fresh 6 --tag "p$p" >"$OUT/repro_p$p.log" 2>&1 &
done
wait
cat "$OUT"/repro_p*.log | grep -E "failed|bad" | head -40
mkdir -p "$OUT/t"
OUT=$OUT/t TESTS_K=fold bash benchmarks/harness/library_call.sh tests \
    "200-40001-256 or 130-40001-128 or 200-20704-4096" | tail -4
for v in C D; do
    logged ab_$v 110 python3 benchmarks/harness/ab_time.py --a build/A/lib.so --b build/$v/lib.so \
        --heads 262144x5376,248320x5120,128256x4096,262144x640 --m 128,192,384,768,2048
    tail -32 "$OUT/ab_$v.log"
done
