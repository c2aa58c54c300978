"""What the tests share: the GPU skip.

A test that needs a GPU says so with ``@pytest.mark.gpu`` (or ``pytestmark = pytest.mark.gpu`` for
a whole file). It runs where radiance was built with a GPU backend (CUDA or ROCm) and torch sees a
GPU, and is skipped, with the reason, everywhere else. Nothing here imports torch unless a GPU
test was collected, so the CPU-only test environments (no torch) load this file too.
"""

import functools

import pytest


@functools.cache
def gpu_skip_reason():
    """Why GPU tests cannot run here, or None when they can."""
    import radiance

    if radiance.gpu_backend() == "none":
        return "radiance was built without a GPU backend"
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():  # true for ROCm builds of torch too
        return "no GPU visible to torch"
    return None


def pytest_collection_modifyitems(config, items):
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu_items:
        return
    reason = gpu_skip_reason()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=f"needs a GPU: {reason}")
    for item in gpu_items:
        item.add_marker(skip)
