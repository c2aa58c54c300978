# device call 3 (2026-12-02, fourth session): main (A, HEAD) against this tree (B) in one timing
# loop (benchmarks/harness/ab_time.py), after B's fold variants are checked against float64 with
# the folded reference
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/python:$PWD/tests"
. benchmarks/harness/out_files.sh
trap bundle_out EXIT
H=benchmarks/harness/gpu_kernels.py
start=$SECONDS
rm -rf /tmp/A && mkdir -p /tmp/A && tar -xf .carry/head.tar -C /tmp/A
python3 /tmp/A/$H build --lib /tmp/A/lib.so --log "$OUT/nvcc_A.log" >/dev/null &
python3 $H build --lib "$PWD/build/B/lib.so" --log "$OUT/nvcc_B.log" || { tail -30 "$OUT/nvcc_B.log"; exit 1; }
wait
echo "builds ($((SECONDS - start)) s)"; ls -la /tmp/A/lib.so build/B/lib.so
timeout 120 python3 $H check --lib build/B/lib.so --variants auto,fold3x16,fold3x32,fold3x48,fold3x64,fold3x96,fold3x128,fold3x128l1,fold3x160,fold2x192,fold2x192l1,fold2x224,fold2x256,fold2x256l1,fold2x256l2 >"$OUT/check.log" 2>&1
echo "check rc=$? ($((SECONDS - start)) s) :: $(grep -E 'ALL CHECKS|FAILED' "$OUT/check.log")"
grep -A 8 FAILED "$OUT/check.log" | head -10
A="python3 benchmarks/harness/ab_time.py --a /tmp/A/lib.so --b build/B/lib.so"
timeout 150 $A >"$OUT/ab.log" 2>&1
echo "ab rc=$? ($((SECONDS - start)) s)"; cat "$OUT/ab.log"
timeout 150 $A --heads 248320x5120,151936x1024,262144x640,49152x576 --m 96,128,1024,2048 \
    --b-variants fold3x96,fold3x128,fold2x256,fold2x256l1 >"$OUT/ab_lag.log" 2>&1
echo "ab_lag rc=$? ($((SECONDS - start)) s)"; cat "$OUT/ab_lag.log"
