#!/usr/bin/env bash
# The two-GPU checks on a lent 2-GPU H200 host (kind nvidia-h200-x2), recorded in $OUT:
# tests/test_multi_gpu.py (one process, two GPUs: device guard, streams, graphs, per-device
# caches) and tests/test_tensor_parallel.py (TP=2 over NCCL), with NVLink multicast off.
#
#   OUT=/tmp/out bash benchmarks/harness/multi_gpu_run.sh          # build, then test (one call)
#   OUT=/tmp/out bash benchmarks/harness/multi_gpu_run.sh build    # build only (the .so stays in the
#   OUT=/tmp/out bash benchmarks/harness/multi_gpu_run.sh test     #   tree for the next call), test only
#
# Two calls (build, then test) leave the tests the whole 600 s of a call; `all` gives them what the
# build left (TEST_TIMEOUT_S overrides). Writes $OUT/build.log and $OUT/multi_gpu.log (machine,
# topology, versions, pytest -v -rs) and exits with pytest's status; 3 where fewer than two GPUs
# are visible (everything would skip: not a pass).
# Needs python3 with torch (CUDA), numpy, ml_dtypes and pytest, as benchmarks/harness/device_run.sh does;
# the host reaches no package index, so a missing one is reported, not installed. vLLM is not
# needed: the tests that use it skip, saying so.
. "$(dirname "$0")/call_preamble.sh"
what=${1:-all}
export NCCL_NVLS_ENABLE=0  # NVLink multicast off, before any process group exists
log="$OUT/multi_gpu.log"

case "$what" in all | build | test) ;; *) echo "usage: $0 [all|build|test]" >&2; exit 2 ;; esac

if ! python3 -c "import torch, numpy, ml_dtypes, pytest" 2>"$OUT/imports.log"; then
    echo "missing Python packages (this host installs nothing):"; cat "$OUT/imports.log"; exit 1
fi

if [ "$what" != test ]; then
    rm -f python/radiance/_C.*.so
    echo "building the CUDA extension in place ($(date -u +%H:%M:%S))"
    (time RADIANCE_GPU=cuda RADIANCE_GPU_ARCHS=${RADIANCE_GPU_ARCHS:-90} \
        python3 setup.py -q build_ext --inplace) >"$OUT/build.log" 2>&1 \
        || { grep -v ptxas "$OUT/build.log" | tail -30; exit 1; }
    grep -E "^real" "$OUT/build.log"
    [ "$what" = build ] && exit 0
fi

{
    echo "=== $(date -u '+%Y-%m-%d %H:%M:%S UTC') $(hostname)" \
        "commit $(git rev-parse --short HEAD 2>/dev/null)"
    if command -v nvidia-smi >/dev/null; then
        nvidia-smi --query-gpu=index,name,pci.bus_id,memory.total,driver_version --format=csv
        echo "--- nvidia-smi topo -m"
        nvidia-smi topo -m
    else
        echo "no nvidia-smi on this host"
    fi
    echo "--- versions"
    python3 - <<'EOF'
import os
import numpy, torch, radiance
nccl = torch.cuda.nccl.version() if torch.cuda.is_available() else None
print(f"torch {torch.__version__} (CUDA {torch.version.cuda}, NCCL {nccl}), "
      f"numpy {numpy.__version__}")
print(f"radiance {radiance.__file__}: backend {radiance.gpu_backend()}, "
      f"{radiance.gpu_device_count()} GPUs; torch sees {torch.cuda.device_count()}")
print("NCCL_NVLS_ENABLE =", os.environ.get("NCCL_NVLS_ENABLE"))
EOF
} 2>&1 | tee "$log"

gpus=$(python3 -c "import radiance; print(radiance.gpu_device_count())" 2>/dev/null || echo 0)
backend=$(python3 -c "import radiance; print(radiance.gpu_backend())" 2>/dev/null || echo none)

# One lent call runs at most 600 s: what the build left of it, less a margin for the summary.
limit=${TEST_TIMEOUT_S:-$((SECONDS > 480 ? 60 : 580 - SECONDS))}
echo "--- pytest (limit ${limit} s)" | tee -a "$log"
timeout "$limit" python3 -m pytest -v -rs -p no:cacheprovider --durations=10 \
    tests/test_multi_gpu.py tests/test_tensor_parallel.py 2>&1 | tee -a "$log"
rc=${PIPESTATUS[0]}
echo "multi-GPU tests rc=$rc :: $(tail -1 "$log")"
if [ "$backend" = none ] || [ "$gpus" -lt 2 ]; then
    echo "NOT RUN: backend $backend, $gpus GPUs visible; the two-GPU tests skipped" | tee -a "$log"
    [ "$rc" = 0 ] && rc=3
fi
exit "$rc"
