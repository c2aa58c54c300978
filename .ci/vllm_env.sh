#!/usr/bin/env bash
# A vLLM test environment: a virtual environment with one pinned vLLM release and the torch it pins,
# radiance built from this tree (CPU only), then the vLLM tests in it on vLLM's CPU platform.
# Creates the environment on the first run and refreshes it on later ones (pip skips what is
# already there).
#
#   bash .ci/vllm_env.sh                                 # vLLM 0.33.0, all vLLM tests
#   RADIANCE_VLLM_VERSION=0.32.0 bash .ci/vllm_env.sh    # vLLM 0.32.0
#   bash .ci/vllm_env.sh -k drafter -x                   # extra arguments go to pytest
#
# RADIANCE_VLLM_VENV (default .venv-vllm-<version>, git-ignored) says where the environment lives.
# .ci/vllm-constraints-<version>.txt pins every other package of the environment.
# Fresh installs here: 0.32.0 212 s (about 6 GB), 0.33.0 about 7 minutes (about 9.4 GB: torch
# 2.14.0 is PyPI's CUDA wheel, whose CUDA libraries come along); a refresh about a minute.
set -euo pipefail
cd "$(dirname "$0")/.."

# vLLM pins torch exactly. 0.32.0 pins 2.13.0, the CPU build this machine kind has on disk;
# 0.33.0 pins 2.14.0, PyPI's CUDA build, which runs on vLLM's CPU platform (VLLM_TARGET_DEVICE=cpu).
VLLM_VERSION=${RADIANCE_VLLM_VERSION:-0.33.0}
case "$VLLM_VERSION" in
    0.32.0) TORCH_VERSION=2.13.0 ;;
    0.33.0) TORCH_VERSION=2.14.0 ;;
    *) echo "RADIANCE_VLLM_VERSION=$VLLM_VERSION: expected 0.32.0 or 0.33.0" >&2; exit 2 ;;
esac
constraints=.ci/vllm-constraints-$VLLM_VERSION.txt
venv=${RADIANCE_VLLM_VENV:-.venv-vllm-$VLLM_VERSION}
. .ci/common.sh
started=$(date +%s)

step "virtual environment $venv: torch==$TORCH_VERSION, vllm==$VLLM_VERSION"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
py="$venv/bin/python"
versions_ok() { venv_has "$py" "$TORCH_VERSION" vllm "$VLLM_VERSION" pytest; }
# Without pip's cache (--no-cache-dir) the downloaded wheels do not stay on disk beside the
# environment as another 3 to 4 GB; a failed install (a dropped connection, a full disk) is tried
# once more after saying how much disk is free.
install() {
    "$py" -m pip install -q --no-cache-dir -c "$constraints" \
        "torch==$TORCH_VERSION" "vllm==$VLLM_VERSION" pytest
}
if ! versions_ok 2>/dev/null; then
    df -h . | tail -n 1 | awk '{print "disk free before the install: " $4}'
    if ! install; then
        df -h . | tail -n 1 | awk '{print "install failed; disk free now: " $4 "; trying once more"}'
        install
    fi
    drop_torch_extras "$py"
    versions_ok
fi

step "radiance from this tree (CPU build)"
install_radiance_cpu "$py"
echo "environment ready after $(( $(date +%s) - started )) s"

step "vLLM $VLLM_VERSION tests"
# vLLM's CPU platform, and no hub: the tests build everything from local files. What a release
# lacks (the quantized lm_head copies before 0.33) is skipped, saying why (-rs).
VLLM_TARGET_DEVICE=cpu HF_HUB_OFFLINE=1 "$py" -m pytest -q -p no:cacheprovider -rs \
    tests/test_vllm.py tests/test_vllm_drafter.py tests/test_vllm_peer_formats.py \
    tests/test_tensor_parallel.py "$@"
echo "done after $(( $(date +%s) - started )) s"
