"""What the tests share: the GPU skip.

A test that needs a GPU says so with ``@pytest.mark.gpu`` (or ``pytestmark = pytest.mark.gpu`` for
a whole file); one that needs several GPUs of one host gives the count: ``@pytest.mark.gpu(2)``.
It runs where radiance was built with a GPU backend (CUDA or ROCm) and both radiance and torch see
that many GPUs, and is skipped, with the reason, everywhere else. Nothing here imports torch unless
a GPU test was collected, so the CPU-only test environments (no torch) load this file too.
"""

import functools

import pytest


@functools.cache
def gpu_skip_reason(count=1):
    """Why tests that need `count` GPUs cannot run here, or None when they can."""
    import radiance

    if radiance.gpu_backend() == "none":
        return "radiance was built without a GPU backend (RADIANCE_GPU=none or no nvcc/hipcc)"
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():  # true for ROCm builds of torch too
        return "no GPU visible to torch"
    seen = (radiance.gpu_device_count(), torch.cuda.device_count())
    if min(seen) < count:
        return f"radiance sees {seen[0]} GPUs, torch sees {seen[1]}"
    return None


def gpu_count(marker):
    """The GPUs a `gpu` marker asks for: @pytest.mark.gpu is one, @pytest.mark.gpu(n) is n."""
    count = marker.args[0] if marker.args else marker.kwargs.get("count", 1)
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise pytest.UsageError(f"pytest.mark.gpu takes a GPU count >= 1, not {count!r}")
    return count


def pytest_collection_modifyitems(config, items):
    for item in items:
        marker = item.get_closest_marker("gpu")
        if marker is None:
            continue
        count = gpu_count(marker)
        reason = gpu_skip_reason(count)
        if reason is not None:
            needs = "a GPU" if count == 1 else f"{count} GPUs"
            item.add_marker(pytest.mark.skip(reason=f"needs {needs}: {reason}"))
