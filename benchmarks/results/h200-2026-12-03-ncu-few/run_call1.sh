#!/usr/bin/env bash
# Run 61 (prepared 2026-12-03, tenth session, on the CPU machine; see CALLS.md): Nsight Compute of
# the few-token cells where the int4 head still trails Humming (8-16 tokens), beside one token of
# the same kernels and Humming's kernel on the same shapes. The benchmark build of this tree, made
# on the CPU machine and carried with Humming's wheel:
#   python3 benchmarks/harness/gpu_kernels.py build --lib $PWD/build/B/lib.so     # about 2 minutes
#   device: OUT=... bash benchmarks/results/h200-2026-12-03-ncu-few/run_call1.sh
#           (carry build/B/lib.so and .carry/whl)
# About 6 minutes.
. "$(dirname "$0")/../../harness/call_preamble.sh"
ls -l build/B/lib.so || exit 1
python3 -m pip install -q --no-index --no-deps .carry/whl/humming_kernels-*.whl 2>&1 | tail -1
# 17-32 tokens, groups of 128: the library's wgmma pipe kernel (4 warpgroups, the scale applied to
# the accumulators) against the folding kernel's 32-token tile, stored from the registers or written
# by TMA (262144 x 640 runs 48 tokens in 55 us and 32 in 65: the folding kernel might be the faster
# one here too); twice
for r in 1 2; do
    logged "ab32_$r" 120 python3 benchmarks/harness/ab_time.py --a build/B/lib.so --b build/B/lib.so --fastest \
        --heads 262144x640,151936x1024,128256x2048,128256x4096,248320x5120 --m 20,24,32 \
        --b-variants fold3x32,fold3x32t
done
for f in ab32_1 ab32_2; do echo "== $f"; grep -vE "^# |^$" "$OUT/$f.log" | sed -E 's/ {2,}/ /g'; done
big=248320x5120 gemma=262144x5376
runs="1:auto:$big,4:auto:$big,8:auto:$big,8:humming:$big,16:auto:$big,16:humming:$big"
runs="$runs,1:auto:$gemma,8:auto:$gemma,8:humming:$gemma"
OUT=$OUT/ncu LIB=build/B/lib.so timeout $((590 - (SECONDS - call_started))) bash benchmarks/harness/ncu_profile.sh "$runs"
