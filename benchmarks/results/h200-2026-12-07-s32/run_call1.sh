#!/usr/bin/env bash
# Thirty-second session, call 1 (never ran: no machine came; CALLS.md). For a later session, built
# on the CPU machine from main (79f6671 or later, whose benchmark build has the mma*t2 variants):
#   PYTHON=... bash benchmarks/harness/make_carries.sh        # python/radiance/_C.abi3.so (main's
#       library), .carry/b_lib.tar.xz (build/B/lib.so, the benchmark build), .carry/whl
#   git worktree add --detach /tmp/tt && cd /tmp/tt &&
#       git apply benchmarks/results/h200-2026-12-07-s32/mma_two_tiles.patch &&
#       PYTHON=... bash benchmarks/harness/make_carries.sh library && tar -cf - python/radiance/_C.abi3.so \
#       tests/test_gpu.py tests/reference.py | xz -T2 -3 >/work/main/.carry/two_tiles.tar.xz
#   (then git worktree remove --force /tmp/tt)
# and carry python/radiance/_C.abi3.so, .carry/whl, .carry/b_lib.tar.xz and .carry/two_tiles.tar.xz
# (mma_two_tiles.patch's library, with its tests: 9-16 tokens on the register pipe of two 8-token
# n-tiles per warp where the group is under 128 and k <= 2048).
# t2_*.log: the plan (the folding kernel's 16-token tile) against the mma*t2 variants at 9-16
#     tokens on the heads of groups under 128 that the register pipe takes at 1-8 tokens (the second
#     loop after the tests);
# t/: main's library under the GPU tests of the cut last round (the cases of 384 and 500 tokens,
#     a5601e1, and the clusters lowered to two parts, RADIANCE_GPU_TEST_CLUSTERS_OF_TWO), every
#     folding tile and the calls split in two; memcheck of three;
# tt/: the patch's library under its tests of the register pipe and every folding tile; memcheck of
#     two;
# check.log (after the tests): the mma*t2 variants against the float64 reference (gpu_kernels.py
#     check); b/: where the GPU is an H200, benchmarks/gpu.py on main's library (README's table).
. "$(dirname "$0")/../../harness/call_preamble.sh"
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/gpu.txt"
tar -xJf .carry/b_lib.tar.xz || exit 1
t2=mma3b6t2,mma2b6t2,mma2b8t2,mma3b4t2
t2_loop() {
    logged t2_$1 120 python3 benchmarks/harness/ab_time.py --a build/B/lib.so --b build/B/lib.so \
        --heads 49152x576:64,262144x640:64,151936x1024:64,49152x576:32,128256x2048:64 --m 9,12,16 \
        --b-variants mma3b6,$t2 --fastest
}
t2_loop 1
grep -vE "^#" "$OUT/t2_1.log" | head -24
OUT=$OUT/t TESTS_K="cut or every_fold_tile or split_in_two_calls" \
    bash benchmarks/harness/library_call.sh tests "(cut_along_k and (8955 or 8963)) or (of_two and 26003)"
mkdir -p /tmp/main_tree && cp python/radiance/_C.abi3.so tests/test_gpu.py tests/reference.py /tmp/main_tree/
tar -xJf .carry/two_tiles.tar.xz || exit 1
OUT=$OUT/tt TESTS_K="register_pipe or every_fold_tile" \
    bash benchmarks/harness/library_call.sh tests "register_pipe and (9-576-64 or 12-1376-32)"
cp /tmp/main_tree/_C.abi3.so python/radiance/ && cp /tmp/main_tree/test_gpu.py /tmp/main_tree/reference.py tests/
logged check 120 python3 benchmarks/harness/gpu_kernels.py check --lib build/B/lib.so --variants $t2
tail -3 "$OUT/check.log"
t2_loop 2
grep -q H200 "$OUT/gpu.txt" && OUT=$OUT/b bash benchmarks/harness/library_call.sh bench
