"""radiance: the lm_head of a language model as int4 (W4A16), 4x lighter and close to free.

The format (docs/FORMAT.md): symmetric int4 with one bf16 scale per group of ``group_size`` input
columns, the clip ratio of each group chosen by least squared error ("mse") or fixed at 1
("rtn"); nibbles ``q + 8`` packed eight to an int32 word in the order 0,2,4,6,1,3,5,7.

Every function takes NumPy arrays (bf16 as ``ml_dtypes.bfloat16``) and returns NumPy arrays.
torch tensors are taken too and give torch tensors back: on the GPU the work is launched on the
current stream into outputs allocated by torch; on the CPU the C kernels read the tensors in
place through DLPack. ``import radiance`` needs only NumPy and ml_dtypes.
"""

import math

import ml_dtypes
import numpy as np

from . import _C
from . import _build_info
from . import _torch_bridge as _bridge
from .format import CLIP_MODES, GROUP_SIZES, NIBBLE_SHIFTS  # noqa: F401  (radiance.NIBBLE_SHIFTS)

_build_info.warn_if_gpu_kernels_missing(_C.gpu_backend())

__version__ = "0.1.0"
__all__ = [
    "quantize_rows",
    "pack_shuffle",
    "unpack_shuffle",
    "dequantize",
    "apply",
    "gpu_backend",
    "gpu_device_count",
    "bfloat16",
    "GROUP_SIZES",
    "CLIP_MODES",
]

bfloat16 = ml_dtypes.bfloat16


def gpu_backend():
    """'cuda', 'rocm' or 'none': the GPU kernels this installation was built with."""
    return _C.gpu_backend()


def gpu_device_count():
    """Number of GPUs the built backend sees (0 without a driver or a GPU)."""
    return _C.gpu_device_count()


def quantize_rows(w, group_size=128, clip="mse", *, activation_sq=None, packed_out=None,
                  scales_out=None):
    """Quantize the rows of ``w`` [N, K] to int4.

    Returns ``(packed, scales)``: int32 [N, K/8] words and bf16 [N, K/group_size] scales.
    ``w`` is bf16, fp16 or fp32; ``K`` must be a multiple of ``group_size`` (32, 64, 128, 256).
    ``clip="mse"`` tries the clip ratios 1.0, 0.95, 0.9, 0.85, 0.8 per group and keeps the one
    with the least squared error; ``"rtn"`` rounds to nearest with ratio 1.0. ``clip="act"``
    tries the same ratios but weighs the squared error of column k by ``activation_sq[k]``, the
    mean of x[k]^2 over calibration hidden states (a float32 [K] array, or anything NumPy or
    torch converts to one; a torch tensor on the GPU must be on ``w``'s device and is copied to
    the host, 4 bytes per column). Non-finite weights raise ValueError naming the first bad row.
    CPU and GPU results are bit-identical.
    """
    if _bridge.tensor(w) is not None:
        return _bridge.quantize_rows(w, group_size, clip, activation_sq, packed_out, scales_out,
                                     host_float32=_host_float32)
    outputs = (_bridge.as_output(packed_out, "packed_out"),
               _bridge.as_output(scales_out, "scales_out"))
    result = _C.quantize_rows(w, group_size, clip, activation_sq=_host_float32(activation_sq),
                              packed_out=packed_out, scales_out=scales_out)
    _bridge.written(*outputs)
    return result


def _host_float32(activation_sq, device=None):
    """activation_sq as float32 in host memory (None stays None); `device` is w's torch device.

    The C core takes a float32 host array: it validates the K entries and turns them into the
    act error weights on the host for the CPU and GPU paths alike (docs/FORMAT.md).
    """
    if activation_sq is None:
        return None
    t = _bridge.tensor(activation_sq)
    if t is not None:
        return _bridge.activation_sq_on_host(t, device)
    if isinstance(activation_sq, np.ndarray) and activation_sq.dtype == np.float32:
        return activation_sq
    try:
        a = np.asarray(activation_sq)
    except Exception as error:  # noqa: BLE001 - any failure to convert is the caller's type
        raise TypeError(
            f"activation_sq must be a float32 [K] array, got {type(activation_sq).__name__}"
        ) from error
    if a.dtype.kind not in "fiu" and a.dtype != bfloat16:
        raise TypeError(f"activation_sq must be real numbers (float32 [K]), got {a.dtype}")
    with np.errstate(over="ignore"):  # beyond float32 becomes inf, which the C core names
        return a.astype(np.float32)


def pack_shuffle(nibbles):
    """uint8 nibbles [N, K] (each 0..15, i.e. q + 8) -> int32 words [N, K/8]."""
    t = _bridge.tensor(nibbles)
    return _C.pack_shuffle(nibbles) if t is None else _bridge.pack_shuffle(t)


def unpack_shuffle(words):
    """int32 words [N, K/8] -> uint8 nibbles [N, K] (the inverse of pack_shuffle)."""
    t = _bridge.tensor(words)
    return _C.unpack_shuffle(words) if t is None else _bridge.unpack_shuffle(t)


def dequantize(packed, scales, group_size=128):
    """float32 [N, K] weights that packed words and bf16 scales stand for: (nibble - 8) * scale."""
    scales = _bridge.as_input(scales, "scales")
    if _bridge.tensor(packed) is None:
        return _C.dequantize(packed, scales, group_size)
    return _bridge.dequantize(packed, scales, group_size)


def apply(x, packed, scales, bias=None, group_size=128, *, out=None):
    """y = x @ dequantize(packed, scales).T (+ bias): [..., K] -> [..., N] in bf16.

    fp32 accumulation. On the CPU ``x`` and ``bias`` may be bf16, fp16 or fp32; on the GPU they
    must be bf16 and the call is asynchronous on torch's current stream (CUDA-graph safe).
    """
    t = _bridge.tensor(x)
    if t is not None:
        _bridge.check_has_data(t, "x")
    out_written = _bridge.as_output(out, "out")
    packed = _bridge.as_input(packed, "packed")
    scales = _bridge.as_input(scales, "scales")
    bias = _bridge.as_input(bias, "bias")
    if t is not None:
        return _bridge.apply(t, packed, scales, bias, group_size, out, out_written)
    reshape = isinstance(x, np.ndarray) and x.ndim not in (0, 2)
    # [..., K] -> [M, K] with M spelled out: reshape(-1, K) is ambiguous when M or K is 0
    x2 = x.reshape(math.prod(x.shape[:-1]), x.shape[-1]) if reshape else x
    y = _C.apply(x2, packed, scales, bias, group_size, out=out)
    _bridge.written(out_written)
    return y.reshape(*x.shape[:-1], y.shape[-1]) if x2 is not x else y
