"""The AMD WMMA path (hip/apply_wmma.hip) and its rad_wmma layer (hip/wmma.h) on any GPU.

On NVIDIA the layer is an emulation of the RDNA4 (gfx12) and RDNA3 (gfx11) lane layouts, so the
same kernel source runs here through the test flags of radiance_gpu_test_refuse; on an RDNA GPU the
layer is the hardware instruction and the same tests check it. Three things are pinned apart:
the layout (one rad_wmma against a plain matrix product, element by element, for every lane), the
kernel (against float64 on awkward shapes, poisoned outputs) and the self-check on first use (a
deliberately wrong kernel must be caught, warned about once, and replaced by the vector kernel).
"""

import ctypes
import os

import ml_dtypes
import numpy as np
import pytest

import radiance
from reference import apply_reference

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.gpu
BF16 = ml_dtypes.bfloat16
DEV = torch.device("cuda")
EINVAL = -1
FORCE_WMMA12, FORCE_WMMA11, CORRUPT_WMMA = 64, 128, 256  # csrc/include/radiance/radiance_gpu.h
FORCE = {12: FORCE_WMMA12, 11: FORCE_WMMA11}
WORDS = {12: 4, 11: 8}  # 32-bit words (bf16 pairs) of an A or B fragment per lane


def lib():
    from radiance import _C

    so = ctypes.CDLL(_C.__file__)
    so.radiance_gpu_test_refuse.argtypes, so.radiance_gpu_test_refuse.restype = [ctypes.c_int], ctypes.c_int
    u32p, f32p = ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(ctypes.c_float)
    so.radiance_gpu_test_wmma.argtypes = [ctypes.c_int, u32p, u32p, f32p, f32p]
    so.radiance_gpu_test_wmma.restype = ctypes.c_int
    return so


