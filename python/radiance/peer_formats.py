"""The two other lm_head formats a drafter head can take in vLLM 0.33, computed in NumPy exactly as
vLLM's lm_head copies compute them (`vllm/model_executor/layers/quantization/online/lm_head.py`),
so radiance can compare them with its int4 format offline. No torch, no vLLM: NumPy and ml_dtypes.

fp8 (vLLM's "fp8" copy, `Fp8PtpcOnlineLinearMethod`): one float32 scale per weight row,
``scale = max(amax_row / 448, 1 / (448 * 512))``, codes ``e4m3fn(clamp(w / scale, ±448))``
(true division); activations get the same treatment per token at run time
(`fp8_quantize_activations`).

nvfp4 (vLLM's "nvfp4" copy, `_quantize_nvfp4` over `ref_nvfp4_quant`): a float32 global scale
``g = max(amax / (6 * 448), 1e-12)``; per block of 16 values an e4m3fn scale
``s = e4m3(clamp((1/g) * (amax_block * (1/6)), ±448))``; values ``w * 1/(s * g')`` (``g'`` the
float32 reciprocal of ``1/g``) clamped to ±6 and rounded to E2M1 {0, 0.5, 1, 1.5, 2, 3, 4, 6}
with ties to the even code; codes are sign << 3 | magnitude index, two per byte, low nibble
first. The dequantized weight is ``e2m1 * s * g``.

API (all arrays NumPy; ``w`` is [N, K] float32, float16 or ml_dtypes.bfloat16, finite):

    fp8_quantize_weight(w) -> (codes uint8 [N, K] (e4m3fn bits), scale float32 [N])
    fp8_quantize_activations(x, reciprocal=False) -> (codes uint8 [M, K], scale float32 [M])
    fp8_dequantize(codes, scale) -> float32 [N, K]
    nvfp4_quantize(w) -> (packed uint8 [N, K/2], block_scale uint8 [N, K/16] (e4m3fn bits),
                          global_scale float32 scalar)
    nvfp4_dequantize(packed, block_scale, global_scale) -> float32 [N, K]
    bytes_per_step(format, n, k, group_size=128) -> int   # "bf16", "fp8", "nvfp4", "int4"

Where vLLM runs the same formula differently on the GPU the difference is one rounding of a
scale: CUDA torch divides by a Python number through its reciprocal (nvfp4's global scale, the
per-token activation scale), and vLLM's CUDA per-token kernel divides by the activation scale
where its torch-native path (`QuantFP8.forward_native`, what its CPU platform runs) multiplies by
the reciprocal; `reciprocal=True` gives the latter. Everything here is tested bit for bit against
vLLM's own quantizers on its CPU platform (tests/test_vllm_peer_formats.py).
"""

import ml_dtypes
import numpy as np

__all__ = ["fp8_quantize_weight", "fp8_quantize_activations", "fp8_dequantize", "nvfp4_quantize",
           "nvfp4_dequantize", "bytes_per_step", "FORMATS", "E2M1_VALUES"]

FORMATS = ("bf16", "fp8", "nvfp4", "int4")
FP8_MAX = np.float32(448.0)  # largest finite e4m3fn
# Scales below this would turn small rows into infinities on the way back (vLLM's floor).
FP8_MIN_SCALE = np.float32(1.0) / (FP8_MAX * np.float32(512.0))
E2M1_MAX = np.float32(6.0)
NVFP4_BLOCK = 16
# The 8 E2M1 magnitudes, by code (bit 3 of a code is the sign).
E2M1_VALUES = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=np.float32)
# Rounding to E2M1: the upper bound of each magnitude's interval and whether it is included;
# a midpoint goes to the neighbour with an even code (0.25 -> 0, 0.75 -> 1, 1.25 -> 1, ...).
_E2M1_BOUNDS = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0], dtype=np.float32)
_E2M1_BOUND_INCLUDED = np.array([True, False, True, False, True, False, True])


