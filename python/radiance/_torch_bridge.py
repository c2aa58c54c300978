"""How the public functions of radiance take torch tensors (private; radiance/__init__.py is the API).

radiance._C reads tensors through DLPack, which carries neither autograd's view of a write nor
torch's negative/conjugate bits, and on the GPU _C writes only into outputs the caller provides.
This module closes those gaps: it hands _C plain contiguous tensors, allocates GPU outputs with
torch (so the caching allocator and graph capture keep working), names torch's current stream,
and bumps the version counter of every tensor written in place.

torch is never imported here at module level: a function that receives a tensor finds torch
already imported (the caller made the tensor with it), so ``import radiance`` needs only NumPy.
"""

import math
import sys

from . import _C
from .format import GROUP_SIZES, NIBBLE_SHIFTS


def tensor(obj):
    """obj if it is a torch tensor (without importing torch), else None."""
    torch = sys.modules.get("torch")
    return obj if torch is not None and isinstance(obj, torch.Tensor) else None


def check_has_data(t, name):
    if t.device.type == "meta":
        raise ValueError(
            f"{name} is a meta tensor (shape only, no data); radiance computes on real memory "
            f"(torch.ops.radiance.* infer shapes on meta tensors)"
        )


def as_input(obj, name):
    """obj as radiance._C reads it: a torch tensor detached, contiguous, with its negative and
    conjugate bits applied (DLPack carries neither, so the values would be read with the wrong
    sign); anything else unchanged."""
    t = tensor(obj)
    if t is None:
        return obj
    check_has_data(t, name)
    t = t.detach()
    if t.is_neg() or t.is_conj():
        t = t.resolve_neg().resolve_conj()
    return t.contiguous()


def as_output(obj, name):
    """obj if it is a torch tensor radiance may write in place, else None; raises where torch
    itself would refuse the write (or where it would be silently wrong)."""
    t = tensor(obj)
    if t is None:
        return None
    check_has_data(t, name)
    if t.is_neg() or t.is_conj():
        raise ValueError(
            f"{name} has torch's negative or conjugate bit set; it is written in place, so it "
            f"must be a plain tensor (call .resolve_neg() / .resolve_conj() first)"
        )
    torch = sys.modules["torch"]
    if t.requires_grad and torch.is_grad_enabled():
        raise ValueError(
            f"{name} requires grad; radiance writes it in place, which autograd cannot record: "
            f"pass a tensor that does not require grad, or call under torch.no_grad()"
        )
    return t


def written(*tensors):
    """Bumps the version counter of torch tensors written through DLPack, as torch's in-place
    ops do, so that autograd and torch.compile see the change."""
    for t in tensors:
        if t is not None:
            sys.modules["torch"].autograd.graph.increment_version(t)


def _dim(obj):
    """Dimensions of a NumPy array or a tensor; -1 for anything else."""
    ndim = getattr(obj, "ndim", None)
    return ndim if isinstance(ndim, int) else -1


def _stream_of(t):
    """The stream to hand to _C for t: None where _C finds torch's current stream itself (the
    tensor's type has the DLPack C exchange API, torch >= 2.10) or on the CPU, else the handle of
    torch's current stream on t's device."""
    if t.device.type != "cuda" or hasattr(type(t), "__dlpack_c_exchange_api__"):
        return None
    return sys.modules["torch"].cuda.current_stream(t.device).cuda_stream


def _valid_head_shape(w, group_size):
    return (
        w.dim() == 2
        and isinstance(group_size, int)
        and group_size in GROUP_SIZES
        and w.shape[1] > 0
        and w.shape[1] % group_size == 0
    )


def activation_sq_on_host(t, device):
    """The torch tensor activation_sq as a float32 CPU tensor; `device` is w's torch device, or
    None where w is a NumPy array. The C core takes a host array: it validates the K entries and
    turns them into the act error weights on the host for the CPU and GPU paths alike."""
    torch = sys.modules["torch"]
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


def quantize_rows(w, group_size, clip, activation_sq, packed_out, scales_out, host_float32):
    """radiance.quantize_rows for a torch ``w``; host_float32 turns activation_sq into the host
    float32 array _C takes (torch or not), given w's device."""
    torch = sys.modules["torch"]
    outputs = (as_output(packed_out, "packed_out"), as_output(scales_out, "scales_out"))
    t = as_input(w, "w")
    activation_sq = host_float32(activation_sq, t.device)
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
    written(*outputs)
    return result


def pack_shuffle(t):
    """radiance.pack_shuffle for a torch tensor: on the CPU through _C, on a GPU in torch."""
    torch = sys.modules["torch"]
    if t.device.type == "cpu":
        return torch.from_numpy(_C.pack_shuffle(as_input(t, "nibbles")))
    check_has_data(t, "nibbles")
    return _pack_shuffle_torch(t.resolve_neg())


def unpack_shuffle(t):
    """radiance.unpack_shuffle for a torch tensor: on the CPU through _C, on a GPU in torch."""
    torch = sys.modules["torch"]
    if t.device.type == "cpu":
        return torch.from_numpy(_C.unpack_shuffle(as_input(t, "words")))
    check_has_data(t, "words")
    return _unpack_shuffle_torch(t.resolve_neg())


def dequantize(packed, scales, group_size):
    """radiance.dequantize for a torch ``packed``; ``scales`` already passed through as_input."""
    torch = sys.modules["torch"]
    t = as_input(packed, "packed")
    if t.device.type == "cpu":
        return torch.from_numpy(_C.dequantize(t, scales, group_size))
    if tensor(scales) is None or scales.device != t.device:
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


def apply(x, packed, scales, bias, group_size, out, out_written):
    """radiance.apply for a torch ``x`` (already checked for data); the other inputs already
    passed through as_input, ``out_written`` is as_output(out)."""
    torch = sys.modules["torch"]
    lead = x.shape[:-1]
    x2 = as_input(x, "x")
    if x2.dim() not in (0, 2):
        x2 = x2.reshape(math.prod(lead), x.shape[-1])
    if out is None and x2.dim() == 2 and _dim(packed) == 2:
        out = torch.empty((x2.shape[0], packed.shape[0]), dtype=torch.bfloat16, device=x.device)
    y = _C.apply(x2, packed, scales, bias, group_size, out=out, stream=_stream_of(x))
    written(out_written)
    return y.reshape(*lead, y.shape[-1]) if x.dim() not in (0, 2) else y


# -- GPU pack/unpack in torch: not on any hot path, so plain tensor ops do. ---------------------


def _pack_shuffle_torch(nibbles):
    torch = sys.modules["torch"]
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
    torch = sys.modules["torch"]
    if words.dtype != torch.int32 or words.dim() != 2:
        raise ValueError(f"words must be int32 [N, K/8], got {words.dtype} {tuple(words.shape)}")
    shifts = torch.tensor(NIBBLE_SHIFTS, dtype=torch.int64, device=words.device)
    n, kw = words.shape
    wide = words.to(torch.int64) & 0xFFFFFFFF
    return ((wide.unsqueeze(-1) >> shifts) & 15).to(torch.uint8).reshape(n, kw * 8)
