#!/usr/bin/env bash
# The CUDA wheel as a user makes it: README's wheel command in a clean clone of this commit, with
# NVIDIA's CUDA toolkit from PyPI (the machine's own nvcc is taken off PATH), warnings as errors.
# Then: `auditwheel show` must accept the wheel's manylinux tag, `abi3audit` its stable-ABI claim,
# and the wheel must install into fresh virtual environments (every CPython on the machine from
# 3.10 on: one abi3 wheel serves them all), import there with radiance.gpu_backend() == 'cuda' and
# run apply on NumPy on this machine, which has no GPU. Nothing is cached between runs.
#
#   bash .ci/wheel.sh        # leaves nothing behind; RADIANCE_WHEEL_OUT=DIR keeps the wheel in DIR
#                            # (RADIANCE_WERROR=0: warnings stay warnings, for a look at them)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
. .ci/common.sh
export PIP_NO_CACHE_DIR=1

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
git clone -q --no-hardlinks "$root" "$work/src"

step "build tools: a fresh venv (auditwheel, abi3audit)"
python3 -m venv "$work/tools"
"$work/tools/bin/pip" install -q auditwheel abi3audit

step "README's wheel command, with no nvcc on PATH (the toolkit comes from PyPI)"
command=$(readme_command wheel-command)
[ -n "$command" ] || { echo "no <!-- wheel-command --> block in README.md" >&2; exit 1; }
echo "$command"
python3 -m venv "$work/build"
# PATH without any folder that holds an nvcc; no CUDA_HOME: only PyPI's toolkit can be found.
# PIP_VERBOSE: the build's own log (its plan line, the nvcc commands, any warning) shows in CI's.
clean_path=$(printf '%s' "$PATH" | tr ':' '\n' | while read -r dir; do
    [ -n "$dir" ] && [ ! -e "$dir/nvcc" ] && printf '%s:' "$dir"; done)
clean_path="$work/build/bin:${clean_path%:}"
if PATH="$clean_path" command -v nvcc >/dev/null; then
    echo "nvcc is still on the build's PATH: $(PATH="$clean_path" command -v nvcc)" >&2; exit 1
fi
started=$(date +%s)
(cd "$work/src" && env -u CUDA_HOME -u CUDA_PATH PATH="$clean_path" PIP_VERBOSE=1 RADIANCE_WERROR="${RADIANCE_WERROR:-1}" bash -c "$command")
echo "wheel built in $(( $(date +%s) - started )) s on $(nproc) cores"
wheels=("$work"/src/dist/*.whl)
[ "${#wheels[@]}" -eq 1 ] && [ -f "${wheels[0]}" ] || { echo "expected one wheel in dist/: ${wheels[*]}" >&2; exit 1; }
wheel=${wheels[0]}
ls -l "$wheel"

step "auditwheel show and abi3audit"
"$work/tools/bin/auditwheel" show "$wheel" | tee "$work/auditwheel.txt"
tag=$(basename "$wheel" .whl | awk -F- '{print $NF}')
case "$tag" in manylinux_*) ;; *) echo "the wheel's platform tag $tag is not manylinux" >&2; exit 1 ;; esac
# the floor docs/install.md promises: glibc 2.34 (Ubuntu 22.04 has 2.35, RHEL 9 2.34)
glibc_minor=$(printf '%s' "$tag" | awk -F_ '{print $3}')
[ "$glibc_minor" -le 34 ] || { echo "the wheel needs glibc 2.$glibc_minor, above the 2.34 it promises" >&2; exit 1; }
# auditwheel names the newest tag the wheel's symbols allow; the wheel's own must be that one.
tr -s ' \n' ' ' <"$work/auditwheel.txt" | grep -q "consistent with the following platform tag: \"$tag\"" ||
    { echo "auditwheel does not accept the tag $tag" >&2; exit 1; }
"$work/tools/bin/abi3audit" --strict --report "$wheel"

step "install into fresh venvs and run on the CPU"
check='
import numpy as np, ml_dtypes, radiance, sys
assert radiance.gpu_backend() == "cuda", radiance.gpu_backend()
assert radiance.__file__.startswith(sys.prefix), radiance.__file__
rng = np.random.default_rng(0)
w = rng.standard_normal((256, 512)).astype(ml_dtypes.bfloat16)
x = rng.standard_normal((3, 512)).astype(ml_dtypes.bfloat16)
packed, scales = radiance.quantize_rows(w, group_size=128)
y = radiance.apply(x, packed, scales, group_size=128).astype(np.float32)
ref = x.astype(np.float32) @ radiance.dequantize(packed, scales, group_size=128).T
assert np.allclose(y, ref, rtol=2e-2, atol=2e-2 * np.abs(ref).max()), np.abs(y - ref).max()
print(f"Python {sys.version.split()[0]}: gpu_backend cuda, {radiance.gpu_device_count()} GPUs, apply on NumPy ok")
'
tested=0
for version in 3.10 3.11 3.12 3.13; do
    # on PATH, else pyenv's (whose shims answer only for the versions it has selected)
    python=python$version
    "$python" -c "" 2>/dev/null ||
        python=$(ls "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$version".*/bin/python"$version" 2>/dev/null | tail -n 1)
    [ -n "$python" ] && "$python" -c "" 2>/dev/null || { echo "Python $version: not on this machine"; continue; }
    "$python" -m venv "$work/v$version"
    "$work/v$version/bin/pip" install -q "$wheel"
    (cd "$work" && "$work/v$version/bin/python" -c "$check")
    tested=$((tested + 1))
done
[ "$tested" -ge 1 ] || { echo "no Python to install the wheel into" >&2; exit 1; }
if [ -n "${RADIANCE_WHEEL_OUT:-}" ]; then mkdir -p "$RADIANCE_WHEEL_OUT" && cp "$wheel" "$RADIANCE_WHEEL_OUT/"; fi
echo "wheel: built, accepted by auditwheel and abi3audit, installed and run on $tested Pythons"
