"""GPU kernels through the public API (torch tensors via DLPack); skipped without a GPU build+GPU.

Every check draws fresh random inputs (the seed is printed in failure messages) and compares with
the CPU path (quantize: bit for bit) or a float64 reference (apply).
"""

import os

import ml_dtypes
import numpy as np
import pytest

import radiance
from reference import (apply_reference, expected_fold_launches, fold_chunks_of, fold_fill, fold_tail_parts,
                       folds_on_hopper)

torch = pytest.importorskip("torch")
from torch_helpers import fresh_rng, to_numpy, to_torch  # noqa: E402  (needs torch)

pytestmark = pytest.mark.gpu
BF16 = ml_dtypes.bfloat16
DEV = torch.device("cuda")


def weights(rng, n, k, kind):
    w = rng.standard_normal((n, k)) * 0.02
    if kind == "outliers":
        w[rng.random((n, k)) < 0.01] *= 8
    if kind == "zero_rows":
        w[:: max(1, n // 4)] = 0.0
    if kind == "student_t":
        w = rng.standard_t(3, size=(n, k)) * 0.02
    return w


def random_call(rng, m, n, k, group_size, bias, zero_row=None):
    """A fresh random head of n x k (outliers; row zero_row all zero where given) quantized with
    group_size, m tokens of activations and, where `bias`, a bias: (x, packed, scales, bias), drawn
    in that order."""
    w = weights(rng, n, k, "outliers").astype(BF16)
    if zero_row is not None:
        w[zero_row] = 0
    packed, scales = radiance.quantize_rows(w, group_size)
    x = (rng.standard_normal((m, k)) * 2).astype(BF16)
    return x, packed, scales, rng.standard_normal(n).astype(BF16) if bias else None


def awkward_weights(rng, group_size, kind, dtype):
    """weights() of an awkward shape: N odd, up to 3000; K a multiple of group_size, up to 8192."""
    n = int(rng.integers(1, 3000)) | 1
    k = group_size * int(rng.integers(1, 8192 // group_size + 1))
    return weights(rng, n, k, kind).astype(dtype)


def assert_same_quantization(packed, scales, packed_cpu, scales_cpu, seed):
    """GPU quantize_rows' tensors equal the CPU's arrays bit for bit (scales as bit patterns)."""
    np.testing.assert_array_equal(to_numpy(packed), packed_cpu, err_msg=f"seed {seed}")
    np.testing.assert_array_equal(
        to_numpy(scales).view(np.uint16), scales_cpu.view(np.uint16), err_msg=f"seed {seed}"
    )


def folded_weights(packed, scales, group_size):
    """float64 bf16_rne(q * s): the weights of the folding kernel (docs/FORMAT.md, "Rounding of
    apply"). q * s is exact in float32 (4 + 8 significant bits); ml_dtypes rounds to nearest even."""
    return radiance.dequantize(packed, scales, group_size).astype(BF16).astype(np.float64)


def folds(m, n, k, group_size, flags=0):
    """Whether the planner folds the scale into the weights for this call (hip/dispatch.h, decide;
    docs/FORMAT.md says which calls fold): sm_90 with its wgmma kernels and tensor maps, and
    reference.folds_on_hopper for this GPU's SM count."""
    if torch.cuda.get_device_capability() != (9, 0) or flags & (NO_MMA | NO_WGMMA | REFUSE_XMAP | REFUSE_WMAP):
        return False
    return folds_on_hopper(m, k, group_size, n, torch.cuda.get_device_properties(DEV).multi_processor_count)


def excess_over_bound(got, x, packed, scales, group_size, bias, floor=1e-6, folded=False):
    """|got - ref| over its bound, element by element (<= 1 passes): ref the float64 logits of the
    quantized head, the bound one bf16 rounding (2^-8 relative) plus fp32 accumulation over K;
    `floor` absolute. folded: of the head whose weights are bf16_rne(q * s) (the folding kernel),
    else of q * s exactly."""
    if folded:
        w_hat = folded_weights(packed, scales, group_size)
        ref = np.asarray(x).astype(np.float64) @ w_hat.T
        if bias is not None:
            ref = ref + np.asarray(bias).astype(np.float64)
    else:
        ref = apply_reference(x, radiance.unpack_shuffle(packed), scales, group_size, bias)
        w_hat = radiance.dequantize(packed, scales, group_size).astype(np.float64)
    bound = 2.0**-8 * np.abs(ref) + 2e-6 * (np.abs(x.astype(np.float64)) @ np.abs(w_hat).T) + floor
    return np.abs(np.asarray(got).astype(np.float64) - ref) / bound


def assert_within_bf16_of_float64(got, x, packed, scales, group_size, bias, seed, floor=1e-6, folded=False):
    """got within excess_over_bound's bound of the float64 logits of the quantized head."""
    excess = excess_over_bound(got, x, packed, scales, group_size, bias, floor, folded)
    what = "bf16(q * s)" if folded else "q * s"
    assert excess.max() <= 1.0, f"seed {seed}: worst error {excess.max():.2f}x the bound (weights {what})"


@pytest.mark.parametrize("group_size", [32, 64, 128, 256])
@pytest.mark.parametrize("clip", ["mse", "rtn"])
@pytest.mark.parametrize("kind", ["gaussian", "outliers", "zero_rows", "student_t"])
@pytest.mark.parametrize("dtype", [BF16, np.float16, np.float32], ids=["bf16", "f16", "f32"])
def test_quantize_gpu_equals_cpu_bit_for_bit(group_size, clip, kind, dtype):
    rng, seed = fresh_rng()
    w = awkward_weights(rng, group_size, kind, dtype)
    packed_cpu, scales_cpu = radiance.quantize_rows(w, group_size, clip)
    packed, scales = radiance.quantize_rows(to_torch(w), group_size, clip)
    assert packed.is_cuda and packed.dtype == torch.int32 and scales.dtype == torch.bfloat16
    assert_same_quantization(packed, scales, packed_cpu, scales_cpu, seed)


def test_quantize_gpu_flags_non_finite_rows():
    w = torch.randn(300, 512, device=DEV, dtype=torch.bfloat16)
    w[123, 7] = float("nan")
    w[200, 0] = float("inf")
    with pytest.raises(ValueError, match="non-finite.*row 123"):
        radiance.quantize_rows(w)


M_VALUES = [1, 2, 3, 5, 8, 16, 17, 33, 64, 100, 256, 300]
# radiance_gpu_test_refuse flags (csrc/include/radiance/radiance_gpu.h; planner_refuses below): never /
# always (1-8 tokens) the shared-activation stream kernels; no mma.sync / wgmma kernel; the
# activations', weights', output's tensor map refused; the folding kernel's clusters refused, or
# none larger than two blocks
NO_SHARED_X, SHARED_X = 16, 32
NO_MMA, NO_WGMMA, REFUSE_XMAP, REFUSE_WMAP, REFUSE_OMAP = 1, 2, 4, 8, 2048
REFUSE_CLUSTERS, CLUSTERS_OF_TWO = 4096, 8192


@pytest.mark.parametrize("m", M_VALUES)
@pytest.mark.parametrize("k, group_size", [(128, 128), (576, 64), (1376, 32), (5120, 128), (8192, 256)])
def test_apply_gpu_matches_float64(m, k, group_size):
    rng, seed = fresh_rng()
    n = int(rng.integers(1000, 5000)) | 1  # never a multiple of a tile
    x, packed, scales, bias = random_call(rng, m, n, k, group_size, m % 2)
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device=DEV)  # poisoned
    y = radiance.apply(
        to_torch(x), to_torch(packed), to_torch(scales),
        None if bias is None else to_torch(bias), group_size, out=out,
    )
    assert y is out
    torch.cuda.synchronize()
    got = to_numpy(y).astype(np.float64)
    assert np.isfinite(got).all(), f"unwritten outputs (seed {seed})"
    assert_within_bf16_of_float64(got, x, packed, scales, group_size, bias, seed, folded=folds(m, n, k, group_size))


def profiled_apply(rng, m, n, k, group_size):
    """A fresh random head of n x k (outliers) and m tokens (a bias where m is odd) through
    radiance.apply into a poisoned output, under the CUDA profiler: (the profile, the output as
    float64, (x, packed, scales, bias))."""
    x, packed, scales, bias = random_call(rng, m, n, k, group_size, m % 2)
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device=DEV)  # poisoned
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        radiance.apply(to_torch(x), to_torch(packed), to_torch(scales),
                       None if bias is None else to_torch(bias), group_size, out=out)
        torch.cuda.synchronize()
    return prof, to_numpy(out).astype(np.float64), (x, packed, scales, bias)


def guarded_apply(x, packed, scales, bias, group_size, seed):
    """radiance.apply into a NaN-poisoned output followed by 64 more poisoned elements, under the
    CUDA profiler: (the profile, the output as float64), after checking that nothing was written
    past the output."""
    m, n = x.shape[0], packed.shape[0]
    guard = 64
    buf = torch.full((m * n + guard,), float("nan"), dtype=torch.bfloat16, device=DEV)
    out = buf[: m * n].view(m, n)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        radiance.apply(to_torch(x), to_torch(packed), to_torch(scales), None if bias is None else to_torch(bias),
                       group_size, out=out)
        torch.cuda.synchronize()
    assert np.isnan(to_numpy(buf[m * n :]).astype(np.float64)).all(), f"written past the output (seed {seed})"
    return prof, to_numpy(out).astype(np.float64)


def kernel_launches_template_args(prof, kernel):
    """The template arguments, as strings, of each launch of `kernel` the profiler saw, in the order
    they ran: [("64", "2", "true", "2")] for one apply_wgmma_fold_kernel<64, 2, true, 2>(...)."""
    ran = sorted((e for e in prof.events() if f"{kernel}<" in e.name), key=lambda e: e.time_range.start)
    return [tuple(arg.strip() for arg in e.name.split(f"{kernel}<")[1].split(">")[0].split(",")) for e in ran]


def profiled_on_hopper():
    """Whether a test reads which stream kernel ran from the profiler: on an H100 / H200 (CUDA, sm_90,
    where the planner's stream plans are the ones the tests name), unless RADIANCE_TEST_NO_PROFILER=1
    (memcheck runs)."""
    return (torch.version.cuda is not None and torch.cuda.get_device_capability() == (9, 0)
            and os.environ.get("RADIANCE_TEST_NO_PROFILER") != "1")


def kernel_template_args(prof, kernel):
    """The template arguments of the one launch of `kernel` the profiler saw."""
    ran = kernel_launches_template_args(prof, kernel)
    assert len(ran) == 1, (kernel, ran)
    return ran[0]


def kernel_grids(prof, kernel):
    """The grid's x size of each launch of `kernel` in the profiler's trace (CUPTI records it), in
    the order they ran."""
    import json
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as fh:
            events = json.load(fh)["traceEvents"]
    ran = sorted((e for e in events if f"{kernel}<" in e.get("name", "") and "grid" in e.get("args", {})),
                 key=lambda e: e["ts"])
    return [e["args"]["grid"][0] for e in ran]


def kernel_grid(prof, kernel):
    """The grid's x size of the one launch of `kernel` in the profiler's trace."""
    grids = kernel_grids(prof, kernel)
    assert len(grids) == 1, (kernel, grids)
    return grids[0]


# The register pipe for 1-8 tokens with groups under 128 (hip/dispatch.h, plan_mma) in both of its
# shapes: 3 steps ahead with registers for 6 blocks per SM, and 2 steps ahead for 8 blocks (whose
# registers spill a few bytes to the stack) for group 64 with k >= 4096 from 4 tokens and group 32
# from k = 2048 (2080: 65 groups of 32). n odd, k past
# a multiple of 512 (4160 = 65 groups of 64), outlier rows. Which shape ran is read from the
# profiler (sm_80 and later; not under compute-sanitizer: RADIANCE_TEST_NO_PROFILER=1).
@pytest.mark.parametrize("m", [1, 3, 4, 5, 8])
@pytest.mark.parametrize("k, group_size", [(576, 64), (1376, 32), (2080, 32), (4096, 32), (4160, 64), (8192, 64)])
def test_apply_gpu_register_pipe_matches_float64(m, k, group_size):
    if torch.version.cuda is None or torch.cuda.get_device_capability() < (8, 0):
        pytest.skip("the register pipe is the mma.sync kernel of NVIDIA sm_80 and later")
    rng, seed = fresh_rng()
    n = int(rng.integers(2000, 9000)) | 1
    prof, got, (x, packed, scales, bias) = profiled_apply(rng, m, n, k, group_size)
    if os.environ.get("RADIANCE_TEST_NO_PROFILER") != "1":
        # apply_mma_kernel<group, 1, 1, steps ahead, blocks per SM>
        deep = k >= 2048 if group_size == 32 else k >= 4096 and m >= 4
        ahead, blocks = (2, 8) if deep else (3, 6)
        assert kernel_template_args(prof, "apply_mma_kernel") == (str(group_size), "1", "1", str(ahead), str(blocks))
    assert np.isfinite(got).all(), f"unwritten outputs (seed {seed})"
    assert_within_bf16_of_float64(got, x, packed, scales, group_size, bias, seed, folded=folds(m, n, k, group_size))


# Every tile the planner picks from 9 tokens (hip/dispatch.h, decide and fold_tile): the split-k
# stream kernel for 9-16 tokens where the halves of k fit (and, with NO_SHARED_X, the wgmma kernel
# instead), and each tile of the folding wgmma kernel (16 and 32 tokens for groups under 128; 16
# for 9-16 tokens where k <= 1024 is no multiple of twice the group and 32 for 17-32 tokens where
# k <= 1024, as 640 here, the wgmma pipe kernel at 5120 and 2304; 48;
# 64 to 256 in 32s; above 256 in equal chunks: 257 as 2 x 160, 384 as 2 x 192, 700 as 3 x 256,
# 1000 as 4 x 256; the warpgroups starting 1 step apart at 96-160 tokens and 2 at 224-256),
# checked against float64 of bf16_rne(q * s) where it folds. Heads of 40001 rows give every
# persistent block several tiles (more tiles than an H200 has SMs), so the ring carries on from one
# tile to the next; k = 576, 1312 and 1376 end inside a 128-column step (576 and 1312 in its first
# half, whose second half the kernel skips).
@pytest.mark.parametrize("flags", [0, NO_SHARED_X], ids=["auto", "no_shared_x"])
@pytest.mark.parametrize("m", [9, 12, 16, 20, 32, 40, 96, 129, 160, 192, 224, 255, 257])
@pytest.mark.parametrize("n, k, group_size", [(40001, 640, 128), (3001, 5120, 128), (1999, 2304, 256)])
def test_apply_gpu_every_tile_matches_float64(flags, m, n, k, group_size):
    check_flags_against_float64(flags, m, n, k, group_size)


# 17-32 tokens with groups of 128 and k > 1024 (hip/dispatch.h, fold_32_fills_rounds): the folding
# kernel's 32-token tile where its 192-row tiles fill their last round over this GPU's SMs to 0.99
# (n = 192 rows an SM: one whole round), the wgmma pipe kernel one row later (a second round of one
# tile). Which kernel ran is read from the profiler; against float64 of the rounding each applies.
@pytest.mark.parametrize("m", [17, 24, 32])
@pytest.mark.parametrize("extra_rows", [0, 1])
def test_apply_gpu_17_to_32_tokens_fold_where_tiles_fill_their_rounds(m, extra_rows):
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the folding kernel is sm_90a's")
    sms = torch.cuda.get_device_properties(DEV).multi_processor_count
    n, k = 192 * sms + extra_rows, 2304
    assert folds(m, n, k, 128) == (extra_rows == 0)
    rng, seed = fresh_rng()
    x, packed, scales, bias = random_call(rng, m, n, k, 128, m % 2 == 0)
    prof, got = guarded_apply(x, packed, scales, bias, 128, seed)
    if os.environ.get("RADIANCE_TEST_NO_PROFILER") != "1":
        assert (len(fold_launches(prof)) > 0) == (extra_rows == 0), fold_launches(prof)
    assert np.isfinite(got).all(), f"unwritten outputs (seed {seed})"
    assert_within_bf16_of_float64(got, x, packed, scales, 128, bias, seed, folded=folds(m, n, k, 128))


@pytest.mark.parametrize(
    "m, n, k, group_size",
    [
        *[(m, n, k, g) for m in (13, 30, 33, 120) for n, k, g in ((20001, 576, 64), (2999, 1376, 32))],
        *[(m, 1501, 1312, 32) for m in (48, 230)],
        *[(m, 2001, 1024, 128) for m in (384, 700)],
        (1000, 3001, 640, 128),
        (300, 1999, 2304, 256),
        # tiles of 2 consumer warpgroups with one, two and three steps per tile, many tiles per
        # block and a last row block past n: the next tile's scales requested in the step before
        # straight into their registers, rows past n reading row 0's (fold_load_scales, DIRECT)
        (200, 40001, 256, 128), (130, 40001, 128, 128), (250, 30011, 384, 64),
    ],
)
def test_apply_gpu_every_fold_tile_matches_float64(m, n, k, group_size):
    check_flags_against_float64(0, m, n, k, group_size)


# Tiles written by TMA (hip/dispatch.h, fold_tile: every 2-warpgroup tile, 161-256 tokens per chunk;
# 97-160 with 2 warpgroups for k <= 2048, 129-160 beyond where 128-row tiles fill the SMs' last
# round better (fold_tile_rows: 150 tokens on 2048 x 4096); every tile from 32 tokens for k <= 1024,
# 17-32 tokens too there: 20 of 32 at k = 640, 32 at 1024; the 48-token tile at every k: 40 of 48 at
# k = 5120, 48 at 2304) only where the output's tensor map is granted: n % 8 == 0 and a 16-byte
# aligned output, so the heads above (odd n) never take them. Here n % 8 == 0: below one 64-row box
# (24), a last box cut by n (40008, 3000, 20000), whole boxes (2048); m cut inside the last token
# box (200 of 224, 161 of 192, 24 of 32, 40 of 48, 120 of 128, 150 of 160, 700 as 3 x 256) or whole;
# several tiles per persistent block (40008 and 20000 rows). The engine must write every output
# inside n and m and nothing past them (poisoned output, and poisoned elements after it), and the
# same bits as the stores from the registers: with REFUSE_OMAP, and with the output 2 bytes off
# 16-byte alignment, which the driver refuses (through the C entry: radiance.apply refuses such an
# output before). Which kernel ran is read from the profiler (CUPTI), except under
# compute-sanitizer, which holds CUPTI itself: there RADIANCE_TEST_NO_PROFILER=1.
TMA_STORE_CASES = [
    (192, 40008, 640, 128), (200, 40008, 640, 128), (256, 2048, 5120, 128), (161, 3000, 5120, 128),
    (224, 24, 1024, 128), (700, 3000, 1024, 128), (384, 20000, 576, 64), (250, 2048, 1312, 32),
    (24, 20000, 576, 64), (40, 40008, 640, 128), (64, 20000, 576, 64), (96, 3000, 1024, 128),
    (120, 20000, 576, 64), (150, 40008, 1024, 256), (300, 40008, 640, 128), (150, 3000, 2048, 128),
    (100, 2048, 2048, 128), (40, 3000, 5120, 128), (48, 2048, 2304, 256), (20, 40008, 640, 128),
    (32, 3000, 1024, 128), (150, 2048, 4096, 128),
]


def fold_launches(prof):
    """The folding kernel's launches the profiler saw, in order, each (tokens, consumer warpgroups,
    written by TMA, blocks per SM, units of a cut last round): apply_wgmma_fold_kernel<64, 2, true,
    2, false> is (64, 2, True, 2, False)."""
    return [(int(t), int(w), ts == "true", int(b), c == "true")
            for t, w, ts, b, c in kernel_launches_template_args(prof, "apply_wgmma_fold_kernel")]


def fold_kernel_ran(prof):
    """The folding tile of one call, as (tokens, consumer warpgroups, written by TMA, blocks per SM):
    its one launch, or where its last round is cut along k (fold_kernel_cut), the launch of the
    whole rounds, which the launch of the units follows with the same tile."""
    ran = fold_launches(prof)
    assert len(ran) == 1 or (len(ran) == 2 and not ran[0][4] and ran[1][:4] == ran[0][:4] and ran[1][4]), ran
    return ran[0][:4]


def fold_kernel_cut(prof):
    """Whether the call's last round of tiles was cut along k: a second launch, of the units' kernel."""
    fold_kernel_ran(prof)
    return len(fold_launches(prof)) == 2


def fold_tiles(m, n, tokens, wgs):
    """The folding kernel's tiles for m tokens and n rows: 64 rows per consumer warpgroup by a
    chunk of `tokens`."""
    return -(-n // (64 * wgs)) * -(-m // tokens)


def fold_cuts(m, n, k, tokens, wgs, blocks, sms):
    """Whether the folding kernel cuts its last round along k for this tile (hip/dispatch.h,
    fold_tail_parts; one block per SM only)."""
    return blocks == 1 and fold_tail_parts(fold_tiles(m, n, tokens, wgs), sms, k) > 1


def apply_c_entry(x, packed, scales, bias, group_size, out, expect=0):
    """radiance_gpu_apply (csrc/include/radiance/radiance_gpu.h) on torch tensors, no Python checks;
    asserts that it returns `expect`."""
    import ctypes

    from radiance import _C

    entry = ctypes.CDLL(_C.__file__).radiance_gpu_apply
    p, i64 = ctypes.c_void_p, ctypes.c_int64
    entry.argtypes, entry.restype = [p, i64, i64, p, p, p, i64, ctypes.c_int, p, p], ctypes.c_int
    (m, k), n = x.shape, packed.shape[0]
    err = entry(x.data_ptr(), m, k, packed.data_ptr(), scales.data_ptr(), None if bias is None else bias.data_ptr(),
                n, group_size, out.data_ptr(), torch.cuda.current_stream().cuda_stream)
    assert err == expect, f"radiance_gpu_apply returned {err}, expected {expect}"


@pytest.mark.parametrize("m, n, k, group_size", TMA_STORE_CASES)
def test_apply_gpu_tma_store_matches_float64_and_register_store_bit_for_bit(m, n, k, group_size):
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the tiles written by TMA are the sm_90a folding kernel's")
    rng, seed = fresh_rng()
    x, packed, scales, bias = random_call(rng, m, n, k, group_size, m % 2 == 0)
    args = (to_torch(x), to_torch(packed), to_torch(scales), None if bias is None else to_torch(bias), group_size)
    guard = 64  # poisoned elements after the output
    outs = {}
    for name, flags, offset in (("tma", 0, 0), ("registers", REFUSE_OMAP, 0), ("unaligned", 0, 1)):
        buf = torch.full((offset + m * n + guard,), float("nan"), dtype=torch.bfloat16, device=DEV)
        out = buf[offset : offset + m * n].view(m, n)
        with planner_refuses(flags), torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            apply_c_entry(*args, out=out)
            torch.cuda.synchronize()
        if os.environ.get("RADIANCE_TEST_NO_PROFILER") != "1":
            assert fold_kernel_ran(prof)[2] == (name == "tma"), name
        rest = to_numpy(buf[offset + m * n :]).astype(np.float64)
        assert np.isnan(rest).all(), f"{name}: written past the output (seed {seed})"
        outs[name] = to_numpy(out)
    got = outs["tma"].astype(np.float64)
    assert np.isfinite(got).all(), f"unwritten outputs (seed {seed})"
    assert_within_bf16_of_float64(got, x, packed, scales, group_size, bias, seed, folded=folds(m, n, k, group_size))
    for name in ("registers", "unaligned"):
        np.testing.assert_array_equal(outs[name].view(np.uint16), outs["tma"].view(np.uint16),
                                      err_msg=f"{name} against tma, seed {seed}")


def fold_fill_one_block(tiles, slots, k):
    """fold_fill for one block per SM, whose last round may be cut along k (fold_tail_parts): that
    round then counts 1 / parts of one."""
    parts = fold_tail_parts(tiles, slots, k)
    return fold_fill(tiles, slots) if parts == 1 else tiles / ((tiles // slots + 1 / parts) * slots)


def expected_fold_tile(m, n, k, sms):
    """(tokens, consumer warpgroups, blocks per SM) of the folding tile for one chunk of 33-128 tokens
    with the output's tensor map granted, as hip/dispatch.h states its rule (fold_tile,
    fold_tile_two_per_sm): two blocks per SM of 128-row tiles (64-row at 128 tokens) where the last
    round of tiles fills the SMs' slots 8 % better than one block's tiles of 192 rows (128 rows at
    128 tokens with k <= 2048), or, with k <= 1024, no more than 1 % worse; the tiles of 64 and 96
    tokens where it fills no worse (5 % better from k = 3584), or, with k <= 1024, no more than 5 %
    worse; the tile of 128 tokens only from 112 tokens, where one block's fill counts the cut of its
    last round along k, and with k <= 1024 at an equal fill only where one block's tiles take at
    most 4 rounds. One block's tile at 128 tokens has 2 consumer warpgroups where k <= 2048, and
    beyond where 3's tiles take at most 3 rounds and 2's fill the last round 4 % better
    (fold_tile_rows)."""
    tokens = fold_chunks_of(m)
    wgs_one = 2 if tokens == 128 and k <= 2048 else 3
    if tokens == 128 and wgs_one == 3:  # fold_tile_rows: 2 where 3's tiles take at most 3 rounds
        tiles3 = -(-n // 192)
        if -(-tiles3 // sms) <= 3 and fold_fill(-(-n // 128), sms) >= 1.04 * fold_fill(tiles3, sms):
            wgs_one = 2
    wgs_two = 1 if tokens == 128 else 2
    tiles_one = -(-n // (64 * wgs_one))
    fill_one = fold_fill_one_block(tiles_one, sms, k) if tokens == 128 else fold_fill(tiles_one, sms)
    fill_two = fold_fill(-(-n // (64 * wgs_two)), 2 * sms)
    gain, small_k_loss = ((1.05 if k >= 3584 else 1.0), 0.95) if tokens in (64, 96) else (1.08, 0.99)
    if tokens == 128 and m < 112:
        return tokens, wgs_one, 1
    few_rounds = -(-tiles_one // sms) <= 4
    small_k_holds = k <= 1024 and (tokens != 128 or few_rounds) and fill_two >= small_k_loss * fill_one
    if fill_two >= gain * fill_one or small_k_holds:
        return tokens, wgs_two, 2
    return tokens, wgs_one, 1


# The folding kernel's tiles of two blocks per SM (hip/dispatch.h, fold_tile_two_per_sm), written by
# TMA, against float64 and bit for bit against the one-block tile of the same tokens stored from the
# registers (REFUSE_OMAP: the output's map refused, which is also the planner's fallback for them).
# The heads: 264 tiles of 128 rows (one per block of an H200's two per SM, the last cut by n), 528
# (two rounds), group 32 at k = 1376 (> 1024: the fills equal, so one block per SM), 24000 x 4096
# (one block's 125 tiles fill more than 188 of two: not taken), and odd n (no output map: one block,
# from the registers); 33-48 tokens alike (40 and 48 on the heads of 264 and 528 tiles, 45 on 24000
# x 4096: not taken). The tiles of 64 and 96 tokens where their own thresholds decide (76168 x 2304
# at 64 tokens: the fill equal, enough below k = 3584, and 76168 x 4096: not 5 % better from there;
# 101384 x 1024 at 72: 6 % worse at k <= 1024, more than the 5 % allowed), the 96-token tile at k =
# 576, whose last step's second half, past k, its four parts skip, and 100 tokens, where the fill
# would take two blocks but the tile of 128 tokens is taken only from 112; at 128 tokens with k <=
# 1024 and equal fills, two blocks where one block's tiles take 4 rounds (67576 x 640) and one block
# where they take 5 (84480 x 640). Which tile ran is read from the profiler and must be the rule's,
# for this GPU's SM count; on an H200 (132 SMs) the cases take both answers. At 112-128 tokens one
# block's fill counts the cut of its last round along k (fold_fill_one_block): 76040 x 2304 at 128
# tokens takes one block of 3 consumer warpgroups, cut; 33784 x 5120 one block of 2, whose 128-row
# tiles fill its 2 rounds where 3's 192-row ones would leave a third of them idle (fold_tile_rows).
# The two plans agree bit for bit where they run the same tiles the same way: neither cuts, or both
# run the one-block tile (a cut adds its parts' sums, which changes the order of additions).
TWO_PER_SM_CASES = [
    (64, 33784, 2304, 256), (80, 67576, 640, 128), (120, 20000, 576, 64), (128, 33784, 5120, 128),
    (97, 40008, 1376, 32), (64, 24000, 4096, 128), (50, 67576, 1024, 128), (96, 33783, 2304, 256),
    (40, 33784, 5120, 128), (48, 67576, 640, 128), (45, 24000, 4096, 128), (33, 33783, 1024, 64),
    (64, 76168, 2304, 128), (72, 101384, 1024, 128), (72, 67576, 576, 64), (100, 67576, 640, 128),
    (128, 67576, 640, 128), (128, 84480, 640, 128), (64, 76168, 4096, 128), (128, 76040, 2304, 128),
]


@pytest.mark.parametrize("m, n, k, group_size", TWO_PER_SM_CASES)
def test_apply_gpu_fold_two_blocks_per_sm_match_float64_and_one_block_bit_for_bit(m, n, k, group_size):
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the folding kernel is sm_90a's")
    sms = torch.cuda.get_device_properties(DEV).multi_processor_count
    want = expected_fold_tile(m, n, k, sms) if n % 8 == 0 else (fold_chunks_of(m), 3, 1)
    if sms == 132:  # an H100 / H200: the cases were chosen for its 264 slots
        one_block = ((97, 40008, 1376), (64, 24000, 4096), (45, 24000, 4096), (100, 67576, 640), (128, 33784, 5120),
                     (72, 101384, 1024), (128, 84480, 640), (64, 76168, 4096), (128, 76040, 2304))
        assert (want[2] == 2) == (n % 8 == 0 and (m, n, k) not in one_block), want
    rng, seed = fresh_rng()
    x, packed, scales, bias = random_call(rng, m, n, k, group_size, m % 2 == 0)
    args = (to_torch(x), to_torch(packed), to_torch(scales), None if bias is None else to_torch(bias), group_size)
    outs = {}
    for name, flags in (("auto", 0), ("one block, registers", REFUSE_OMAP)):
        out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device=DEV)  # poisoned
        with planner_refuses(flags), torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            radiance.apply(*args, out=out)
            torch.cuda.synchronize()
        if os.environ.get("RADIANCE_TEST_NO_PROFILER") != "1":
            tokens, wgs, tstore, blocks = fold_kernel_ran(prof)
            assert fold_kernel_cut(prof) == fold_cuts(m, n, k, tokens, wgs, blocks, sms), (name, tokens, wgs, blocks)
            if name == "auto":
                # written by TMA: every tile of two blocks or 2 warpgroups, any from 32 tokens with
                # k <= 1024, and the 48-token tile (fold_tile), where the output's map is granted
                by_tma = n % 8 == 0 and (blocks == 2 or wgs == 2 or k <= 1024 or tokens == 48)
                assert (tokens, wgs, blocks) == want and tstore == by_tma, (name, tokens, wgs, tstore, blocks, want)
            else:
                assert (tokens, wgs, tstore, blocks) == (want[0], 3, False, 1), (name, tokens, wgs, tstore, blocks)
        outs[name] = to_numpy(out)
    got = outs["auto"].astype(np.float64)
    assert np.isfinite(got).all(), f"unwritten outputs (seed {seed})"
    assert_within_bf16_of_float64(got, x, packed, scales, group_size, bias, seed, folded=True)
    if want[1:] == (3, 1) or not (fold_cuts(m, n, k, *want, sms) or fold_cuts(m, n, k, want[0], 3, 1, sms)):
        np.testing.assert_array_equal(outs["one block, registers"].view(np.uint16), outs["auto"].view(np.uint16),
                                      err_msg=f"two blocks per SM against one, seed {seed}")
    else:
        got = outs["one block, registers"].astype(np.float64)
        assert np.isfinite(got).all(), f"unwritten outputs, one block (seed {seed})"
        assert_within_bf16_of_float64(got, x, packed, scales, group_size, bias, seed, folded=True)


# The folding kernel's last round cut along k (hip/dispatch.h, fold_tail_parts): more tiles than
# blocks, the last round at most half full, one block per SM. The whole rounds run as one launch;
# then each tile of the last round as 2-8 units over ranges of its steps, one block each, in a
# second launch, the units of a tile one cluster that adds their fp32 sums through distributed
# shared memory, each unit a share of the tile's tokens. Heads chosen for an H200's 132 SMs
# (every case cuts there): odd n (the tiles stored from the registers) and n % 8 == 0 (written by
# TMA), 2 and 3 consumer warpgroups, groups 32-256, k = 2048-8192, every count of parts from 2 to 8
# (3, 5 and 7 share the tokens unevenly), two token chunks (280 tokens, two of 160: 3 consumer
# warpgroups on 16904 rows, 2 on 25352, whose 128-row tiles fill the rounds better:
# fold_tile_rows), 384 and 500 tokens (two chunks of 192 and of 256, 12 of them past m, in eight
# parts), an all-zero row, a bias where m is even. Which kernel ran (read from the
# profiler) must be the rule's for this GPU's SM count; against float64, with nothing written past
# the output.
CUT_CASES = [
    (128, 26003, 4096, 128), (48, 26003, 4096, 64), (200, 20704, 4096, 128), (280, 16904, 8192, 64),
    (280, 25352, 8192, 64), (64, 25601, 2048, 256), (100, 26881, 5120, 32), (40, 25601, 5376, 128),
    (100, 32975, 4096, 128), (96, 29853, 4096, 64), (128, 29177, 4096, 256), (48, 28417, 4096, 128),
    (384, 8955, 4096, 128), (500, 8963, 4096, 64),
]


@pytest.mark.parametrize("m, n, k, group_size", CUT_CASES)
def test_apply_gpu_fold_last_round_cut_along_k_matches_float64(m, n, k, group_size):
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the folding kernel is sm_90a's")
    sms = torch.cuda.get_device_properties(DEV).multi_processor_count
    rng, seed = fresh_rng()
    x, packed, scales, bias = random_call(rng, m, n, k, group_size, m % 2 == 0, zero_row=n // 3)
    prof, got = guarded_apply(x, packed, scales, bias, group_size, seed)
    if os.environ.get("RADIANCE_TEST_NO_PROFILER") != "1":
        tokens, wgs, tstore, blocks = fold_kernel_ran(prof)
        cut = fold_cuts(m, n, k, tokens, wgs, blocks, sms)
        assert fold_kernel_cut(prof) == cut, (tokens, wgs, tstore, blocks)
        if sms == 132:
            assert cut and tstore == (n % 8 == 0 and (wgs == 2 or tokens == 48)), (tokens, wgs, tstore, blocks)
    assert np.isfinite(got).all(), f"unwritten outputs (seed {seed})"
    assert (got[:, n // 3] == (0.0 if bias is None else float(bias[n // 3]))).all(), f"zero row (seed {seed})"
    assert_within_bf16_of_float64(got, x, packed, scales, group_size, bias, seed, folded=True)


# Where the runtime cannot place the units' clusters (REFUSE_CLUSTERS), the second launch runs each
# tile of the last round whole, one block each; where the device runs no cluster of the units larger
# than two blocks (CLUSTERS_OF_TWO, as a GPU of fewer SMs than the planner's cut assumes), the
# parts are lowered to two. The second launch's grid (the profiler's trace) is the last round's
# tiles times the blocks of each; still against float64, nothing written past the output (8 and 5
# parts planned; 5376 x 48 tokens: 8).
@pytest.mark.parametrize("flags, blocks_per_tile", [(REFUSE_CLUSTERS, 1), (CLUSTERS_OF_TWO, 2)],
                         ids=["refused", "of_two"])
@pytest.mark.parametrize("m, n, k, group_size",
                         [(128, 26003, 4096, 128), (96, 29853, 4096, 64), (40, 25601, 5376, 128)])
def test_apply_gpu_fold_cut_round_with_fewer_clusters_matches_float64(m, n, k, group_size, flags,
                                                                      blocks_per_tile):
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the folding kernel is sm_90a's")
    sms = torch.cuda.get_device_properties(DEV).multi_processor_count
    rng, seed = fresh_rng()
    x, packed, scales, bias = random_call(rng, m, n, k, group_size, m % 2 == 0, zero_row=n // 2)
    with planner_refuses(flags):
        prof, got = guarded_apply(x, packed, scales, bias, group_size, seed)
    if os.environ.get("RADIANCE_TEST_NO_PROFILER") != "1":
        ran = fold_launches(prof)
        assert len(ran) == 2 and ran[1][4], ran
        tiles = fold_tiles(m, n, *ran[0][:2])
        assert kernel_grids(prof, "apply_wgmma_fold_kernel") == [sms, tiles % sms * blocks_per_tile], (tiles, sms)
    assert np.isfinite(got).all(), f"unwritten outputs (seed {seed})"
    assert (got[:, n // 2] == (0.0 if bias is None else float(bias[n // 2]))).all(), f"zero row (seed {seed})"
    assert_within_bf16_of_float64(got, x, packed, scales, group_size, bias, seed, folded=True)


# More than 256 tokens where k >= 5120 (hip/dispatch.h, fold_split_tokens): a call whose equal
# chunks would hold tokens past m is cut into the whole chunks of 256 below m and the rest, each
# planned as a call of its own. Two calls of the folding kernel (read from the profiler, in order)
# or one where the rule says so (384: whole chunks of 192; 1000: the rest's tile wastes as many;
# k = 4096: never), against float64 and with nothing written past the output; n odd (no output
# map: the tiles stored from the registers) and n % 8 == 0 (written by TMA), groups 128 and 64.
SPLIT_CASES = [
    (352, 3001, 5120, 128), (416, 2048, 5376, 128), (640, 1000, 8192, 64), (480, 1024, 5120, 128),
    (384, 2048, 5120, 128), (1000, 512, 5120, 128), (416, 2048, 4096, 128),
]


@pytest.mark.parametrize("m, n, k, group_size", SPLIT_CASES)
def test_apply_gpu_fold_split_in_two_calls_matches_float64(m, n, k, group_size):
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the folding kernel is sm_90a's")
    want = expected_fold_launches(m, k)
    assert (len(want) == 2) == ((m, k) in ((352, 5120), (416, 5376), (640, 8192), (480, 5120))), want
    rng, seed = fresh_rng()
    x, packed, scales, bias = random_call(rng, m, n, k, group_size, m % 64 == 0)
    prof, got = guarded_apply(x, packed, scales, bias, group_size, seed)
    if os.environ.get("RADIANCE_TEST_NO_PROFILER") != "1":
        tokens = [launch[0] for launch in fold_launches(prof) if not launch[4]]  # not the units of a cut
        assert tokens == want, (tokens, want)
    assert np.isfinite(got).all(), f"unwritten outputs (seed {seed})"
    assert_within_bf16_of_float64(got, x, packed, scales, group_size, bias, seed, folded=True)


@pytest.mark.parametrize("m", [1, 16, 64, 65, 200])
def test_apply_gpu_hand_made_scales_match_float64(m):
    """Scales quantize_rows never makes (zero, subnormal, a fall of 2^30 within a row, negative):
    the folding kernel (m > 32 on sm_90) rounds each q * s to bf16 as FORMAT.md states, subnormal
    products included; the running-scale kernels hand those rows to their exact loop."""
    rng, seed = fresh_rng()
    n, k, group_size = 1031, 1024, 128
    packed = rng.integers(-(2**31), 2**31, (n, k // 8), dtype=np.int64).astype(np.int32)
    scales = (rng.random((n, k // group_size)) * 0.02 + 1e-3) * rng.choice([-1.0, 1.0], (n, k // group_size))
    scales[3, 2] = 0.0
    scales[300, :] = 1e-9
    scales[300, 0] = 1.0
    scales[700, 5] = 1e-40  # subnormal in bf16
    scales[1030, ::2] = 0.0
    scales = scales.astype(BF16)
    x = rng.standard_normal((m, k)).astype(BF16)
    got = to_numpy(radiance.apply(to_torch(x), to_torch(packed), to_torch(scales), group_size=group_size))
    assert_within_bf16_of_float64(got, x, packed, scales, group_size, None, seed, floor=1e-30,
                                  folded=folds(m, n, k, group_size))


def test_apply_gpu_any_m_without_bias_matches_cpu_path():
    rng, seed = fresh_rng()
    n, k = 777, 1024
    w = weights(rng, n, k, "gaussian").astype(BF16)
    packed, scales = radiance.quantize_rows(w)
    x = rng.standard_normal((1000, k)).astype(BF16)
    y_gpu = to_numpy(radiance.apply(to_torch(x), to_torch(packed), to_torch(scales)))
    y_cpu = radiance.apply(x, packed, scales)
    diff = np.abs(y_gpu.astype(np.float64) - y_cpu.astype(np.float64))
    # Past 32 tokens the Hopper kernel folds each scale into its weight, bf16_rne(q * s)
    # (docs/FORMAT.md, "Rounding of apply"): up to 2^-9 of every |x * w| term, beside the bf16
    # rounding of both outputs.
    w_hat = radiance.dequantize(packed, scales).astype(np.float64)
    fold = 2.0**-9 * (np.abs(x.astype(np.float64)) @ np.abs(w_hat).T)
    assert (diff <= 2.0**-7 * np.abs(y_cpu.astype(np.float64)) + fold + 1e-3).all(), f"seed {seed}"


def test_bad_gpu_inputs_are_refused():
    w = torch.randn(64, 256, device=DEV, dtype=torch.bfloat16)
    packed, scales = radiance.quantize_rows(w)
    x = torch.randn(2, 256, device=DEV, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="different devices"):
        radiance.apply(x, packed.cpu(), scales)
    with pytest.raises(ValueError, match="different devices"):
        radiance.apply(x.cpu(), packed, scales)
    with pytest.raises(TypeError, match="x must be bfloat16, got float32"):
        radiance.apply(x.float(), packed, scales)
    with pytest.raises(TypeError, match="bias must be bfloat16"):
        radiance.apply(x, packed, scales, torch.zeros(64, device=DEV))
    with pytest.raises(ValueError, match="contiguous"):
        radiance._C.apply(x, packed.t().contiguous().t(), scales,
                          out=torch.empty(2, 64, dtype=torch.bfloat16, device=DEV))
    with pytest.raises(ValueError, match="16-byte aligned"):
        flat = torch.randn(2 * 256 + 1, device=DEV, dtype=torch.bfloat16)
        shifted = flat[1:].view(2, 256)  # contiguous, but 2 bytes past an aligned address
        radiance._C.apply(shifted, packed, scales,
                          out=torch.empty(2, 64, dtype=torch.bfloat16, device=DEV))
    with pytest.raises(TypeError, match="pass out="):
        radiance._C.apply(x, packed, scales)
    with pytest.raises(ValueError, match="out must have shape"):
        radiance.apply(x, packed, scales, out=torch.empty(3, 64, dtype=torch.bfloat16, device=DEV))
    with pytest.raises(ValueError, match="x has K = 128 columns"):
        radiance.apply(x[:, :128].contiguous(), packed, scales)
    with pytest.raises(TypeError, match="w must be bfloat16"):
        radiance.quantize_rows(w.to(torch.int32))
    with pytest.raises(ValueError, match="different devices"):
        radiance.quantize_rows(w, packed_out=torch.empty(64, 32, dtype=torch.int32))


@pytest.mark.parametrize("m", [1, 12, 64])
def test_c_entry_refuses_scales_off_16_bytes(m):
    """radiance_gpu_apply's contract (radiance_gpu.h): scales 16-byte aligned. The stream kernels
    copy a row's scales 4 or 8 bytes at a time where the ring carries them (k % 512 == 0, here at 1
    and 12 tokens), so scales 2 bytes past an aligned address would fault the context: the entry
    refuses them with RADIANCE_GPU_EINVAL, writes nothing, and the next call runs."""
    rng, seed = fresh_rng()
    n, k = 4099, 4096
    x, packed, scales, bias = random_call(rng, m, n, k, 128, False)
    xt, pt, st = to_torch(x), to_torch(packed), to_torch(scales)
    flat = torch.empty(st.numel() + 1, dtype=st.dtype, device=DEV)
    shifted = flat[1:].view(st.shape)
    shifted.copy_(st)
    assert shifted.data_ptr() % 16 == 2
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device=DEV)
    apply_c_entry(xt, pt, shifted, None, 128, out, expect=-1)  # RADIANCE_GPU_EINVAL
    torch.cuda.synchronize()
    assert torch.isnan(out).all(), f"written despite the refusal (seed {seed})"
    apply_c_entry(xt, pt, st, None, 128, out)
    torch.cuda.synchronize()
    got = to_numpy(out).astype(np.float64)
    assert_within_bf16_of_float64(got, x, packed, scales, 128, None, seed, folded=folds(m, n, k, 128))


def test_apply_is_captured_by_cuda_graphs():
    rng, seed = fresh_rng()
    n, k = 4099, 2048
    w = weights(rng, n, k, "gaussian").astype(BF16)
    packed, scales = radiance.quantize_rows(to_torch(w))
    x = torch.randn(4, k, device=DEV, dtype=torch.bfloat16)
    out = torch.empty(4, n, device=DEV, dtype=torch.bfloat16)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm up off the default stream, as capture requires
        radiance.apply(x, packed, scales, out=out)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        radiance.apply(x, packed, scales, out=out)
    for _ in range(3):
        x.copy_(torch.randn(4, k, device=DEV, dtype=torch.bfloat16))
        out.fill_(float("nan"))
        graph.replay()
        eager = radiance.apply(x, packed, scales)
        torch.cuda.synchronize()
        assert torch.equal(out, eager), f"seed {seed}"


@pytest.mark.slow
def test_gpu_head_past_2_gib():
    k = 8192
    n = 2**31 // (k // 2) + 5  # packed bytes pass 2^31
    g = torch.Generator(device=DEV).manual_seed(int.from_bytes(os.urandom(4), "little"))
    packed = torch.randint(-(2**31), 2**31 - 1, (n, k // 8), dtype=torch.int32, device=DEV,
                           generator=g)
    scales = (torch.rand(n, k // 128, device=DEV, generator=g) * 0.01 + 0.001).to(torch.bfloat16)
    for m in (1, 16, 64):
        x = torch.randn(m, k, device=DEV, dtype=torch.bfloat16, generator=g)
        y = radiance.apply(x, packed, scales)
        torch.cuda.synchronize()
        rows = torch.tensor([0, 1, n // 2, n - 2, n - 1], device=DEV)
        ref = apply_reference(to_numpy(x), radiance.unpack_shuffle(to_numpy(packed[rows])),
                              to_numpy(scales[rows]), 128)
        got = to_numpy(y[:, rows]).astype(np.float64)
        np.testing.assert_allclose(got, ref, rtol=2**-7, atol=2e-3 * np.abs(ref).max())
    del packed, scales
    torch.cuda.empty_cache()
    # quantize: a bf16 weight of more than 2^31 bytes
    n = 2**31 // (2 * k) + 3
    w = torch.randn(n, k, device=DEV, dtype=torch.bfloat16, generator=g)
    packed, scales = radiance.quantize_rows(w)
    tail = to_numpy(w[-3:])
    p_cpu, s_cpu = radiance.quantize_rows(tail)
    np.testing.assert_array_equal(to_numpy(packed[-3:]), p_cpu)
    np.testing.assert_array_equal(to_numpy(scales[-3:]).view(np.uint16), s_cpu.view(np.uint16))


def activation_sq(rng, k, kind):
    """Per-channel mean squares: lognormal, a few outlier channels, or zeros in places."""
    a = rng.lognormal(0.0, 1.0, size=k)
    if kind == "outlier_channels":
        a[rng.choice(k, size=max(1, k // 100), replace=False)] *= rng.uniform(50, 500)
    if kind == "zeros":
        a[rng.random(k) < 0.2] = 0.0
        a[:32] = 0.0
    return a.astype(np.float32)


@pytest.mark.parametrize("group_size", [32, 64, 128, 256])
@pytest.mark.parametrize("kind", ["gaussian", "outliers", "zero_rows", "student_t"])
@pytest.mark.parametrize("stats", ["lognormal", "outlier_channels", "zeros"])
@pytest.mark.parametrize("dtype", [BF16, np.float16, np.float32], ids=["bf16", "f16", "f32"])
def test_quantize_act_gpu_equals_cpu_bit_for_bit(group_size, kind, stats, dtype):
    rng, seed = fresh_rng()
    w = awkward_weights(rng, group_size, kind, dtype)
    a = activation_sq(rng, w.shape[1], stats)
    packed_cpu, scales_cpu = radiance.quantize_rows(w, group_size, "act", activation_sq=a)
    # statistics as a GPU tensor on w's device, and as a NumPy array: the same result
    for a_in in (torch.from_numpy(a).to(DEV), a):
        packed, scales = radiance.quantize_rows(to_torch(w), group_size, "act", activation_sq=a_in)
        assert packed.is_cuda and scales.is_cuda
        assert_same_quantization(packed, scales, packed_cpu, scales_cpu, seed)


@pytest.mark.parametrize("group_size", [32, 64, 128, 256])
def test_quantize_act_gpu_with_equal_statistics_is_mse(group_size):
    rng, seed = fresh_rng()
    n = int(rng.integers(1, 3000)) | 1
    k = group_size * int(rng.integers(1, 8192 // group_size + 1))
    w = to_torch(weights(rng, n, k, "outliers").astype(BF16))
    packed_mse, scales_mse = radiance.quantize_rows(w, group_size, "mse")
    a = torch.full((k,), float(rng.uniform(1e-3, 1e3)), device=DEV)
    packed, scales = radiance.quantize_rows(w, group_size, "act", activation_sq=a)
    assert torch.equal(packed, packed_mse), f"seed {seed}"
    assert torch.equal(scales.view(torch.int16), scales_mse.view(torch.int16)), f"seed {seed}"


def test_quantize_act_gpu_torch_op_and_errors():
    import radiance.torch_ops  # noqa: F401 - registers torch.ops.radiance

    rng, seed = fresh_rng()
    w = weights(rng, 333, 1024, "outliers").astype(BF16)
    a = activation_sq(rng, 1024, "outlier_channels")
    packed_cpu, scales_cpu = radiance.quantize_rows(w, 128, "act", activation_sq=a)
    packed, scales = torch.ops.radiance.quantize_rows(to_torch(w), 128, "act", torch.from_numpy(a).to(DEV))
    np.testing.assert_array_equal(to_numpy(packed), packed_cpu, err_msg=f"seed {seed}")
    np.testing.assert_array_equal(to_numpy(scales).view(np.uint16), scales_cpu.view(np.uint16))
    bad = torch.from_numpy(a).to(DEV)
    bad[5] = -1.0
    with pytest.raises(ValueError, match=r"activation_sq\[5\]"):
        radiance.quantize_rows(to_torch(w), 128, "act", activation_sq=bad)
    with pytest.raises(ValueError, match="activation_sq must have shape"):
        radiance.quantize_rows(to_torch(w), 128, "act", activation_sq=torch.ones(512, device=DEV))
    if torch.cuda.device_count() > 1:
        with pytest.raises(ValueError, match="activation_sq is on cuda:1 but w is on cuda:0"):
            radiance.quantize_rows(to_torch(w), 128, "act", activation_sq=torch.ones(1024, device="cuda:1"))


# Fallback paths an H200 takes only when the device or the driver refuses something: the test hook
# radiance_gpu_test_refuse (csrc/include/radiance/radiance_gpu.h, exported by radiance._C) makes the apply planner
# act as if it had (the flags: above), so that every kernel of the library runs here against float64.
def planner_refuses(flags):
    import ctypes

    from radiance import _C

    hook = ctypes.CDLL(_C.__file__).radiance_gpu_test_refuse
    hook.argtypes, hook.restype = [ctypes.c_int], ctypes.c_int

    class Refusing:
        def __enter__(self):
            assert hook(flags) == 0, "the test hook was left set"

        def __exit__(self, *exc):
            assert hook(0) == flags, "radiance._C does not see the test hook"  # the same library

    return Refusing()


def apply_with_flags(flags, x, packed, scales, bias, group_size, n):
    """radiance.apply of NumPy inputs on the GPU with the planner refusing `flags`; NumPy out."""
    out = torch.full((x.shape[0], n), float("nan"), dtype=torch.bfloat16, device=DEV)  # poisoned
    with planner_refuses(flags):
        radiance.apply(
            to_torch(x), to_torch(packed), to_torch(scales),
            None if bias is None else to_torch(bias), group_size, out=out,
        )
        torch.cuda.synchronize()
    return to_numpy(out)


def check_flags_against_float64(flags, m, n, k, group_size):
    """A fresh random head of n x k (outliers; n an odd draw from [lo, hi) where n is that pair)
    and m tokens through the planner refusing `flags`, poisoned output, against float64."""
    rng, seed = fresh_rng()
    if isinstance(n, tuple):
        n = int(rng.integers(*n)) | 1
    x, packed, scales, bias = random_call(rng, m, n, k, group_size, m % 2)
    got = apply_with_flags(flags, x, packed, scales, bias, group_size, n).astype(np.float64)
    assert np.isfinite(got).all(), f"unwritten outputs (seed {seed})"
    assert_within_bf16_of_float64(got, x, packed, scales, group_size, bias, seed,
                                  folded=folds(m, n, k, group_size, flags))


@pytest.mark.parametrize(
    "flags, m, k, group_size",
    [
        # the vector kernel (AMD's path, NVIDIA before sm_80), every group size
        *[(NO_MMA, m, k, g) for m in (1, 5, 17) for k, g in ((576, 64), (1376, 32), (5120, 128))],
        (NO_MMA, 3, 8192, 256),
        # no sm_90a kernel: the stream kernel to 8 tokens, the tiled kernel (16, 32, 64 per block)
        *[(NO_WGMMA, m, k, g) for m in (8, 16, 32, 64, 100) for k, g in ((5120, 128), (8192, 256))],
        # tensor maps refused: the wgmma kernel with cp.async copies or TMA activations only from 32
        # tokens, the stream and tiled kernels below
        *[(f, m, k, g) for f in (REFUSE_XMAP, REFUSE_WMAP) for m in (8, 16, 32, 64, 100, 300)
          for k, g in ((5120, 128), (8192, 256))],
    ],
)
def test_apply_gpu_fallback_paths_match_float64(flags, m, k, group_size):
    check_flags_against_float64(flags, m, (300, 1500), k, group_size)


# The stream kernel with the activations in shared memory (hip/apply_stream.hip): the planner takes
# it from 6 tokens where they fit beside 16 warps' rings (16 k bytes per 8 tokens: k up to about
# 6300 with an H200's 227 KiB per block), the flag SHARED_X forces it for 1-8
# tokens where they fit, NO_SHARED_X never. k = 6400 and 8192 do not fit on an H200 (the fallback: stream or wgmma).
SHARED_X_SHAPES = [(128, 128), (640, 128), (1152, 128), (2304, 256), (5120, 128), (6400, 128), (8192, 256)]


@pytest.mark.parametrize("flags", [0, SHARED_X, NO_SHARED_X], ids=["auto", "forced", "never"])
@pytest.mark.parametrize("m", [1, 4, 5, 8])
@pytest.mark.parametrize("k, group_size", SHARED_X_SHAPES)
def test_apply_gpu_shared_x_matches_float64(flags, m, k, group_size):
    rng, seed = fresh_rng()
    # n: below one block's 16 warps x 16 rows (idle warps), a few thousand rows, or (small k, to keep
    # the float64 reference small) more 16-row units than an H200's 132 x 16 warps; never a tile multiple
    big_n = 40000 if k <= 640 else 6000
    n = int(rng.choice([1, 17, 255, int(rng.integers(big_n // 2, big_n)) | 1]))
    w = weights(rng, n, k, "outliers").astype(BF16)
    packed, scales = radiance.quantize_rows(w, group_size, "rtn")  # rtn: the apply is tested
    x = (rng.standard_normal((m, k)) * 2).astype(BF16)
    x[m // 2, : k // 3] *= 50  # an outlier token
    bias = rng.standard_normal(n).astype(BF16) if (m + k // 128) % 2 else None
    got = apply_with_flags(flags, x, packed, scales, bias, group_size, n).astype(np.float64)
    assert np.isfinite(got).all(), f"unwritten outputs (seed {seed})"
    assert_within_bf16_of_float64(got, x, packed, scales, group_size, bias, seed,
                                  folded=folds(m, n, k, group_size, flags))


@pytest.mark.parametrize("m", [1, 2, 5, 6])
@pytest.mark.parametrize("k, group_size", [(640, 128), (2304, 256), (5120, 128)])
def test_apply_gpu_shared_x_equals_stream_kernel_bit_for_bit(m, k, group_size):
    """Both kernels run the same warp body (stream_warp_rows), only the activations' source
    differs, so every output bit must agree: a misplaced activation in the shared copy shows."""
    rng, seed = fresh_rng()
    n = int(rng.integers(2000, 9000)) | 1
    w = weights(rng, n, k, "gaussian").astype(BF16)
    packed, scales = radiance.quantize_rows(w, group_size, "rtn")  # rtn: the apply is tested
    x = (rng.standard_normal((m, k)) * 2).astype(BF16)
    bias = rng.standard_normal(n).astype(BF16)
    shared = apply_with_flags(SHARED_X, x, packed, scales, bias, group_size, n)
    stream = apply_with_flags(NO_SHARED_X | NO_WGMMA, x, packed, scales, bias, group_size, n)
    assert np.isfinite(shared.astype(np.float64)).all(), f"unwritten outputs (seed {seed})"
    diff = np.flatnonzero(shared.view(np.uint16) != stream.view(np.uint16))
    assert diff.size == 0, f"seed {seed}: {diff.size} outputs differ, first at {np.unravel_index(diff[0], shared.shape)}"


# The stream kernels of 1-8 tokens, groups 128 and 256 (hip/dispatch.h, decide): the loads of
# tokens past m skipped at 1-5 tokens, the activations in shared memory from 6 (from 5 where
# k % 512 == 0 and k <= 4096); whole 4-step super-steps where k % 512 == 0 (no step tested against
# k), elsewhere all but the last (tail); whole ones with their scales copied into the ring, in the
# shared-activation kernel always, in the other to k = 4096 (kRingScalesFewTokensMaxK).
# k = 2304, 5376 and 640 end half-way or a quarter into a super-step; n odd or 17 (one warp's rows
# and one more). Which kernel ran is read from the profiler on an H100 / H200 (the shared copy fits
# there at these k); elsewhere only the float64 check.
@pytest.mark.parametrize("m", [1, 2, 3, 5, 6, 8])
@pytest.mark.parametrize("k, group_size", [(640, 128), (1024, 256), (2304, 256), (2560, 128), (5120, 128),
                                           (5376, 128)])
def test_apply_gpu_stream_plans_match_float64(m, k, group_size):
    rng, seed = fresh_rng()
    n = int(rng.choice([17, int(rng.integers(2000, 9000)) | 1]))
    prof, got, (x, packed, scales, bias) = profiled_apply(rng, m, n, k, group_size)
    if profiled_on_hopper():
        whole, tail = ("true", "false") if k % 512 == 0 else ("false", "true")
        few_k = k % 512 == 0 and k <= 4096
        if m >= 6 or (m == 5 and few_k):  # apply_stream_xs_kernel<group, 1, 1, 4, 2, whole, tail, ring>
            assert kernel_template_args(prof, "apply_stream_xs_kernel") == (
                str(group_size), "1", "1", "4", "2", whole, tail, whole)
        else:  # apply_stream_kernel<group, 1, 1, 4, 2, x mode (1: skipped), whole, tail, ring, pairs (none here)>
            assert kernel_template_args(prof, "apply_stream_kernel") == (
                str(group_size), "1", "1", "4", "2", "1", whole, tail, "true" if few_k else "false", "false")
    assert np.isfinite(got).all(), f"unwritten outputs (seed {seed})"
    assert_within_bf16_of_float64(got, x, packed, scales, group_size, bias, seed)


# The persistent stream kernels of 6-16 tokens (the activations in shared memory; from 9 tokens
# with k split over a cluster pair) with several 16-row units per warp: an H200 runs 132 x 16 warps,
# 33792 rows a round (split k: 16896), so 68001-71999 rows give every warp 2-5 units, through which
# each warp's ring runs on (the next unit's first super-step copied, and its scales loaded, during
# the last of this one: stream_warp_rows). k = 768: a tail super-step (split k: 3 steps per half),
# 1024 and 2048 whole ones; there, at 6-8 tokens, 2 full rounds leave 26-276 units, which pairs of
# warps take over halves of k each (apply_stream_xs_kernel, PairMeet). Which kernel ran is read
# from the profiler on an H100 / H200.
@pytest.mark.parametrize("m", [6, 8, 9, 16])
@pytest.mark.parametrize("k, group_size", [(768, 128), (1024, 256), (2048, 128)])
def test_apply_gpu_persistent_stream_units_match_float64(m, k, group_size):
    rng, seed = fresh_rng()
    n = int(rng.integers(68000, 72000)) | 1
    prof, got, (x, packed, scales, bias) = profiled_apply(rng, m, n, k, group_size)
    if profiled_on_hopper():
        if m <= 8:  # apply_stream_xs_kernel<group, 1, 1, 4, 2, whole, tail, scales in the ring (whole)>
            whole, tail = ("true", "false") if k % 512 == 0 else ("false", "true")
            assert kernel_template_args(prof, "apply_stream_xs_kernel") == (
                str(group_size), "1", "1", "4", "2", whole, tail, whole)
        else:  # apply_stream_split_k_kernel<group, whole super-steps in each half, scales in the ring (whole),
            # steps a slot, slots, tail, biased codes, one mma chain, halves' shift>: 2-step super-steps in 3
            # slots with the scales and one chain for groups of 128 where they are whole (k = 2048;
            # hip/dispatch.h, kSplitKFineScalesMinK), else 4-step ones
            fine = group_size == 128 and k % 512 == 0
            whole = "true" if fine or k % 1024 == 0 else "false"
            assert kernel_template_args(prof, "apply_stream_split_k_kernel") == (
                str(group_size), whole, whole, "2" if fine else "4", "3" if fine else "2", "false", "false",
                "true" if fine else "false", "0")
    assert np.isfinite(got).all(), f"unwritten outputs (seed {seed})"
    assert_within_bf16_of_float64(got, x, packed, scales, group_size, bias, seed)


# The split-k pair's hand-over under load: block 0 of a cluster pair reads block 1's sums of a
# 16-row unit from its shared memory, then hands the slot back for the next unit's st.async. With
# a CTA-scope release and nothing else ordering them, the hand-over left two instructions after the
# reads, and with several processes on the GPU a few calls in a hundred had a whole unit's sums
# wrong (H100, 2026-12-06: 11 in 6 processes over 110 s, 1 of 54 in this test; one process alone
# never showed it). Now the arrival waits for the reads' values (hip/ptx_sm90.h,
# rad_cluster_mbarrier_arrive_remote). `workers` processes of tests/split_k_load_worker.py run split
# k of 16 tokens, groups of 256 and k = 1024 on fresh heads of 68001-71999 rows for `seconds`
# each; every call is checked in float64.
def test_apply_gpu_split_k_under_load_matches_float64():
    import subprocess
    import sys

    workers, seconds = 6, 25
    env = dict(os.environ, OMP_NUM_THREADS="2", OPENBLAS_NUM_THREADS="2",
               PYTHONPATH=os.pathsep.join([os.path.join(os.path.dirname(radiance.__file__), ".."),
                                           os.path.dirname(__file__), os.environ.get("PYTHONPATH", "")]))
    script = os.path.join(os.path.dirname(__file__), "split_k_load_worker.py")
    procs = [subprocess.Popen([sys.executable, script, str(seconds)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env) for _ in range(workers)]
    calls = []
    for p in procs:
        out, err = p.communicate(timeout=seconds + 240)
        assert p.returncode == 0, err[-2000:]
        calls += [line.split() for line in out.splitlines()]
    assert len(calls) >= workers, f"only {len(calls)} calls in {workers} processes"
    wrong = [(seed, worst) for seed, worst in calls if not float(worst) <= 1.0]
    assert not wrong, f"{len(wrong)} of {len(calls)} calls beyond the float64 bound (seed, worst): {wrong[:8]}"


SPLIT_K_SHIFT = "-1"  # hip/dispatch.h, kSplitKShift: block 0's steps beyond k / 256 where that is odd


# Split k at 9-16 tokens in 2-step super-steps in 3 ring slots (hip/dispatch.h, kSplitKFineSteps),
# groups of 128, whole in each half with each super-step's scales in the ring and one mma chain:
# where k % 512 == 0 (here 3584-6144) halves of k / 256 steps (kSplitKFineScalesMinK; 3584: halves
# of 7 super-steps; 6144: 16 warps fit only in these slots); at k = 5376, where 16 warps' rings of
# 4-step slots do not fit beside the halves' activations, halves of 20 and 22 steps (kSplitKShift:
# k / 256 = 21 is odd). n = 1001 (a partial last unit) or 17000-21000 rows (an H200 runs 16896 a
# round, so some warps take a second unit, their ring, scales included, run on into it). Which
# kernel ran is read from the profiler on an H100 / H200 (elsewhere the float64 check only); an
# all-zero row, a bias at odd m, nothing written past the output.
@pytest.mark.parametrize("m", [9, 13, 16])
@pytest.mark.parametrize("rows", ["partial", "second_unit"])
@pytest.mark.parametrize("k", [3584, 4096, 5120, 5376, 6144])
def test_apply_gpu_split_k_fine_ring_matches_float64(m, rows, k):
    rng, seed = fresh_rng()
    n = 1001 if rows == "partial" else int(rng.integers(17000, 21000)) | 1
    x, packed, scales, bias = random_call(rng, m, n, k, 128, m % 2, zero_row=int(rng.integers(n)))
    prof, got = guarded_apply(x, packed, scales, bias, 128, seed)
    if profiled_on_hopper():
        # apply_stream_split_k_kernel<group, whole, scales in the ring, steps a slot, slots, tail, biased
        # codes, one mma chain, block 0's steps beyond k / 256>
        assert kernel_template_args(prof, "apply_stream_split_k_kernel") == (
            "128", "true", "true", "2", "3", "false", "false", "true", "0" if k % 512 == 0 else SPLIT_K_SHIFT)
    assert np.isfinite(got).all(), f"unwritten outputs (seed {seed})"
    assert_within_bf16_of_float64(got, x, packed, scales, 128, bias, seed)


def stream_pair_block0(n, k, sms):
    """hip/dispatch.h's stream_pair_block0: the first block of the one-unit stream kernel (1-5
    tokens, 4 blocks of 4 warps per SM, a 16-row unit per warp) whose units go to pairs of warps over
    halves of k, where the last wave is at most half full behind a full one, k % 1024 == 0 and
    k >= 4096 (kStreamPairMinK); 0: none."""
    units, wave = -(-n // 16), 4 * 4 * sms
    waves, left = divmod(units, wave)
    ok = k % 1024 == 0 and k >= 4096 and waves > 0 and 0 < left and 2 * left <= wave
    return waves * wave // 4 if ok else 0


# The one-unit stream kernel of 1-5 tokens with its last wave of blocks split in k (hip/dispatch.h,
# stream_pair_block0; apply_stream_kernel<..., PAIRS>): n chosen from the GPU's SM count so that
# one full wave (4 blocks x 4 warps x SMs units of 16 rows) leaves an odd number of units (the last
# block's second pair lies past n) and a last unit cut by n; the two halves' sums meet in the block
# (PairMeet). k = 4096 with the scales in the ring (halves of 16 steps), 5120 with them loaded a
# super-step ahead (halves of 20 steps; groups of 256: a half starts at group 10); a bias at odd m.
# Against float64; the launch's grid, read from the profiler's trace, shows the split (two units
# a block past the full wave, where four would give fewer blocks).
@pytest.mark.parametrize("m", [1, 3, 4])
@pytest.mark.parametrize("k, group_size", [(4096, 128), (5120, 256)])
def test_apply_gpu_stream_last_wave_in_halves_of_k_matches_float64(m, k, group_size):
    if torch.version.cuda is None or torch.cuda.get_device_capability() < (8, 0):
        pytest.skip("the stream kernel is the mma.sync path of NVIDIA sm_80 and later")
    rng, seed = fresh_rng()
    sms = torch.cuda.get_device_properties(DEV).multi_processor_count
    left = 2 * int(rng.integers(1, 2 * sms)) + 1  # odd, under half a wave
    n = 16 * (16 * sms + left) - int(rng.integers(1, 16))
    pair0 = stream_pair_block0(n, k, sms)
    assert pair0 == 4 * sms
    prof, got, (x, packed, scales, bias) = profiled_apply(rng, m, n, k, group_size)
    if os.environ.get("RADIANCE_TEST_NO_PROFILER") != "1":
        # apply_stream_kernel<group, 1, 1, 4, 2, x mode (1: skipped), whole, tail, scales in the ring, pairs>
        assert kernel_template_args(prof, "apply_stream_kernel") == (
            str(group_size), "1", "1", "4", "2", "1", "true", "false", "true" if k <= 4096 else "false", "true")
        assert kernel_grid(prof, "apply_stream_kernel") == pair0 + (-(-n // 16) - 4 * pair0 + 1) // 2, n
    assert np.isfinite(got).all(), f"unwritten outputs (seed {seed}, n {n})"
    assert_within_bf16_of_float64(got, x, packed, scales, group_size, bias, seed)


# The vector kernel (hip/apply_vector.hip) by the same hook: every tile of tokens it plans (1, 2, 4
# and 8, with m past a multiple of 8 and many tiles), every group size, k that ends inside a
# 512-column step (576, 1376, 32), and both ways of holding the activations on an H200: all of k in
# shared memory (to about 6300 columns at 8 tokens, 12600 at 4, 25000 at 2, 50000 at 1) or in
# stages per row block, a stage ending one chunk before k (8320: the 8-token tile stages 1024
# columns; 13344 at 4 tokens: 2048) and past 8192 (9216).
@pytest.mark.parametrize("m", [1, 2, 3, 8, 9, 17, 64, 130])
@pytest.mark.parametrize(
    "k, group_size",
    [(32, 32), (576, 64), (1376, 32), (2080, 32), (1280, 256), (5120, 128), (8320, 128), (9216, 256),
     (13344, 32)],
)
def test_apply_gpu_vector_kernel_matches_float64(m, k, group_size):
    test_apply_gpu_fallback_paths_match_float64(NO_MMA, m, k, group_size)


# More rows than the vector kernel's grid covers at once (an H200 holds 25344 rows' worth of its
# blocks at 1 token, 12672 at 8): each block loops over row blocks, the activations staged once per
# block and tile; n not a multiple of a block's rows.
@pytest.mark.parametrize("m", [1, 2, 4, 8, 9, 17])
@pytest.mark.parametrize("k, group_size", [(256, 128), (576, 32)])
def test_apply_gpu_vector_kernel_many_row_blocks(m, k, group_size):
    check_flags_against_float64(NO_MMA, m, (40000, 60000), k, group_size)
