#!/usr/bin/env bash
# Thirty-fourth session: benchmarks/gpu.py on main's library if the call got an H200 (b/; issue
# 22's goals are judged there), nothing otherwise (an H100's run is call 4's).
# Carry python/radiance/_C.abi3.so and .carry/whl.
. "$(dirname "$0")/../../harness/call_preamble.sh"
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/gpu.txt"
grep -q H200 "$OUT/gpu.txt" || { echo "not an H200: nothing run"; exit 0; }
OUT=$OUT/b bash benchmarks/harness/library_call.sh bench
