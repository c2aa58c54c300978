#!/usr/bin/env bash
# What one lent H200 call runs (see benchmarks/RESULTS.md): build the CUDA extension in place, the
# GPU tests, a compute-sanitizer memcheck pass, and the benchmarks. Logs and results go to $OUT.
# The machine returns at most 8 files: at exit, out_files.sh packs all but the 7 smallest into
# $OUT/bundle.tar.gz.
#
#   OUT=/tmp/out bash benchmarks/harness/device_run.sh [tests|smoke|bench|all]
#       (smoke: tests + a short gpu.py)
#   OUT=/tmp/out bash benchmarks/harness/device_run.sh variants
#       (the kernel harness alone: the benchmark build, every variant checked against float64,
#       then timed at 1-16 tokens)
#   OUT=/tmp/out WHEEL=dist/radiance-*.whl bash benchmarks/harness/device_run.sh wheel
#       (that wheel, not a build made here: installed into a folder of its own, the GPU tests
#       against it (the source tree's python/ stays off the path), then gpu.py on every head;
#       Humming comes from HUMMING_WHEEL where given)
#   OUT=/tmp/out bash benchmarks/harness/device_run.sh speed
#       (about 8 minutes: the benchmark build, every variant checked against float64 with poisoned
#       outputs at awkward sizes, the library's shared-activation tests and their memcheck, then
#       auto against the candidates at 1-256 tokens on 248320 x 5120; the tables come last)
#   OUT=/tmp/out A_TAR=.carry/main.tar [B_VARIANTS=fold2x256t,...] [HEADS=...] [MS=...] \
#       [TESTS='pytest -k expression' [MEMCHECK='-k expression']] bash benchmarks/harness/device_run.sh ab
#       (a kernel change against the tree before, A_TAR = `git archive main -o .carry/main.tar`: both
#       harness builds, B_VARIANTS checked against float64, then benchmarks/harness/ab_time.py twice:
#       both automatic plans and B_VARIANTS in one timing loop; with TESTS, the library is built
#       beside the harness builds and, after the timing, those tests of tests/test_gpu.py run, and
#       the MEMCHECK ones under compute-sanitizer)
. "$(dirname "$0")/call_preamble.sh"
what=${1:-all}

if [ "$what" = variants ]; then
    python3 benchmarks/harness/gpu_kernels.py build --log "$OUT/nvcc.log" || { tail -30 "$OUT/nvcc.log"; exit 1; }
    timeout 300 python3 benchmarks/harness/gpu_kernels.py check >"$OUT/check.log" 2>&1
    echo "check rc=$? :: $(grep -E 'ALL CHECKS|FAILED' "$OUT/check.log")"
    grep -A 20 FAILED "$OUT/check.log" | head -25
    timeout 240 python3 benchmarks/harness/gpu_kernels.py time --quick --ms 1,4,8,12,16 >"$OUT/time.log" 2>&1
    echo "time rc=$?"
    grep -E "roofline|ours" "$OUT/time.log"
    exit 0
fi

