"""How radiance is built: which GPU backend, for which architectures, with which toolkit.

Used twice: as the PEP 517 build backend (pyproject.toml's `backend-path`), where it adds NVIDIA's
CUDA toolkit from PyPI to the build requirements when a CUDA build needs an nvcc that the machine
lacks, and by setup.py, which compiles with what `plan()` decides. Both run the same `plan()`, so
pip installs the toolkit exactly when setup.py will look for it.

RADIANCE_GPU = auto (default) | cuda | rocm | none
  auto  the GPUs this machine can see, their architectures only: AMD ones through the KFD driver's
        topology (/sys/class/kfd), NVIDIA ones through the driver library (libcuda); none seen:
        the CPU path, with one line saying how to build the GPU kernels anyway.
  cuda  archs from RADIANCE_GPU_ARCHS, else the NVIDIA GPUs seen, else every released one.
  rocm  archs from RADIANCE_GPU_ARCHS, else the AMD GPUs seen, else every released one.
RADIANCE_GPU_ARCHS = "80;90a;120" | "gfx942;gfx1201" | "all" (the released set below).

The CUDA toolkit: CUDA_HOME (or CUDA_PATH)/bin/nvcc, else nvcc on PATH, else NVIDIA's PyPI packages
(nvidia-cuda-nvcc and its headers, CUDA 13.0) installed into the build environment. The CUDA 12
packages on PyPI (nvidia-cuda-nvcc-cu12) hold ptxas but no nvcc, so PyPI builds are CUDA 13.
"""

import ctypes
import glob
import os
import shutil
import sys
from dataclasses import dataclass, field

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F401,F403  (the PEP 517 hooks this module does not change)

# CUDA 13.0: the oldest driver line (580) that runs CUDA 13 builds, and the one the H200 machines
# run. nvidia-nvvm is pinned too: nvidia-cuda-nvcc asks for it unpinned, and a newer cicc than
# its nvcc is not a combination NVIDIA ships.
PYPI_CUDA_TOOLKIT = [
    "nvidia-cuda-nvcc==13.0.*",
    "nvidia-nvvm==13.0.*",
    "nvidia-cuda-crt==13.0.*",
    "nvidia-cuda-runtime==13.0.*",
    "nvidia-cuda-cccl==13.0.*",
]
# The released set: what `RADIANCE_GPU_ARCHS=all` and a build that sees no GPU compile. sm_86
# and sm_89 could run sm_80 machine code, but get their own (the compiler schedules for each);
# 90a is Hopper with its wgmma kernel; 100 and 120 (Blackwell datacenter and RTX) take the paths
# without Hopper-only instructions.
RELEASED_ARCHS = {
    "cuda": ["80", "86", "89", "90a", "100", "120"],
    "rocm": ["gfx1201", "gfx1100", "gfx942", "gfx90a"],
}
MIN_CUDA_CC = 80  # the kernels use sm_80's bf16 MMA and cp.async


def log(message):
    print(f"radiance: {message}", file=sys.stderr, flush=True)


@dataclass
class CudaToolkit:
    nvcc: str
    include_dirs: list = field(default_factory=list)  # beyond what nvcc finds itself
    libdir: str = ""  # holds libcudart_static.a
    origin: str = ""


@dataclass
class Plan:
    backend: str  # "cuda", "rocm" or "none"
    archs: list
    reason: str  # one line for the build log
    compiler: str = ""  # hipcc; for CUDA, toolkit.nvcc
    toolkit: CudaToolkit = None
    needs_pypi_toolkit: bool = False  # CUDA without a system nvcc: the build backend installs it


# --- the GPUs this machine can see ---------------------------------------------------------------

