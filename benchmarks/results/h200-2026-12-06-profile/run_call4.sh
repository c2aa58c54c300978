#!/usr/bin/env bash
# Twenty-fourth session, the call that replaced call 3 (which no machine came for): the device time
# left held one call. Carry .carry/a_lib.tar.xz, .carry/c_lib.tar.xz, .carry/whl and
# python/radiance/_C.abi3.so (the library with C).
# 1. The split-k failure of call 2 (tests/test_gpu.py's persistent_stream_units[1024-256-16] on an
#    H100, seed 2494947757) taken apart by split_k_repro.py: its seed 4 times and 8 fresh seeds in
#    one process (repro_1.log), then 8 processes at once, as the tests run (repro_p*.log).
# 2. tests/test_gpu.py -k "fold or persistent_stream" on the library with C, in 8 processes, and
#    memcheck of the new fold cases of 1-3 steps per tile and a last round cut along k (t/).
# 3. Run 89: the folding kernel's scales loaded straight into the registers the fragments read
#    (C) against A, the benchmark build before (ab_c.log).
# 4. benchmarks/gpu.py on the library with C, beside bf16, fp8 and Humming (b/).
. "$(dirname "$0")/../../harness/call_preamble.sh"
here=benchmarks/results/h200-2026-12-06-profile
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
for v in a c; do tar -xJf .carry/${v}_lib.tar.xz || exit 1; done
logged repro_1 60 python3 $here/split_k_repro.py --repeat 4 --fresh 8 --tag single
grep -E "failed|repeat 0|bad" "$OUT/repro_1.log" | head -20
for p in 0 1 2 3 4 5 6 7; do
    timeout 60 python3 $here/split_k_repro.py --repeat 1 --fresh 4 --tag "p$p" >"$OUT/repro_p$p.log" 2>&1 &
done
wait
cat "$OUT"/repro_p*.log | grep -E "failed|bad" | head -30
mkdir -p "$OUT/t" "$OUT/b"
OUT=$OUT/t TESTS_K="fold or persistent_stream" bash benchmarks/harness/library_call.sh tests \
    "200-40001-256 or 130-40001-128 or 200-20704-4096" | tail -4
logged ab_c 100 python3 benchmarks/harness/ab_time.py --a build/A/lib.so --b build/C/lib.so \
    --heads 262144x5376,248320x5120,128256x4096,262144x640 --m 128,192,384,768,2048
tail -32 "$OUT/ab_c.log"
OUT=$OUT/b bash benchmarks/harness/library_call.sh bench | tail -12
