#!/usr/bin/env bash
# Prepared in the twenty-fourth session (2026-12-06; docs/PERF_LOG.md, twenty-ninth round) and not
# run: the session's device time ran out in failed starts. Run it from branch fold-direct-scales
# (run 89: the folding kernel's scales loaded straight into the registers the fragments read; the
# same change as run89_fold_direct_scales.patch here, `git apply` on main where the branch is
# gone), with these carries built on the CPU machine first (about 6 minutes on 2 cores):
#   git checkout main && python3 benchmarks/harness/gpu_kernels.py build --lib "$PWD/build/A/lib.so" &&
#       tar -cf - build/A/lib.so | xz -T2 -3 >.carry/a_lib.tar.xz        # A: the build before
#   git checkout fold-direct-scales && python3 benchmarks/harness/gpu_kernels.py build --lib "$PWD/build/C/lib.so" &&
#       tar -cf - build/C/lib.so | xz -T2 -3 >.carry/c_lib.tar.xz        # C: run 89
#   bash benchmarks/harness/make_carries.sh library wheels              # the library with C, .carry/whl
# then one lent call with carry .carry/a_lib.tar.xz, .carry/c_lib.tar.xz, .carry/whl and
# python/radiance/_C.abi3.so, its steps in the order of what they decide (about 330 s):
# 1. C against A in one timing loop (ab_c.log): if C is faster at 192-2048 tokens, the branch
#    lands (its SASS differs from main's only in the 38 folding kernels of one block per SM);
# 2. tests/test_gpu.py -k "fold or persistent_stream" on the library with C, in 8 processes, and
#    memcheck of a new fold case of one step per tile and a last round cut along k (t/);
# 3. the split-k failure of call 2 (persistent_stream_units[1024-256-16] on an H100, seed
#    2494947757) taken apart by split_k_repro.py: its seed 3 times, then fresh seeds (repro.log);
# 4. benchmarks/gpu.py on the library with C, beside bf16, fp8 and Humming (b/), where time is left.
. "$(dirname "$0")/../../harness/call_preamble.sh"
here=benchmarks/results/h200-2026-12-06-profile
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
for v in a c; do tar -xJf .carry/${v}_lib.tar.xz || exit 1; done
logged ab_c 60 python3 benchmarks/harness/ab_time.py --a build/A/lib.so --b build/C/lib.so \
    --heads 262144x5376,248320x5120,262144x640 --m 192,384,2048
tail -30 "$OUT/ab_c.log"
mkdir -p "$OUT/t" "$OUT/b"
OUT=$OUT/t TESTS_K="fold or persistent_stream" bash benchmarks/harness/library_call.sh tests \
    "130-40001-128 or 200-20704-4096" | tail -4
logged repro 40 python3 $here/split_k_repro.py --repeat 3 --fresh 8 --tag single
grep -E "failed|repeat|bad" "$OUT/repro.log" | head -20
OUT=$OUT/b bash benchmarks/harness/library_call.sh bench | tail -12
