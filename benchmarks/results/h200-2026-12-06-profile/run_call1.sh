#!/usr/bin/env bash
# Twenty-fourth session (2026-12-06; docs/PERF_LOG.md, twenty-ninth round), one lent H200 call,
# carry .carry/b_lib.tar.xz (benchmarks/harness/make_carries.sh bench):
# 1. Nsight Compute of the plan beside cuBLAS (torch's bf16 x @ W.t()) where run 85 found the
#    folding kernel 7-13 % more SM cycles than cuBLAS: 262144 x 5376 at 192 and 384 tokens,
#    248320 x 5120 at 384; and beside Humming on 262144 x 5376 at 96 tokens, where Humming leads
#    by 8 % (ncu_*).
# 2. Run 87: the mma.sync register pipe with two 8-token tiles per warp (16 tokens in one pass over
#    the weights; mma2b6t2, mma3b4t2, mma3b5t2) against the plan (the folding kernel's 16-token
#    tile) and the one-tile pipe in two passes (mma3b6) at 9-16 tokens on the heads of groups of 64,
#    in two timing loops (ab_*).
. "$(dirname "$0")/../../harness/call_preamble.sh"
tar -xJf .carry/b_lib.tar.xz || exit 1
runs=192:auto:262144x5376,384:auto:262144x5376,192:bf16:262144x5376,384:bf16:262144x5376
runs=$runs,384:auto:248320x5120,384:bf16:248320x5120,96:auto:262144x5376,96:humming:262144x5376
# Humming into the system's site-packages: ncu_profile.sh's preamble sets PYTHONPATH anew
python3 -m pip install -q --no-index --no-deps --no-compile .carry/whl/humming_kernels-*.whl >"$OUT/pip.log" 2>&1
mkdir -p "$OUT/ncu"
OUT=$OUT/ncu LIB=build/B/lib.so bash benchmarks/harness/ncu_profile.sh "$runs" | tail -3
for loop in 1 2; do
    logged ab_$loop 150 python3 benchmarks/harness/ab_time.py --a build/B/lib.so --b build/B/lib.so \
        --heads 49152x576:64,151936x1024:64,128256x2048:64,128256x4096:64 --m 9,12,16,24,32 \
        --b-variants mma3b6,mma2b6t2,mma3b4t2,mma3b5t2,fold3x16t --fastest
done
tail -40 "$OUT/ab_1.log"
