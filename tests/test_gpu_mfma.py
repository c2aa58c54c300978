"""The AMD CDNA MFMA path (hip/apply_mfma.hip) and its rad_mfma layer (hip/mfma.h) on any GPU.

On NVIDIA the layer is an emulation of the 64-lane v_mfma_f32_16x16x16_bf16 layout (two warps per
wave), so the same kernel source runs here through the test flags of radiance_gpu_test_refuse; on a
gfx942 / gfx90a GPU the layer is the hardware instruction and the same tests check it. As for WMMA
(test_gpu_wmma.py), three things are pinned apart: the layout (one rad_mfma against a plain matrix
product, element by element, every lane), the kernel (against float64 on awkward shapes, at every
token tiling the planner can give it, poisoned outputs) and the self-check on first use (a
deliberately wrong kernel must be caught, warned about once, and replaced by the vector kernel).
"""

import ctypes
import os

import numpy as np
import pytest

from test_gpu_wmma import (
    EINVAL,
    Flags,
    apply_excess,
    bf16_words,
    problem,
    self_check_falls_back,
    self_check_waits_outside_graph_capture,
)

pytest.importorskip("torch")

pytestmark = pytest.mark.gpu
FORCE_MFMA, CORRUPT_MFMA = 512, 1024  # csrc/include/radiance/radiance_gpu.h


def lib():
    from radiance import _C

    so = ctypes.CDLL(_C.__file__)
    u32p, f32p = ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(ctypes.c_float)
    so.radiance_gpu_test_mfma.argtypes = [u32p, u32p, f32p, f32p]
    so.radiance_gpu_test_mfma.restype = ctypes.c_int
    return so


