#!/usr/bin/env bash
# The ignored files a lent-GPU call carries, built on the CPU machine from this tree (a new
# session's machine has none of them; about 4 minutes on 2 cores):
#   python/radiance/_C.abi3.so  the library as users build it (setup.py build_ext --inplace,
#                               RADIANCE_GPU=cuda RADIANCE_GPU_ARCHS=90): library_call.sh, the
#                               run_call*.sh that time or test the library
#   .carry/b_lib.tar.xz         the benchmark build with every variant of variants.def
#                               (gpu_kernels.py build): the run_call*.sh of A/B runs unpack it
#   .carry/whl/                 wheels the GPU machine has no index for: Humming (vLLM's W4A16
#                               kernel, gpu.py's peer), pytest-xdist and execnet (library_call.sh
#                               runs the GPU tests in 8 processes with them)
#
#   bash benchmarks/harness/make_carries.sh [library] [bench] [wheels]    (default: all three)
#
# PYTHON (default python3) needs numpy and setuptools for the library build; nvcc on PATH.
set -euo pipefail
cd "$(dirname "$0")/../.."
python=${PYTHON:-python3}
parts=("$@")
[ ${#parts[@]} -gt 0 ] || parts=(library bench wheels)
for part in "${parts[@]}"; do
    start=$SECONDS
    case $part in
    library)
        rm -f python/radiance/_C*.so
        mkdir -p build
        RADIANCE_GPU=cuda RADIANCE_GPU_ARCHS=90 MAX_JOBS=${MAX_JOBS:-2} "$python" setup.py -q build_ext --inplace \
            --force >build/library.log 2>&1 || { tail -20 build/library.log; exit 1; }
        ls python/radiance/_C*.so
        ;;
    bench)
        "$python" benchmarks/harness/gpu_kernels.py build --lib "$PWD/build/B/lib.so"
        mkdir -p .carry
        tar -cf - build/B/lib.so | xz -T2 -3 >.carry/b_lib.tar.xz
        ls -l .carry/b_lib.tar.xz
        ;;
    wheels)
        "$python" -m pip download -q --no-deps humming-kernels==0.1.19 pytest-xdist execnet -d .carry/whl
        ls .carry/whl
        ;;
    *)
        echo "make_carries.sh: library, bench or wheels, not $part" >&2
        exit 2
        ;;
    esac
    echo "$part: $((SECONDS - start)) s"
done
