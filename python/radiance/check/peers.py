"""The peer formats of a drafter head, fp8 and nvfp4, as heads ``check`` can run.

The quantizers are ``radiance.peer_formats`` (NumPy references of vLLM 0.33's lm_head copies);
this file only shapes them for the check: the matrix that multiplies the activations, the scales
applied after the product, and what happens to the activations first. The logits are what vLLM
computes:

- fp8: activations quantized per token at run time (e4m3, dynamic scale), weights e4m3 with a
  scale per row; the product of the codes accumulated in fp32, then times both scales.
- nvfp4: weight-only, the activations stay bf16; the weights dequantized (E2M1 × e4m3 block scale
  × fp32 global scale) and the product accumulated in fp32.

Both return bf16 logits, like ``radiance.apply`` and like vLLM's head in a bf16 model.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from radiance import peer_formats


def round_to_bf16(y):
    """float32 -> nearest bf16 (ties to even), returned as float32; in place when possible."""
    bits = np.ascontiguousarray(y, dtype=np.float32).view(np.uint32)
    bits += np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))
    bits &= np.uint32(0xFFFF0000)
    return bits.view(np.float32)


def _e4m3_values(codes):
    return codes.view(ml_dtypes.float8_e4m3fn).astype(np.float32)


class PeerHead:
    """A head in a peer format: ``values`` [N, K] float32 multiplies the (transformed)
    activations; ``row_scale`` [N] (or None) multiplies the product's columns."""

    format = ""
    values: np.ndarray
    row_scale = None

    def bytes_per_step(self):
        n, k = self.values.shape
        return peer_formats.bytes_per_step(self.format, n, k)

    def dequantize_rows(self, r0, r1):
        rows = self.values[r0:r1]
        return rows if self.row_scale is None else rows * self.row_scale[r0:r1, None]

    def activations(self, x):
        """(values [M, K] float32, per-token scale [M] or None) that the head multiplies."""
        return x, None

    def finish(self, product, token_scale, bias):
        """bf16 logits (as float32) from the float32 product of activations and ``values``."""
        y = product
        if token_scale is not None:
            y = y * token_scale[:, None]
        if self.row_scale is not None:
            y = y * self.row_scale[None, :]
        if bias is not None:
            y = y + bias
        return round_to_bf16(y)


class Fp8Head(PeerHead):
    """vLLM's "fp8" copy: per-row e4m3 weights, per-token dynamic e4m3 activations."""

    format = "fp8"

    def __init__(self, weight):
        codes, scale = peer_formats.fp8_quantize_weight(weight)
        self.values = _e4m3_values(codes)
        self.row_scale = scale

    def activations(self, x):
        codes, scale = peer_formats.fp8_quantize_activations(x)
        return _e4m3_values(codes), scale


class Nvfp4Head(PeerHead):
    """vLLM's "nvfp4" copy, weight-only: the activations stay bf16."""

    format = "nvfp4"

    def __init__(self, weight):
        packed, block_scale, global_scale = peer_formats.nvfp4_quantize(weight)
        self.values = peer_formats.nvfp4_dequantize(packed, block_scale, global_scale)
