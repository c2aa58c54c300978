"""radiance.peer_formats bit for bit against vLLM's own quantizers, on its CPU platform.

fp8 weights: vLLM 0.33's `_fp8_channel_scale` and `_fp8_quant_per_channel` (what
`Fp8PtpcOnlineLinearMethod` runs on the lm_head copy); fp8 activations: vLLM's `QuantFP8`
per-token dynamic quantizer, torch-native path; nvfp4: vLLM 0.33's `_quantize_nvfp4`. Random
inputs of awkward shapes and magnitudes (zero rows, tiny rows, rows near fp8's range) in bf16,
fp16 and fp32. Run it with `bash .ci/vllm_env.sh`; what a vLLM release lacks is skipped.
"""

import importlib

import ml_dtypes
import numpy as np
import pytest

from radiance import peer_formats as pf
from test_vllm import needs_vllm

pytestmark = needs_vllm

SHAPES = [(1, 16), (3, 48), (37, 272), (129, 64), (5, 1040)]
DTYPES = ["float32", "float16", "bfloat16"]


def _vllm_function(module, name):
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as error:
        pytest.skip(f"this vLLM has no {module}.{name}: {error}")


def _weights(shape, dtype, seed):
    """Rows of different magnitudes: normal, all zero, tiny (e4m3 subnormals), large."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal(shape).astype(np.float32)
    w *= np.float32(10.0) ** rng.uniform(-6, 2, size=(shape[0], 1)).astype(np.float32)
    if shape[0] > 2:
        w[1] = 0
        w[2, : shape[1] // 2] = 0  # half a row of zeros: all-zero nvfp4 blocks
    np_dtype = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.dtype(dtype)
    limit = 60000 if dtype == "float16" else 1e30
    return np.clip(w, -limit, limit).astype(np_dtype)


def _torch(a):
    import torch

    if a.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(a.copy())


def _bits(t):
    import torch

    return t.contiguous().view(torch.uint8).numpy()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES + [(7, 1), (4, 301)])
def test_fp8_weight_equals_vllm(shape, dtype):
    channel_scale = _vllm_function("vllm.model_executor.layers.quantization.online.fp8",
                                   "_fp8_channel_scale")
    quant = _vllm_function("vllm.model_executor.layers.quantization.online.fp8",
                           "_fp8_quant_per_channel")
    weight_amax = _vllm_function("vllm.model_executor.layers.quantization.utils.quant_utils",
                                 "weight_amax")
    w = _weights(shape, dtype, seed=sum(shape))
    t = _torch(w)
    scale = channel_scale(weight_amax(t, dim=-1, keepdim=True))
    codes = quant(t, scale)
    ours_codes, ours_scale = pf.fp8_quantize_weight(w)
    np.testing.assert_array_equal(ours_scale, scale.reshape(-1).numpy())
    np.testing.assert_array_equal(ours_codes, _bits(codes))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES + [(2, 5)])
def test_fp8_activations_equal_vllm_quantfp8(shape, dtype):
    quant_fp8 = _vllm_function("vllm.model_executor.layers.quantization.input_quant_fp8",
                               "QuantFP8")
    group_shape = _vllm_function("vllm.model_executor.layers.quantization.utils.quant_utils",
                                 "GroupShape")
    from vllm.config import VllmConfig, set_current_vllm_config

    x = _weights(shape, dtype, seed=7 * sum(shape))
    with set_current_vllm_config(VllmConfig()):  # a CustomOp reads the compilation config
        quantizer = quant_fp8(static=False, group_shape=group_shape.PER_TOKEN)
    codes, scale = quantizer.forward_native(_torch(x))
    ours_codes, ours_scale = pf.fp8_quantize_activations(x, reciprocal=True)
    np.testing.assert_array_equal(ours_scale, scale.reshape(-1).numpy())
    np.testing.assert_array_equal(ours_codes, _bits(codes))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_nvfp4_equals_vllm(shape, dtype):
    quantize = _vllm_function("vllm.model_executor.layers.quantization.online.lm_head",
                              "_quantize_nvfp4")
    w = _weights(shape, dtype, seed=3 * sum(shape))
    packed, scales, global_scale = quantize(_torch(w))
    ours_packed, ours_scales, ours_global = pf.nvfp4_quantize(w)
    assert np.float32(ours_global) == np.float32(global_scale.item())
    np.testing.assert_array_equal(ours_scales, _bits(scales))
    np.testing.assert_array_equal(ours_packed, packed.numpy())


def test_nvfp4_dequantize_equals_vllm_emulation():
    """vLLM's own NVFP4 dequantization of the same codes (its emulation path)."""
    import torch

    dequantize = _vllm_function(
        "vllm.model_executor.layers.quantization.utils.nvfp4_emulation_utils",
        "dequantize_to_dtype")
    w = _weights((9, 64), "bfloat16", seed=5)
    packed, scales, global_scale = pf.nvfp4_quantize(w)
    theirs = dequantize(torch.from_numpy(packed), torch.from_numpy(scales),
                        torch.tensor(global_scale), torch.float32, 16, swizzle=False)
    np.testing.assert_array_equal(pf.nvfp4_dequantize(packed, scales, global_scale),
                                  theirs.numpy())
