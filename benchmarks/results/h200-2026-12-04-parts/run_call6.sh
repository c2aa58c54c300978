#!/usr/bin/env bash
# Run 71, in the library and the kernel harness: the tile of 128 tokens of two blocks per SM taken
# only from 112 tokens (hip/dispatch.h, kFoldTwoPerSm128MinTokens). The library (setup.py, carried
# as python/radiance/_C.abi3.so): the tests of tests/test_gpu.py that run the folding kernel, and
# memcheck of the new two-blocks cases; then A = run 69's harness build (calls 4-5) against B = this
# tree's at 97-128 tokens on the heads that took the tile, two loops.
#   python3 benchmarks/harness/gpu_kernels.py build --lib $PWD/build/B/lib.so   (run 69's: build/B69)
#   tar -cf - build/B69/lib.so build/B/lib.so | xz -T2 -3 > .carry/ab_libs.tar.xz
#   device: OUT=... bash benchmarks/results/h200-2026-12-04-parts/run_call6.sh
#   (carry python/radiance/_C.abi3.so and .carry/ab_libs.tar.xz)
. "$(dirname "$0")/../../harness/call_preamble.sh"
ls python/radiance/_C*.so || exit 1
tar -xJf .carry/ab_libs.tar.xz || exit 1
logged test 300 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py -k "fold or tma_store or two_blocks or every_tile"
tail -1 "$OUT/test.log"; grep -E "^FAILED|^E  " "$OUT/test.log" | head -12
RADIANCE_TEST_NO_PROFILER=1 logged memcheck 120 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest \
    -q -p no:cacheprovider tests/test_gpu.py -k "two_blocks_per_sm and (100-67576-640-128 or 64-76168-2304-128)"
grep -E "ERROR SUMMARY|passed|failed" "$OUT/memcheck.log" | tail -2
AB=(python3 benchmarks/harness/ab_time.py --a build/B69/lib.so --b build/B/lib.so)
for r in 1 2; do
    logged "ab_128_$r" 100 "${AB[@]}" --m 97,104,111,112,128 --heads 128256x4096,262144x640,151936x1024,49152x576
done
# the tile of 48 tokens of two blocks per SM where the rule of 64-96 tokens would take it
logged t48 60 python3 benchmarks/harness/ab_time.py --a build/B/lib.so --b build/B/lib.so --heads 262144x5376,151936x1024 \
    --m 40,48 --b-variants fold3x48t,fold2x48b2t
echo "== t48"; grep -vE "^# |^$" "$OUT/t48.log" | sed -E 's/ {2,}/ /g'
# the same build as A and B on the small head (ab_time.py now gives each int4 column its own
# operand set in a round; call 4 read A's column 10 % slower than B's there)
logged same_576 60 python3 benchmarks/harness/ab_time.py --a build/B/lib.so --b build/B/lib.so --heads 49152x576 --m 12,16,128
echo "== same_576"; grep -vE "^# |^$" "$OUT/same_576.log" | sed -E 's/ {2,}/ /g'
for r in 1 2; do echo "== ab_128_$r"; grep -vE "^# |^$" "$OUT/ab_128_$r.log" | sed -E 's/ {2,}/ /g'; done
