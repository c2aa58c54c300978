#!/usr/bin/env bash
# Prepared by the twenty-fifth session (2026-12-06) for the next: where split k loses to Humming at
# 12-16 tokens on the H100 (gpu.py, calls 4 and 7: 0.86-0.94x on the big heads; 16 tokens at
# 1.16-1.22x one token's time, Humming's at 1.07x; split k reaches 78-84 % of the read floor).
# Existing tools only; carry .carry/b_lib.tar.xz (the benchmark build of main:
# `bash benchmarks/harness/make_carries.sh bench`) and .carry/whl. About 300 s.
# 1. every 9-16-token candidate of the benchmark build at 12 and 16 tokens on three big heads, one
#    timing loop, no peers (variants.log): the split-k rings (streamsplitk*: the plan is `auto`),
#    the unsplit persistent kernel (streamxs*), the wgmma pipe (wgpipe16) and the register pipe;
# 2. Nsight Compute of the plan and of Humming at 16 tokens on 262144 x 5376 (n/), Humming
#    installed for the profile with the system pip (ncu_profile.sh resets PYTHONPATH).
. "$(dirname "$0")/../../harness/call_preamble.sh"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
tar -xJf .carry/b_lib.tar.xz || exit 1
logged variants 150 python3 benchmarks/harness/gpu_kernels.py time --lib build/B/lib.so --no-peers \
    --heads 262144x5376,248320x5120,128256x4096 --ms 12,16 \
    --variants auto,streamsplitk,streamsplitknr,streamsplitk2s3,streamsplitk2s3sr,streamxs,streamxsbal,wgpipe16,mma1x1
tail -40 "$OUT/variants.log"
python3 -m pip install -q --no-index --no-deps .carry/whl/humming_kernels-*.whl
mkdir -p "$OUT/n"
OUT=$OUT/n LIB=build/B/lib.so bash benchmarks/harness/ncu_profile.sh 16:auto:262144x5376,16:humming:262144x5376 | tail -30
