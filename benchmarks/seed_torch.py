"""The seed algorithm in plain torch: the peer radiance's quantizer is measured against.

Every clip ratio runs over the whole tensor with fp32 transients, as a straightforward torch
implementation of the format would; benchmarks/cpu.py, gpu.py and gpu_kernels.py time it.
"""

import torch

RATIOS = {"mse": (1.0, 0.95, 0.9, 0.85, 0.8), "rtn": (1.0,)}
SHIFTS = (0, 16, 4, 20, 8, 24, 12, 28)


def seed_quantize(w, group_size=128, clip="mse"):
    """q (float, -8..7) [N, K/G, G] and s (float, bf16 values) [N, K/G, 1] of w [N, K]."""
    n, k = w.shape
    g = w.float().view(n, k // group_size, group_size)
    amax = g.abs().amax(-1, keepdim=True)
    best_err = best_q = best_s = None
    for r in RATIOS[clip]:
        s = torch.clamp(amax * (r / 7), min=1e-8).to(torch.bfloat16).float()
        q = torch.clamp(torch.round(g / s), -8, 7)
        err = ((q * s - g) ** 2).sum(-1, keepdim=True)
        if best_err is None:
            best_err, best_q, best_s = err, q, s
        else:
            better = err < best_err
            best_err = torch.where(better, err, best_err)
            best_q = torch.where(better, q, best_q)
            best_s = torch.where(better, s, best_s)
    return best_q, best_s


def seed_pack(q, s):
    """Packed int32 words [N, K/8] and bf16 scales [N, K/G] of seed_quantize's result."""
    n = q.shape[0]
    nibbles = (q + 8).to(torch.int64).view(n, -1, 8)
    words = (nibbles << torch.tensor(SHIFTS, device=q.device)).sum(-1)
    words = torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)
    return words, s.view(n, -1).to(torch.bfloat16)