if [ "$what" = ab ]; then
    start=$SECONDS
    rm -rf /tmp/A && mkdir -p /tmp/A && tar -xf "${A_TAR:?A_TAR=a tar of the tree before}" -C /tmp/A || exit 1
    if [ -n "${TESTS:-}" ]; then
        rm -f python/radiance/_C.*.so
        (RADIANCE_GPU=cuda RADIANCE_GPU_ARCHS=${RADIANCE_GPU_ARCHS:-90} python3 setup.py -q build_ext --inplace \
            >"$OUT/build.log" 2>&1; echo $? >"$OUT/build.rc") &
    fi
    python3 /tmp/A/benchmarks/harness/gpu_kernels.py build --lib /tmp/A/lib.so --log "$OUT/nvcc_A.log" >/dev/null &
    python3 benchmarks/harness/gpu_kernels.py build --lib "$PWD/build/B/lib.so" --log "$OUT/nvcc_B.log" >/dev/null ||
        { tail -30 "$OUT/nvcc_B.log"; exit 1; }
    wait
    [ -f /tmp/A/lib.so ] || { echo "the build of A failed"; tail -30 "$OUT/nvcc_A.log"; exit 1; }
    echo "builds $((SECONDS - start)) s${TESTS:+ (library build rc $(cat "$OUT/build.rc"))}"
    if [ -n "${B_VARIANTS:-}" ]; then
        timeout 150 python3 benchmarks/harness/gpu_kernels.py check --lib build/B/lib.so --variants "auto,$B_VARIANTS" \
            >"$OUT/check.log" 2>&1
        echo "check of B rc=$? ($((SECONDS - start)) s) :: $(grep -E 'ALL CHECKS|FAILED' "$OUT/check.log")"
        grep -A 8 FAILED "$OUT/check.log" | head -10
    fi
    for r in 1 2; do
        timeout 200 python3 benchmarks/harness/ab_time.py --a /tmp/A/lib.so --b build/B/lib.so ${HEADS:+--heads "$HEADS"} \
            ${MS:+--m "$MS"} ${B_VARIANTS:+--b-variants "$B_VARIANTS"} >"$OUT/ab$r.log" 2>&1
        echo "ab_time run $r rc=$? ($((SECONDS - start)) s)"
    done
    if [ -n "${TESTS:-}" ] && [ "$(cat "$OUT/build.rc")" = 0 ]; then
        timeout 240 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py -k "$TESTS" >"$OUT/test_gpu.log" 2>&1
        echo "GPU tests rc=$? ($((SECONDS - start)) s) :: $(tail -1 "$OUT/test_gpu.log")"
        grep -E "^(FAILED|ERROR)" "$OUT/test_gpu.log" | head -10
        if [ -n "${MEMCHECK:-}" ]; then
            RADIANCE_TEST_NO_PROFILER=1 timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest -q -x \
                -p no:cacheprovider tests/test_gpu.py -k "$MEMCHECK" >"$OUT/memcheck.log" 2>&1
            echo "memcheck rc=$? ($((SECONDS - start)) s) :: $(grep -E 'ERROR SUMMARY|passed|failed' "$OUT/memcheck.log" | tail -2 | tr '\n' ' ')"
        fi
    elif [ -n "${TESTS:-}" ]; then
        echo "library build failed:"; grep -v ptxas "$OUT/build.log" | tail -15
    fi
    cat "$OUT/ab1.log"
    echo "== run 2, B / A"; grep -E "^##|^ +[0-9]+ " "$OUT/ab2.log" | awk '/^##/{print; next}{print $1, $NF}'
    exit 0
fi

if [ "$what" = wheel ]; then
    start=$SECONDS
    site=$(mktemp -d)
    # shellcheck disable=SC2086  # WHEEL may be a glob
    python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" ${WHEEL:?WHEEL=path of the wheel} \
        ${HUMMING_WHEEL:-} || exit 1
    export PYTHONPATH="$site:$PWD/tests"
    python3 -c 'import radiance, sys; print(radiance.__file__, radiance.gpu_backend(), radiance.gpu_device_count())'
    python3 -c "import radiance, sys; sys.exit(not radiance.__file__.startswith('$site'))" ||
        { echo "radiance is not imported from the wheel" >&2; exit 1; }
    timeout 330 python3 -m pytest -q -p no:cacheprovider -rfE tests/test_gpu.py tests/test_gpu_torch.py \
        tests/test_gpu_wmma.py tests/test_gpu_mfma.py tests/test_quantize_gpu.py tests/test_device_context.py \
        tests/test_torch_ops.py >"$OUT/test_gpu.log" 2>&1
    echo "GPU tests with the wheel rc=$? ($((SECONDS - start)) s) :: $(tail -1 "$OUT/test_gpu.log")"
    grep -E "^(FAILED|ERROR)" "$OUT/test_gpu.log" | head -20
    { nvidia-smi; timeout 400 python3 benchmarks/gpu.py --round-budget 0.1 --out "$OUT"; } >"$OUT/bench.log" 2>&1
    echo "gpu.py with the wheel rc=$? ($((SECONDS - start)) s)"
    grep -v "^plot" "$OUT/bench.log" | tail -12
    exit 0
fi

