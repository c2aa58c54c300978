#!/usr/bin/env bash
# Thirty-first session, call 2: B9's library (python/radiance/_C.abi3.so, the tree with
# cluster_tail_rows.patch applied) under the GPU tests of every path its change can reach (the
# folding kernel's tiles and cuts, the planner's choices around them, graphs, the 2 GiB head), memcheck
# of the cut; A against B9 again where B9's plan cuts in more parts (8 instead of 4); where the GPU is
# an H200 and the rest took under 300 s, benchmarks/gpu.py on B9's library. Carry
# python/radiance/_C.abi3.so, .carry/whl, .carry/a_lib.tar.xz, .carry/b_lib.tar.xz.
. "$(dirname "$0")/../../harness/call_preamble.sh"
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/gpu.txt"
for l in a b; do tar -xJf .carry/${l}_lib.tar.xz || exit 1; done
OUT=$OUT/t TESTS_K="fold or cut or tile or graphs or any_m or apply_gpu_matches or 2_gib or hand_made" \
    bash benchmarks/harness/library_call.sh tests "cut_along_k and (29177 or 32975)"
logged ab_parts 90 python3 benchmarks/harness/ab_time.py --a build/A/lib.so --b build/B/lib.so \
    --heads 262144x5376,248320x5120,128256x4096 --m 128,384,512,768,1024,2048
grep -E "^ +[0-9]|^##" "$OUT/ab_parts.log"
if grep -q H200 "$OUT/gpu.txt" && [ $((SECONDS - call_started)) -lt 300 ]; then
    OUT=$OUT/b bash benchmarks/harness/library_call.sh bench
fi
