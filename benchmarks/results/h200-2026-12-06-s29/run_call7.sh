#!/usr/bin/env bash
# Twenty-ninth session, call 7. Carry python/radiance/_C.abi3.so (B3's library: B2, run 97's
# spreading, with one warp fencing the pieces' sums instead of every consumer warp), .carry/whl,
# .carry/a_lib.tar.xz (A: main's benchmark build at c885e8f) and .carry/b_lib.tar.xz (B3's).
# t/: the GPU tests of the folding kernel (pytest -k fold), memcheck of two spread cases;
# ab_1.log, ab_2.log: A against B3, two loops, where it spreads and where it does not (64 tokens).
. "$(dirname "$0")/../../harness/call_preamble.sh"
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/gpu.txt"
tar -xJf .carry/a_lib.tar.xz && tar -xJf .carry/b_lib.tar.xz || exit 1
OUT=$OUT/t TESTS_K="fold" bash benchmarks/harness/library_call.sh tests "cut_along_k and (128-26003 or 200-20704)"
for loop in 1 2; do
    logged ab_$loop 60 python3 benchmarks/harness/ab_time.py --a build/A/lib.so --b build/B/lib.so \
        --heads 128256x4096,262144x5376 --m 64,100,128,384
done
paste <(grep -E "^ +[0-9]|^##" "$OUT/ab_1.log") <(grep -E "^ +[0-9]|^##" "$OUT/ab_2.log" | awk '{print $NF}')
