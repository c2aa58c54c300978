"""torch.ops.radiance: the int4 lm_head GEMM and the quantizer as PyTorch operators.

Importing this module registers

    radiance::apply(Tensor x, Tensor packed, Tensor scales, Tensor? bias=None,
                    int group_size=128) -> Tensor
    radiance::quantize_rows(Tensor w, int group_size=128, str clip="mse",
                            Tensor? activation_sq=None) -> (Tensor, Tensor)

with a CPU and a CUDA kernel (the CUDA key also serves ROCm builds of torch) and a fake kernel for
shape inference, so `torch.compile(fullgraph=True)` traces them and CUDA graphs capture `apply`.

The op is declared with `torch.library.Library` and its kernels are plain Python functions bound to
dispatch keys, not `torch.library.custom_op`: the latter wraps every call in Python layers that
cost tens of microseconds of host time, which the decode step pays once per token. The GPU
kernel launches on torch's current stream and its output comes from torch's caching allocator, so
graph capture and stream semantics follow torch's own ops.

`packed` is int32 [N, K/8] or its int8 view [N, K/2] (how vLLM stores it); both are the same bytes.
`x` and `bias` are rounded to bf16 first on every device, so CPU and GPU compute the same thing.
"""

import torch

import radiance
from radiance import _C
from radiance.format import NIBBLE_OFFSET, NIBBLE_SHIFTS

NAMESPACE = "radiance"
_BYTES_PER_ELEMENT = {torch.int32: 8, torch.int8: 2}  # int4 elements per packed element


def _defined(name):
    try:
        getattr(getattr(torch.ops, NAMESPACE), name)
    except (AttributeError, RuntimeError):
        return False
    return True


def _words(packed):
    """The int32 [N, K/8] view of `packed`."""
    if packed.dtype == torch.int32:
        return packed
    if packed.dtype == torch.int8:
        return packed.view(torch.int32)
    raise TypeError(f"radiance::apply: packed must be int32 [N, K/8] or its int8 view [N, K/2], "
                    f"got {packed.dtype}")


def _bf16(t):
    return t if t is None or t.dtype == torch.bfloat16 else t.to(torch.bfloat16)


# --- GPU kernels ---------------------------------------------------------------------------------

# The raw cudaStream_t/hipStream_t of torch's current stream, as an int: one C call, where
# torch.cuda.current_stream().cuda_stream builds a Python Stream object first.
_current_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def _apply_gpu(x, packed, scales, bias=None, group_size=128):
    if x.dtype != torch.bfloat16:
        x = x.to(torch.bfloat16)
    if bias is not None and bias.dtype != torch.bfloat16:
        bias = bias.to(torch.bfloat16)
    # _C reads the int8 [N, K/2] view itself: no per-call .view(torch.int32) (host time).
    out = torch.empty((x.shape[0], packed.shape[0]), dtype=torch.bfloat16, device=x.device)
    _C.apply(x.contiguous(), packed, scales, bias, group_size, out=out,
             stream=_current_raw_stream(x.device.index))
    return out


