#!/usr/bin/env bash
# Twenty-ninth session, call 1. Carry python/radiance/_C.abi3.so (main's library at 8373560, the
# 17-32-token rule fold_32_fills_rounds included), .carry/whl and .carry/a_lib.tar.xz (A: main's
# benchmark build at c885e8f, build/A/lib.so; its plans at 96-128 and 1-16 tokens are main's).
# t/: the GPU tests of the 17-32-token rule and of every folding tile (their first GPU run), then
#     memcheck of one of the rule's cases;
# b/: benchmarks/gpu.py on the library (README's H200 table, now with the rule);
# n/: Nsight Compute beside Humming on 128256 x 4096 at 96 and 128 tokens (Humming's lead there),
#     16 tokens on 248320 x 5120 (split k against one token) and one token on 128256 x 4096.
. "$(dirname "$0")/../../harness/call_preamble.sh"
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/gpu.txt"
tar -xJf .carry/a_lib.tar.xz || exit 1
OUT=$OUT/t TESTS_K="17_to_32 or every_fold_tile" bash benchmarks/harness/library_call.sh tests "17_to_32 and 0-24"
OUT=$OUT/b bash benchmarks/harness/library_call.sh bench
site=$(mktemp -d)
python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" .carry/whl/humming_kernels-*.whl
PYTHONPATH="$PYTHONPATH:$site" OUT=$OUT/n LIB=build/A/lib.so timeout 230 bash benchmarks/harness/ncu_profile.sh \
    128:auto:128256x4096,128:humming:128256x4096,96:auto:128256x4096,96:humming:128256x4096,16:auto,16:humming,1:auto:128256x4096