# The layout as documented in hip/wmma.h (written here from that table, not from the C code):
# lane l, h = l // 16, r = l % 16; element e of an A/B fragment; register v of C/D.
def a_entry(arch, lane, e):
    """(M, K) of A held by element e of lane."""
    return (lane % 16, 8 * (lane // 16) + e) if arch == 12 else (lane % 16, e)


def b_entry(arch, lane, e):
    """(K, N) of B held by element e of lane."""
    return (8 * (lane // 16) + e, lane % 16) if arch == 12 else (e, lane % 16)


def d_entry(arch, lane, v):
    """(M, N) of C/D held by register v of lane."""
    return (v + 8 * (lane // 16), lane % 16) if arch == 12 else (2 * v + lane // 16, lane % 16)


def bf16_words(values):
    """[32, 2w] small integers -> [32, w] uint32, element 2j in the low half of word j."""
    bits = (np.asarray(values, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint32)
    return bits[:, 0::2] | (bits[:, 1::2] << 16)


def fragments(arch, a, b, c):
    elems = 2 * WORDS[arch]
    fa = np.array([[a[a_entry(arch, l, e)] for e in range(elems)] for l in range(32)])
    fb = np.array([[b[b_entry(arch, l, e)] for e in range(elems)] for l in range(32)])
    fc = np.array([[c[d_entry(arch, l, v)] for v in range(8)] for l in range(32)], dtype=np.float32)
    return bf16_words(fa), bf16_words(fb), fc


def run_wmma(arch, fa, fb, fc):
    so = lib()
    fa, fb = np.ascontiguousarray(fa, np.uint32), np.ascontiguousarray(fb, np.uint32)
    fc, fd = np.ascontiguousarray(fc, np.float32), np.full((32, 8), np.nan, np.float32)
    u32p, f32p = ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(ctypes.c_float)
    rc = so.radiance_gpu_test_wmma(
        arch, fa.ctypes.data_as(u32p), fb.ctypes.data_as(u32p), fc.ctypes.data_as(f32p), fd.ctypes.data_as(f32p)
    )
    return rc, fd


def require_layer(arch):
    z = np.zeros((32, WORDS[arch]), np.uint32)
    rc, _ = run_wmma(arch, z, z, np.zeros((32, 8), np.float32))
    if rc == EINVAL:
        pytest.skip(f"no rad_wmma<{arch}> for this GPU (an AMD GPU of another family, or an NVIDIA GPU "
                    f"other than sm_90, the only NVIDIA target built with the emulation)")
    assert rc == 0, f"radiance_gpu_test_wmma failed: {rc}"


@pytest.mark.parametrize("arch", [12, 11])
def test_wmma_layer_equals_matrix_product_in_every_lane(arch):
    require_layer(arch)
    rng = np.random.default_rng()
    for _ in range(4):
        # small integers: every product and sum is exact in fp32, whatever the order
        a = rng.integers(-8, 9, (16, 16)).astype(np.float32)
        b = rng.integers(-8, 9, (16, 16)).astype(np.float32)
        c = rng.integers(-64, 65, (16, 16)).astype(np.float32)
        rc, d = run_wmma(arch, *fragments(arch, a, b, c))
        assert rc == 0
        want = a.astype(np.float64) @ b + c
        for lane in range(32):
            for v in range(8):
                mn = d_entry(arch, lane, v)
                assert d[lane, v] == want[mn], f"gfx{arch} lane {lane} register {v} (D{mn})"
    # one nonzero A and B element at a time: catches a layout that is right only on average
    for m, kk, nn in [(0, 0, 0), (15, 15, 15), (3, 9, 12), (8, 7, 1), (13, 2, 6)]:
        a, b, c = np.zeros((16, 16)), np.zeros((16, 16)), np.zeros((16, 16))
        a[m, kk], b[kk, nn] = 3.0, 5.0
        rc, d = run_wmma(arch, *fragments(arch, a, b, c))
        got = np.zeros((16, 16))
        for lane in range(32):
            for v in range(8):
                got[d_entry(arch, lane, v)] = d[lane, v]
        assert rc == 0 and got[m, nn] == 15.0 and np.count_nonzero(got) == 1, (m, kk, nn)


@pytest.mark.skipif(radiance.gpu_backend() != "cuda", reason="the emulation's replication check")
def test_wmma_gfx11_emulation_needs_both_half_waves():
    # RDNA3 wants A and B replicated in both half-waves; the emulation reads K 8-15 from the high
    # one, so a kernel that fills only lanes 0-15 fails on NVIDIA too
    require_layer(11)
    rng = np.random.default_rng()
    a = rng.integers(1, 9, (16, 16)).astype(np.float32)
    b = rng.integers(1, 9, (16, 16)).astype(np.float32)
    fa, fb, fc = fragments(11, a, b, np.zeros((16, 16), np.float32))
    fa[16:] = 0
    rc, d = run_wmma(11, fa, fb, fc)
    assert rc == 0
    want = a.astype(np.float64) @ b
    got = np.array([[d[l, v] for v in range(8)] for l in range(32)])
    assert not all(got[l, v] == want[d_entry(11, l, v)] for l in range(32) for v in range(8))


def test_wmma_test_entry_rejects_other_layouts():
    z = np.zeros((32, 8), np.uint32)
    assert run_wmma(10, z, z, np.zeros((32, 8), np.float32))[0] == EINVAL


class Flags:
    """radiance_gpu_test_refuse(flags) for the block (setting it forgets the self-check results)."""

    def __init__(self, flags):
        self.flags, self.hook = flags, lib().radiance_gpu_test_refuse

    def __enter__(self):
        assert self.hook(self.flags) == 0, "the test hook was left set"

    def __exit__(self, *exc):
        assert self.hook(0) == self.flags


def problem(rng, m, k, group_size):
    n = int(rng.integers(40, 700)) | 1
    w = (rng.standard_normal((n, k)) * 0.02).astype(BF16)
    packed, scales = radiance.quantize_rows(w, group_size)
    x = (rng.standard_normal((m, k)) * 2).astype(BF16)
    bias = rng.standard_normal(n).astype(BF16) if m % 2 else None
    ref = apply_reference(x, radiance.unpack_shuffle(packed), scales, group_size, bias)
    w_hat = radiance.dequantize(packed, scales, group_size).astype(np.float64)
    bound = 2.0**-8 * np.abs(ref) + 2e-6 * (np.abs(x.astype(np.float64)) @ np.abs(w_hat).T) + 1e-6
    args = [torch.from_numpy(a.view(np.int16)).view(torch.bfloat16).to(DEV) if a.dtype == BF16
            else torch.from_numpy(a).to(DEV) for a in (x, packed, scales)]
    bias_t = None if bias is None else torch.from_numpy(bias.view(np.int16)).view(torch.bfloat16).to(DEV)
    return args, bias_t, n, ref, bound


def apply_excess(args, bias_t, n, ref, bound, group_size):
    out = torch.full((ref.shape[0], n), float("nan"), dtype=torch.bfloat16, device=DEV)  # poisoned
    radiance.apply(*args, bias_t, group_size, out=out)
    torch.cuda.synchronize()
    got = out.float().cpu().numpy().astype(np.float64)
    assert np.isfinite(got).all(), "unwritten outputs"
    return (np.abs(got - ref) / bound).max()


@pytest.mark.parametrize("arch", [12, 11])
@pytest.mark.parametrize(
    "m, k, group_size",
    [(1, 576, 64), (5, 1376, 32), (16, 5120, 128), (17, 576, 64), (33, 1376, 32), (100, 5120, 128),
     (3, 8192, 256), (40, 8192, 256), (70, 2048, 32)],
)
def test_wmma_kernel_matches_float64(arch, m, k, group_size, monkeypatch):
    require_layer(arch)
    monkeypatch.setenv("RADIANCE_AMD_WMMA", "1")  # the kernel itself, no self-check
    seed = int.from_bytes(os.urandom(4), "little")
    args, bias_t, n, ref, bound = problem(np.random.default_rng(seed), m, k, group_size)
    with Flags(FORCE[arch]):
        excess = apply_excess(args, bias_t, n, ref, bound, group_size)
    assert excess <= 1.0, f"gfx{arch} seed {seed} n {n}: worst error {excess:.2f}x the bound"


def self_check_falls_back(force, corrupt, env_name, label, monkeypatch, capfd):
    """The self-check of a matrix path under its test flags (force: take the path, corrupt: its
    deliberately wrong kernel) and its switch env_name; label starts the path's warning. Shared by
    the WMMA and MFMA tests."""
    seed = int.from_bytes(os.urandom(4), "little")
    prob = problem(np.random.default_rng(seed), 24, 1024, 128)
    capfd.readouterr()
    # the wrong kernel is really wrong: =1 skips the check and runs it
    monkeypatch.setenv(env_name, "1")
    with Flags(force | corrupt):
        assert apply_excess(*prob, 128) > 1.0, f"seed {seed}: the corrupted kernel gave right results"
    assert "warning" not in capfd.readouterr().err
    # =0: the path is off, the plan without it runs, nothing is checked
    monkeypatch.setenv(env_name, "0")
    with Flags(force | corrupt):
        assert apply_excess(*prob, 128) <= 1.0, f"seed {seed}"
    assert "warning" not in capfd.readouterr().err
    # unset: the first call checks, finds the difference, warns once naming the GPU, falls back
    monkeypatch.delenv(env_name, raising=False)
    with Flags(force | corrupt):
        assert apply_excess(*prob, 128) <= 1.0, f"seed {seed}"
        err = capfd.readouterr().err
        assert f"radiance: warning: the {label}" in err and "disagrees" in err, err
        assert f"{env_name}=1" in err and torch.cuda.get_device_name() in err, err
        assert apply_excess(*prob, 128) <= 1.0, f"seed {seed}"
        assert "warning" not in capfd.readouterr().err, "warned twice"
    # a right kernel passes the check silently
    with Flags(force):
        assert apply_excess(*prob, 128) <= 1.0, f"seed {seed}"
    assert "warning" not in capfd.readouterr().err


def self_check_waits_outside_graph_capture(force, corrupt, env_name, monkeypatch, capfd):
    """A matrix path's self-check is never run while a graph is being captured (it synchronizes):
    the captured call takes the plan without the path, the first uncaptured call checks."""
    monkeypatch.delenv(env_name, raising=False)
    seed = int.from_bytes(os.urandom(4), "little")
    args, bias_t, n, ref, bound = problem(np.random.default_rng(seed), 20, 1024, 128)
    out = torch.full((20, n), float("nan"), dtype=torch.bfloat16, device=DEV)
    for flags in (0, 1):  # load the kernels that can serve the captured call (1: NO_MMA, vector)
        with Flags(flags):
            apply_excess(args, bias_t, n, ref, bound, 128)
    capfd.readouterr()
    with Flags(force | corrupt):
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):  # unchecked while capturing
            radiance.apply(*args, bias_t, 128, out=out)
        graph.replay()
        torch.cuda.synchronize()
        got = out.float().cpu().numpy().astype(np.float64)
        assert (np.abs(got - ref) / bound).max() <= 1.0, f"seed {seed}"
        assert "warning" not in capfd.readouterr().err, "checked during capture"
        # the first call outside capture checks (and catches the wrong kernel)
        assert apply_excess(args, bias_t, n, ref, bound, 128) <= 1.0
        assert "disagrees" in capfd.readouterr().err


@pytest.mark.parametrize("arch", [12, 11])
def test_wmma_self_check_catches_a_wrong_kernel_and_falls_back(arch, monkeypatch, capfd):
    require_layer(arch)
    self_check_falls_back(FORCE[arch], CORRUPT_WMMA, "RADIANCE_AMD_WMMA", f"WMMA kernel (gfx{arch} layout)",
                          monkeypatch, capfd)


def test_wmma_self_check_waits_outside_graph_capture(monkeypatch, capfd):
    require_layer(12)
    self_check_waits_outside_graph_capture(FORCE_WMMA12, CORRUPT_WMMA, "RADIANCE_AMD_WMMA", monkeypatch, capfd)
