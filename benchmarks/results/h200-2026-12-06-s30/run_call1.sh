#!/usr/bin/env bash
# Thirtieth session, call 1 (run 98). Carry python/radiance/_C.abi3.so (B's library: the units of a
# cut last round as clusters of up to 8 that add their sums through distributed shared memory),
# .carry/whl, .carry/a_lib.tar.xz (A: main's benchmark build at f1786db), .carry/b_lib.tar.xz (B's)
# and .carry/c_lib.tar.xz (C: B with the units launched as the whole rounds' programmatic dependent).
# t/: the GPU tests of the cut (pytest -k cut), memcheck of 6 and 3 parts;
# ab_<X>_<loop>_<heads>.log: A against X where the cut changes (and 64 tokens, where it does not).
. "$(dirname "$0")/../../harness/call_preamble.sh"
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/gpu.txt"
for l in a b c; do tar -xJf .carry/${l}_lib.tar.xz || exit 1; done
OUT=$OUT/t TESTS_K="cut" bash benchmarks/harness/library_call.sh tests "cut_along_k and (29177 or 32975)"
ab() { # X LOOP
    logged ab_$1_$2_a 110 python3 benchmarks/harness/ab_time.py --a build/A/lib.so --b build/$1/lib.so \
        --heads 128256x4096 --m 64,100,128,384,512,1024
    logged ab_$1_$2_b 110 python3 benchmarks/harness/ab_time.py --a build/A/lib.so --b build/$1/lib.so \
        --heads 262144x5376,248320x5120 --m 128,384,768,2048
}
ab B 1; ab C 1; ab B 2; ab C 2
for f in "$OUT"/ab_*.log; do echo "== $f"; grep -E "^ +[0-9]|^##" "$f"; done
