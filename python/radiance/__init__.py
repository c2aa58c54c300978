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
import sys

import ml_dtypes
import numpy as np

from . import _C
from .format import CLIP_MODES, GROUP_SIZES, NIBBLE_SHIFTS

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


def _torch_tensor(obj):
    """obj if it is a torch tensor (without importing torch), else None."""
    torch = sys.modules.get("torch")
    return obj if torch is not None and isinstance(obj, torch.Tensor) else None


def _check_has_data(t, name):
    if t.device.type == "meta":
        raise ValueError(
            f"{name} is a meta tensor (shape only, no data); radiance computes on real memory "
            f"(torch.ops.radiance.* infer shapes on meta tensors)"
        )


def _torch_input(obj, name):
    """obj as radiance._C reads it: a torch tensor detached, contiguous, with its negative and
    conjugate bits applied (DLPack carries neither, so the values would be read with the wrong
    sign); anything else unchanged."""
    t = _torch_tensor(obj)
    if t is None:
        return obj
    _check_has_data(t, name)
    t = t.detach()
    if t.is_neg() or t.is_conj():
        t = t.resolve_neg().resolve_conj()
    return t.contiguous()


def _torch_output(obj, name):
    """obj if it is a torch tensor radiance may write in place, else None; raises where torch
    itself would refuse the write (or where it would be silently wrong)."""
    t = _torch_tensor(obj)
    if t is None:
        return None
    _check_has_data(t, name)
    if t.is_neg() or t.is_conj():
        raise ValueError(
            f"{name} has torch's negative or conjugate bit set; it is written in place, so it "
            f"must be a plain tensor (call .resolve_neg() / .resolve_conj() first)"
        )
    import torch

    if t.requires_grad and torch.is_grad_enabled():
        raise ValueError(
            f"{name} requires grad; radiance writes it in place, which autograd cannot record: "
            f"pass a tensor that does not require grad, or call under torch.no_grad()"
        )
    return t


def _written(*tensors):
    """Bumps the version counter of torch tensors written through DLPack, as torch's in-place
    ops do, so that autograd and torch.compile see the change."""
    for t in tensors:
        if t is not None:
            sys.modules["torch"].autograd.graph.increment_version(t)


def _dim(obj):
    """Dimensions of a NumPy array or a tensor; -1 for anything else."""
    ndim = getattr(obj, "ndim", None)
    return ndim if isinstance(ndim, int) else -1


def _stream_of(tensor):
    """The stream to hand to _C for tensor: None where _C finds torch's current stream itself
    (the tensor's type has the DLPack C exchange API, torch >= 2.10) or on the CPU, else the
    handle of torch's current stream on tensor's device."""
    if tensor.device.type != "cuda" or hasattr(type(tensor), "__dlpack_c_exchange_api__"):
        return None
    import torch

    return torch.cuda.current_stream(tensor.device).cuda_stream


