#!/usr/bin/env bash
# Twenty-eighth session, call 1. Carry .carry/libs.tar.xz (python/radiance/_C.abi3.so: main's
# library at c885e8f; .carry/p_C.abi3.so: the library with P's change below, branch l2-256), .carry/whl,
# .carry/a_lib.tar.xz (A: main's benchmark build at c885e8f, build/A/lib.so) and .carry/p_lib.tar.xz
# (P: the same with the weights' copies asking L2 for 256 bytes: cp.async's .L2::256B prefetch
# and the weights' TMA map's L2 promotion of 256 bytes, build/P/lib.so).
# ab_l2_*.log: A against P on every head at 1-64 tokens, two loops; ab_16.log: the folding
# kernel's 16-token tiles of A and P against A's plan (split k) at 9-16 tokens on the big heads;
# then on an H200 b/: benchmarks/gpu.py on the library for the README's H200 table, and
# 1. ab_90.log: run 90 (the plan at k = 5376, 9-16 tokens) against the kernel it replaced
#    (splitktailwin, 7 % ahead of the plain halves there in the twenty-eighth round), one loop;
# 2. ab_32.log: the folding kernel's 32-token tiles against the plan (the wgmma pipe) at 20-32
#    tokens, on the Qwen heads (branch fold-32-full-rounds takes them) and four heads it leaves;
# then p/: the whole tests/test_gpu.py on the library with P's change.
. "$(dirname "$0")/../../harness/call_preamble.sh"
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/gpu.txt"
tar -xJf .carry/libs.tar.xz && tar -xJf .carry/a_lib.tar.xz && tar -xJf .carry/p_lib.tar.xz || exit 1
for loop in 1 2; do
    logged ab_l2_$loop 120 python3 benchmarks/harness/ab_time.py --a build/A/lib.so --b build/P/lib.so \
        --heads 248320x5120,262144x5376,151936x5120,128256x4096,151936x1024,262144x640,49152x576:64 \
        --m 1,4,8,12,16,24,32,48,64
done
tail -70 "$OUT/ab_l2_1.log"
logged ab_16 120 python3 benchmarks/harness/ab_time.py --a build/A/lib.so --b build/P/lib.so \
    --heads 248320x5120,262144x5376,151936x5120,128256x4096 --m 9,12,16 --b-variants fold3x16,fold3x16t
tail -16 "$OUT/ab_16.log"
if grep -q H200 "$OUT/gpu.txt"; then
    OUT=$OUT/b bash benchmarks/harness/library_call.sh bench
    logged ab_90 120 python3 benchmarks/harness/ab_time.py --a build/A/lib.so --b build/A/lib.so \
        --heads 262144x5376,151936x5376 --m 9,12,16 --b-variants splitktailwin
    tail -12 "$OUT/ab_90.log"
    logged ab_32 120 python3 benchmarks/harness/ab_time.py --a build/A/lib.so --b build/A/lib.so \
        --heads 151936x5120,151936x4096,152064x3584,151936x2560,248320x5120,100000x4096,262144x5376,128256x4096 \
        --m 20,24,32 --b-variants fold3x32,fold3x32t --fastest
    tail -30 "$OUT/ab_32.log"
fi
mkdir -p "$OUT/p" && cp python/radiance/_C.abi3.so /tmp/main_C.abi3.so && cp .carry/p_C.abi3.so python/radiance/_C.abi3.so
OUT=$OUT/p bash benchmarks/harness/library_call.sh tests "stream_plans and (640-128-1 or 5376-128-6)" | tail -4
cp /tmp/main_C.abi3.so python/radiance/_C.abi3.so
