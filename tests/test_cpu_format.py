"""The int4 format on the CPU: exact against the independent NumPy reference in reference.py."""

import importlib

import ml_dtypes
import numpy as np
import pytest

import radiance
from reference import (
    act_errors_float64,
    apply_reference,
    candidate_scales,
    dequantize_reference,
    pack_reference,
    quantize_reference,
    unpack_reference,
)

BF16 = ml_dtypes.bfloat16
DTYPES = [BF16, np.float16, np.float32]


def make_weights(kind, n, k, rng):
    if kind == "gaussian":
        w = rng.standard_normal((n, k)) * 0.02
    elif kind == "student_t":
        w = rng.standard_t(3, size=(n, k)) * 0.02
    elif kind == "outliers":
        w = rng.standard_normal((n, k)) * 0.02
        mask = rng.random((n, k)) < 0.01
        w[mask] *= 8.0
        w[0, 0] = 40.0  # one extreme outlier in its group
    elif kind == "zero_rows":
        w = rng.standard_normal((n, k))
        w[:: max(1, n // 3)] = 0.0  # padded-vocab rows
        w[-1, : k // 2] = 0.0  # and an all-zero first half of a row
    elif kind == "ties":
        # Values on the half-way points between quantization levels, plus exact lattices
        # (several clip ratios reach the same error) and signed zeros.
        s = 2.0 ** rng.integers(-12, -2, size=(n, 1))
        w = (rng.integers(-8, 8, size=(n, k)) + rng.choice([0.0, 0.5], size=(n, k))) * s
        w[:, ::7] = -0.0
    elif kind == "tiny":
        w = rng.standard_normal((n, k)) * 1e-9  # below the 1e-8 scale floor
    else:
        raise ValueError(kind)
    return w


@pytest.mark.parametrize("kind", ["gaussian", "student_t", "outliers", "zero_rows", "ties", "tiny"])
@pytest.mark.parametrize("group_size", [32, 64, 128, 256])
@pytest.mark.parametrize("clip", ["mse", "rtn"])
def test_quantize_matches_reference_bit_for_bit(kind, group_size, clip):
    rng = np.random.default_rng(abs(hash((kind, group_size, clip))) % 2**32)
    n = int(rng.integers(1, 90)) * 2 + 1  # odd row counts, nothing a multiple of a tile
    k = group_size * int(rng.integers(1, 9))
    w = make_weights(kind, n, k, rng).astype(BF16)
    packed, scales = radiance.quantize_rows(w, group_size=group_size, clip=clip)
    nibbles, ref_scales = quantize_reference(w, group_size, clip)
    assert packed.dtype == np.int32 and packed.shape == (n, k // 8)
    assert scales.dtype == BF16 and scales.shape == (n, k // group_size)
    np.testing.assert_array_equal(packed, pack_reference(nibbles))
    np.testing.assert_array_equal(scales.view(np.uint16), ref_scales.view(np.uint16))


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_quantize_every_input_dtype(dtype):
    rng = np.random.default_rng(7)
    w = make_weights("outliers", 33, 640, rng).astype(dtype)
    packed, scales = radiance.quantize_rows(w, group_size=128)
    nibbles, ref_scales = quantize_reference(w, 128, "mse")
    np.testing.assert_array_equal(packed, pack_reference(nibbles))
    np.testing.assert_array_equal(scales.view(np.uint16), ref_scales.view(np.uint16))


def test_all_zero_rows_give_floor_scale_and_nibble_8():
    w = np.zeros((3, 256), dtype=BF16)
    packed, scales = radiance.quantize_rows(w)
    floor = np.array([1e-8], dtype=np.float32).astype(BF16).view(np.uint16)[0]
    assert (scales.view(np.uint16) == floor).all()
    assert (radiance.unpack_shuffle(packed) == 8).all()


def test_mse_clip_lowers_weight_error():
    rng = np.random.default_rng(3)
    w = rng.standard_normal((256, 1024)).astype(np.float32)
    errors = {}
    for clip in ("rtn", "mse"):
        packed, scales = radiance.quantize_rows(w, clip=clip)
        w_hat = radiance.dequantize(packed, scales)
        errors[clip] = np.sqrt(np.mean((w_hat - w) ** 2) / np.mean(w**2))
    # anchors.md measured 0.1173 -> 0.1019 for gaussian weights with group 128.
    assert errors["mse"] < errors["rtn"] * 0.92
    assert 0.09 < errors["mse"] < 0.12


def test_packed_word_layout_follows_design():
    # Element e of a word sits at bit shift (0, 16, 4, 20, 8, 24, 12, 28)[e].
    nibbles = np.array([[1, 2, 3, 4, 5, 6, 7, 8]], dtype=np.uint8)
    expected = 1 | 3 << 4 | 5 << 8 | 7 << 12 | 2 << 16 | 4 << 20 | 6 << 24 | 8 << 28
    words = radiance.pack_shuffle(nibbles)
    assert words.dtype == np.int32 and words.shape == (1, 1)
    assert int(words.view(np.uint32)[0, 0]) == expected


def test_pack_unpack_round_trip():
    rng = np.random.default_rng(11)
    nibbles = rng.integers(0, 16, size=(77, 8 * 53), dtype=np.uint8)
    words = radiance.pack_shuffle(nibbles)
    np.testing.assert_array_equal(words, pack_reference(nibbles))
    np.testing.assert_array_equal(radiance.unpack_shuffle(words), nibbles)
    np.testing.assert_array_equal(unpack_reference(words), nibbles)


def test_dequantize_is_exact():
    rng = np.random.default_rng(5)
    w = make_weights("student_t", 41, 384, rng).astype(BF16)
    packed, scales = radiance.quantize_rows(w, group_size=64)
    w_hat = radiance.dequantize(packed, scales, group_size=64)
    assert w_hat.dtype == np.float32
    nibbles = radiance.unpack_shuffle(packed)
    np.testing.assert_array_equal(w_hat, dequantize_reference(nibbles, scales, 64).astype(np.float32))


def assert_close_to_float64(y, ref, x, w_hat):
    """Within bf16 output rounding (half an ulp: 2^-9 relative) plus fp32 accumulation error."""
    assert y.dtype == BF16
    y64 = y.astype(np.float64)
    scale = np.abs(x.astype(np.float64)) @ np.abs(w_hat).T
    bound = 2.0**-8 * np.abs(ref) + 1e-6 * scale + 1e-30
    assert np.all(np.abs(y64 - ref) <= bound), float(np.max(np.abs(y64 - ref) / bound))


@pytest.mark.parametrize("m", [1, 2, 7, 33])
@pytest.mark.parametrize("group_size", [32, 128, 256])
@pytest.mark.parametrize("x_dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_apply_matches_float64(m, group_size, x_dtype):
    rng = np.random.default_rng(m * 1000 + group_size)
    n, k = 1 + int(rng.integers(50, 300)), group_size * int(rng.integers(1, 6))
    w = make_weights("outliers", n, k, rng).astype(BF16)
    packed, scales = radiance.quantize_rows(w, group_size=group_size)
    x = (rng.standard_normal((m, k)) * 3).astype(x_dtype)
    bias = rng.standard_normal(n).astype(BF16)
    nibbles = radiance.unpack_shuffle(packed)
    w_hat = dequantize_reference(nibbles, scales, group_size)
    for b in (None, bias, bias.astype(np.float32)):
        y = radiance.apply(x, packed, scales, b, group_size=group_size)
        assert y.shape == (m, n)
        ref = apply_reference(x, nibbles, scales, group_size, b)
        assert_close_to_float64(y, ref, x, w_hat)


def test_int8_view_of_packed_words_is_the_same_head():
    # vLLM keeps the packed words as an int8 [N, K/2] view of the same bytes.
    rng = np.random.default_rng(12)
    w = rng.standard_normal((23, 512)).astype(BF16)
    packed, scales = radiance.quantize_rows(w)
    x = rng.standard_normal((3, 512)).astype(BF16)
    bytes_view = packed.view(np.int8)
    assert bytes_view.shape == (23, 256)
    np.testing.assert_array_equal(radiance.apply(x, bytes_view, scales).view(np.uint16),
                                  radiance.apply(x, packed, scales).view(np.uint16))
    np.testing.assert_array_equal(radiance.dequantize(bytes_view, scales),
                                  radiance.dequantize(packed, scales))


def test_apply_leading_dims_and_out():
    rng = np.random.default_rng(2)
    w = rng.standard_normal((19, 256)).astype(np.float32)
    packed, scales = radiance.quantize_rows(w)
    x = rng.standard_normal((2, 3, 256)).astype(BF16)
    y = radiance.apply(x, packed, scales)
    assert y.shape == (2, 3, 19)
    out = np.full((6, 19), np.nan, dtype=BF16)
    y2 = radiance.apply(x.reshape(6, 256), packed, scales, out=out)
    assert y2 is out
    np.testing.assert_array_equal(out.view(np.uint16), y.reshape(6, 19).view(np.uint16))


def test_empty_inputs():
    packed, scales = radiance.quantize_rows(np.zeros((0, 128), dtype=BF16))
    assert packed.shape == (0, 16) and scales.shape == (0, 1)
    w = np.ones((5, 128), dtype=np.float32)
    packed, scales = radiance.quantize_rows(w)
    assert radiance.apply(np.zeros((0, 128), np.float32), packed, scales).shape == (0, 5)
    assert radiance.unpack_shuffle(np.zeros((0, 4), np.int32)).shape == (0, 32)


def test_noncontiguous_and_misaligned_inputs_are_handled():
    rng = np.random.default_rng(9)
    base = rng.standard_normal((64, 512)).astype(np.float32)
    expected = radiance.quantize_rows(np.ascontiguousarray(base[::2, :256]))
    got = radiance.quantize_rows(base[::2, :256])  # strided view
    for a, b in zip(expected, got):
        np.testing.assert_array_equal(a.view(np.uint8), b.view(np.uint8))
    transposed = np.ascontiguousarray(base[:, :256].T).T  # Fortran order
    expected = radiance.quantize_rows(np.ascontiguousarray(transposed))
    got = radiance.quantize_rows(transposed)
    for a, b in zip(expected, got):
        np.testing.assert_array_equal(a.view(np.uint8), b.view(np.uint8))
    raw = np.zeros(4 * 256 * 4 + 1, dtype=np.uint8)
    misaligned = raw[1:].view(np.float32).reshape(4, 256)  # 1-byte offset: not aligned
    misaligned[:] = base[:4, :256]
    assert not misaligned.flags.aligned
    expected = radiance.quantize_rows(np.ascontiguousarray(base[:4, :256]))
    got = radiance.quantize_rows(misaligned)
    for a, b in zip(expected, got):
        np.testing.assert_array_equal(a.view(np.uint8), b.view(np.uint8))


# -- clip "act": the squared error of column k weighted by activation_sq[k] -----------------------


def make_activation_sq(kind, k, group_size, rng):
    """Per-channel mean squares as real final hidden states give them: mostly O(1), a few outlier
    channels far above, plus the corner cases of the rule."""
    a = rng.lognormal(0.0, 1.0, size=k)
    if kind == "outlier_channels":
        a[rng.choice(k, size=max(1, k // 100), replace=False)] *= rng.uniform(50, 500)
    elif kind == "zeros":
        a[rng.random(k) < 0.2] = 0.0  # channels that never fire
        a[:group_size] = 0.0  # a whole group of them: weighs as mse
        a[-1] = -0.0
    elif kind == "huge_range":
        a = 10.0 ** rng.uniform(-30, 30, size=k)
    elif kind != "lognormal":
        raise ValueError(kind)
    return a.astype(np.float32)


def fresh_seed():
    return int.from_bytes(np.random.bytes(4), "little")


@pytest.mark.parametrize("stats", ["lognormal", "outlier_channels", "zeros", "huge_range"])
@pytest.mark.parametrize("kind", ["gaussian", "outliers", "zero_rows", "ties", "tiny"])
@pytest.mark.parametrize("group_size", [32, 64, 128, 256])
def test_act_matches_reference_bit_for_bit(stats, kind, group_size):
    seed = fresh_seed()
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 90)) * 2 + 1
    k = group_size * int(rng.integers(1, 9))
    w = make_weights(kind, n, k, rng).astype(BF16)
    a = make_activation_sq(stats, k, group_size, rng)
    packed, scales = radiance.quantize_rows(w, group_size=group_size, clip="act", activation_sq=a)
    nibbles, ref_scales = quantize_reference(w, group_size, "act", activation_sq=a)
    np.testing.assert_array_equal(packed, pack_reference(nibbles), err_msg=f"seed {seed}")
    np.testing.assert_array_equal(scales.view(np.uint16), ref_scales.view(np.uint16),
                                  err_msg=f"seed {seed}")


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_act_every_input_dtype(dtype):
    seed = fresh_seed()
    rng = np.random.default_rng(seed)
    w = make_weights("outliers", 37, 768, rng).astype(dtype)
    a = make_activation_sq("outlier_channels", 768, 64, rng)
    packed, scales = radiance.quantize_rows(w, 64, "act", activation_sq=a)
    nibbles, ref_scales = quantize_reference(w, 64, "act", activation_sq=a)
    np.testing.assert_array_equal(packed, pack_reference(nibbles), err_msg=f"seed {seed}")
    np.testing.assert_array_equal(scales.view(np.uint16), ref_scales.view(np.uint16))


@pytest.mark.parametrize("group_size", [32, 64, 128, 256])
def test_act_chooses_the_float64_best_ratio(group_size):
    """Against float64 errors with the raw statistics: wherever the best ratio leads the runner-up
    by more than the float32 rounding of the kernel's sum can hide, the kernel picks exactly it;
    in near-ties its pick is within that rounding of the best."""
    seed = fresh_seed()
    rng = np.random.default_rng(seed)
    n, k = 301, group_size * 12
    w = make_weights("student_t", n, k, rng).astype(BF16)
    a = make_activation_sq("outlier_channels", k, group_size, rng)
    packed, scales = radiance.quantize_rows(w, group_size, "act", activation_sq=a)
    candidates = candidate_scales(w.astype(np.float32), group_size, "act")  # [R, N, K/G]
    errors = act_errors_float64(w, group_size, a, candidates)
    # The index of the kernel's scale among the candidates (the five scales of a group differ:
    # 5 % steps against bf16's 0.4 %, and these weights are far above the 1e-8 floor).
    chosen_bits = scales.view(np.uint16)
    candidate_bits = candidates.astype(BF16).view(np.uint16)
    assert (np.diff(np.sort(candidate_bits, axis=0), axis=0) > 0).all()
    picked = np.argmax(candidate_bits == chosen_bits[None], axis=0)
    assert (candidate_bits[picked, np.arange(n)[:, None], np.arange(k // group_size)]
            == chosen_bits).all()
    ordered = np.sort(errors, axis=0)
    best, runner_up = ordered[0], ordered[1]
    # float32: every term rounds a few times (d, d^2, the weight, its product) and the sum of
    # group_size terms adds at most ~group_size/8 + log2 roundings; 64 ulps bounds it amply.
    tolerance = 64 * 2.0**-24 * runner_up
    decided = runner_up - best > 2 * tolerance
    assert decided.mean() > 0.9, f"seed {seed}: too few decided groups to test"
    want = np.argmin(errors, axis=0)
    np.testing.assert_array_equal(picked[decided], want[decided], err_msg=f"seed {seed}")
    got_err = np.take_along_axis(errors, picked[None], axis=0)[0]
    assert (got_err <= best + 2 * tolerance).all(), f"seed {seed}"
    # and its nibbles are round-to-nearest at that scale
    q = np.clip(np.rint(w.astype(np.float32).reshape(n, -1, group_size)
                        / scales.astype(np.float32)[..., None]), -8, 7)
    np.testing.assert_array_equal(radiance.unpack_shuffle(packed),
                                  (q + 8).astype(np.uint8).reshape(n, k))


@pytest.mark.parametrize("k", [128, 576, 1408, 4096, 8192])
def test_act_with_equal_statistics_is_mse_bit_for_bit(k):
    """Equal statistics weigh every error by exactly 1 (each group is divided by its largest
    entry), so the choice is mse's for any positive constant, however it rounds."""
    seed = fresh_seed()
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 700)) * 2 + 1
    w = make_weights("outliers", n, k, rng)
    w[:: max(1, n // 5)] = 0.0  # all-zero rows
    w = w.astype(BF16)
    for group_size in (g for g in (32, 64, 128, 256) if k % g == 0):
        ref = radiance.quantize_rows(w, group_size, "mse")
        constants = [float(rng.uniform(1e-3, 1e3)), 1.0 / 3.0, 1e-38, 3e38, 1e-45, 0.0]
        for c in constants:
            a = np.full(k, c, dtype=np.float32)
            got = radiance.quantize_rows(w, group_size, "act", activation_sq=a)
            np.testing.assert_array_equal(got[0], ref[0], err_msg=f"seed {seed} c {c}")
            np.testing.assert_array_equal(got[1].view(np.uint16), ref[1].view(np.uint16))
        # constant within each group, different between groups: still mse, group by group
        a = np.repeat(rng.lognormal(0, 3, size=k // group_size), group_size).astype(np.float32)
        got = radiance.quantize_rows(w, group_size, "act", activation_sq=a)
        np.testing.assert_array_equal(got[0], ref[0], err_msg=f"seed {seed}")
        np.testing.assert_array_equal(got[1].view(np.uint16), ref[1].view(np.uint16))


def test_act_statistics_scaled_by_a_power_of_two_change_nothing():
    seed = fresh_seed()
    rng = np.random.default_rng(seed)
    w = make_weights("student_t", 129, 1024, rng).astype(BF16)
    a = make_activation_sq("outlier_channels", 1024, 128, rng)
    ref = radiance.quantize_rows(w, 128, "act", activation_sq=a)
    for factor in (2.0**-40, 0.5, 8.0, 2.0**50):
        got = radiance.quantize_rows(w, 128, "act", activation_sq=a * np.float32(factor))
        np.testing.assert_array_equal(got[0], ref[0], err_msg=f"seed {seed}")
        np.testing.assert_array_equal(got[1].view(np.uint16), ref[1].view(np.uint16))


def test_act_lowers_the_activation_weighted_error():
    """What act is for: the error of x . w, not of w. With outlier channels it must beat mse on
    sum_k a_k (w_hat - w)^2 (float64), and mse must beat it on the plain weight error."""
    seed = fresh_seed()
    rng = np.random.default_rng(seed)
    w = make_weights("student_t", 512, 1024, rng).astype(np.float32)
    a = make_activation_sq("outlier_channels", 1024, 128, rng)
    errors = {}
    for clip in ("mse", "act"):
        packed, scales = radiance.quantize_rows(w, 128, clip, activation_sq=a if clip == "act" else None)
        d = radiance.dequantize(packed, scales).astype(np.float64) - w
        errors[clip] = ((d * d) @ a.astype(np.float64), float((d * d).sum()))
    assert errors["act"][0].sum() < errors["mse"][0].sum(), f"seed {seed}"
    assert errors["mse"][1] < errors["act"][1], f"seed {seed}"


def test_act_takes_statistics_numpy_and_torch_convert():
    rng = np.random.default_rng(21)
    w = rng.standard_normal((17, 256)).astype(BF16)
    a = make_activation_sq("lognormal", 256, 128, rng)
    ref = radiance.quantize_rows(w, 128, "act", activation_sq=a)
    for same in (a.astype(np.float64), list(a.astype(np.float64))):  # exact in float32
        got = radiance.quantize_rows(w, 128, "act", activation_sq=same)
        np.testing.assert_array_equal(got[0], ref[0])
        np.testing.assert_array_equal(got[1].view(np.uint16), ref[1].view(np.uint16))
    torch = pytest.importorskip("torch")
    importlib.import_module("radiance.torch_ops")  # registers torch.ops.radiance
    wt = torch.from_numpy(w.view(np.int16)).view(torch.bfloat16)
    for at in (torch.from_numpy(a), torch.from_numpy(a).double()):
        packed, scales = radiance.quantize_rows(wt, 128, "act", activation_sq=at)
        np.testing.assert_array_equal(packed.numpy(), ref[0])
    packed, scales = torch.ops.radiance.quantize_rows(wt, 128, "act", torch.from_numpy(a))
    np.testing.assert_array_equal(packed.numpy(), ref[0])
    np.testing.assert_array_equal(scales.view(torch.int16).numpy().view(np.uint16),
                                  ref[1].view(np.uint16))
    with pytest.raises(TypeError, match="activation_sq must be real numbers"):
        radiance.quantize_rows(wt, 128, "act", activation_sq=torch.ones(256, dtype=torch.bool))


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"clip": "act"}, ValueError, "clip='act' needs activation_sq"),
        ({"clip": "mse", "activation_sq": np.ones(256, np.float32)}, ValueError,
         "activation_sq is used by clip='act' only"),
        ({"clip": "rtn", "activation_sq": np.ones(256, np.float32)}, ValueError,
         "activation_sq is used by clip='act' only"),
        ({"clip": "act", "activation_sq": np.ones(255, np.float32)}, ValueError,
         r"activation_sq must have shape \(K,\) = \(256,\)"),
        ({"clip": "act", "activation_sq": np.ones((2, 128), np.float32)}, ValueError,
         "activation_sq must have 1 dimension"),
        ({"clip": "act", "activation_sq": np.float32(1.0)}, ValueError, "activation_sq must have 1"),
        ({"clip": "act", "activation_sq": np.ones(256, np.complex64)}, TypeError,
         "activation_sq must be real numbers"),
        ({"clip": "act", "activation_sq": np.array(["a"] * 256)}, TypeError,
         "activation_sq must be real numbers"),
        ({"clip": "act", "activation_sq": object()}, TypeError, "activation_sq must be"),
        ({"clip": "fancy"}, ValueError, "clip must be 'mse', 'rtn' or 'act'"),
    ],
)
def test_act_bad_arguments(kwargs, error, match):
    w = np.ones((3, 256), dtype=BF16)
    with pytest.raises(error, match=match):
        radiance.quantize_rows(w, 128, **kwargs)


@pytest.mark.parametrize("bad", [-1.0, -1e-30, np.nan, np.inf, -np.inf, 1e39])
def test_act_bad_statistics_name_the_entry(bad):
    a = np.ones(256, dtype=np.float64)
    a[77] = bad
    with pytest.raises(ValueError, match=r"activation_sq\[77\] is .*finite and >= 0"):
        radiance.quantize_rows(np.ones((3, 256), dtype=BF16), 128, "act", activation_sq=a)


def test_act_statistics_go_to_the_c_core_as_float32_only():
    w = np.ones((3, 256), dtype=BF16)
    with pytest.raises(TypeError, match="activation_sq must be float32, got float16"):
        radiance._C.quantize_rows(w, 128, "act", activation_sq=np.ones(256, np.float16))
