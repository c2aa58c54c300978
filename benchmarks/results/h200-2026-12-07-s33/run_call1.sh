#!/usr/bin/env bash
# Thirty-third session: the thirty-second's run_call1.sh (../h200-2026-12-07-s32/, whose header
# says how to build what it carries), whole (`all`, about 400 s) or in two calls:
#   bash .../run_call1.sh a   the mma*t2 variants against the plan at 9-16 tokens (t2_1.log; beside
#                             the s32 heads of groups under 128, the two small heads of group 128,
#                             whose 12-16 tokens take 1.38-1.64x one token's time); main's
#                             library under the cut and folding-tile tests (t/); the patch's library
#                             under its tests (tt/); the variants against float64 (check.log)
#   bash .../run_call1.sh t2  the first timing loop alone (what little device time is left)
#   bash .../run_call1.sh b   the second timing loop (t2_2.log); on an H200, benchmarks/gpu.py on
#                             main's library (b/)
# Carry python/radiance/_C.abi3.so, .carry/whl, .carry/b_lib.tar.xz, .carry/two_tiles.tar.xz.
. "$(dirname "$0")/../../harness/call_preamble.sh"
part=${1:?"a, b, t2 or all"}
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/gpu.txt"
tar -xJf .carry/b_lib.tar.xz || exit 1
t2=mma3b6t2,mma2b6t2,mma2b8t2,mma3b4t2
t2_loop() {
    logged t2_$1 120 python3 benchmarks/harness/ab_time.py --a build/B/lib.so --b build/B/lib.so \
        --heads 49152x576:64,262144x640:64,151936x1024:64,49152x576:32,128256x2048:64,262144x640,151936x1024 \
        --m 9,12,16 \
        --b-variants mma3b6,$t2 --fastest
    grep -vE "^#" "$OUT/t2_$1.log" | head -40
}
[ "$part" = t2 ] && { t2_loop 1; exit; }
if [ "$part" != b ]; then
    t2_loop 1
    OUT=$OUT/t TESTS_K="cut or every_fold_tile or split_in_two_calls" \
        bash benchmarks/harness/library_call.sh tests "(cut_along_k and (8955 or 8963)) or (of_two and 26003)"
    mkdir -p /tmp/main_tree && cp python/radiance/_C.abi3.so tests/test_gpu.py tests/reference.py /tmp/main_tree/
    tar -xJf .carry/two_tiles.tar.xz || exit 1
    OUT=$OUT/tt TESTS_K="register_pipe or every_fold_tile" \
        bash benchmarks/harness/library_call.sh tests "register_pipe and (9-576-64 or 12-1376-32)"
    cp /tmp/main_tree/_C.abi3.so python/radiance/ && cp /tmp/main_tree/test_gpu.py /tmp/main_tree/reference.py tests/
    logged check 120 python3 benchmarks/harness/gpu_kernels.py check --lib build/B/lib.so --variants $t2
    tail -3 "$OUT/check.log"
fi
if [ "$part" != a ]; then
    t2_loop 2
    grep -q H200 "$OUT/gpu.txt" && OUT=$OUT/b bash benchmarks/harness/library_call.sh bench
fi
