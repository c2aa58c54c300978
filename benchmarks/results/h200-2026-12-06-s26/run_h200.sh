#!/usr/bin/env bash
# Twenty-sixth session, for an H200 only (exits 3 at once on any other GPU): run 90 against the
# kernel it replaced (O's plan at k = 5376: halves of 21 steps with the scales' windows and the
# biased codes, 7 % ahead of the plain halves on the H200 in the twenty-eighth round) in one timing
# loop at 9-16 tokens (ab.log), then benchmarks/gpu.py on the library with runs 90-91 (b/) for the
# README's table. Carry python/radiance/_C.abi3.so (8034a4c), .carry/whl, .carry/o_lib.tar.xz and
# .carry/n_lib.tar.xz.
. "$(dirname "$0")/../../harness/call_preamble.sh"
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/gpu.txt" | grep -q H200 || exit 3
tar -xJf .carry/o_lib.tar.xz && tar -xJf .carry/n_lib.tar.xz || exit 1
logged ab 150 python3 benchmarks/harness/ab_time.py --a build/B/lib.so --b build/N/lib.so \
    --heads 262144x5376,151936x5376 --m 9,12,16
tail -10 "$OUT/ab.log"
OUT=$OUT/b bash benchmarks/harness/library_call.sh bench
