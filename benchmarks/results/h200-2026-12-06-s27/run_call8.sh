#!/usr/bin/env bash
# Twenty-seventh session, call 8: 49152 x 576 g64 (SmolLM2's head, 14 MB), where Humming led at
# 1-16 tokens in call 6 (0.93-0.97x): every kernel of the benchmark build O that serves those
# tokens, in ab_time.py's one loop (ab_small.log). On an H200 also the twenty-sixth session's
# run_h200.sh (run 90 against the kernel it replaced; gpu.py on the library with run 94 for the
# README's table; h200/). Carry python/radiance/_C.abi3.so, .carry/whl, .carry/o_lib.tar.xz and
# .carry/n_lib.tar.xz.
. "$(dirname "$0")/../../harness/call_preamble.sh"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader | tee "$OUT/gpu.txt"
if grep -q H200 "$OUT/gpu.txt"; then
    OUT=$OUT/h200 bash benchmarks/results/h200-2026-12-06-s26/run_h200.sh
fi
tar -xJf .carry/o_lib.tar.xz || exit 1
logged ab_small 120 python3 benchmarks/harness/ab_time.py --a build/B/lib.so --b build/B/lib.so \
    --heads 49152x576:64 --m 1,2,4,8,12,16 --b-variants mma3b6,mma2b8,mma1x1,tile2x2,fold3x16,fold3x16t --fastest
