"""What the torch-side tests share: a freshly seeded generator, and NumPy <-> torch conversion
that keeps bf16 bit for bit (NumPy has no bf16; ml_dtypes' bfloat16 and torch.bfloat16 share
the bit layout, so the arrays travel as int16 and are viewed back).

Imports torch: only files that already need torch import this (reference.py stays NumPy-only
for the CPU test environments without torch).
"""

import os

import ml_dtypes
import numpy as np
import torch

BF16 = ml_dtypes.bfloat16


def fresh_rng():
    """A generator on a fresh seed, and the seed (for failure messages)."""
    seed = int.from_bytes(os.urandom(4), "little")
    return np.random.default_rng(seed), seed


def to_torch(a, device="cuda"):
    """NumPy (bf16 included) -> torch on device. Copied first: torch.from_numpy shares the
    array's memory, and a CPU result must not alias the caller's array."""
    if a.dtype == BF16:
        return torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16).to(device)
    return torch.from_numpy(np.ascontiguousarray(a)).to(device)


def to_numpy(t):
    """torch (bf16 included, any device) -> NumPy on the CPU."""
    t = t.detach().cpu()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(BF16)
    return t.numpy()
