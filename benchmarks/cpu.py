"""CPU benchmark: radiance's C kernels beside the same algorithm in NumPy and in torch.

    python benchmarks/cpu.py                      # 151936 x 5120 and 49152 x 576
    python benchmarks/cpu.py --heads 49152x576    # one head

Quantize: radiance runs the whole head; the NumPy and torch versions of the same algorithm (the
seed algorithm: all five clip ratios over the whole tensor, in row chunks to bound memory) run on
the first --peer-rows rows and are scaled to the whole head (their cost is linear in rows); the
table says so. apply: radiance at M = 1, 4, 16 beside NumPy fp32 and torch bf16 matmuls over the
unquantized head, and the memory floor of reading the packed head at the measured bandwidth.
"""

import argparse
import os
import platform
import sys
import time

import ml_dtypes
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
import radiance  # noqa: E402
from reference import quantize_reference  # noqa: E402  (the NumPy version of the algorithm)

try:
    import torch

    from seed_torch import seed_pack, seed_quantize
except ImportError:  # the torch column is left out
    torch = None

BF16 = ml_dtypes.bfloat16


def best_time(fn, repeat=3, min_time=0.0):
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
        if sum(times) > 60 and len(times) >= 1 and min_time == 0:
            break
    return min(times)


def torch_seed_quantize(w, group_size=128, clip="mse", chunk=8192):
    """The seed algorithm in torch, in row chunks so its fp32 transients fit in memory here."""
    for r0 in range(0, w.shape[0], chunk):
        seed_pack(*seed_quantize(w[r0 : r0 + chunk], group_size, clip))


def read_bandwidth():
    """GB/s of reading a 1 GiB array with all CPU threads (torch) or one (NumPy)."""
    a = np.ones(2**28, dtype=np.float32)
    if torch is not None:
        t = torch.from_numpy(a)
        seconds = best_time(lambda: t.sum(), repeat=5)
        return a.nbytes / seconds / 1e9, f"torch sum, {torch.get_num_threads()} threads"
    seconds = best_time(lambda: a.sum(), repeat=5)
    return a.nbytes / seconds / 1e9, "numpy sum, 1 thread"


def bench_head(n, k, args, rng, bandwidth):
    group_size = 128 if k % 128 == 0 else 64
    print(f"\n## head {n} x {k}, group {group_size}")
    w = (rng.standard_normal((n, k)) * 0.02).astype(BF16)
    peer_rows = min(n, args.peer_rows)
    scale_up = n / peer_rows
    rows = []
    for clip in ("mse", "rtn"):
        ours = best_time(lambda: radiance.quantize_rows(w, group_size, clip), repeat=2)
        np_time = best_time(lambda: quantize_reference(w[:peer_rows], group_size, clip), repeat=1)
        np_time *= scale_up
        line = {"op": f"quantize {clip}", "radiance s": ours, "numpy s": np_time}
        if torch is not None:
            wt = torch.from_numpy(w[:peer_rows].view(np.int16)).view(torch.bfloat16)
            line["torch s"] = scale_up * best_time(
                lambda: torch_seed_quantize(wt, group_size, clip), repeat=1
            )
        rows.append(line)
    packed, scales = radiance.quantize_rows(w, group_size)
    w32 = w.astype(np.float32)
    wt_full = torch.from_numpy(w.view(np.int16)).view(torch.bfloat16) if torch is not None else None
    packed_bytes = packed.nbytes + scales.nbytes
    for m in (1, 4, 16):
        x = rng.standard_normal((m, k)).astype(BF16)
        ours = best_time(lambda: radiance.apply(x, packed, scales, group_size=group_size), 5)
        x32 = x.astype(np.float32)
        line = {"op": f"apply M={m}", "radiance s": ours,
                "numpy s": best_time(lambda: x32 @ w32.T, 3),
                "floor s": packed_bytes / (bandwidth * 1e9)}
        if torch is not None:
            xt = torch.from_numpy(x.view(np.int16)).view(torch.bfloat16)
            line["torch s"] = best_time(lambda: xt @ wt_full.T, 3)
        rows.append(line)
    print(f"(numpy/torch quantize timed on {peer_rows} rows and scaled x{scale_up:.2f}; "
          "apply peers are fp32 NumPy and bf16 torch matmuls over the unquantized head)")
    header = f"{'op':<14}{'radiance':>11}{'numpy':>11}{'torch':>11}{'vs numpy':>10}{'vs torch':>10}{'% floor':>9}"
    print(header)
    for line in rows:
        ours = line["radiance s"]
        tt = line.get("torch s")
        floor = line.get("floor s")
        print(f"{line['op']:<14}{ours * 1e3:>9.1f}ms{line['numpy s'] * 1e3:>9.1f}ms"
              + (f"{tt * 1e3:>9.1f}ms" if tt else f"{'-':>11}")
              + f"{line['numpy s'] / ours:>9.1f}x"
              + (f"{tt / ours:>9.1f}x" if tt else f"{'-':>10}")
              + (f"{100 * floor / ours:>8.0f}%" if floor else f"{'-':>9}"))
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--heads", default="151936x5120,49152x576")
    parser.add_argument("--peer-rows", type=int, default=8192)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    bandwidth, how = read_bandwidth()
    print(f"# radiance CPU benchmark, {time.strftime('%Y-%m-%d')}")
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, radiance threads "
          f"{radiance._C.cpu_threads()}, numpy {np.__version__}, "
          f"torch {torch.__version__ if torch else 'not installed'}")
    print(f"measured read bandwidth: {bandwidth:.1f} GB/s ({how})")
    for head in args.heads.split(","):
        n, k = (int(v) for v in head.lower().split("x"))
        bench_head(n, k, args, rng, bandwidth)


if __name__ == "__main__":
    main()
