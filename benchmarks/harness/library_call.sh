#!/usr/bin/env bash
# Lent-GPU calls for the library as users build it (setup.py build_ext --inplace on the CPU machine,
# RADIANCE_GPU=cuda RADIANCE_GPU_ARCHS=90), carried as python/radiance/_C.abi3.so. Two calls, since
# one call's 600 s no longer hold both (2026-12-04: the whole tests/test_gpu.py, 774 tests, passed
# 88 % of itself in 420 s on one H200, so it has 530 s; gpu.py takes about 145 s):
#   device: OUT=... [TESTS_K=...] [TEST_WORKERS=8] bash benchmarks/harness/library_call.sh tests \
#               "stream_plans and (640-128-1 or 5376-128-6)"
#     the whole tests/test_gpu.py (or the tests TESTS_K selects, pytest -k, where it no longer fits
#     one call), in TEST_WORKERS processes where pytest-xdist is carried, then compute-sanitizer's
#     memcheck of the tests that the second argument selects (pytest -k, without the profiler, one
#     process); carry python/radiance/_C.abi3.so and .carry/whl (pytest-xdist and execnet:
#     `pip download --no-deps pytest-xdist execnet -d .carry/whl`)
#   device: OUT=... bash benchmarks/harness/library_call.sh bench
#     benchmarks/gpu.py on its seven heads, beside Humming (vLLM's W4A16 kernel) from its wheel;
#     carry python/radiance/_C.abi3.so and .carry/whl
. "$(dirname "$0")/call_preamble.sh"
mode=${1:?"tests SELECTION, or bench"}
ls python/radiance/_C*.so || exit 1
if [ "$mode" = tests ]; then
    selection=${2:?"the tests to run under memcheck (pytest -k)"}
    # Most of a test's time is its NumPy side on the CPU (a fresh random head, its quantization and
    # the float64 reference: 0.2-5 s a test on this project's CPU machine), so where pytest-xdist's
    # wheels are carried (.carry/whl: pytest_xdist, execnet) the tests run in TEST_WORKERS processes
    # (default 8; the machine has 16 cores), each BLAS on 2 threads; else one process as before.
    site=$(mktemp -d)
    workers=()
    if ls .carry/whl/pytest_xdist-*.whl .carry/whl/execnet-*.whl >/dev/null 2>&1 &&
        python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" \
            .carry/whl/pytest_xdist-*.whl .carry/whl/execnet-*.whl &&
        PYTHONPATH="$PYTHONPATH:$site" python3 -c "import xdist" 2>/dev/null; then
        workers=(-n "${TEST_WORKERS:-8}")
    fi
    echo "tests/test_gpu.py in ${workers[1]:-1} process(es)"
    PYTHONPATH="$PYTHONPATH:$site" OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 logged test 530 \
        python3 -m pytest -q -p no:cacheprovider "${workers[@]}" tests/test_gpu.py ${TESTS_K:+-k "$TESTS_K"}
    tail -1 "$OUT/test.log"; grep -E "^FAILED|^E  " "$OUT/test.log" | head -12
    RADIANCE_TEST_NO_PROFILER=1 logged memcheck 60 compute-sanitizer --tool memcheck --error-exitcode 9 \
        python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py -k "$selection"
    grep -E "ERROR SUMMARY|passed|failed" "$OUT/memcheck.log" | tail -2
elif [ "$mode" = bench ]; then
    site=$(mktemp -d)
    python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" .carry/whl/humming_kernels-*.whl || exit 1
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv \
        >"$OUT/bench_gpu.txt"
    PYTHONPATH="$PWD/python:$site:$PWD/tests" logged bench 580 python3 benchmarks/gpu.py --round-budget 0.07 --out "$OUT"
    sed -n '/worst cell/,$p' "$OUT/bench.log"
else
    echo "library_call.sh: the first argument is tests or bench" >&2
    exit 2
fi
