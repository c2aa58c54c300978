#!/bin/bash
# H200 call 4: the fold kernel's epilogue staged through shared memory (B, this tree) against the
# direct one (A: .carry/fold_direct.hip, tested in call 3): B's float64 tests of every fold tile
# and memcheck, the split-k kernel's name at 16 tokens (sm_90a build), gpu.py on every head with
# the build that passed (B if it did), then A on the small heads for a same-machine comparison.
set -uo pipefail
export PYTHONUNBUFFERED=1
start=$SECONDS
rm -rf /tmp/A && mkdir -p /tmp/A && cp -r hip csrc python setup.py pyproject.toml build_backend MANIFEST.in README.md /tmp/A/ && cp .carry/fold_direct.hip /tmp/A/hip/apply_wgmma_fold.hip
rm -f python/radiance/_C*.so /tmp/A/python/radiance/_C*.so
(cd /tmp/A && RADIANCE_GPU=cuda RADIANCE_GPU_ARCHS=90 MAX_JOBS=8 python3 setup.py -q build_ext --inplace >/tmp/buildA.log 2>&1; echo $? >/tmp/buildA.rc) &
RADIANCE_GPU=cuda RADIANCE_GPU_ARCHS=90 MAX_JOBS=8 python3 setup.py -q build_ext --inplace >/tmp/buildB.log 2>&1; echo "build B rc=$? ($((SECONDS - start)) s)"
wait; echo "build A rc=$(cat /tmp/buildA.rc) ($((SECONDS - start)) s)"
export PYTHONPATH=$PWD/python:$PWD/tests
timeout 110 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py -k "every_tile or every_fold_tile or hand_made or any_m or matches_float64" >"$OUT/test.log" 2>&1
rc=$?; echo "B fold tests rc=$rc ($((SECONDS - start)) s) :: $(tail -1 "$OUT/test.log")"; grep -E "^FAILED" "$OUT/test.log" | head -5
timeout 45 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py \
    -k "every_fold_tile and (1000 or 300 or 4096 or 6144)" >"$OUT/memcheck.log" 2>&1
echo "B memcheck rc=$? :: $(grep -E 'ERROR SUMMARY|passed|failed' "$OUT/memcheck.log" | tail -2 | tr '\n' ' ')"
timeout 30 python3 - <<'PY'
import torch, radiance
from torch.profiler import profile, ProfilerActivity
w = torch.randn(248320, 5120, device="cuda", dtype=torch.bfloat16)
p, s = radiance.quantize_rows(w)
for m in (1, 16, 64, 2048):
    x = torch.randn(m, 5120, device="cuda", dtype=torch.bfloat16)
    radiance.apply(x, p, s); torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        radiance.apply(x, p, s); torch.cuda.synchronize()
    print("M", m, "kernels:", sorted({e.name.split("(")[0][-60:] for e in prof.events() if "apply" in e.name}))
PY
[ $rc = 0 ] || { echo "B failed: gpu.py runs A"; rm -f python/radiance/_C*.so; cp /tmp/A/python/radiance/_C*.so python/radiance/; }
python3 -m pip install -q --no-index --no-deps .carry/whl/humming_kernels-*.whl 2>&1 | tail -1
{ nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv; timeout $((470 - (SECONDS - start))) python3 benchmarks/gpu.py --round-budget 0.07 --out /tmp/g; } >"$OUT/bench.log" 2>&1
echo "gpu.py rc=$? ($((SECONDS - start)) s)"; grep -E "^## |worst" "$OUT/bench.log" | grep -v "^## worst" | head -20
cp /tmp/g/results.md "$OUT/" 2>/dev/null
rm -f python/radiance/_C*.so; cp /tmp/A/python/radiance/_C*.so python/radiance/
timeout $((500 - (SECONDS - start))) python3 benchmarks/gpu.py --heads 262144x640,49152x576,151936x1024 --m 64,128,192,256,1024,2048 --round-budget 0.07 --peers bf16 --out /tmp/gA >"$OUT/bench_A.log" 2>&1
echo "A gpu.py rc=$? ($((SECONDS - start)) s)"