# The layout as documented in hip/mfma.h (written here from that table, not from the C code):
# lane l of 64, g = l // 16, c = l % 16; element e (0..3) of an A/B fragment; register v (0..3) of C/D.
def a_entry(lane, e):
    """(M, K) of A held by element e of lane."""
    return lane % 16, 4 * (lane // 16) + e


def b_entry(lane, e):
    """(K, N) of B held by element e of lane."""
    return 4 * (lane // 16) + e, lane % 16


def d_entry(lane, v):
    """(M, N) of C/D held by register v of lane."""
    return 4 * (lane // 16) + v, lane % 16


def fragments(a, b, c):
    fa = np.array([[a[a_entry(l, e)] for e in range(4)] for l in range(64)])
    fb = np.array([[b[b_entry(l, e)] for e in range(4)] for l in range(64)])
    fc = np.array([[c[d_entry(l, v)] for v in range(4)] for l in range(64)], dtype=np.float32)
    return bf16_words(fa), bf16_words(fb), fc


def run_mfma(fa, fb, fc):
    so = lib()
    fa, fb = np.ascontiguousarray(fa, np.uint32), np.ascontiguousarray(fb, np.uint32)
    fc, fd = np.ascontiguousarray(fc, np.float32), np.full((64, 4), np.nan, np.float32)
    u32p, f32p = ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(ctypes.c_float)
    rc = so.radiance_gpu_test_mfma(
        fa.ctypes.data_as(u32p), fb.ctypes.data_as(u32p), fc.ctypes.data_as(f32p), fd.ctypes.data_as(f32p)
    )
    return rc, fd


def require_layer():
    z = np.zeros((64, 2), np.uint32)
    rc, _ = run_mfma(z, z, np.zeros((64, 4), np.float32))
    if rc == EINVAL:
        pytest.skip("no rad_mfma for this GPU (an AMD GPU without CDNA's MFMA, or an NVIDIA GPU other "
                    "than sm_90, the only NVIDIA target built with the emulation)")
    assert rc == 0, f"radiance_gpu_test_mfma failed: {rc}"


def gather(d):
    got = np.full((16, 16), np.nan)
    for lane in range(64):
        for v in range(4):
            got[d_entry(lane, v)] = d[lane, v]
    return got


def test_mfma_layer_equals_matrix_product_in_every_lane():
    require_layer()
    rng = np.random.default_rng()
    for _ in range(4):
        # small integers: every product and sum is exact in fp32, whatever the order
        a = rng.integers(-8, 9, (16, 16)).astype(np.float32)
        b = rng.integers(-8, 9, (16, 16)).astype(np.float32)
        c = rng.integers(-64, 65, (16, 16)).astype(np.float32)
        rc, d = run_mfma(*fragments(a, b, c))
        assert rc == 0
        want = a.astype(np.float64) @ b + c
        for lane in range(64):
            for v in range(4):
                mn = d_entry(lane, v)
                assert d[lane, v] == want[mn], f"lane {lane} register {v} (D{mn})"
    # one nonzero A and B element at a time: catches a layout that is right only on average, for
    # every K (each lane group's four) and rows / columns in every lane group of D
    for m, kk, nn in [(0, 0, 0), (15, 15, 15), (3, 9, 12), (8, 7, 1), (13, 2, 6), (4, 4, 4), (11, 12, 3)]:
        a, b, c = np.zeros((16, 16)), np.zeros((16, 16)), np.zeros((16, 16))
        a[m, kk], b[kk, nn] = 3.0, 5.0
        rc, d = run_mfma(*fragments(a, b, c))
        got = gather(d)
        assert rc == 0 and got[m, nn] == 15.0 and np.count_nonzero(got) == 1, (m, kk, nn)


def test_mfma_layer_keeps_bf16_operands_exact():
    # bf16 operands that are not small integers (full 8-bit significands, mixed exponents): every
    # product is exact in fp32; sums of 16 of them with C are compared at fp32 accuracy
    require_layer()
    rng = np.random.default_rng()
    a = (rng.standard_normal((16, 16)) * 4).astype(np.float32)
    b = (rng.standard_normal((16, 16)) / 4).astype(np.float32)
    a = (a.view(np.uint32) & 0xFFFF0000).view(np.float32)
    b = (b.view(np.uint32) & 0xFFFF0000).view(np.float32)
    c = rng.standard_normal((16, 16)).astype(np.float32)
    rc, d = run_mfma(*fragments(a, b, c))
    assert rc == 0
    want = a.astype(np.float64) @ b.astype(np.float64) + c
    scale = np.abs(a).astype(np.float64) @ np.abs(b) + np.abs(c)
    assert (np.abs(gather(d) - want) <= 2.0**-20 * scale).all()


def test_mfma_layer_takes_k_8_to_15_from_lanes_32_to_63():
    # lane groups 2 and 3 hold K 8-15; on NVIDIA they are the emulated wave's second warp, so a
    # fragment missing there must leave exactly the product over K 0-7
    require_layer()
    rng = np.random.default_rng()
    a = rng.integers(1, 9, (16, 16)).astype(np.float32)
    b = rng.integers(1, 9, (16, 16)).astype(np.float32)
    fa, fb, fc = fragments(a, b, np.zeros((16, 16), np.float32))
    fa[32:] = 0
    rc, d = run_mfma(fa, fb, fc)
    assert rc == 0
    want = a[:, :8].astype(np.float64) @ b[:8]
    assert (gather(d) == want).all()


# token counts of every tiling the planner gives the MFMA path (16, 32, 64, 128 tokens per wave:
# hip/apply.hip, plan_mfma) and past them (several chunks of 128), with group sizes and k that
# are not powers of two, n odd (row tiles cut short)
@pytest.mark.parametrize(
    "m, k, group_size",
    [(1, 576, 64), (4, 1376, 32), (16, 5120, 128), (17, 576, 64), (32, 1376, 32), (33, 2048, 256),
     (64, 960, 64), (65, 5120, 128), (100, 1376, 32), (128, 768, 256), (129, 640, 128), (300, 576, 32)],
)
def test_mfma_kernel_matches_float64(m, k, group_size, monkeypatch):
    require_layer()
    monkeypatch.setenv("RADIANCE_AMD_MFMA", "1")  # the kernel itself, no self-check
    seed = int.from_bytes(os.urandom(4), "little")
    args, bias_t, n, ref, bound = problem(np.random.default_rng(seed), m, k, group_size)
    with Flags(FORCE_MFMA):
        excess = apply_excess(args, bias_t, n, ref, bound, group_size)
    assert excess <= 1.0, f"seed {seed} n {n}: worst error {excess:.2f}x the bound"


def test_mfma_self_check_catches_a_wrong_kernel_and_falls_back(monkeypatch, capfd):
    require_layer()
    self_check_falls_back(FORCE_MFMA, CORRUPT_MFMA, "RADIANCE_AMD_MFMA", "MFMA kernel (CDNA layout)", monkeypatch, capfd)


def test_mfma_switch_is_its_own(monkeypatch, capfd):
    # RADIANCE_AMD_WMMA=0 leaves the MFMA path on, and a wrong MFMA kernel is still caught
    require_layer()
    monkeypatch.setenv("RADIANCE_AMD_WMMA", "0")
    monkeypatch.delenv("RADIANCE_AMD_MFMA", raising=False)
    seed = int.from_bytes(os.urandom(4), "little")
    prob = problem(np.random.default_rng(seed), 24, 1024, 128)
    capfd.readouterr()
    with Flags(FORCE_MFMA | CORRUPT_MFMA):
        assert apply_excess(*prob, 128) <= 1.0, f"seed {seed}"
    assert "the MFMA kernel (CDNA layout) disagrees" in capfd.readouterr().err


def test_mfma_self_check_waits_outside_graph_capture(monkeypatch, capfd):
    require_layer()
    self_check_waits_outside_graph_capture(FORCE_MFMA, CORRUPT_MFMA, "RADIANCE_AMD_MFMA", monkeypatch, capfd)
