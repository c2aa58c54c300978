#!/usr/bin/env bash
# Thirty-fourth session, call 3 (an H200): benchmarks/gpu.py on main's library (b/, the goals'
# record with run 99, never timed on an H200), then Nsight Compute (ncu/) of every cell of issue
# 22's goals that the H200 record leaves unmet and no earlier profile covers, each beside the peer
# or floor it is judged against (the twenty-ninth round profiled 384 tokens against cuBLAS and 96
# against Humming on the big heads): bf16 at 2048 tokens on 262144 x 5376 and at 384 on
# 49152 x 576 (g64); Humming at 12 on 49152 x 576 and at 128 on 128256 x 4096 (the cut tile's
# two launches); one token against a plain read of the same bytes on 128256 x 4096 and
# 262144 x 640; the 12-16 tokens that take over 1.25x one token's time on 128256 x 4096,
# 262144 x 640 and 151936 x 1024.
# Carry python/radiance/_C.abi3.so, .carry/b_lib.tar.xz and .carry/whl.
. "$(dirname "$0")/../../harness/call_preamble.sh"
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/gpu.txt"
tar -xJf .carry/b_lib.tar.xz || exit 1
grep -q H200 "$OUT/gpu.txt" && OUT=$OUT/b bash benchmarks/harness/library_call.sh bench
runs=2048:auto:262144x5376,2048:bf16:262144x5376
runs=$runs,384:auto:49152x576:64,384:bf16:49152x576:64,12:auto:49152x576:64,12:humming:49152x576:64
runs=$runs,128:auto:128256x4096,128:humming:128256x4096
runs=$runs,1:auto:128256x4096,1:read:128256x4096,16:auto:128256x4096
runs=$runs,1:auto:262144x640,1:read:262144x640,12:auto:262144x640,1:auto:151936x1024,16:auto:151936x1024
# Humming into the system's site-packages: ncu_profile.sh's preamble sets PYTHONPATH anew
python3 -m pip install -q --no-index --no-deps --no-compile .carry/whl/humming_kernels-*.whl >"$OUT/pip.log" 2>&1
mkdir -p "$OUT/ncu"
OUT=$OUT/ncu LIB=build/B/lib.so NCU_LIMIT=$((560 - SECONDS)) bash benchmarks/harness/ncu_profile.sh "$runs" | tail -3
