"""The build's choices (build_backend/radiance_build.py) and the import-time warning of a CPU-only
build next to a GPU torch (radiance/_build_info.py). No compiler runs here: the plans are read,
with the machine's GPUs and toolchains replaced by stand-ins."""

import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("setuptools")  # the build backend is setuptools plus one hook

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "build_backend"))
import radiance_build  # noqa: E402

from radiance import _build_info  # noqa: E402


@pytest.fixture
def machine(monkeypatch):
    """A machine with no GPU and no toolchain; tests add what they need."""
    for var in ("RADIANCE_GPU", "RADIANCE_GPU_ARCHS"):
        monkeypatch.delenv(var, raising=False)
    state = {"nvidia": [], "amd": [], "hipcc": None, "system_nvcc": None, "pypi_nvcc": None}
    monkeypatch.setattr(radiance_build, "visible_nvidia_archs", lambda: state["nvidia"])
    monkeypatch.setattr(radiance_build, "visible_amd_archs", lambda: state["amd"])
    monkeypatch.setattr(radiance_build, "find_hipcc", lambda: state["hipcc"])
    monkeypatch.setattr(radiance_build, "system_cuda_toolkit",
                        lambda: state["system_nvcc"] and radiance_build.CudaToolkit(state["system_nvcc"]))
    monkeypatch.setattr(radiance_build, "pypi_cuda_toolkit",
                        lambda: state["pypi_nvcc"] and radiance_build.CudaToolkit(state["pypi_nvcc"]))
    return state


def test_no_gpu_seen_builds_the_cpu_path_and_says_how_to_get_kernels(machine):
    machine["system_nvcc"] = "/usr/local/bin/nvcc"  # nvcc alone is no reason to compile CUDA
    plan = radiance_build.plan()
    assert plan.backend == "none"
    assert "no GPU seen" in plan.reason and "RADIANCE_GPU=cuda" in plan.reason
    assert "RADIANCE_GPU_ARCHS" in plan.reason


def test_seen_gpus_give_their_archs_only(machine):
    machine["nvidia"], machine["system_nvcc"] = [90], "/usr/local/bin/nvcc"
    plan = radiance_build.plan()
    assert (plan.backend, plan.archs, plan.compiler) == ("cuda", ["90a"], "/usr/local/bin/nvcc")
    assert not plan.needs_pypi_toolkit


def test_seen_gpu_without_nvcc_asks_for_the_pypi_toolkit(machine):
    machine["nvidia"] = [80, 120]
    plan = radiance_build.plan()
    assert plan.backend == "cuda" and plan.archs == ["80", "120"] and plan.needs_pypi_toolkit
    requires = radiance_build._with_toolkit(["setuptools"])
    assert requires[0] == "setuptools"
    assert "nvidia-cuda-nvcc==13.0.*" in requires and "nvidia-nvvm==13.0.*" in requires


def test_pypi_toolkit_is_not_requested_where_nvcc_exists(machine, monkeypatch):
    monkeypatch.setenv("RADIANCE_GPU", "cuda")
    machine["system_nvcc"] = "/opt/cuda/bin/nvcc"
    assert radiance_build._with_toolkit(["setuptools"]) == ["setuptools"]
    machine["system_nvcc"], machine["pypi_nvcc"] = None, "/venv/nvidia/cu13/bin/nvcc"
    assert radiance_build._with_toolkit(["setuptools"]) == ["setuptools"]
    assert radiance_build.plan().compiler == "/venv/nvidia/cu13/bin/nvcc"


def test_old_nvidia_gpu_builds_the_cpu_path(machine):
    machine["nvidia"], machine["system_nvcc"] = [75], "/usr/bin/nvcc"
    plan = radiance_build.plan()
    assert plan.backend == "none" and "sm_75" in plan.reason and "sm_80" in plan.reason


def test_explicit_cuda_without_gpu_builds_the_released_archs(machine, monkeypatch):
    monkeypatch.setenv("RADIANCE_GPU", "cuda")
    plan = radiance_build.plan()
    assert plan.archs == ["80", "86", "89", "90a", "100", "120"] and plan.needs_pypi_toolkit


@pytest.mark.parametrize("raw, archs", [("90", ["90a"]), ("sm_80;sm_90a", ["80", "90a"]),
                                        ("80,120", ["80", "120"]), ("all", radiance_build.RELEASED_ARCHS["cuda"])])
