#!/usr/bin/env bash
# Thirtieth session, call 2 (run 98 with the race fixed). Carry python/radiance/_C.abi3.so (B8's
# library: the units as clusters of up to 8, the sums written once every warpgroup's wgmmas are
# done), .carry/whl, .carry/a_lib.tar.xz (A: main at f1786db), .carry/b_lib.tar.xz (B8's benchmark
# build) and .carry/c_lib.tar.xz (B4: the same with at most 4 parts of 8 steps or more, as main).
# clusters.txt: how many clusters of 1-8 blocks of the folding kernel's size run at once;
# t/: the GPU tests of the cut, memcheck of 6 and 3 parts; ab_<X>_<loop>.log: A against X;
# ncu/: Nsight Compute of B8's and A's launches on 128256 x 4096 at 128 tokens.
. "$(dirname "$0")/../../harness/call_preamble.sh"
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/gpu.txt"
here=benchmarks/results/h200-2026-12-06-s30
nvcc -arch=sm_90a -o /tmp/cluster_probe $here/cluster_probe.cu && /tmp/cluster_probe | tee "$OUT/clusters.txt"
for l in a b c; do tar -xJf .carry/${l}_lib.tar.xz || exit 1; done
OUT=$OUT/t TESTS_K="cut" bash benchmarks/harness/library_call.sh tests "cut_along_k and (29177 or 32975)"
for loop in 1 2; do
    for X in B C; do
        logged ab_${X}_$loop 60 python3 benchmarks/harness/ab_time.py --a build/A/lib.so --b build/$X/lib.so \
            --heads 128256x4096 --m 64,100,128,384,512
    done
done
for f in "$OUT"/ab_*.log; do echo "== $f"; grep -E "^ +[0-9]|^##" "$f"; done
for X in B A; do
    OUT=$OUT/ncu_$X LIB=build/$X/lib.so KERNELS=fold bash benchmarks/harness/ncu_profile.sh 128:auto:128256x4096 |
        grep -E "Kernel|gpu__time|gmma|stalls" | head -12
done
