#!/usr/bin/env bash
# Thirty-first session, call 1: the thirtieth session's calls 3 and 4, then gpu.py on main's library
# where the GPU is an H200. Carry python/radiance/_C.abi3.so (B9's library: the units of a cut last
# round as clusters that add their sums through distributed shared memory, tokens x rows, 4 rows a
# load), .carry/whl, .carry/a_lib.tar.xz (A: main's benchmark build at 7dcb534, the same kernels
# as f1786db), .carry/b_lib.tar.xz (B9's benchmark build) and .carry/main_lib.tar.xz (main's
# library as users build it, build/main/_C.abi3.so).
# t/: B9's GPU tests of the cut, memcheck of 6 and 3 parts; ab_<loop>_*.log: A against B9;
# few.log, many.log: A's kernels side by side on 49152 x 576 (g64) at 9-16 and 384 tokens;
# b/: benchmarks/gpu.py on main's library (H200 only).
. "$(dirname "$0")/../../harness/call_preamble.sh"
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/gpu.txt"
for l in a b main; do tar -xJf .carry/${l}_lib.tar.xz || exit 1; done
OUT=$OUT/t TESTS_K="cut" bash benchmarks/harness/library_call.sh tests "cut_along_k and (29177 or 32975)"
for loop in 1 2; do
    logged ab_${loop}_a 60 python3 benchmarks/harness/ab_time.py --a build/A/lib.so --b build/B/lib.so \
        --heads 128256x4096 --m 64,100,128,384,512
done
logged ab_1_b 90 python3 benchmarks/harness/ab_time.py --a build/A/lib.so --b build/B/lib.so \
    --heads 262144x5376,248320x5120 --m 128,384
for f in "$OUT"/ab_*.log; do echo "== $f"; grep -E "^ +[0-9]|^##" "$f"; done
ab() { # NAME HEADS M VARIANTS
    logged "$1" 120 python3 benchmarks/harness/ab_time.py --a build/A/lib.so --b build/A/lib.so --heads "$2" \
        --m "$3" --b-variants "$4" --fastest
}
ab few 49152x576:64 9,12,16 mma3b6,mma2b8,tile2x2,wgquad16,wgpipe16,fold3x16,fold3x16t
ab many 49152x576:64 384 \
    fold2x192,fold2x192t,fold2x128t,fold2x160t,fold2x256t,fold3x128,fold3x96t,fold2x96b2t,fold1x128b2t
for f in few many; do echo "== $f"; grep -vE "^#" "$OUT/$f.log" | head -30; done
if grep -q H200 "$OUT/gpu.txt"; then
    cp build/main/_C.abi3.so python/radiance/_C.abi3.so
    OUT=$OUT/b bash benchmarks/harness/library_call.sh bench
fi
