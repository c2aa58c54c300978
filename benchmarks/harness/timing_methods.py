#!/usr/bin/env python3
"""How the timing method moves a bandwidth-bound kernel's number (H200, one head, M tokens).

    python benchmarks/harness/timing_methods.py [--lib PATH] [--m 1,4,16]

Three ways to time the same call, in one run, for radiance's int4 apply (through the ctypes
harness of gpu_kernels.py, so build it first: `python benchmarks/harness/gpu_kernels.py build`)
and for the bf16 matmul over the same head:
  do_bench   triton.testing.do_bench, median (gpu_kernels.bench): it zeroes a 256 MB buffer
             before every call, which could leave dirty L2 lines to be written back while the
             timed call runs
  flushed    CUDA events around each call after the same zeroing, as do_bench does it, median
  loop       CUDA events around 50 back-to-back calls over rotating weight copies (no flush; no
             copy is read twice within 250 MB), per call: what a decode loop sees
"""

import argparse
import math
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_kernels as gk  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", default=gk.DEFAULT_LIB)
    ap.add_argument("--m", default="1,4,16")
    ap.add_argument("--head", default="248320x5120")
    args = ap.parse_args()
    import torch
    from gpu import int4_head_bytes

    L = gk.Lib(args.lib)
    stream = torch.cuda.current_stream().cuda_stream
    n, k = (int(v) for v in args.head.split("x"))
    group = 128
    int4_bytes = int4_head_bytes(n, k, group)
    bf16_bytes = n * k * 2
    nrot = max(2, math.ceil(250e6 / int4_bytes) + 1)
    nrot_bf = max(2, math.ceil(250e6 / bf16_bytes) + 1)
    torch.manual_seed(0)
    pks, scs, wbf = gk.random_heads(torch, n, k, group, (nrot, nrot_bf))
    flush = torch.empty(256 * 2 ** 20, dtype=torch.int8, device="cuda")
    print(f"# {torch.cuda.get_device_name()} head {n}x{k} int4 g{group} {int4_bytes / 1e6:.0f} MB, "
          f"bf16 {bf16_bytes / 1e6:.0f} MB; us per call")
    print(f"{'M':>4} {'kernel':>8} {'do_bench':>9} {'flushed':>9} {'loop':>9}")
    for m in (int(v) for v in args.m.split(",")):
        x = torch.randn(m, k, device="cuda").to(torch.bfloat16)
        xi = x.view(torch.int16)
        out = torch.empty((m, n), dtype=torch.int16, device="cuda")
        it = [0]

        def ours():
            i = it[0] = (it[0] + 1) % nrot
            L.apply(xi, pks[i], scs[i], None, group, out, stream, 0)

        def bf16():
            i = it[0] = (it[0] + 1) % nrot_bf
            return x @ wbf[i].t()

        for name, fn in (("int4", ours), ("bf16", bf16)):
            t_db = gk.bench(fn, torch)
            fl = []
            for _ in range(30):
                flush.zero_()
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record()
                fn()
                e1.record()
                torch.cuda.synchronize()
                fl.append(e0.elapsed_time(e1) * 1e3)
            lp = []
            for _ in range(10):
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record()
                for _ in range(50):
                    fn()
                e1.record()
                torch.cuda.synchronize()
                lp.append(e0.elapsed_time(e1) * 1e3 / 50)
            print(f"{m:4d} {name:>8} {t_db:9.1f} {statistics.median(fl):9.1f} {statistics.median(lp):9.1f}",
                  flush=True)


if __name__ == "__main__":
    main()