def _quantize_rows_gpu(w, group_size=128, clip="mse", activation_sq=None):
    rows, cols = _check_quantize_shape(w, group_size)
    packed = torch.empty((rows, cols // 8), dtype=torch.int32, device=w.device)
    scales = torch.empty((rows, cols // group_size), dtype=torch.bfloat16, device=w.device)
    radiance.quantize_rows(w.contiguous(), group_size=group_size, clip=clip,
                           activation_sq=activation_sq, packed_out=packed, scales_out=scales)
    return packed, scales


# --- CPU kernels ---------------------------------------------------------------------------------

def _apply_cpu(x, packed, scales, bias=None, group_size=128):
    x = _bf16(x).contiguous()
    bias = None if bias is None else _bf16(bias).contiguous()
    packed = _words(packed)
    out = torch.empty((x.shape[0], packed.shape[0]), dtype=torch.bfloat16)
    _C.apply(x, packed.contiguous(), scales.contiguous(), bias, group_size, out=out)
    return out


def _quantize_rows_cpu(w, group_size=128, clip="mse", activation_sq=None):
    rows, cols = _check_quantize_shape(w, group_size)
    packed = torch.empty((rows, cols // 8), dtype=torch.int32)
    scales = torch.empty((rows, cols // group_size), dtype=torch.bfloat16)
    radiance.quantize_rows(w.contiguous(), group_size=group_size, clip=clip,
                           activation_sq=activation_sq, packed_out=packed, scales_out=scales)
    return packed, scales


# --- fake kernels (shapes only) ------------------------------------------------------------------

def _check_quantize_shape(w, group_size):
    torch._check(w.dim() == 2, lambda: f"radiance::quantize_rows: w must be 2-D [N, K], got "
                                       f"{w.dim()}-D")
    rows, cols = w.shape
    torch._check(cols % group_size == 0 and cols % 8 == 0,
                 lambda: f"radiance::quantize_rows: K={cols} must be a multiple of group_size="
                         f"{group_size} and of 8")
    return rows, cols


def _apply_fake(x, packed, scales, bias=None, group_size=128):
    torch._check(x.dim() == 2, lambda: f"radiance::apply: x must be 2-D [M, K], got {x.dim()}-D")
    torch._check(packed.dtype in _BYTES_PER_ELEMENT,
                 lambda: f"radiance::apply: packed must be int32 or int8, got {packed.dtype}")
    torch._check(packed.dim() == 2, lambda: "radiance::apply: packed must be 2-D")
    k = packed.shape[1] * _BYTES_PER_ELEMENT[packed.dtype]
    torch._check(x.shape[1] == k, lambda: f"radiance::apply: x has K={x.shape[1]} columns, the "
                                          f"packed weight holds K={k}")
    torch._check(scales.dim() == 2 and scales.shape[0] == packed.shape[0]
                 and scales.shape[1] * group_size == k,
                 lambda: f"radiance::apply: scales must be [{packed.shape[0]}, {k}/{group_size}]"
                         f", got {list(scales.shape)}")
    return x.new_empty((x.shape[0], packed.shape[0]), dtype=torch.bfloat16)


def _quantize_rows_fake(w, group_size=128, clip="mse", activation_sq=None):
    rows, cols = _check_quantize_shape(w, group_size)
    return (w.new_empty((rows, cols // 8), dtype=torch.int32),
            w.new_empty((rows, cols // group_size), dtype=torch.bfloat16))


# --- registration --------------------------------------------------------------------------------

_SCHEMAS = {
    "apply": "apply(Tensor x, Tensor packed, Tensor scales, Tensor? bias=None, "
             "int group_size=128) -> Tensor",
    "quantize_rows": "quantize_rows(Tensor w, int group_size=128, str clip=\"mse\", "
                     "Tensor? activation_sq=None) -> (Tensor, Tensor)",
}
_KERNELS = {
    "apply": {"CPU": _apply_cpu, "CUDA": _apply_gpu},
    "quantize_rows": {"CPU": _quantize_rows_cpu, "CUDA": _quantize_rows_gpu},
}
_FAKES = {"apply": _apply_fake, "quantize_rows": _quantize_rows_fake}

# The Library objects must live as long as the process: dropping them unregisters the kernels.
# importlib.reload re-runs this file in the same module dict: keep the list the first run made,
# or the old Library would be collected and take the registration with it (torch 2.11 does).
_LIBRARIES = globals().get("_LIBRARIES", [])


def _register():
    if _defined("apply"):  # imported again (importlib.reload): the first registration stays
        return
    lib = torch.library.Library(NAMESPACE, "DEF")
    _LIBRARIES.append(lib)
    for name, schema in _SCHEMAS.items():
        lib.define(schema)
        for key, kernel in _KERNELS[name].items():
            lib.impl(name, kernel, key)
        torch.library.register_fake(f"{NAMESPACE}::{name}", _FAKES[name], lib=lib)


_register()

apply = torch.ops.radiance.apply.default
quantize_rows = torch.ops.radiance.quantize_rows.default


def apply_int4(x, packed, scales, bias=None, group_size=128):
    """radiance::apply, minus the dispatcher where that changes nothing.

    Traced by torch.compile (and on any device but a GPU) it is the op itself; in eager mode on
    a GPU it calls the op's CUDA kernel directly, which saves the dispatcher's boxing of the
    arguments into a Python call (a few microseconds per decode step). Same kernel, same stream,
    same allocator, so CUDA graph capture sees exactly what the op would do.
    """
    if x.is_cuda and not torch.compiler.is_compiling():
        return _apply_gpu(x, packed, scales, bias, group_size)
    return apply(x, packed, scales, bias, group_size)


def embedding_int4(ids, packed, scales, group_size=128, dtype=torch.bfloat16):
    """Rows `ids` of the dequantized head, (nibble - 8) * scale, as `dtype` [..., K].

    For a packed head that is also used as a lookup table; plain torch ops, so any device.
    """
    words = _words(packed)[ids]  # [..., K/8]
    shifts = torch.tensor(NIBBLE_SHIFTS, dtype=torch.int32, device=words.device)
    nibbles = (words.unsqueeze(-1) >> shifts) & 15  # [..., K/8, 8]; int32 >> is arithmetic
    k = words.shape[-1] * 8
    values = (nibbles.reshape(*words.shape[:-1], k // group_size, group_size) - NIBBLE_OFFSET)
    values = values.float()
    values = values * scales[ids].float().unsqueeze(-1)
    return values.reshape(*words.shape[:-1], k).to(dtype)
