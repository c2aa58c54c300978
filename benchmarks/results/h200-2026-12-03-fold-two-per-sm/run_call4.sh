#!/usr/bin/env bash
# device call 4 (2026-12-03, run 57): the benchmark build of call 2's tree plus a 48-token tile of
# two blocks per SM (fold2x48b2[t]), compiled on the CPU machine and carried as build/B/lib.so.
# The new variants against float64 first; then, in one timing loop, at 40 and 48 tokens, against
# the library's 48-token tile (auto: fold3x48, written by TMA where k <= 1024), and on Llama 3.2
# 1B's 128256 x 2048 (the rule takes two blocks there at 49-96 tokens, not measured in run 56) the
# new plan against the tiles it replaced (fold3x64, fold3x96).
#   OUT=... bash benchmarks/results/h200-2026-12-03-fold-two-per-sm/run_call4.sh
set -uo pipefail
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/python:$PWD/tests"
. benchmarks/harness/out_files.sh
trap bundle_out EXIT
H=benchmarks/harness/gpu_kernels.py
start=$SECONDS
ls build/B/lib.so || exit 1
timeout 100 python3 $H check --lib build/B/lib.so --variants "auto,fold2x48b2,fold2x48b2t" >"$OUT/check.log" 2>&1
rc=$?
echo "check rc=$rc ($((SECONDS - start)) s) :: $(grep -E 'ALL CHECKS|FAILED' "$OUT/check.log")"
grep -A 8 FAILED "$OUT/check.log" | head -10
[ $rc = 0 ] || exit 1
AB="timeout 150 python3 benchmarks/harness/ab_time.py --a build/B/lib.so --b build/B/lib.so"
$AB --heads 128256x4096,262144x640,151936x1024,49152x576:64,128256x2048,262144x5376,248320x5120,151936x5120 \
    --m 40,48 --b-variants fold3x48,fold3x48t,fold2x48b2t,fold2x64b2t >"$OUT/ab48.log" 2>&1
echo "ab48 rc=$? ($((SECONDS - start)) s)"
$AB --heads 128256x2048 --m 56,64,80,96,112,128 --b-variants fold3x64,fold3x96,fold2x128t >"$OUT/ab2048.log" 2>&1
echo "ab2048 rc=$? ($((SECONDS - start)) s)"
for f in ab48 ab2048; do echo "== $f"; grep -vE "^# |^$" "$OUT/$f.log"; done
