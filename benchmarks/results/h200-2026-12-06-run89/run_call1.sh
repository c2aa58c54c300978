#!/usr/bin/env bash
# Twenty-fifth session (2026-12-06): run 89 measured and tested, the split-k failure of the
# twenty-fourth session's call 2 taken apart. Run from branch fold-direct-scales with carries
# .carry/a_lib.tar.xz (A: main's benchmark build), .carry/c_lib.tar.xz (C: the branch's),
# python/radiance/_C.abi3.so (the library with C), .carry/d_C.abi3.so.xz (D: the library with C
# and the split-k pair's remote arrival released at cluster scope, not CTA scope) and .carry/whl;
# their recipe is run_call4.sh's header in ../h200-2026-12-06-profile.
# 1. C against A in one timing loop (ab_c.log);
# 2. the fold, persistent-stream and split-k tests on the library with C in 8 processes, memcheck
#    of two fold cases (t/);
# 3. split_k_repro.py on the library with C: the failing seed 6 times, then fresh seeds (repro_c);
#    where it fails, again on the library with D (repro_d).
. "$(dirname "$0")/../../harness/call_preamble.sh"
profile=benchmarks/results/h200-2026-12-06-profile
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
for v in a c; do tar -xJf .carry/${v}_lib.tar.xz || exit 1; done
logged ab_c 70 python3 benchmarks/harness/ab_time.py --a build/A/lib.so --b build/C/lib.so \
    --heads 262144x5376,248320x5120,262144x640 --m 192,384,2048
tail -30 "$OUT/ab_c.log"
mkdir -p "$OUT/t"
OUT=$OUT/t TESTS_K="fold or persistent_stream or split_k" bash benchmarks/harness/library_call.sh tests \
    "130-40001-128 or 200-20704-4096" | tail -4
logged repro_c 100 python3 $profile/split_k_repro.py --repeat 6 --fresh 24 --tag C
grep -E "failed|bad" "$OUT/repro_c.log" | head -20
if grep -q " bad of \|Error\|Traceback" "$OUT/repro_c.log"; then
    xz -dc .carry/d_C.abi3.so.xz >python/radiance/_C.abi3.so
    logged repro_d 100 python3 $profile/split_k_repro.py --repeat 6 --fresh 24 --tag D
    grep -E "failed|bad" "$OUT/repro_d.log" | head -20
fi
