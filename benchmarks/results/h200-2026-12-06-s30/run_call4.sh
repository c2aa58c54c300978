#!/usr/bin/env bash
# Thirtieth session, call 4 (run 98, second form; never ran). Carry python/radiance/_C.abi3.so
# (B's library: the units of a cut last round as clusters of up to 8 that add their sums through
# distributed shared memory, tokens x rows, 4 rows a load; fewer parts where the clusters would not
# all run at once), .carry/whl, .carry/a_lib.tar.xz (A: main at f1786db) and .carry/b_lib.tar.xz (B's
# benchmark build). t/: the GPU tests of the cut, memcheck of 6 and 3 parts; ab_<loop>_*.log: A
# against B.
. "$(dirname "$0")/../../harness/call_preamble.sh"
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/gpu.txt"
for l in a b; do tar -xJf .carry/${l}_lib.tar.xz || exit 1; done
OUT=$OUT/t TESTS_K="cut" bash benchmarks/harness/library_call.sh tests "cut_along_k and (29177 or 32975)"
for loop in 1 2; do
    logged ab_${loop}_a 60 python3 benchmarks/harness/ab_time.py --a build/A/lib.so --b build/B/lib.so \
        --heads 128256x4096 --m 64,100,128,384,512
done
logged ab_1_b 90 python3 benchmarks/harness/ab_time.py --a build/A/lib.so --b build/B/lib.so \
    --heads 262144x5376,248320x5120 --m 128,384
for f in "$OUT"/ab_*.log; do echo "== $f"; grep -E "^ +[0-9]|^##" "$f"; done
