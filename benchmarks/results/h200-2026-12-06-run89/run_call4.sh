#!/usr/bin/env bash
# Twenty-fifth session, call 4: E, the split-k hand-over fixed by a data dependency (the remote
# arrival's count computed from the values read; hip/ptx_sm90.h), instead of D's cluster-scope
# release. Carries: .carry/c_lib.tar.xz, .carry/e_lib.tar.xz (benchmark builds), .carry/c_C.abi3.so.xz
# (the library with C), python/radiance/_C.abi3.so (the library with E), .carry/whl.
# 1. E against C at 9-16 tokens on gpu.py's heads (ab_e.log);
# 2. the new load test on the library with C (expected to fail: the race is there) and with E, then
#    tests/test_gpu.py -k "split_k or persistent_stream" with E in 8 processes (t/);
# 3. benchmarks/gpu.py with E beside bf16, fp8 and Humming (b/).
. "$(dirname "$0")/../../harness/call_preamble.sh"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
for v in c e; do tar -xJf .carry/${v}_lib.tar.xz || exit 1; done
logged ab_e 60 python3 benchmarks/harness/ab_time.py --a build/C/lib.so --b build/E/lib.so \
    --heads 248320x5120,262144x5376,128256x4096,151936x1024,262144x640 --m 9,12,16
tail -32 "$OUT/ab_e.log"
cp python/radiance/_C.abi3.so /tmp/e_C.abi3.so
xz -dc .carry/c_C.abi3.so.xz >python/radiance/_C.abi3.so
logged load_c 120 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py -k split_k_under_load
tail -3 "$OUT/load_c.log"
cp /tmp/e_C.abi3.so python/radiance/_C.abi3.so
logged load_e 120 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py -k split_k_under_load
tail -3 "$OUT/load_e.log"
mkdir -p "$OUT/t" "$OUT/b"
OUT=$OUT/t TESTS_K="(split_k or persistent_stream) and not under_load" bash benchmarks/harness/library_call.sh \
    tests "persistent_stream_units and 1024-256-16" | tail -4
OUT=$OUT/b bash benchmarks/harness/library_call.sh bench | tail -12
