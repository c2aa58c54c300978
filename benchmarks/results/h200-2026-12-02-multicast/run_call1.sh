#!/usr/bin/env bash
# device call 1 (2026-12-02, sixth session): the cluster pairs sharing activation boxes by TMA
# multicast (PERF_LOG run 53) against main, then Nsight Compute of the cells that trail: radiance
# and Humming on 49152 x 576 (g64) at 1 and 8 tokens and on 128256 x 4096 at 96, radiance on
# 262144 x 640 at 384 (what remains between tiles), a multicast variant at 96.
#   OUT=... bash benchmarks/results/h200-2026-12-02-multicast/run_call1.sh   (A: .carry/main.tar)
set -uo pipefail
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/python:$PWD/tests"
. benchmarks/harness/out_files.sh
trap bundle_out EXIT
H=benchmarks/harness/gpu_kernels.py
start=$SECONDS
python3 -m pip install -q --no-index --no-deps .carry/whl/humming_kernels-*.whl 2>&1 | tail -1
rm -rf /tmp/A build/B && mkdir -p /tmp/A && tar -xf .carry/main.tar -C /tmp/A
python3 /tmp/A/$H build --lib /tmp/A/lib.so --log /tmp/nvcc_A.log >/dev/null &
python3 $H build --lib "$PWD/build/B/lib.so" --log /tmp/nvcc_B.log >/dev/null || { tail -30 /tmp/nvcc_B.log; exit 1; }
wait
echo "builds ($((SECONDS - start)) s)"
MC=fold3x48m,fold3x64m,fold3x96m,fold3x128m,fold3x160m,fold2x128tm,fold2x160tm,fold2x192tm,fold2x256tm
timeout 150 python3 $H check --lib build/B/lib.so --variants "auto,$MC" >"$OUT/check.log" 2>&1
rc=$?
echo "check rc=$rc ($((SECONDS - start)) s) :: $(grep -E 'ALL CHECKS|FAILED' "$OUT/check.log")"
grep -A 8 FAILED "$OUT/check.log" | head -10
if [ $rc = 0 ]; then
    for r in 1 2; do
        timeout 110 python3 benchmarks/harness/ab_time.py --a /tmp/A/lib.so --b build/B/lib.so \
            --heads 128256x4096,248320x5120,151936x1024,262144x640 --m 48,64,96,128,160,192,256 \
            --b-variants fold3x48m,fold3x64m,fold3x96m,fold3x128m,fold3x160m,fold2x192tm,fold2x256tm >"$OUT/ab$r.log" 2>&1
        echo "ab$r rc=$? ($((SECONDS - start)) s)"
    done
    grep -vE "^#" "$OUT/ab1.log" | grep -v "^$"; echo "== run 2"; grep -E "^ +[0-9]+ " "$OUT/ab2.log"
    prof=",96:fold3x96m:128256x4096"
fi
OUT=$OUT/ncu LIB=build/B/lib.so timeout $((590 - (SECONDS - start))) bash benchmarks/harness/ncu_profile.sh \
    "1:auto:49152x576:64,1:humming:49152x576:64,8:auto:49152x576:64,8:humming:49152x576:64,96:auto:128256x4096,96:humming:128256x4096,384:auto:262144x640${prof:-}"
echo "ncu done ($((SECONDS - start)) s)"
