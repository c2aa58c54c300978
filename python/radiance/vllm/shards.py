"""Quantizing a head's shard into int4 buffers in place, and recognising a float head; torch only.

The vLLM-facing modules (method, reload, copies) share these; nothing here imports vLLM.
"""

import torch

import radiance

from .settings import ENV_ENABLE

# Bytes of float weight quantized (or fingerprinted) per step: bounds the temporary memory of the
# GPU quantizer.
CHUNK_BYTES = 64 << 20

# Odd 64-bit multipliers for fingerprint(): fixed, so a head fingerprinted at load and a drafter's
# head fingerprinted later compare. Built once per (columns, device).
_MULTIPLIERS = {}


def is_packed(layer):
    """Whether layer.weight already holds the int4 words (second pass, reload, a copy)."""
    return getattr(layer, "weight_scale", None) is not None and layer.weight.dtype == torch.int8


def check_gpu_build(device):
    """Refuse a head on a GPU that this build of radiance has no kernels for."""
    if device.type == "cpu":
        return
    backend = radiance.gpu_backend()
    wanted = "rocm" if getattr(torch.version, "hip", None) else "cuda"
    if device.type != "cuda" or backend != wanted:
        raise RuntimeError(f"radiance: the lm_head is on {device} ({wanted} torch), but radiance "
                           f"was built with GPU backend {backend!r}; reinstall radiance where "
                           f"{'hipcc' if wanted == 'rocm' else 'nvcc'} is found (RADIANCE_GPU="
                           f"{wanted}) or unset {ENV_ENABLE}")


def _row_step(cols, element_size):
    return max(1, CHUNK_BYTES // max(1, cols * element_size))


def quantize_into(source, words, scales, group_size, clip, activation_sq=None):
    """Quantize source [n, K] into words [N, K/8] and scales [N, K/G] in place, in row chunks on
    words' device; rows n..N (vocab padding, absent from source) quantize as zeros. A source on
    words' device is read where it is: no float copy of the head is made. activation_sq: the
    float32 [K] statistics of clip "act" (None otherwise), the same for every chunk."""
    rows, cols = words.shape[0], words.shape[1] * 8
    step = _row_step(cols, source.element_size())
    for start in range(0, rows, step):
        stop = min(rows, start + step)
        have = max(0, min(stop, source.shape[0]) - start)
        piece = source[start:start + have].to(words.device, non_blocking=False)
        if have < stop - start:
            padding = torch.zeros((stop - start - have, cols), dtype=source.dtype,
                                  device=words.device)
            piece = torch.cat([piece, padding]) if have else padding
        radiance.quantize_rows(piece.contiguous(), group_size=group_size, clip=clip,
                               activation_sq=activation_sq, packed_out=words[start:stop],
                               scales_out=scales[start:stop])


def _multipliers(cols, device):
    key = (cols, str(device))
    if key not in _MULTIPLIERS:
        # A 64-bit LCG, odd outputs: every column weighs differently, no bit pattern cancels.
        values, state = [], 0x9E3779B97F4A7C15
        for _ in range(cols):
            state = (state * 6364136223846793005 + 1442695040888963407) % (1 << 64)
            values.append((state | 1) - (1 << 64) if state | 1 >= 1 << 63 else state | 1)
        _MULTIPLIERS[key] = torch.tensor(values, dtype=torch.int64, device=device)
    return _MULTIPLIERS[key]


def fingerprint(weight):
    """int64 [N]: per row, the bit patterns of the row weighted by fixed odd 64-bit multipliers
    and summed modulo 2^64. Two heads whose rows all fingerprint equal are, short of a 2^-64
    coincidence per row, bit-identical: a drafter's float head is compared with a target head
    that is int4 by then (vLLM's torch.equal cannot see through the swap)."""
    rows, cols = weight.shape
    bits = {2: torch.int16, 4: torch.int32}.get(weight.element_size())
    if bits is None:
        raise TypeError(f"radiance: cannot fingerprint a {weight.dtype} head")
    multipliers = _multipliers(cols, weight.device)
    out = torch.empty(rows, dtype=torch.int64, device=weight.device)
    step = max(1, _row_step(cols, 8))
    for start in range(0, rows, step):
        piece = weight[start:start + step].view(bits).to(torch.int64)
        out[start:start + step] = (piece * multipliers).sum(dim=1)
    return out


def megabytes(nbytes):
    return nbytes / 1e6
