#!/usr/bin/env bash
# Run 70 (2026-12-04, fourteenth session): the cells issue 22 still misses after run 69, each with
# the tiles the benchmark build holds for it, in one timing loop per head, twice (ab_time.py with A
# and B the same build: B's plan and its variants side by side, bf16 beside). 49152 x 576 g64 at
# 9-16 tokens (12 tokens took 15.4-16.1 us, 16 took 14.9-15.0, the same 16-token tile: its stores
# past m tested per element, against the tile written by TMA); 128256 x 4096 and 262144 x 5376 at
# 97-128 (the tiles of 128 tokens); 262144 x 5376 at 40-48 and 12-16.
#   python3 benchmarks/harness/gpu_kernels.py build --lib $PWD/build/B/lib.so
#   tar -cf - build/B/lib.so | xz -T2 -3 > .carry/b_lib.tar.xz
#   device: OUT=... bash benchmarks/results/h200-2026-12-04-parts/run_call4.sh  (carry .carry/b_lib.tar.xz)
. "$(dirname "$0")/../../harness/call_preamble.sh"
tar -xJf .carry/b_lib.tar.xz || exit 1
T=(python3 benchmarks/harness/ab_time.py --a build/B/lib.so --b build/B/lib.so)
for r in 1 2; do
    logged "small16_$r" 60 "${T[@]}" --heads 49152x576 --m 9,12,13,16 --b-variants fold3x16,fold3x16t
    logged "t128_$r" 100 "${T[@]}" --heads 128256x4096,262144x5376 --m 97,112,128 \
        --b-variants fold1x128b2t,fold2x128t,fold2x128,fold3x128
    logged "t48_$r" 60 "${T[@]}" --heads 262144x5376 --m 40,48 --b-variants fold3x48t,fold3x48,fold2x48b2t,fold3x64t
    logged "t16_$r" 60 "${T[@]}" --heads 262144x5376,248320x5120 --m 12,16 \
        --b-variants wgpipe16,wgquad16,streamsplitk,fold3x16,fold3x16t
done
for f in small16 t128 t48 t16; do for r in 1 2; do echo "== ${f}_$r"; grep -vE "^# |^$" "$OUT/${f}_$r.log" | sed -E 's/ {2,}/ /g'; done; done