def _float32_matrix(name, a, multiple=1):
    a = np.asarray(a)
    if a.dtype not in (np.float32, np.float16, np.dtype(ml_dtypes.bfloat16)):
        raise TypeError(f"{name} must be float32, float16 or bfloat16, got {a.dtype}")
    if a.ndim != 2 or a.shape[0] == 0 or a.shape[1] == 0 or a.shape[1] % multiple:
        need = f" with K a multiple of {multiple}" if multiple > 1 else ""
        raise ValueError(f"{name} must be a non-empty 2-D [N, K] array{need}, got shape "
                         f"{a.shape}")
    a = a.astype(np.float32)  # exact for all three
    if not np.isfinite(a).all():
        row = int(np.flatnonzero(~np.isfinite(a).all(axis=1))[0])
        raise ValueError(f"{name} has non-finite values in row {row}")
    return a


def _e4m3_bits(a):
    """float32 -> e4m3fn, round to nearest even (no value here exceeds ±448), as uint8 bits."""
    return a.astype(ml_dtypes.float8_e4m3fn).view(np.uint8)


def _from_e4m3_bits(bits):
    return np.asarray(bits, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float32)


# --- fp8 -----------------------------------------------------------------------------------------


def _fp8_codes(a, scale, reciprocal):
    scaled = a * (np.float32(1.0) / scale) if reciprocal else a / scale
    return _e4m3_bits(np.clip(scaled, -FP8_MAX, FP8_MAX))


def fp8_quantize_weight(w):
    """Per-row fp8: (e4m3fn codes as uint8 [N, K], float32 scale [N])."""
    a = _float32_matrix("w", w)
    scale = np.maximum(np.abs(a).max(axis=1) / FP8_MAX, FP8_MIN_SCALE).astype(np.float32)
    return _fp8_codes(a, scale[:, None], reciprocal=False), scale


def fp8_quantize_activations(x, reciprocal=False):
    """Per-token dynamic fp8 of hidden states x [M, K]: (codes uint8 [M, K], scale float32 [M]).

    reciprocal=False divides by the scale (vLLM's CUDA kernel); True multiplies by its float32
    reciprocal (vLLM's torch-native QuantFP8 path).
    """
    a = _float32_matrix("x", x)
    scale = np.maximum(np.abs(a).max(axis=1) / FP8_MAX, FP8_MIN_SCALE).astype(np.float32)
    return _fp8_codes(a, scale[:, None], reciprocal), scale


def fp8_dequantize(codes, scale):
    """float32 [N, K]: e4m3fn value of each code times its row's scale."""
    codes, scale = np.asarray(codes), np.asarray(scale)
    if codes.dtype != np.uint8 or codes.ndim != 2:
        raise TypeError(f"codes must be uint8 [N, K] (e4m3fn bits), got {codes.dtype} "
                        f"{codes.shape}")
    if scale.dtype != np.float32 or scale.shape != (codes.shape[0],):
        raise ValueError(f"scale must be float32 [{codes.shape[0]}], got {scale.dtype} "
                         f"{scale.shape}")
    return _from_e4m3_bits(codes) * scale[:, None]


# --- nvfp4 ---------------------------------------------------------------------------------------


def _e2m1_index(magnitude):
    """Index into E2M1_VALUES of the rounded magnitude (0..6 in float32)."""
    index = np.zeros(magnitude.shape, dtype=np.uint8)
    for bound, included in zip(_E2M1_BOUNDS, _E2M1_BOUND_INCLUDED):
        index += (magnitude > bound) if included else (magnitude >= bound)
    return index


