#!/usr/bin/env bash
# Twenty-sixth session, call 6: the library with runs 90 and 91 (split k's halves one step apart at
# k = 5376; the folding kernel's 16-token tile at 9-16 tokens where k <= 1024 cannot be split):
# the whole tests/test_gpu.py in 8 processes, memcheck of one case of each (t/), then the other
# GPU test files (other.log). Carry python/radiance/_C.abi3.so and .carry/whl.
. "$(dirname "$0")/../../harness/call_preamble.sh"
mkdir -p "$OUT/t"
OUT=$OUT/t bash benchmarks/harness/library_call.sh tests \
    "fine_ring and 5376-second_unit-16 or every_tile and 40001-640-128-12-auto" | tail -6
site=$(mktemp -d)
python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" .carry/whl/pytest_xdist-*.whl \
    .carry/whl/execnet-*.whl
PYTHONPATH="$PYTHONPATH:$site" OMP_NUM_THREADS=2 logged other 200 python3 -m pytest -q -p no:cacheprovider -n 8 \
    tests/test_gpu_torch.py tests/test_quantize_gpu.py tests/test_torch_ops.py tests/test_device_context.py \
    tests/test_dlpack_producers.py
tail -3 "$OUT/other.log"
