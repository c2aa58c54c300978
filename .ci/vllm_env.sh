#!/usr/bin/env bash
# The vLLM test environment: a virtual environment with the pinned vLLM on the CPU build of torch,
# radiance built from this tree (CPU only), then tests/test_vllm.py in it. Creates the environment
# on the first run and refreshes it on later ones (pip skips what is already there).
#
#   bash .ci/vllm_env.sh                 # all vLLM tests
#   bash .ci/vllm_env.sh -k tp2 -x       # extra arguments go to pytest
#
# RADIANCE_VLLM_VENV (default .venv-vllm, git-ignored) says where the environment lives.
# A fresh install downloads about 3 GB and takes 5 to 7 minutes here (395 s on 2026-11-30); a
# refresh about a minute.
# .ci/vllm-constraints.txt pins every other package of the environment.
set -euo pipefail
cd "$(dirname "$0")/.."

# vLLM pins torch exactly; 0.32.0 is the newest release that pins 2.13.0, the CPU build of torch
# this machine kind has on disk (0.33.0 pins 2.14.0, which is neither on disk nor a CPU build).
VLLM_VERSION=0.32.0
TORCH_VERSION=2.13.0
venv=${RADIANCE_VLLM_VENV:-.venv-vllm}
export PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONUNBUFFERED=1

step() { printf '\n=== %s (%s)\n' "$1" "$(date -u +%H:%M:%S)"; }
started=$(date +%s)

step "virtual environment $venv: torch==$TORCH_VERSION, vllm==$VLLM_VERSION"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
py="$venv/bin/python"
versions_ok() {
    "$py" - <<EOF
import importlib.metadata as m, importlib.util as u
assert m.version("torch").split("+")[0] == "$TORCH_VERSION", m.version("torch")
assert m.version("vllm") == "$VLLM_VERSION", m.version("vllm")
assert u.find_spec("pytest") and not u.find_spec("torchvision")
print(f"torch {m.version('torch')}, vllm {m.version('vllm')}")
EOF
}
# About 6 GB once installed. Without pip's cache (--no-cache-dir) the downloaded wheels do not stay
# on disk beside it as another 3 GB; a failed install (a dropped connection, a full disk) is tried
# once more after saying how much disk is free.
install() {
    "$py" -m pip install -q --no-cache-dir -c .ci/vllm-constraints.txt \
        "torch==$TORCH_VERSION" "vllm==$VLLM_VERSION" pytest
}
if ! versions_ok 2>/dev/null; then
    df -h . | tail -n 1 | awk '{print "disk free before the install: " $4}'
    if ! install; then
        df -h . | tail -n 1 | awk '{print "install failed; disk free now: " $4 "; trying once more"}'
        install
    fi
    # vLLM also brings torchvision, torchaudio and torchcodec built against torch's CUDA wheels.
    # Beside the CPU torch they fail at import ("operator torchvision::nms does not exist"), and
    # transformers imports torchvision whenever it is installed; nothing tested here needs them.
    "$py" -m pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
    versions_ok
fi

step "radiance from this tree (CPU build)"
RADIANCE_GPU=none "$py" -m pip install -q --no-deps --force-reinstall .
echo "environment ready after $(( $(date +%s) - started )) s"

step "tests/test_vllm.py"
# vLLM's CPU platform, and no hub: the tests build everything from local files.
VLLM_TARGET_DEVICE=cpu HF_HUB_OFFLINE=1 "$py" -m pytest -q -p no:cacheprovider -rs \
    tests/test_vllm.py "$@"
echo "done after $(( $(date +%s) - started )) s"