def visible_nvidia_archs():
    """Compute capabilities (major * 10 + minor) of the NVIDIA GPUs the driver shows; [] without a
    driver. CUDA_VISIBLE_DEVICES applies, as for any CUDA program."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return []
    count, device, major, minor = ctypes.c_int(), ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
    if cuda.cuInit(0) != 0 or cuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return []
    found = []
    for index in range(count.value):
        if (cuda.cuDeviceGet(ctypes.byref(device), index) == 0
                and cuda.cuDeviceGetAttribute(ctypes.byref(major), 75, device) == 0  # CC major
                and cuda.cuDeviceGetAttribute(ctypes.byref(minor), 76, device) == 0):  # CC minor
            found.append(major.value * 10 + minor.value)
    return sorted(set(found))


def visible_amd_archs():
    """gfx names of the AMD GPUs in the KFD topology (what ROCm itself enumerates); [] without one.
    gfx_target_version is major * 10000 + minor * 100 + stepping, the last two hex digits of the
    name: 90402 is gfx942, 90010 gfx90a, 120001 gfx1201."""
    found = set()
    for path in glob.glob("/sys/class/kfd/kfd/topology/nodes/*/properties"):
        try:
            with open(path) as f:
                fields = dict(line.split(None, 1) for line in f if " " in line.strip())
            version = int(fields.get("gfx_target_version", "0"))
        except (OSError, ValueError):
            continue
        if version:  # 0: a CPU node
            found.add(f"gfx{version // 10000}{version // 100 % 100:x}{version % 100:x}")
    return sorted(found)


def cuda_arch_name(cc):
    # Hopper's wgmma kernel needs the arch-specific target; sm_90a code runs on every sm_90 GPU.
    return "90a" if cc == 90 else str(cc)


# --- toolchains ----------------------------------------------------------------------------------

def find_hipcc():
    for var in ("ROCM_PATH", "HIP_PATH"):
        home = os.environ.get(var)
        if home and os.path.isfile(os.path.join(home, "bin", "hipcc")):
            return os.path.join(home, "bin", "hipcc")
    return shutil.which("hipcc") or ("/opt/rocm/bin/hipcc" if os.path.isfile("/opt/rocm/bin/hipcc") else None)


def system_cuda_toolkit():
    """CUDA_HOME/CUDA_PATH's nvcc, else the one on PATH; its libcudart_static.a beside it."""
    nvcc = None
    for var in ("CUDA_HOME", "CUDA_PATH"):
        home = os.environ.get(var)
        if home and os.path.isfile(os.path.join(home, "bin", "nvcc")):
            nvcc = os.path.join(home, "bin", "nvcc")
            break
    nvcc = nvcc or shutil.which("nvcc")
    if not nvcc:
        return None
    # the toolkit holding libcudart_static.a: CUDA_HOME, else the one nvcc lives in (through
    # symlinks), else the usual install folders (nvcc may be a wrapper script elsewhere)
    homes = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"),
             os.path.dirname(os.path.dirname(os.path.realpath(nvcc))), "/usr/local/cuda",
             *sorted(glob.glob("/usr/local/cuda-*"), reverse=True)]
    for home in filter(None, homes):
        for sub in ("lib64", "lib", "targets/x86_64-linux/lib", "targets/sbsa-linux/lib"):
            if os.path.isfile(os.path.join(home, sub, "libcudart_static.a")):
                return CudaToolkit(nvcc, [], os.path.join(home, sub), f"system ({nvcc})")
    return CudaToolkit(nvcc, [], "", f"system ({nvcc})")


def pypi_cuda_toolkit():
    """NVIDIA's PyPI toolkit where it is importable (the build environment): nvidia/cu13/ holds
    bin/nvcc, nvvm/, include/ (CCCL in include/cccl) and lib/libcudart_static.a. Its nvcc.profile
    points at a targets/ folder the wheels do not have, so the include dirs are passed here."""
    for entry in sys.path:
        root = os.path.join(entry or ".", "nvidia", "cu13")
        nvcc = os.path.join(root, "bin", "nvcc")
        if os.path.isfile(nvcc) and os.access(nvcc, os.X_OK):
            includes = [os.path.join(root, "include")]
            if os.path.isdir(os.path.join(root, "include", "cccl")):
                includes.append(os.path.join(root, "include", "cccl"))
            libdir = os.path.join(root, "lib") if os.path.isfile(os.path.join(root, "lib", "libcudart_static.a")) else ""
            return CudaToolkit(nvcc, includes, libdir, f"PyPI ({root})")
    return None


# --- the decision --------------------------------------------------------------------------------

def requested_backend():
    requested = os.environ.get("RADIANCE_GPU", "auto").strip().lower() or "auto"
    if requested not in ("auto", "rocm", "cuda", "none"):
        raise SystemExit(f"radiance: RADIANCE_GPU must be auto, cuda, rocm or none, got {requested!r}")
    return requested


