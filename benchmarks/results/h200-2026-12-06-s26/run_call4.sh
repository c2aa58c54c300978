#!/usr/bin/env bash
# Twenty-sixth session, call 4: run 90 (split k's halves one step apart at k = 5376) against main's
# build in one timing loop at 9-16 tokens (ab.log; wanted on an H200, where the kernel it replaces
# had won 7 %), then benchmarks/gpu.py on the library with run 90 (b/). Carry
# python/radiance/_C.abi3.so, .carry/whl, .carry/o_lib.tar.xz and .carry/n_lib.tar.xz (as call 3).
. "$(dirname "$0")/../../harness/call_preamble.sh"
tar -xJf .carry/o_lib.tar.xz && tar -xJf .carry/n_lib.tar.xz || exit 1
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
logged ab 150 python3 benchmarks/harness/ab_time.py --a build/B/lib.so --b build/N/lib.so \
    --heads 262144x5376,151936x5376 --m 9,12,16 --b-variants splitkshift0
tail -10 "$OUT/ab.log"
OUT=$OUT/b bash benchmarks/harness/library_call.sh bench
