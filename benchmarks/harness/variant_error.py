#!/usr/bin/env python3
"""The float64 error of apply variants side by side, on operands chosen to stress the fp32 sums.

    python benchmarks/harness/variant_error.py --lib build/B/lib.so \\
        [--variants auto,streamsplitk2s3sr] [--shapes 4099x1024,4099x5376] [--m 9,16]

gpu_kernels.py's check holds every variant to 2^-8 |y| + 2^-14 sum |x| |w| on normal activations.
This asks how close each comes to docs/FORMAT.md's tighter bound, 2^-8 |y| + 2e-6 sum |x| |w|
(w = q s exactly), and to its accumulation term alone, where the activations have a mean (all
positive, or normal + 3) and the codes are small (q in -1 .. 1, so |w| is small against the
activations' sums), besides the check's normal activations with an outlier token and uniform
codes. The biased codes (splitktailwin: the library's split k at k = 5376 until run 90) sum
(q + 24) x in fp32 and subtract 24 sum x, so their error grows with 24 sum |x| |s| rather than with
sum |x| |w|: the table prints both ratios.
Groups of 128. Every output is poisoned with NaN first; a variant that does not apply is skipped.
"""

import argparse
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from gpu_kernels import (SHIFTS, VARIANTS, Lib, NotApplicable, bf16_bits_to_f32,  # noqa: E402
                         f32_to_bf16_rne_bits, unpack_q)

GROUP = 128


def operands(rng, n, k, m, x_kind, q_kind):
    if q_kind == "uniform":
        codes = rng.integers(0, 16, (n, k))
    else:  # small: q in -1 .. 1
        codes = rng.integers(7, 10, (n, k))
    shifts = np.array(SHIFTS, np.uint64)  # element e of a word at bit SHIFTS[e]
    words = (codes.reshape(n, k // 8, 8).astype(np.uint64) << shifts).sum(-1).astype(np.uint32).view(np.int32)
    s32 = (rng.random((n, k // GROUP)).astype(np.float32) * 0.02 + 0.001) * np.where(
        rng.random((n, k // GROUP)) < 0.1, -1, 1).astype(np.float32)
    sbits = f32_to_bf16_rne_bits(s32)
    x = rng.standard_normal((m, k)).astype(np.float32)
    if x_kind == "outlier":
        x[m // 2, : k // 3] *= 50
    elif x_kind == "positive":
        x = np.abs(x)
    else:  # mean: normal + 3
        x = x + 3.0
    xb = f32_to_bf16_rne_bits(x)
    return words, sbits, xb


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--variants", default="auto,streamsplitk2s3sr,streamsplitk2s3")
    ap.add_argument("--shapes", default="4099x1024,4099x4096,2053x5120,2053x5376")
    ap.add_argument("--m", default="9,16")
    args = ap.parse_args()
    L = Lib(args.lib)
    stream = torch.cuda.current_stream().cuda_stream
    rng = np.random.default_rng(20261205)
    names = [v for v in args.variants.split(",") if v]
    unknown = [v for v in names if v not in VARIANTS]
    if unknown:
        sys.exit(f"unknown variants: {unknown}")
    print(f"# {torch.cuda.get_device_name()}, groups of {GROUP}; per cell: max err / (2e-6 sum|x||w|), "
          "max err / (2^-8 |y| + 2e-6 sum|x||w|), max err / (2^-8 |y| + 2e-6 sum|x|(|w| + 24 |s|))")
    failed = False
    for shape in args.shapes.split(","):
        n, k = (int(v) for v in shape.split("x"))
        for m in (int(v) for v in args.m.split(",")):
            for x_kind in ("outlier", "positive", "mean"):
                for q_kind in ("uniform", "small"):
                    words, sbits, xb = operands(rng, n, k, m, x_kind, q_kind)
                    q = unpack_q(words).astype(np.float64)
                    s = bf16_bits_to_f32(sbits).astype(np.float64)
                    w = (q.reshape(n, k // GROUP, GROUP) * s[..., None]).reshape(n, k)
                    x64 = bf16_bits_to_f32(xb).astype(np.float64)
                    ref = x64 @ w.T
                    acc_term = 2e-6 * (np.abs(x64) @ np.abs(w).T)
                    biased_term = 2e-6 * (np.abs(x64) @ (np.abs(w) + 24 * np.repeat(np.abs(s), GROUP, 1)).T)
                    pk = torch.from_numpy(words).cuda()
                    sc = torch.from_numpy(sbits.view(np.int16)).cuda()
                    xt = torch.from_numpy(xb.view(np.int16)).cuda()
                    cells = []
                    for name in names:
                        out = torch.full((m, n), -1, dtype=torch.int16, device="cuda")
                        try:
                            L.apply(xt, pk, sc, None, GROUP, out, stream, VARIANTS[name])
                        except NotApplicable:
                            cells.append(f"{name}: n/a")
                            continue
                        torch.cuda.synchronize()
                        got = bf16_bits_to_f32(out.cpu().numpy().view(np.uint16)).astype(np.float64)
                        if not np.isfinite(got).all():
                            cells.append(f"{name}: NOT WRITTEN")
                            failed = True
                            continue
                        err = np.abs(got - ref)
                        r_acc = np.max(err / acc_term)
                        r_doc = np.max(err / (2.0 ** -8 * np.abs(ref) + acc_term))
                        r_bias = np.max(err / (2.0 ** -8 * np.abs(ref) + biased_term))
                        cells.append(f"{name}: {r_acc:.3g} / {r_doc:.3g} / {r_bias:.3g}")
                        failed |= r_bias > 1
                    print(f"{n}x{k} m={m} x={x_kind:8s} q={q_kind:7s} | " + " | ".join(cells), flush=True)
    print("variant_error:", "FAILED (over the last bound, or not written)" if failed else "ok")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
