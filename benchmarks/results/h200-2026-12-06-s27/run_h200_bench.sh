#!/usr/bin/env bash
# Twenty-seventh session, for an H200 only (exits 3 at once on any other GPU): benchmarks/gpu.py
# on the library with runs 89-96 for the README's H200 table (b/). Carry
# python/radiance/_C.abi3.so and .carry/whl.
. "$(dirname "$0")/../../harness/call_preamble.sh"
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/gpu.txt" | grep -q H200 || exit 3
OUT=$OUT/b bash benchmarks/harness/library_call.sh bench
