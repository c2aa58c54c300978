#!/usr/bin/env bash
# Prepared in the twenty-third session (2026-12-06; docs/PERF_LOG.md, twenty-eighth round): the
# profile that names where the folding kernel's extra cycles go at 384 tokens. Run 85 measured, under
# the same 700 W cap, 7-13 % more SM cycles than cuBLAS at 384 tokens (two chunks of 192) on the big
# heads. Nsight Compute of radiance's plan and of torch's bf16 x @ W.t() (cuBLAS) on 262144 x 5376
# at 192 and 384 tokens, and on 248320 x 5120 at 384: tensor-pipe activity, issue, instructions and
# the stall reasons of each (ncu_summary.txt), their tile and grid (ncu_details.txt). One lent H200
# call, about 300 s; carry .carry/b_lib.tar.xz (benchmarks/harness/make_carries.sh bench).
. "$(dirname "$0")/../../harness/call_preamble.sh"
tar -xJf .carry/b_lib.tar.xz || exit 1
runs=192:auto:262144x5376,384:auto:262144x5376,192:bf16:262144x5376,384:bf16:262144x5376
runs=$runs,384:auto:248320x5120,384:bf16:248320x5120
OUT=$OUT LIB=build/B/lib.so bash benchmarks/harness/ncu_profile.sh "$runs"
