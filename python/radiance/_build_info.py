"""The one warning a CPU-only build of radiance owes a GPU machine.

A source build that found no GPU toolchain has the CPU path only; next to a CUDA or ROCm torch on
a machine with a GPU, every GPU tensor would then be refused (and vLLM would not start with the
plugin on). radiance/__init__.py calls `warn_if_gpu_kernels_missing(_C.gpu_backend())` once, at
import. Nothing here imports torch: its build is read from torch/version.py, so `import radiance`
stays as cheap as NumPy.
"""

import glob
import importlib.util
import os
import re
import sys
import warnings


def torch_gpu_build():
    """("cuda", "13.0") or ("rocm", "6.4...") for the torch installed here, None for a CPU torch or no
    torch. Read from torch.version when torch is imported already, else from its version.py."""
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "version"):
        cuda, hip = getattr(torch.version, "cuda", None), getattr(torch.version, "hip", None)
    else:
        try:
            spec = importlib.util.find_spec("torch")
        except (ImportError, ValueError):
            return None
        locations = list(spec.submodule_search_locations or []) if spec else []
        text = ""
        for location in locations:
            try:
                with open(os.path.join(location, "version.py"), encoding="utf-8") as f:
                    text = f.read()
                break
            except OSError:
                continue
        # torch/version.py: `cuda: Optional[str] = '13.0'`, `hip: Optional[str] = None`
        def field(name):
            match = re.search(rf"^{name}\s*(?::[^=\n]*)?=\s*['\"]([^'\"]+)['\"]", text, re.MULTILINE)
            return match.group(1) if match else None
        cuda, hip = field("cuda"), field("hip")
    if hip:
        return "rocm", hip
    if cuda:
        return "cuda", cuda
    return None


def gpu_present(kind):
    """Whether the driver's device files of an NVIDIA ("cuda") or AMD ("rocm") GPU exist."""
    if kind == "cuda":
        return bool(glob.glob("/dev/nvidia[0-9]*"))
    return os.path.exists("/dev/kfd")


def warn_if_gpu_kernels_missing(backend):
    """Warns once when radiance was built without GPU kernels (backend "none") but torch is a GPU
    build and this machine has that GPU."""
    if backend != "none":
        return
    torch_build = torch_gpu_build()
    if torch_build is None or not gpu_present(torch_build[0]):
        return
    kind, version = torch_build
    if kind == "cuda":
        how = ("install radiance's CUDA wheel, or build from source with RADIANCE_GPU=cuda "
               "(no CUDA toolkit needed: pip brings nvcc from PyPI)")
    else:
        how = "build from source with ROCm's hipcc: RADIANCE_GPU=rocm RADIANCE_GPU_ARCHS=<your gfx> pip install ."
    warnings.warn(
        f"radiance was built without GPU kernels, but torch is a {kind.upper()} {version} build on a "
        f"machine with a GPU: radiance refuses GPU tensors. To get the kernels, {how}; "
        f"docs/install.md has the commands.",
        RuntimeWarning,
        stacklevel=3,
    )