if [ "$what" = speed ]; then
    start=$SECONDS
    python3 benchmarks/harness/gpu_kernels.py build --log "$OUT/nvcc.log" || { tail -30 "$OUT/nvcc.log"; exit 1; }
    echo "harness build $((SECONDS - start)) s"
    # the library build (setup.py) in the background while the harness checks run
    rm -f python/radiance/_C.*.so
    (RADIANCE_GPU=cuda RADIANCE_GPU_ARCHS=${RADIANCE_GPU_ARCHS:-90} python3 setup.py -q build_ext --inplace \
        >"$OUT/build.log" 2>&1; echo $? >"$OUT/build.rc") &
    timeout 180 python3 benchmarks/harness/gpu_kernels.py check >"$OUT/check.log" 2>&1
    echo "check rc=$? ($((SECONDS - start)) s) :: $(grep -E 'ALL CHECKS|FAILED' "$OUT/check.log")"
    grep -A 12 FAILED "$OUT/check.log" | head -14
    wait
    if [ "$(cat "$OUT/build.rc")" = 0 ]; then
        timeout 90 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py -k "shared_x or fallback" \
            >"$OUT/test_shared_x.log" 2>&1
        echo "GPU tests (shared_x, fallback) rc=$? :: $(tail -1 "$OUT/test_shared_x.log")"
        grep -E "^(FAILED|E  )" "$OUT/test_shared_x.log" | head -8
        RADIANCE_TEST_NO_PROFILER=1 timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest -q -x \
            -p no:cacheprovider tests/test_gpu.py -k "(shared_x and bit_for_bit) or (shared_x and 5120-128-8)" \
            >"$OUT/memcheck.log" 2>&1
        echo "memcheck rc=$? :: $(grep -E 'ERROR SUMMARY|passed|failed' "$OUT/memcheck.log" | tail -2 | tr '\n' ' ')"
    else
        echo "library build failed:"; grep -v ptxas "$OUT/build.log" | tail -15
    fi
    echo "tests done $((SECONDS - start)) s"
    timeout 150 python3 benchmarks/harness/gpu_kernels.py time --quick --ms 1,4,8,12,16,64,128,256 \
        >"$OUT/time.log" 2>&1
    echo "time rc=$? ($((SECONDS - start)) s)"
    grep -E "roofline" "$OUT/time.log"
    if grep -q '^## variants' "$OUT/time.log"; then sed -n '/^## variants/,$p' "$OUT/time.log"
    else grep -E "ours|bf16|Error|error" "$OUT/time.log" | tail -30; fi
    exit 0
fi

if [ ! -f python/radiance/_C.*.so ] || [ "${REBUILD:-1}" = 1 ]; then
    rm -f python/radiance/_C.*.so
    (time RADIANCE_GPU=cuda RADIANCE_GPU_ARCHS=${RADIANCE_GPU_ARCHS:-90} \
        python3 setup.py -q build_ext --inplace) >"$OUT/build.log" 2>&1 \
        || { grep -v ptxas "$OUT/build.log" | tail -30; exit 1; }
fi
python3 -c "import radiance; print('backend', radiance.gpu_backend(), 'gpus', radiance.gpu_device_count())"

if [ "$what" != bench ]; then  # tests, smoke, all
    timeout 300 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py tests/test_gpu_torch.py \
        tests/test_torch_ops.py >"$OUT/test_gpu.log" 2>&1
    echo "GPU tests rc=$? :: $(tail -1 "$OUT/test_gpu.log")"
    RADIANCE_TEST_NO_PROFILER=1 timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest -q -x \
        -p no:cacheprovider tests/test_gpu.py \
        -k "(equals_cpu and bf16 and mse and outliers) or (matches_float64 and 5120) or hand_made or graphs or refused or (shared_x and bit_for_bit) or (shared_x and 640-128) or (tma_store and (700 or 40008-640))" \
        >"$OUT/memcheck.log" 2>&1
    echo "memcheck rc=$? :: $(grep -E 'ERROR SUMMARY|passed|failed' "$OUT/memcheck.log" | tail -2 | tr '\n' ' ')"
fi
if [ "$what" = smoke ]; then
    timeout 120 python3 benchmarks/gpu.py --heads 49152x576 --m 1,16,64 --round-budget 0.05 --out "$OUT/smoke" \
        >"$OUT/smoke.log" 2>&1
    echo "gpu.py smoke rc=$?"; tail -8 "$OUT/smoke.log"
fi
if [ "$what" = bench ] || [ "$what" = all ]; then
    { nvidia-smi; timeout 400 python3 benchmarks/gpu.py --round-budget 0.1 --quantize --out "$OUT"; } >"$OUT/bench.log" 2>&1
    echo "gpu.py rc=$?"
    timeout 120 python3 benchmarks/torch_op.py >"$OUT/torch_op.log" 2>&1
    echo "torch_op.py rc=$?"
    tail -40 "$OUT/bench.log"
    tail -25 "$OUT/torch_op.log"
fi