def nvfp4_quantize(w):
    """NVFP4 of w [N, K], K a multiple of 16: (packed uint8 [N, K/2], low nibble first;
    block scales uint8 [N, K/16] (e4m3fn bits); global scale float32)."""
    a = _float32_matrix("w", w, NVFP4_BLOCK)
    n, k = a.shape
    global_scale = np.maximum(np.abs(a).max() / (E2M1_MAX * FP8_MAX), np.float32(1e-12))
    global_scale = np.float32(global_scale)
    inverse_global = np.float32(1.0) / global_scale
    blocks = a.reshape(n, k // NVFP4_BLOCK, NVFP4_BLOCK)
    block_max = np.abs(blocks).max(axis=-1, keepdims=True)
    scale = inverse_global * (block_max * np.float32(1.0 / 6.0))
    scale_bits = _e4m3_bits(np.clip(scale, -FP8_MAX, FP8_MAX))
    scale = _from_e4m3_bits(scale_bits)
    product = scale * (np.float32(1.0) / inverse_global)
    product = np.where(product == 0, np.float32(1e8), product)  # all-zero block: any finite
    values = np.clip(blocks * (np.float32(1.0) / product), -E2M1_MAX, E2M1_MAX).reshape(n, k)
    index = _e2m1_index(np.abs(values))
    codes = index | (((values < 0) & (index > 0)).astype(np.uint8) << 3)
    packed = codes[:, 0::2] | (codes[:, 1::2] << 4)
    return packed, scale_bits.reshape(n, k // NVFP4_BLOCK), global_scale


def nvfp4_dequantize(packed, block_scale, global_scale):
    """float32 [N, K]: E2M1 value times its block's e4m3 scale times the global scale."""
    packed, block_scale = np.asarray(packed), np.asarray(block_scale)
    if packed.dtype != np.uint8 or packed.ndim != 2 or (2 * packed.shape[1]) % NVFP4_BLOCK:
        raise TypeError(f"packed must be uint8 [N, K/2] with K a multiple of 16, got "
                        f"{packed.dtype} {packed.shape}")
    n, k = packed.shape[0], packed.shape[1] * 2
    if block_scale.dtype != np.uint8 or block_scale.shape != (n, k // NVFP4_BLOCK):
        raise ValueError(f"block_scale must be uint8 [{n}, {k // NVFP4_BLOCK}] (e4m3fn bits), "
                         f"got {block_scale.dtype} {block_scale.shape}")
    codes = np.empty((n, k), dtype=np.uint8)
    codes[:, 0::2], codes[:, 1::2] = packed & 15, packed >> 4
    values = E2M1_VALUES[codes & 7] * np.where(codes & 8, np.float32(-1), np.float32(1))
    # vLLM's order: the block scale times the global scale first, then the value.
    scale = _from_e4m3_bits(block_scale) * np.float32(global_scale)
    return values * np.repeat(scale, NVFP4_BLOCK, axis=1)


# --- bytes ---------------------------------------------------------------------------------------


def bytes_per_step(format, n, k, group_size=128):
    """Bytes of an [n, k] head's weights and scales, read once per decode step."""
    if format not in FORMATS:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}, got {format!r}")
    if int(n) != n or int(k) != k or n <= 0 or k <= 0:
        raise ValueError(f"n and k must be positive integers, got {n!r}, {k!r}")
    n, k = int(n), int(k)
    if format == "bf16":
        return n * k * 2
    if format == "fp8":
        return n * k + n * 4  # e4m3 codes, a float32 scale per row
    if format == "nvfp4":
        if k % NVFP4_BLOCK:
            raise ValueError(f"nvfp4 needs k a multiple of {NVFP4_BLOCK}, got {k}")
        return n * k // 2 + n * (k // NVFP4_BLOCK) + 4  # codes, e4m3 block scales, global
    if group_size not in (32, 64, 128, 256) or k % group_size:
        raise ValueError(f"int4 needs group_size in 32, 64, 128, 256 dividing k={k}, got "
                         f"{group_size!r}")
    return n * k // 2 + n * (k // group_size) * 2  # nibbles, a bf16 scale per group
