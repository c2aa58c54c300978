#!/usr/bin/env bash
# Twenty-fourth session, call 2 (docs/PERF_LOG.md, twenty-ninth round): run 88, the folding
# kernel's tiles of 2 consumer warpgroups requesting each step's scales two steps ahead
# (FoldCfg::scales_ahead) instead of one part ahead. Carry .carry/a_lib.tar.xz (A: the benchmark
# build before, build/A/lib.so), .carry/b_lib.tar.xz (B: after), python/radiance/_C.abi3.so (the
# library after) and .carry/whl:
# 1. tests/test_gpu.py on the library after, in 8 processes; memcheck of the new fold cases of 1-3
#    steps per tile and a last round cut along k (test_*);
# 2. A against B in two timing loops at 128-2048 tokens on six heads (ab_*);
# 3. Nsight Compute's source counters (warp stall samples per SASS instruction) of A's and B's
#    folding kernel on 262144 x 5376 at 384 tokens (src_*), where call 1 found the tensor pipe
#    86.8 % busy against cuBLAS's 96.8 %.
. "$(dirname "$0")/../../harness/call_preamble.sh"
tar -xJf .carry/a_lib.tar.xz && tar -xJf .carry/b_lib.tar.xz || exit 1
mkdir -p "$OUT/t"
OUT=$OUT/t bash benchmarks/harness/library_call.sh tests "200-40001-256 or 130-40001-128 or 200-20704-4096" | tail -4
for loop in 1 2; do
    logged ab_$loop 170 python3 benchmarks/harness/ab_time.py --a build/A/lib.so --b build/B/lib.so \
        --heads 262144x5376,248320x5120,151936x5120,128256x4096,151936x1024,262144x640 \
        --m 128,192,256,384,512,768,1024,2048
done
tail -62 "$OUT/ab_1.log"
for lib in A B; do
    timeout 100 ncu --clock-control none --profile-from-start off -k regex:apply_wgmma_fold --section SourceCounters \
        --section WarpStateStats --section SpeedOfLight -o "$OUT/src_$lib" python3 benchmarks/harness/gpu_kernels.py \
        profile --lib build/$lib/lib.so --variants 384:auto:262144x5376 >"$OUT/src_${lib}_run.log" 2>&1
    echo "ncu $lib rc=$?"
    ncu -i "$OUT/src_$lib.ncu-rep" --page source --csv --print-source sass >"$OUT/src_${lib}_sass.csv" 2>&1
    echo "source page $lib rc=$? $(wc -l <"$OUT/src_${lib}_sass.csv") lines"; head -c 600 "$OUT/src_${lib}_sass.csv"; echo
done