def _valid_head_shape(w, group_size):
    return (
        w.dim() == 2
        and isinstance(group_size, int)
        and group_size in GROUP_SIZES
        and w.shape[1] > 0
        and w.shape[1] % group_size == 0
    )


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
    written = (_torch_output(packed_out, "packed_out"), _torch_output(scales_out, "scales_out"))
    t = _torch_tensor(w)
    if t is None:
        result = _C.quantize_rows(w, group_size, clip, activation_sq=_host_float32(activation_sq),
                                  packed_out=packed_out, scales_out=scales_out)
        _written(*written)
        return result
    import torch

    t = _torch_input(t, "w")
    activation_sq = _host_float32(activation_sq, t.device)
    if not _valid_head_shape(t, group_size):
        # raises the precise error
        return _C.quantize_rows(t, group_size, clip, activation_sq=activation_sq)
    rows, cols = t.shape
    if packed_out is None:
        packed_out = torch.empty((rows, cols // 8), dtype=torch.int32, device=t.device)
    if scales_out is None:
        scales_out = torch.empty((rows, cols // group_size), dtype=torch.bfloat16, device=t.device)
    result = _C.quantize_rows(
        t, group_size, clip, activation_sq=activation_sq, packed_out=packed_out,
        scales_out=scales_out, stream=_stream_of(t)
    )
    _written(*written)
    return result


def _host_float32(activation_sq, device=None):
    """activation_sq as float32 in host memory (None stays None); `device` is w's torch device.

    The C core takes a float32 host array: it validates the K entries and turns them into the
    act error weights on the host for the CPU and GPU paths alike (docs/FORMAT.md).
    """
    if activation_sq is None:
        return None
    t = _torch_tensor(activation_sq)
    if t is not None:
        import torch

        if t.dtype.is_complex or t.dtype == torch.bool:
            raise TypeError(f"activation_sq must be real numbers (float32 [K]), got {t.dtype}")
        if t.device.type != "cpu" and device is not None and t.device != device:
            raise ValueError(
                f"activation_sq is on {t.device} but w is on {device}; put them on one device "
                f"(or pass activation_sq as a CPU tensor or NumPy array)"
            )
        if t.device.type != "cpu" and device is None:
            raise ValueError(
                f"activation_sq is on {t.device} but w is a NumPy array; pass a CPU tensor or a "
                f"NumPy array"
            )
        return t.detach().to(device="cpu", dtype=torch.float32).contiguous()
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
    t = _torch_tensor(nibbles)
    if t is None:
        return _C.pack_shuffle(nibbles)
    if t.device.type == "cpu":
        import torch

        return torch.from_numpy(_C.pack_shuffle(_torch_input(t, "nibbles")))
    _check_has_data(t, "nibbles")
    return _pack_shuffle_torch(t.resolve_neg())


def unpack_shuffle(words):
    """int32 words [N, K/8] -> uint8 nibbles [N, K] (the inverse of pack_shuffle)."""
    t = _torch_tensor(words)
    if t is None:
        return _C.unpack_shuffle(words)
    if t.device.type == "cpu":
        import torch

        return torch.from_numpy(_C.unpack_shuffle(_torch_input(t, "words")))
    _check_has_data(t, "words")
    return _unpack_shuffle_torch(t.resolve_neg())


def dequantize(packed, scales, group_size=128):
    """float32 [N, K] weights that packed words and bf16 scales stand for: (nibble - 8) * scale."""
    t = _torch_tensor(packed)
    scales = _torch_input(scales, "scales")
    if t is None:
        return _C.dequantize(packed, scales, group_size)
    import torch

    t = _torch_input(t, "packed")
    if t.device.type == "cpu":
        return torch.from_numpy(_C.dequantize(t, scales, group_size))
    if _torch_tensor(scales) is None or scales.device != t.device:
        raise ValueError(
            f"packed and scales must be on one device: packed is on {t.device}, scales is "
            f"{getattr(scales, 'device', type(scales).__name__)}"
        )
    if group_size not in GROUP_SIZES:
        raise ValueError(f"group_size must be one of 32, 64, 128, 256, got {group_size}")
    q = _unpack_shuffle_torch(t).to(torch.float32) - 8.0
    if scales.dtype != torch.bfloat16 or scales.shape != (q.shape[0], q.shape[1] // group_size):
        raise ValueError(
            f"scales must be bfloat16 of shape {(q.shape[0], q.shape[1] // group_size)}, got "
            f"{scales.dtype} {tuple(scales.shape)}"
        )
    return q * scales.to(torch.float32).repeat_interleave(group_size, dim=1)


def apply(x, packed, scales, bias=None, group_size=128, *, out=None):
    """y = x @ dequantize(packed, scales).T (+ bias): [..., K] -> [..., N] in bf16.

    fp32 accumulation. On the CPU ``x`` and ``bias`` may be bf16, fp16 or fp32; on the GPU they
    must be bf16 and the call is asynchronous on torch's current stream (CUDA-graph safe).
    """
    t = _torch_tensor(x)
    if t is not None:
        _check_has_data(t, "x")
    written = _torch_output(out, "out")
    packed = _torch_input(packed, "packed")
    scales = _torch_input(scales, "scales")
    bias = _torch_input(bias, "bias")
    if t is None:
        reshape = isinstance(x, np.ndarray) and x.ndim not in (0, 2)
        # [..., K] -> [M, K] with M spelled out: reshape(-1, K) is ambiguous when M or K is 0
        x2 = x.reshape(math.prod(x.shape[:-1]), x.shape[-1]) if reshape else x
        y = _C.apply(x2, packed, scales, bias, group_size, out=out)
        _written(written)
        return y.reshape(*x.shape[:-1], y.shape[-1]) if x2 is not x else y
    import torch

    lead = t.shape[:-1]
    x2 = _torch_input(t, "x")
    if x2.dim() not in (0, 2):
        x2 = x2.reshape(math.prod(lead), t.shape[-1])
    if out is None and x2.dim() == 2 and _dim(packed) == 2:
        out = torch.empty((x2.shape[0], packed.shape[0]), dtype=torch.bfloat16, device=t.device)
    y = _C.apply(x2, packed, scales, bias, group_size, out=out, stream=_stream_of(t))
    _written(written)
    return y.reshape(*lead, y.shape[-1]) if t.dim() not in (0, 2) else y


# -- GPU pack/unpack in torch: not on any hot path, so plain tensor ops do. ---------------------


def _pack_shuffle_torch(nibbles):
    import torch

    if nibbles.dtype != torch.uint8 or nibbles.dim() != 2 or nibbles.shape[1] % 8:
        raise ValueError(
            f"nibbles must be uint8 [N, K] with K a multiple of 8, got {nibbles.dtype} "
            f"{tuple(nibbles.shape)}"
        )
    if nibbles.numel() and int(nibbles.max()) > 15:
        raise ValueError("nibbles must be in 0..15 (q + 8)")
    shifts = torch.tensor(NIBBLE_SHIFTS, dtype=torch.int64, device=nibbles.device)
    n, k = nibbles.shape
    words = (nibbles.view(n, k // 8, 8).to(torch.int64) << shifts).sum(-1)
    words = torch.where(words >= 2**31, words - 2**32, words)
    return words.to(torch.int32)


def _unpack_shuffle_torch(words):
    import torch

    if words.dtype != torch.int32 or words.dim() != 2:
        raise ValueError(f"words must be int32 [N, K/8], got {words.dtype} {tuple(words.shape)}")
    shifts = torch.tensor(NIBBLE_SHIFTS, dtype=torch.int64, device=words.device)
    n, kw = words.shape
    wide = words.to(torch.int64) & 0xFFFFFFFF
    return ((wide.unsqueeze(-1) >> shifts) & 15).to(torch.uint8).reshape(n, kw * 8)
