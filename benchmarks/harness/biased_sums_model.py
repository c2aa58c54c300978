#!/usr/bin/env python3
"""A NumPy model of what biased codes cost the fp32 sums of mma.sync (no GPU needed).

    python benchmarks/harness/biased_sums_model.py [--k 1024] [--n 64] [--m 8]

The stream kernels dequantize a code c = q + 8 to the bf16 value 128 + c and subtract 136 with a
bf16x2 FMA, so the tensor core sums q x. Without that FMA the A fragments are q + offset and the
kernel starts each group's sum at -offset * sum(x) (variants.def, streamsplitk2s3*b: offset 24,
the nibble in mantissa bits 3-6 under 16; offset 136 would need no shift for the first pair). The
fp32 sums then run over larger terms, and their error grows with offset * sum |x| instead of with
sum |q x|. This models each mma as the exact sum of its 16 products and its C operand, each term
truncated to 23 bits below the largest one's exponent and the result rounded toward zero (the
alignment that published measurements of NVIDIA's tensor cores describe), two chains of 8 mmas a
128-column group as the kernel runs them, the group's sum times its scale added in fp32, and prints
the largest error over docs/FORMAT.md's accumulation term 2e-6 sum |x| |w| for offsets 0 (the
library), 24 and 136, on activations without and with a mean, codes of any value and of -1 .. 1.
A model, not a measurement: benchmarks/harness/variant_error.py measures the kernels on a GPU.
"""

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_kernels import bf16_bits_to_f32, f32_to_bf16_rne_bits  # noqa: E402


def round_toward_zero_f32(v):
    f = v.astype(np.float32).astype(np.float64)
    over = np.abs(f) > np.abs(v)
    f[over] = np.nextafter(f[over].astype(np.float32), np.float32(0)).astype(np.float64)
    return f


def mma(c, products):
    """c [...] (fp32 values) + the sum of products [..., 16], as modelled above."""
    terms = np.concatenate([c[..., None], products], axis=-1)
    biggest = np.max(np.abs(terms), axis=-1, keepdims=True)
    exp = np.floor(np.log2(np.where(biggest > 0, biggest, 1.0)))
    unit = 2.0 ** (exp - 23)
    return round_toward_zero_f32((np.trunc(terms / unit) * unit).sum(-1))


def bf16(a):
    """float64 of a's values rounded to bf16 (nearest, ties to even)."""
    return bf16_bits_to_f32(f32_to_bf16_rne_bits(a)).astype(np.float64)


def pairwise_f32(v):
    v = v.astype(np.float32)
    while v.shape[-1] > 1:
        v = (v[..., 0::2] + v[..., 1::2]).astype(np.float32)
    return v[..., 0].astype(np.float64)


def apply_model(x, q, s, offset):
    """x [M, K], q [N, K] (-8 .. 7), s [N, K / 128]: the model's y [N, M]."""
    n, k = q.shape
    y = np.zeros((n, x.shape[0]))
    for g in range(k // 128):
        cols = slice(128 * g, 128 * g + 128)
        xg, codes = x[:, cols], q[:, cols] + offset
        start = -offset * pairwise_f32(xg) if offset else np.zeros(x.shape[0])
        chain = [np.broadcast_to(start, (n, x.shape[0])).copy(), np.zeros((n, x.shape[0]))]
        for i in range(8):  # the low and the high k8 of each k16 in their own chains
            p = codes[:, None, 16 * i:16 * i + 16] * xg[None, :, 16 * i:16 * i + 16]
            zeros = np.zeros_like(p[..., :8])
            chain[0] = mma(chain[0], np.concatenate([p[..., :8], zeros], -1))
            chain[1] = mma(chain[1], np.concatenate([p[..., 8:], zeros], -1))
        group_sum = (chain[0] + chain[1]).astype(np.float32).astype(np.float64)
        y = (y + s[:, g:g + 1] * group_sum).astype(np.float32).astype(np.float64)
    return y


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--k", type=int, default=1024)
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--m", type=int, default=8)
    args = ap.parse_args()
    rng = np.random.default_rng(1)
    k, n, m = args.k, args.n, args.m
    print(f"largest error / (2e-6 sum|x||w|), k = {k}, {n} rows, {m} tokens")
    print(f"{'activations':>16} {'codes':>8} {'offset 0':>9} {'24':>9} {'136':>9}")
    for x_kind in ("outlier token", "all positive", "normal + 3"):
        x = rng.standard_normal((m, k))
        if x_kind == "outlier token":
            x[m // 2, : k // 3] *= 50
        elif x_kind == "all positive":
            x = np.abs(x)
        else:
            x = x + 3.0
        x = bf16(x)
        for q_kind in ("any", "-1..1"):
            q = rng.integers(-8, 8, (n, k)) if q_kind == "any" else rng.integers(-1, 2, (n, k))
            s = bf16(rng.uniform(0.001, 0.01, (n, k // 128)))
            w = q * np.repeat(s, 128, 1)
            ref = w @ x.T
            term = 2e-6 * (np.abs(w) @ np.abs(x).T)
            cells = [np.max(np.abs(apply_model(x, q, s, off) - ref) / term) for off in (0, 24, 136)]
            print(f"{x_kind:>16} {q_kind:>8} " + " ".join(f"{c:>9.3f}" for c in cells))


if __name__ == "__main__":
    main()
