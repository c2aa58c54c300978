"""GPU quantize_rows on the inputs that steer hip/quantize.hip between its searches: warps whose
groups all allow the saturating search, warps with one group that does not (amax >= 2^100, or a
bf16 weight with 0 < |v| < 2^-63 under mse), and the groups of tests/test_quantize_sat.py (ties,
clamp boundaries, the scale's floor, subnormals). Every result is the CPU path's, bit for bit.
"""

import numpy as np
import pytest

import radiance
from test_quantize_sat import BF16, adversarial_groups

torch = pytest.importorskip("torch")
from torch_helpers import fresh_rng, to_numpy, to_torch  # noqa: E402  (needs torch)

pytestmark = pytest.mark.gpu


def steering_rows(rng, group_size, dtype, rows):
    """[rows, K] float32 (exact in dtype): every adversarial group in turn, each row made of one kind,
    and 8 groups of gaussian weights per row beside it, so one warp (1024 weights) mixes kinds."""
    kinds = adversarial_groups(rng, group_size, dtype)
    names = list(kinds)
    k = 9 * group_size
    w = np.empty((rows, k), dtype=np.float32)
    for i in range(rows):
        odd = kinds[names[i % len(names)]]
        if i % 3 == 0:  # a fresh draw of the same kind, so rows of one kind differ
            odd = adversarial_groups(rng, group_size, dtype)[names[i % len(names)]]
        normal = (rng.standard_normal(8 * group_size) * 0.02).astype(np.float32)
        pos = int(rng.integers(0, 9))
        w[i] = np.concatenate([normal[: pos * group_size], odd, normal[pos * group_size:]])
    if dtype == "bf16":
        w[rows // 2, 5] = 2.0**100  # amax = 2^100 exactly: the first amax that leaves the search
        w[rows // 2 + 1, 5] = np.float32(2.0**100).astype(BF16).astype(np.float32) * np.float32(0.99)
    return w.astype(BF16 if dtype == "bf16" else np.float16)


@pytest.mark.parametrize("group_size", [32, 64, 128, 256])
@pytest.mark.parametrize("clip", ["mse", "act"])
@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_quantize_gpu_steered_searches_equal_cpu(group_size, clip, dtype):
    rng, seed = fresh_rng()
    w = steering_rows(rng, group_size, dtype, rows=203)
    act = None
    if clip == "act":
        act = (rng.random(w.shape[1]) * 4.0).astype(np.float32)
        act[: group_size] = 1.0  # one group of equal statistics (act = mse there)
    kwargs = {} if act is None else {"activation_sq": act}
    packed_cpu, scales_cpu = radiance.quantize_rows(w, group_size, clip, **kwargs)
    packed, scales = radiance.quantize_rows(to_torch(w), group_size, clip, **kwargs)
    np.testing.assert_array_equal(to_numpy(packed), packed_cpu, err_msg=f"seed {seed}")
    np.testing.assert_array_equal(to_numpy(scales).view(np.uint16), scales_cpu.view(np.uint16), err_msg=f"seed {seed}")


@pytest.mark.parametrize("dtype", ["bf16", "f16", "f32"])
def test_quantize_gpu_adversarial_groups_equal_cpu(dtype):
    """Each adversarial group alone in its row (K = 128), every group size that divides it."""
    rng, seed = fresh_rng()
    groups = adversarial_groups(rng, 128, "f16" if dtype == "f16" else "bf16")
    w32 = np.stack(list(groups.values()))
    w = w32.astype({"bf16": BF16, "f16": np.float16, "f32": np.float32}[dtype])
    for group_size in (32, 64, 128):
        packed_cpu, scales_cpu = radiance.quantize_rows(w, group_size, "mse")
        packed, scales = radiance.quantize_rows(to_torch(w), group_size, "mse")
        np.testing.assert_array_equal(to_numpy(packed), packed_cpu, err_msg=f"seed {seed} G={group_size}")
        np.testing.assert_array_equal(
            to_numpy(scales).view(np.uint16), scales_cpu.view(np.uint16), err_msg=f"seed {seed} G={group_size}"
        )