def requested_archs(backend):
    raw = os.environ.get("RADIANCE_GPU_ARCHS", "").strip()
    if not raw:
        return None
    if raw.lower() == "all":
        return list(RELEASED_ARCHS[backend])
    archs = [a.strip() for a in raw.replace(",", ";").split(";") if a.strip()]
    if backend == "cuda":
        archs = [a.lower().removeprefix("sm_").removeprefix("compute_") for a in archs]
        archs = ["90a" if a == "90" else a for a in archs]
        bad = [a for a in archs if not a.rstrip("af").isdigit()]
        if bad:
            raise SystemExit(f"radiance: RADIANCE_GPU_ARCHS holds {bad} for CUDA; give compute "
                             f"capabilities like 80;90a;120, or all")
    elif not all(a.startswith("gfx") for a in archs):
        raise SystemExit(f"radiance: RADIANCE_GPU_ARCHS holds {archs} for ROCm; give gfx targets like "
                         f"gfx942;gfx1201, or all")
    return archs


def _cuda_plan(archs, reason):
    toolkit = system_cuda_toolkit() or pypi_cuda_toolkit()
    if toolkit is None:
        # The build backend installs the PyPI toolkit for this plan; setup.py finds it then.
        return Plan("cuda", archs, reason, needs_pypi_toolkit=True)
    return Plan("cuda", archs, f"{reason}; nvcc: {toolkit.origin}", toolkit.nvcc, toolkit)


def plan():
    requested = requested_backend()
    if requested == "none":
        return Plan("none", [], "the CPU path only (RADIANCE_GPU=none)")
    if requested == "rocm":
        hipcc = find_hipcc()
        if not hipcc:
            raise SystemExit("radiance: RADIANCE_GPU=rocm but hipcc was not found: install ROCm, or set "
                             "ROCM_PATH to it (hipcc in $ROCM_PATH/bin)")
        archs = requested_archs("rocm") or visible_amd_archs() or list(RELEASED_ARCHS["rocm"])
        return Plan("rocm", archs, f"RADIANCE_GPU=rocm; hipcc: {hipcc}", hipcc)
    if requested == "cuda":
        seen = [cuda_arch_name(cc) for cc in visible_nvidia_archs() if cc >= MIN_CUDA_CC]
        archs = requested_archs("cuda") or seen or list(RELEASED_ARCHS["cuda"])
        source = ("RADIANCE_GPU_ARCHS" if requested_archs("cuda") else "the GPUs seen" if seen
                  else "no GPU seen: the released set")
        return _cuda_plan(archs, f"RADIANCE_GPU=cuda, archs from {source}")

    # auto: build for what this machine can run
    amd = visible_amd_archs()
    if amd:
        hipcc = find_hipcc()
        if hipcc:
            archs = requested_archs("rocm") or amd
            return Plan("rocm", archs, f"AMD GPU seen ({', '.join(amd)}); hipcc: {hipcc}", hipcc)
        return Plan("none", [], f"the CPU path only: AMD GPU seen ({', '.join(amd)}) but no hipcc; "
                                f"install ROCm, then RADIANCE_GPU=rocm pip install .")
    nvidia = visible_nvidia_archs()
    usable = [cc for cc in nvidia if cc >= MIN_CUDA_CC]
    if usable:
        archs = requested_archs("cuda") or [cuda_arch_name(cc) for cc in usable]
        return _cuda_plan(archs, f"NVIDIA GPU seen (sm_{', sm_'.join(map(str, usable))})")
    if nvidia:
        return Plan("none", [], f"the CPU path only: the NVIDIA GPUs seen (sm_{', sm_'.join(map(str, nvidia))}) "
                                f"are older than sm_80, which the kernels need")
    return Plan("none", [], "the CPU path only: no GPU seen; for the GPU kernels anyway: "
                            "RADIANCE_GPU=cuda (or rocm) RADIANCE_GPU_ARCHS=\"90a;120\" (or all) pip install .")


# --- PEP 517: the build requirements -------------------------------------------------------------

def _with_toolkit(requirements):
    chosen = plan()
    if chosen.needs_pypi_toolkit:
        log(f"{chosen.reason}; no nvcc on this machine: the build installs NVIDIA's CUDA 13.0 "
            f"toolkit from PyPI ({', '.join(PYPI_CUDA_TOOLKIT)})")
        return list(requirements) + PYPI_CUDA_TOOLKIT
    return list(requirements)


def get_requires_for_build_wheel(config_settings=None):
    return _with_toolkit(_setuptools.get_requires_for_build_wheel(config_settings))


def get_requires_for_build_editable(config_settings=None):
    return _with_toolkit(_setuptools.get_requires_for_build_editable(config_settings))
