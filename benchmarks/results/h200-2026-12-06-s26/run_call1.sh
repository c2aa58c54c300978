#!/usr/bin/env bash
# Twenty-sixth session, call 1: benchmarks/gpu.py on main's library (3313e9c: run 89 and the
# split-k fix), for the README's H200 table, then Nsight Compute's source counters (warp stall
# samples per SASS instruction) of the split-k kernel the plan takes at 16 tokens on 262144 x 5376
# (src_*). Carry python/radiance/_C.abi3.so, .carry/whl and .carry/b_lib.tar.xz (make_carries.sh
# library bench). Call 2 is the twenty-fifth session's run_next.sh.
. "$(dirname "$0")/../../harness/call_preamble.sh"
tar -xJf .carry/b_lib.tar.xz || exit 1
OUT=$OUT/b bash benchmarks/harness/library_call.sh bench
for m in 16; do
    timeout 120 ncu --clock-control none --profile-from-start off -k regex:split_k --section SourceCounters \
        --section WarpStateStats --section SpeedOfLight -o "$OUT/src_$m" python3 benchmarks/harness/gpu_kernels.py \
        profile --lib build/B/lib.so --variants $m:auto:262144x5376 >"$OUT/src_${m}_run.log" 2>&1
    echo "ncu $m rc=$?"
    ncu -i "$OUT/src_$m.ncu-rep" --page source --csv --print-source sass >"$OUT/src_${m}_sass.csv" 2>&1
    ncu -i "$OUT/src_$m.ncu-rep" --print-units base >"$OUT/src_${m}_details.txt" 2>&1
    echo "source page $m rc=$? $(wc -l <"$OUT/src_${m}_sass.csv") lines"
done
