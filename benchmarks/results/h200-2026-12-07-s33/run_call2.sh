#!/usr/bin/env bash
# Thirty-third session, call 2 (on the machine call 1 left warm): the whole tests/test_gpu.py on
# main's library (the last whole-file run was the twenty-eighth session's, before runs 97-99 and
# the 17-32-token rule), memcheck of a cut case of 384 tokens and a register-pipe case.
# Carry python/radiance/_C.abi3.so and .carry/whl.
. "$(dirname "$0")/../../harness/call_preamble.sh"
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/gpu.txt"
OUT=$OUT/t bash benchmarks/harness/library_call.sh tests "(cut_along_k and 8955) or (register_pipe and 576-64-8)"
