#!/usr/bin/env bash
# Thirty-first session, call 3 (call 2 cut down to the device time left): B9's library
# (python/radiance/_C.abi3.so) under the cut's GPU tests with the cases of 384 and 500 tokens
# (a5601e1), every folding tile and the calls split in two; memcheck of the cut. Carry
# python/radiance/_C.abi3.so and .carry/whl.
. "$(dirname "$0")/../../harness/call_preamble.sh"
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/gpu.txt"
OUT=$OUT/t TESTS_K="cut or every_fold_tile or split_in_two_calls" \
    bash benchmarks/harness/library_call.sh tests "cut_along_k and (8955 or 8963)"
