#!/usr/bin/env python3
"""Two builds of the kernels in one timing loop: the before and after of a kernel change.

Changes of a few per cent are smaller than what separates two runs of benchmarks/gpu.py on the
lent H200 (bf16 cuBLAS itself moves by 3-5 % between runs, docs/PERF_LOG.md). So both builds
run here in the same process and the same rounds, with gpu.py's timing method (a GPU sleep
before each round, one call of each back to back between CUDA events, the order rotated, the
median), on the same operands, beside bf16 cuBLAS.

    git archive HEAD | tar -x -C /tmp/A        # the tree before
    python /tmp/A/benchmarks/harness/gpu_kernels.py build --lib /tmp/A/lib.so
    python benchmarks/harness/gpu_kernels.py build --lib build/B/lib.so
    python benchmarks/harness/ab_time.py --a /tmp/A/lib.so --b build/B/lib.so \\
        [--heads 262144x640,128256x4096:64,...] [--m 64,128,...] [--b-variants fold2x256,...] [--round-budget 0.07] \\
        [--fastest]

A runs its automatic plan (variant 0). B runs its automatic plan and each of --b-variants (names
from this tree's variants.def). A head is NxK, group 128 (64 where 128 does not divide K), or
NxK:G. Prints µs per cell and B / A (below 1: B is faster).
"""

import argparse
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
from gpu import DEV, Rotating, bf16_fn, int4_head_sets, rounds  # noqa: E402
from gpu_kernels import VARIANTS, Lib, NotApplicable  # noqa: E402

HEADS = "248320x5120,128256x4096,151936x1024,262144x640,49152x576"
TOKENS = "48,64,96,128,192,256,384,1024,2048"


def int4_fn(lib, variant, sets, group, start):
    """One int4 callable over the shared operand sets, from set `start` on: the callables of a
    round each read another set where there are enough (a head that fits in L2 would otherwise be
    read from DRAM by the round's first int4 callable and from L2 by the rest; until 2026-12-04,
    when all started at one set, A's column, which follows bf16's in every round's order, read
    49152 x 576 about 10 % slower than B's with the same build: docs/PERF_LOG.md, nineteenth
    round)."""
    stream = torch.cuda.current_stream().cuda_stream

    def call(x, out, packed, scales):
        lib.apply(x.view(torch.int16), packed, scales.view(torch.int16), None, group, out.view(torch.int16), stream,
                  variant)

    return Rotating(sets, call, start)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--a", required=True, help="the harness library built from the tree before")
    ap.add_argument("--b", required=True, help="the harness library built from this tree")
    ap.add_argument("--heads", default=HEADS)
    ap.add_argument("--m", default=TOKENS)
    ap.add_argument("--b-variants", default="", help="also these variants of B (comma-separated)")
    ap.add_argument("--round-budget", type=float, default=0.07)
    ap.add_argument("--fastest", action="store_true",
                    help="end each row with the fastest of A, B and B's variants, its time over A's and bf16's over it")
    args = ap.parse_args()
    lib_a, lib_b = Lib(args.a), Lib(args.b)
    extra = [v for v in args.b_variants.split(",") if v]
    unknown = [v for v in extra if v not in VARIANTS]
    if unknown:
        sys.exit(f"unknown variants: {unknown}")
    l2 = torch.cuda.get_device_properties(DEV).L2_cache_size
    print(f"# {torch.cuda.get_device_name()}, A {args.a}, B {args.b}", flush=True)
    for head in args.heads.split(","):
        shape, _, g = head.partition(":")
        n, k = (int(v) for v in shape.split("x"))
        group = int(g) if g else 128 if k % 128 == 0 else 64
        sets = int4_head_sets(n, k, group, l2)
        fns = {"A": int4_fn(lib_a, 0, sets, group, 0), "B": int4_fn(lib_b, 0, sets, group, 1)}
        fns.update({f"B:{v}": int4_fn(lib_b, VARIANTS[v], sets, group, 2 + j) for j, v in enumerate(extra)})
        fns["bf16"] = bf16_fn(n, k, l2)
        print(f"\n## {n} x {k}, group {group}")
        print(f"{'M':>5} " + " ".join(f"{name:>16}" for name in fns) + "   B / A")
        for m in (int(v) for v in args.m.split(",")):
            x = torch.randn(m, k, device=DEV, dtype=torch.bfloat16)
            outs = {name: torch.empty(m, n, device=DEV, dtype=torch.bfloat16) for name in fns}
            live = {}
            for name, fn in fns.items():  # a variant that does not apply to this call is left out
                try:
                    fn(x, outs[name])
                    live[name] = fn
                except NotApplicable:
                    pass
            t = rounds(live, x, outs, args.round_budget)
            cells = " ".join(f"{t[name]:>16.1f}" if name in t else f"{'-':>16}" for name in fns)
            fastest = ""
            if args.fastest:
                best = min((name for name in t if name != "bf16"), key=t.get)
                fastest = f"   fastest {best} {t[best] / t['A']:.3f}, bf16 / it {t['bf16'] / t[best]:.2f}"
            print(f"{m:>5} {cells}   {t['B'] / t['A']:.3f}{fastest}", flush=True)
        del sets, fns
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
