"""radiance_gpu_device_has_context: the question radiance's device guard asks before it restores
the caller's device (csrc/module.c), answered without making a context.

The guard leaves a thread on the tensors' GPU instead of restoring a caller's device that has no
context, because on CUDA 12+ restoring it would create one there (hundreds of MB). If this answer
were wrong one way, the guard would make those contexts; wrong the other way, it would leave a
caller that used its device on another GPU. The two-GPU case is
tests/test_multi_gpu.py::test_work_on_gpu_1_makes_no_context_on_gpu_0; this one needs one GPU.
Run in a fresh process, where no context exists yet; skipped without a GPU build and a GPU.
"""

import os
import subprocess
import sys
import textwrap

import pytest

import radiance

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

_HAS_CONTEXT = textwrap.dedent("""
    import ctypes
    import radiance
    import torch

    lib = ctypes.CDLL(radiance._C.__file__)
    has_context = lib.radiance_gpu_device_has_context
    has_context.argtypes, has_context.restype = [ctypes.c_int], ctypes.c_int
    torch_says = getattr(torch._C, "_cuda_hasPrimaryContext", lambda device: None)
    last = radiance.gpu_device_count() - 1
    print("out of range:", has_context(-1), has_context(last + 1))
    print("before:", has_context(last), torch_says(last))
    torch.ones(1, device=f"cuda:{last}").sum().item()
    print("after:", has_context(last), torch_says(last))
""")


def test_device_has_context_answers_without_making_one():
    package_root = os.path.dirname(os.path.dirname(radiance.__file__))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [package_root] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    run = subprocess.run([sys.executable, "-c", _HAS_CONTEXT], env=env, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, f"exit {run.returncode}:\n{run.stdout}\n{run.stderr[-4000:]}"
    lines = dict(line.split(": ", 1) for line in run.stdout.splitlines() if ": " in line)
    assert lines["out of range"] == "-1 -1", run.stdout
    # a fresh process: importing radiance and torch and counting GPUs made no context, and asking
    # (twice: radiance, then torch) made none either
    assert lines["before"] in ("0 False", "0 None"), run.stdout
    assert lines["after"] in ("1 True", "1 None"), run.stdout
