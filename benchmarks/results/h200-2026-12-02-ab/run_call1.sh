# device call 1 (2026-12-02, fourth session): the staggered start, the 48-token tile, the dead
# half-step, in the kernel harness: checked against float64, then timed beside the tiles of main
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/python:$PWD/tests"
. benchmarks/harness/out_files.sh
trap bundle_out EXIT
H=benchmarks/harness/gpu_kernels.py
start=$SECONDS
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
python3 $H build --log "$OUT/nvcc.log" || { tail -30 "$OUT/nvcc.log"; exit 1; }
echo "build $((SECONDS - start)) s"
timeout 150 python3 $H check --variants fold3x16,fold3x32,fold3x48,fold3x64,fold3x128,fold3x128l1,fold3x128l2,fold2x192,fold2x192l1,fold2x192l2,fold2x256,fold2x256l1,fold2x256l2 >"$OUT/check.log" 2>&1
echo "check rc=$? ($((SECONDS - start)) s) :: $(grep -E 'ALL CHECKS|FAILED' "$OUT/check.log")"
grep -A 12 FAILED "$OUT/check.log" | head -14
T="python3 $H time --quick"
timeout 170 $T --heads 262144x640,151936x1024,49152x576 --ms 128,256,384,1024,2048 \
    --variants auto,fold3x128,fold3x128l1,fold3x128l2,fold2x192,fold2x192l1,fold2x192l2,fold2x256,fold2x256l1,fold2x256l2 \
    >"$OUT/time_small.log" 2>&1
echo "time_small rc=$? ($((SECONDS - start)) s)"
timeout 60 $T --heads 49152x576 --ms 1,4,8,12,16,24,32,48,64 --variants auto,fold3x16,fold3x32,fold3x48,fold3x64 \
    >"$OUT/time_smol.log" 2>&1
echo "time_smol rc=$? ($((SECONDS - start)) s)"
timeout 80 $T --heads 248320x5120,128256x4096,262144x5376 --ms 40,48,64 --variants auto,fold3x48,fold3x64 \
    >"$OUT/time_48.log" 2>&1
echo "time_48 rc=$? ($((SECONDS - start)) s)"
timeout 100 $T --heads 248320x5120,128256x4096 --ms 384,1024,2048 \
    --variants auto,fold2x192,fold2x192l1,fold2x192l2,fold2x256,fold2x256l1,fold2x256l2 >"$OUT/time_big.log" 2>&1
echo "time_big rc=$? ($((SECONDS - start)) s)"
for f in time_small time_smol time_48 time_big; do echo "== $f"; sed -n '/## variants/,$p' "$OUT/$f.log"; done
