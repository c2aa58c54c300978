#!/usr/bin/env bash
# The nineteenth session's second device call (2026-12-05): the library's speed beside its peers,
# run 79's prepared ring (split k with the scales in 2-step slots), and where the worst Humming cells
# wait now. Three parts, each in its own folder of $OUT:
#   bench/  benchmarks/harness/library_call.sh bench (gpu.py on the library built by setup.py)
#   ring/   ../h200-2026-12-04-ring-slots/run_call5.sh (the benchmark build B of this tree)
#   ncu/    Nsight Compute of the library's plan and of Humming's kernel at 16 tokens on
#           248320 x 5120 and at 128 tokens on 128256 x 4096 (issue 22's Humming cells, 0.96x and
#           0.90x at 21:38 UTC on 2026-12-04), with the time that is left
# Carry python/radiance/_C.abi3.so, .carry/b_lib.tar.xz and .carry/whl:
#   rm -f python/radiance/_C.abi3.so
#   RADIANCE_GPU=cuda RADIANCE_GPU_ARCHS=90 python3 setup.py -q build_ext --inplace --force
#   python3 benchmarks/harness/gpu_kernels.py build --lib $PWD/build/B/lib.so
#   tar -cf - build/B/lib.so | xz -T2 -3 > .carry/b_lib.tar.xz
#   device: bash benchmarks/results/h200-2026-12-05-library/run_call2.sh
. "$(dirname "$0")/../../harness/call_preamble.sh"
OUT=$OUT/bench bash benchmarks/harness/library_call.sh bench
echo "bench done ($((SECONDS - call_started)) s)"
OUT=$OUT/ring bash benchmarks/results/h200-2026-12-04-ring-slots/run_call5.sh
echo "ring done ($((SECONDS - call_started)) s)"
site=$(mktemp -d)
python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" .carry/whl/humming_kernels-*.whl
big=248320x5120 mid=128256x4096
runs="16:auto:$big,16:humming:$big,128:auto:$mid,128:humming:$mid"
PYTHONPATH="$PYTHONPATH:$site" OUT=$OUT/ncu LIB=build/B/lib.so \
    timeout $((590 - (SECONDS - call_started))) bash benchmarks/harness/ncu_profile.sh "$runs"
