#!/usr/bin/env bash
# Call 2 of the twenty-first session (2026-12-05): call 1 ran on an H100, where none of runs 81-83
# was 3 % faster. The same A/B loops on an H200 (whose 4.4 TB/s leaves split k more issue-bound,
# what the variants cut), three times, and gpu.py at 1, 9 and 16 tokens beside a plain read of each
# head's bytes (the share of the roofline a kernel of that size reaches); on an H100 only the
# latter. Carry
# python/radiance/_C.abi3.so (setup.py's build of this tree) and .carry/b_lib.tar.xz (CALLS.md).
. "$(dirname "$0")/../../harness/call_preamble.sh"
tar -xJf .carry/b_lib.tar.xz || exit 1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv >"$OUT/gpu.txt"
# CALL_BUDGET (default 400): the seconds it may take; each A/B loop runs where 60 s are left
logged gpu1 120 python3 benchmarks/gpu.py --heads 128256x4096,151936x5120,248320x5120,262144x5376 --m 1,9,16 \
    --peers bf16 --round-budget 0.07 --out "$OUT/gpu1"
grep -E "plain read|^ +(1|9|16) " "$OUT/gpu1.log"
if grep -q H100 "$OUT/gpu.txt"; then echo "an H100: call 1 ran the A/B loops there"; exit 0; fi
new=streamsplitk2s3srb,streamsplitk2s3b,streamsplitk2s3srw,streamsplitk2s3srwb,streamsplitk2s3sr1,streamsplitk2s3srb1,streamsplitk2s3srwb1
for r in 1 2 3; do
    if [ $((SECONDS - call_started + 60)) -le "${CALL_BUDGET:-400}" ]; then
        logged "ab_$r" 100 python3 benchmarks/harness/ab_time.py --a build/B/lib.so --b build/B/lib.so \
            --heads 248320x5120,151936x5120,128256x4096,262144x5376,151936x6144 --m 9,16 --b-variants $new
    fi
done
for f in "$OUT"/ab_*.log; do echo "== $f"; grep -vE "^# |^$" "$f" | sed -E 's/ {2,}/ /g'; done
