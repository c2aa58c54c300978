#!/usr/bin/env bash
# device call 1 (prepared in a session of 2026-12-03 with no GPU time left, run 2026-12-03 09:55 UTC): the folding
# kernel's tiles of two blocks per SM (RAD_FOLD_TILES_TWO_PER_SM, hip/apply_wgmma_fold.hip;
# docs/PERF_LOG.md twelfth round, run 56). Every new variant against float64 first, then in one
# timing loop beside the library's tile ("auto" of the same build, as A and as B) at 48-128 tokens,
# then memcheck of two of them. One build only: the library's plan did not change.
#   OUT=... bash benchmarks/results/h200-2026-12-03-fold-two-per-sm/run_call1.sh
set -uo pipefail
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/python:$PWD/tests"
. benchmarks/harness/out_files.sh
trap bundle_out EXIT
H=benchmarks/harness/gpu_kernels.py
B2="fold1x64b2,fold1x96b2,fold1x128b2,fold2x64b2,fold2x96b2,fold1x64b2t,fold1x96b2t,fold1x128b2t,fold2x64b2t,fold2x96b2t"
start=$SECONDS
if [ -f build/B/lib.so ]; then # carried from the CPU machine (same nvcc 13.0 build)
    echo "build/B/lib.so carried: $(md5sum build/B/lib.so | cut -c1-12)"
else
    python3 $H build --lib "$PWD/build/B/lib.so" --log "$OUT/nvcc.log" >/dev/null || { tail -30 "$OUT/nvcc.log"; exit 1; }
    echo "build ($((SECONDS - start)) s)"
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
timeout 150 python3 $H check --lib build/B/lib.so --variants "auto,fold3x96,fold2x128,$B2" >"$OUT/check.log" 2>&1
rc=$?
echo "check rc=$rc ($((SECONDS - start)) s) :: $(grep -E 'ALL CHECKS|FAILED' "$OUT/check.log")"
grep -A 8 FAILED "$OUT/check.log" | head -10
if [ $rc = 124 ]; then # a kernel hung (call 0): which one
    for v in ${B2//,/ }; do
        timeout 30 python3 $H check --lib build/B/lib.so --variants "$v" >"$OUT/probe_$v.log" 2>&1
        echo "probe $v rc=$? :: $(grep -E 'ALL CHECKS|FAILED' "$OUT/probe_$v.log")"
    done
fi
[ $rc = 0 ] || exit 1
AB="timeout 150 python3 benchmarks/harness/ab_time.py --a build/B/lib.so --b build/B/lib.so"
for r in 1 2; do
    $AB --heads 128256x4096,262144x5376,248320x5120,151936x5120 --m 48,64,96,128 \
        --b-variants "fold2x128,$B2" >"$OUT/ab_big$r.log" 2>&1
    echo "ab_big$r rc=$? ($((SECONDS - start)) s)"
done
$AB --heads 151936x1024,262144x640,49152x576:64 --m 48,64,96,128 --b-variants "fold2x128,$B2" >"$OUT/ab_small.log" 2>&1
echo "ab_small rc=$? ($((SECONDS - start)) s)"
for f in ab_big1 ab_big2 ab_small; do echo "== $f"; grep -vE "^# |^$" "$OUT/$f.log"; done
RADIANCE_TEST_NO_PROFILER=1 timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 \
    python3 $H check --lib build/B/lib.so --variants "fold1x96b2t,fold2x96b2" >"$OUT/memcheck.log" 2>&1
echo "memcheck rc=$? ($((SECONDS - start)) s) :: $(grep -E 'ERROR SUMMARY' "$OUT/memcheck.log" | tail -1)"
