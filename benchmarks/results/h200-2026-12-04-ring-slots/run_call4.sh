#!/usr/bin/env bash
# Run 79, fourth call: the tests of tests/test_gpu.py that call 3's run of the whole file did not
# reach in its 420 s (it stopped at 88 %, 684 passed, none failed), on the same library
# (python/radiance/_C.abi3.so built by setup.py from this tree), with --durations to see where the
# file's time goes.
#   device: bash benchmarks/results/h200-2026-12-04-ring-slots/run_call4.sh  (carry python/radiance/_C.abi3.so)
. "$(dirname "$0")/../../harness/call_preamble.sh"
ls python/radiance/_C*.so || exit 1
logged test_rest 400 python3 -m pytest -q -p no:cacheprovider --durations=15 tests/test_gpu.py \
    -k "persistent_stream_units or split_k_fine or last_wave or vector_kernel or stream_plans"
tail -22 "$OUT/test_rest.log"; grep -E "^FAILED|^E  " "$OUT/test_rest.log" | head -12
