# Sourced by the scripts of .ci/: what they share.

export PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONUNBUFFERED=1

# A step's heading, with the time and the disk free where it runs (CI's machines differ in disk).
step() {
    printf '\n=== %s (%s, %s free)\n' "$1" "$(date -u +%H:%M:%S)" "$(df -h . | awk 'NR == 2 {print $4}')"
}

# The command in the ```sh block right after the line <!-- NAME --> of README.md.
readme_command() {
    awk -v marker="<!-- $1 -->" '
        $0 == marker { found = 1; next }
        found && /^```/ { if (inside) exit; inside = 1; next }
        inside { print }' README.md
}

# PyPI's vLLM distributions also bring torchvision, torchaudio and torchcodec built against torch's
# CUDA wheels; beside a CPU torch they fail at import ("operator torchvision::nms does not exist"),
# transformers imports torchvision whenever it is installed, and nothing tested here needs them.
drop_torch_extras() {
    "$1" -m pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
}

# Whether the environment of the Python $1 holds torch $2 (any local build), the distribution $3 at
# version $4, the modules named after that, and no torchvision (drop_torch_extras); prints what it has.
venv_has() {
    "$1" - "${@:2}" <<'EOF'
import importlib.metadata as m, importlib.util as u, sys
torch, dist, version, *modules = sys.argv[1:]
assert m.version("torch").split("+")[0] == torch, m.version("torch")
assert m.version(dist) == version, m.version(dist)
for name in modules:
    assert u.find_spec(name), name
assert not u.find_spec("torchvision")
print(f"torch {m.version('torch')}, {dist} {m.version(dist)}")
EOF
}

# radiance from this tree, CPU path only, into the environment of the Python $1.
install_radiance_cpu() {
    RADIANCE_GPU=none "$1" -m pip install -q --no-cache-dir --no-deps --force-reinstall .
}
