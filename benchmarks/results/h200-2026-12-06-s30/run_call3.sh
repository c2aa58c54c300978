#!/usr/bin/env bash
# Thirtieth session, call 3 (never ran): the benchmark build's kernels side by side where issue
# 22's cells miss on 49152 x 576 (A = main at f1786db, .carry/a_lib.tar.xz, against itself with
# --b-variants; --fastest names the fastest of each row).
. "$(dirname "$0")/../../harness/call_preamble.sh"
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/gpu.txt"
tar -xJf .carry/a_lib.tar.xz || exit 1
ab() { # NAME HEADS M VARIANTS
    logged "$1" 120 python3 benchmarks/harness/ab_time.py --a build/A/lib.so --b build/A/lib.so --heads "$2" --m "$3" \
        --b-variants "$4" --fastest
}
ab few 49152x576:64 9,12,16 mma3b6,mma2b8,tile2x2,wgquad16,wgpipe16,fold3x16,fold3x16t
ab many 49152x576:64 384 \
    fold2x192,fold2x192t,fold2x128t,fold2x160t,fold2x256t,fold3x128,fold3x96t,fold2x96b2t,fold1x128b2t
for f in few many; do echo "== $f"; grep -vE "^#" "$OUT/$f.log" | head -30; done
