"""One process of tests/test_gpu.py's test_apply_gpu_split_k_under_load_matches_float64: split k of
16 tokens, groups of 256, k = 1024 (apply_stream_split_k_kernel, the kernel where a cluster
pair's hand-over of a unit's sums once raced) on fresh random heads of 68001-71999 rows for a
given number of seconds, while other processes do the same on the GPU; a script, so that the
test can start several at once.

    PYTHONPATH=python:tests python tests/split_k_load_worker.py SECONDS

Prints one line per call: the seed and the worst error as a multiple of the float64 bound
(test_gpu.excess_over_bound; above 1: wrong).
"""

import sys
import time

import numpy as np
import torch

import radiance
from test_gpu import excess_over_bound, random_call
from torch_helpers import fresh_rng, to_numpy, to_torch


def main():
    seconds = float(sys.argv[1])
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        rng, seed = fresh_rng()
        n = int(rng.integers(68000, 72000)) | 1
        x, packed, scales, bias = random_call(rng, 16, n, 1024, 256, False)
        out = torch.full((16, n), float("nan"), dtype=torch.bfloat16, device="cuda")
        radiance.apply(to_torch(x), to_torch(packed), to_torch(scales), None, 256, out=out)
        torch.cuda.synchronize()
        got = to_numpy(out).astype(np.float64)
        worst = np.max(excess_over_bound(got, x, packed, scales, 256, bias)) if np.isfinite(got).all() else np.inf
        print(seed, float(worst), flush=True)


if __name__ == "__main__":
    main()