def test_cuda_arch_spellings(machine, monkeypatch, raw, archs):
    monkeypatch.setenv("RADIANCE_GPU", "cuda")
    monkeypatch.setenv("RADIANCE_GPU_ARCHS", raw)
    assert radiance_build.plan().archs == archs


def test_bad_values_name_the_variable(machine, monkeypatch):
    monkeypatch.setenv("RADIANCE_GPU", "cuda")
    monkeypatch.setenv("RADIANCE_GPU_ARCHS", "gfx942")
    with pytest.raises(SystemExit, match="RADIANCE_GPU_ARCHS"):
        radiance_build.plan()
    monkeypatch.setenv("RADIANCE_GPU", "metal")
    with pytest.raises(SystemExit, match="RADIANCE_GPU must be"):
        radiance_build.plan()


def test_rocm_without_hipcc_fails_in_one_line(machine, monkeypatch):
    monkeypatch.setenv("RADIANCE_GPU", "rocm")
    with pytest.raises(SystemExit) as raised:
        radiance_build.plan()
    message = str(raised.value)
    assert "hipcc" in message and "ROCM_PATH" in message and "\n" not in message


def test_amd_gpu_seen(machine):
    machine["amd"] = ["gfx1201"]
    assert radiance_build.plan().backend == "none"  # no hipcc: the CPU path, saying why
    assert "hipcc" in radiance_build.plan().reason
    machine["hipcc"] = "/opt/rocm/bin/hipcc"
    plan = radiance_build.plan()
    assert (plan.backend, plan.archs) == ("rocm", ["gfx1201"])


def test_kfd_target_versions_name_the_gfx_targets(monkeypatch, tmp_path):
    nodes = {"0": 0, "1": 90402, "2": 90010, "3": 120001, "4": 110000}
    for node, version in nodes.items():
        (tmp_path / node).mkdir()
        (tmp_path / node / "properties").write_text(f"cpu_cores_count 4\ngfx_target_version {version}\n")
    real_glob = radiance_build.glob.glob
    monkeypatch.setattr(radiance_build.glob, "glob",
                        lambda pattern: real_glob(str(tmp_path / "*" / "properties")) if "kfd" in pattern
                        else real_glob(pattern))
    assert radiance_build.visible_amd_archs() == ["gfx1100", "gfx1201", "gfx90a", "gfx942"]


def fake_torch(tmp_path, cuda, hip=None):
    package = tmp_path / "torch"
    package.mkdir()
    # never imported: a torch that raises on import proves the version is read from the file
    (package / "__init__.py").write_text("raise ImportError('torch must not be imported')\n")
    (package / "version.py").write_text(textwrap.dedent(f"""\
        from typing import Optional
        __version__ = '2.13.0'
        cuda: Optional[str] = {cuda!r}
        hip: Optional[str] = {hip!r}
        """))
    return str(tmp_path)


@pytest.mark.parametrize("cuda, hip, expected", [("13.0", None, ("cuda", "13.0")), (None, None, None),
                                                 (None, "6.4.1", ("rocm", "6.4.1"))])
def test_torch_build_is_read_without_importing_torch(tmp_path, cuda, hip, expected):
    code = ("import sys, radiance._build_info as b; r = b.torch_gpu_build(); "
            "assert 'torch' not in sys.modules; print(r)")
    # the radiance these tests import (installed, or an in-place build under python/)
    package_parent = os.path.dirname(os.path.dirname(os.path.abspath(_build_info.__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([fake_torch(tmp_path, cuda, hip), package_parent]))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == repr(expected)


def test_warning_only_for_a_cpu_build_next_to_a_gpu_torch_on_a_gpu_machine(monkeypatch):
    monkeypatch.setattr(_build_info, "torch_gpu_build", lambda: ("cuda", "13.0"))
    monkeypatch.setattr(_build_info, "gpu_present", lambda kind: kind == "cuda")
    with pytest.warns(RuntimeWarning, match="without GPU kernels.*CUDA 13.0.*RADIANCE_GPU=cuda"):
        _build_info.warn_if_gpu_kernels_missing("none")
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _build_info.warn_if_gpu_kernels_missing("cuda")  # built with kernels: silent
        monkeypatch.setattr(_build_info, "gpu_present", lambda kind: False)
        _build_info.warn_if_gpu_kernels_missing("none")  # no GPU here: nothing to refuse
