#!/usr/bin/env bash
# device call 1 (2026-12-03; prepared in the session of 2026-12-02), three changes against main (A = .carry/main.tar):
#  - the register pipe (49152 x 576 at 1-8 tokens: 126 registers, 4 blocks per SM, 768 blocks in
#    1.45 waves: ncu in ../h200-2026-12-02-multicast) sized for 6 or 8 blocks per SM: variants mma3b6, mma4b6, mma2b8, mma3b8;
#  - the split-k stream kernel (9-16 tokens) and the multicast fold variants handing slots back
#    with a CTA-scope release (no MEMBAR.ALL.GPU per unit): B's auto against A's at 9-16 tokens;
#  - every variant touched checked against float64 first.
#   OUT=... bash benchmarks/results/h200-2026-12-03-regpipe/run_call1.sh
set -uo pipefail
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/python:$PWD/tests"
. benchmarks/harness/out_files.sh
trap bundle_out EXIT
H=benchmarks/harness/gpu_kernels.py
start=$SECONDS
rm -rf /tmp/A build/B && mkdir -p /tmp/A && tar -xf .carry/main.tar -C /tmp/A
python3 /tmp/A/$H build --lib /tmp/A/lib.so --log /tmp/nvcc_A.log >/dev/null &
python3 $H build --lib "$PWD/build/B/lib.so" --log /tmp/nvcc_B.log >/dev/null || { tail -30 /tmp/nvcc_B.log; exit 1; }
wait
echo "builds ($((SECONDS - start)) s)"
timeout 150 python3 $H check --lib build/B/lib.so \
    --variants "auto,mma1x1,mma3b6,mma4b6,mma2b8,mma3b8,streamsplitk,streamsplitk2c,fold3x96m,fold3x128m" >"$OUT/check.log" 2>&1
rc=$?
echo "check rc=$rc ($((SECONDS - start)) s) :: $(grep -E 'ALL CHECKS|FAILED' "$OUT/check.log")"
grep -A 8 FAILED "$OUT/check.log" | head -10
[ $rc = 0 ] || exit 1
AB="timeout 100 python3 benchmarks/harness/ab_time.py --a /tmp/A/lib.so --b build/B/lib.so"
for r in 1 2; do
    $AB --heads 49152x576,49152x576:32,128256x4096:64,151936x1024:64 --m 1,2,4,8 \
        --b-variants mma1x1,mma3b6,mma4b6,mma2b8,mma3b8 >"$OUT/ab_mma$r.log" 2>&1
    echo "ab_mma$r rc=$? ($((SECONDS - start)) s)"
    $AB --heads 248320x5120,151936x5120,128256x4096,151936x1024 --m 9,12,16 >"$OUT/ab_splitk$r.log" 2>&1
    echo "ab_splitk$r rc=$? ($((SECONDS - start)) s)"
done
$AB --heads 128256x4096 --m 96,128 --b-variants fold3x96m,fold3x128m >"$OUT/ab_multicast.log" 2>&1
echo "ab_multicast rc=$? ($((SECONDS - start)) s)"
for f in ab_mma1 ab_mma2 ab_splitk1 ab_splitk2 ab_multicast; do echo "== $f"; grep -vE "^# |^$" "$OUT/$f.log"; done
