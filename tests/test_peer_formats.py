"""radiance.peer_formats on its own (NumPy only): known e4m3 and E2M1 codes worked out by hand,
round trips, nearest-point rounding checked against the whole E2M1 grid, bytes per step, errors.
The bit-for-bit comparison with vLLM's quantizers is tests/test_vllm_peer_formats.py."""

import ml_dtypes
import numpy as np
import pytest

from radiance import peer_formats as pf

# e4m3fn bit patterns: sign | 4 exponent bits (bias 7) | 3 mantissa bits.
E4M3 = {1.0: 0x38, 0.5: 0x30, -2.0: 0xC0, 448.0: 0x7E, 1.125: 0x39, 2.0 ** -9: 0x01,
        0.875: 0x36, 3.0: 0x44}


def test_fp8_known_codes():
    # amax 448 gives scale exactly 1, so the codes are the e4m3 encodings of the values.
    values = list(E4M3)
    w = np.array([values], dtype=np.float32)
    codes, scale = pf.fp8_quantize_weight(w)
    assert scale.tolist() == [1.0]
    assert codes[0].tolist() == [E4M3[v] for v in values]
    # Halfway between 1.0 and 1.125 goes to the even mantissa (1.0); 1.1875 to 1.25.
    w = np.array([[448.0, 1.0625, 1.1875, -1.0625]], dtype=np.float32)
    assert pf.fp8_quantize_weight(w)[0][0, 1:].tolist() == [0x38, 0x3A, 0xB8]


def test_fp8_scale_and_floor():
    w = np.array([[0.0, 0.0], [3.5, -7.0], [1e-30, 0.0]], dtype=np.float32)
    codes, scale = pf.fp8_quantize_weight(w)
    assert scale[1] == np.float32(7.0) / np.float32(448.0)
    floor = np.float32(1.0) / np.float32(448.0 * 512.0)
    assert scale[0] == floor and scale[2] == floor  # never a zero scale
    assert codes[0].tolist() == [0, 0]
    assert codes[1, 1] == 0x80 | 0x7E  # -amax maps to -448


@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16])
def test_fp8_round_trip_within_half_a_step(dtype):
    rng = np.random.default_rng(1)
    w = (rng.standard_normal((33, 200)) * rng.uniform(1e-3, 10, (33, 1))).astype(dtype)
    codes, scale = pf.fp8_quantize_weight(w)
    back = pf.fp8_dequantize(codes, scale)
    w32 = w.astype(np.float32)
    # e4m3: 3 mantissa bits, so half a step is 2^-4 of the value; subnormals step 2^-9.
    bound = np.abs(w32) * 2.0 ** -4 + scale[:, None] * 2.0 ** -10
    assert (np.abs(back - w32) <= bound * (1 + 1e-6)).all()
    x_codes, x_scale = pf.fp8_quantize_activations(w)
    np.testing.assert_array_equal(x_codes, codes)  # same formula per token as per row
    np.testing.assert_array_equal(x_scale, scale)


def test_nvfp4_known_codes_and_nibble_order():
    # One block of 16 with amax 6: block scale 1 at global scale 1/448 * ... built so that the
    # values land on the E2M1 grid: codes are the magnitude indices, sign in bit 3.
    grid = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
    row = grid + [-v for v in grid[1:]] + [-0.0]
    packed, scales, global_scale = pf.nvfp4_quantize(np.array([row], dtype=np.float32))
    assert global_scale == np.float32(6.0) / np.float32(6.0 * 448.0)
    assert scales.tolist() == [[0x7E]]  # 448 in e4m3: amax / (6 * global) = 448
    codes = [i for i in range(8)] + [8 | i for i in range(1, 8)] + [0]
    expected = [codes[j] | (codes[j + 1] << 4) for j in range(0, 16, 2)]  # low nibble first
    assert packed[0].tolist() == expected
    np.testing.assert_array_equal(pf.nvfp4_dequantize(packed, scales, global_scale)[0],
                                  np.array(row, dtype=np.float32))


def test_nvfp4_rounds_to_a_nearest_grid_point():
    """Every dequantized value is, among all points of its block's E2M1 grid, a nearest one to
    the value scaled as vLLM scales it (checked against the whole grid, not the rule)."""
    rng = np.random.default_rng(2)
    w = (rng.standard_normal((24, 96)) * rng.uniform(1e-2, 50, (24, 1))).astype(np.float32)
    w[3, :16] = 0  # an all-zero block
    packed, scales, global_scale = pf.nvfp4_quantize(w)
    back = pf.nvfp4_dequantize(packed, scales, global_scale)
    step = np.repeat(scales.view(ml_dtypes.float8_e4m3fn).astype(np.float64), 16, axis=1) \
        * np.float64(global_scale)
    points = np.concatenate([pf.E2M1_VALUES, -pf.E2M1_VALUES]).astype(np.float64)
    grid = step[..., None] * points  # [N, K, 16]
    best = np.abs(grid - w[..., None]).min(axis=-1)
    # Scales round in float32 on the way: allow a float32 ulp of the block's step.
    slack = step * 6 * 2.0 ** -22 + 1e-30
    assert (np.abs(back - w) <= best + slack).all()
    assert (back[3, :16] == 0).all()


def test_bytes_per_step_for_a_large_head():
    n, k = 248320, 5120
    sizes = {f: pf.bytes_per_step(f, n, k) for f in pf.FORMATS}
    assert sizes["bf16"] == n * k * 2 == 2_542_796_800
    assert sizes["fp8"] == sizes["bf16"] // 2 + 4 * n
    assert sizes["nvfp4"] == sizes["bf16"] // 4 + sizes["bf16"] // 32 + 4
    assert sizes["int4"] == sizes["bf16"] // 4 + n * (k // 128) * 2 == 655_564_800
    assert pf.bytes_per_step("int4", n, k, 64) == sizes["bf16"] // 4 + n * (k // 64) * 2
    assert sizes["int4"] < sizes["nvfp4"] < sizes["fp8"] < sizes["bf16"]


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="row 1"):
        pf.fp8_quantize_weight(np.array([[1.0], [np.inf]], dtype=np.float32))
    with pytest.raises(ValueError, match="row 0"):
        pf.nvfp4_quantize(np.full((1, 16), np.nan, dtype=np.float32))
    with pytest.raises(TypeError, match="w must be float32"):
        pf.fp8_quantize_weight(np.ones((2, 2), dtype=np.int32))
    with pytest.raises(ValueError, match="multiple of 16"):
        pf.nvfp4_quantize(np.ones((2, 24), dtype=np.float32))
    with pytest.raises(ValueError, match="2-D"):
        pf.fp8_quantize_activations(np.ones(4, dtype=np.float32))
    with pytest.raises(ValueError, match="format must be one of"):
        pf.bytes_per_step("int8", 4, 128)
    with pytest.raises(ValueError, match="group_size"):
        pf.bytes_per_step("int4", 4, 96, group_size=64)
    with pytest.raises(ValueError, match="scale must be float32"):
        pf.fp8_dequantize(np.zeros((2, 3), np.uint8), np.zeros(3, np.float32))
