"""GPU benchmark: radiance's int4 lm_head beside the peers, in one run, on one GPU.

    python benchmarks/gpu.py [--heads 248320x5120,...] [--m 1,4,8,16,64,256] [--out DIR]
                             [--no-quantize | --only-quantize]

Per head and token count M: radiance.apply (int4 g128 W4A16) beside bf16 `x @ W.t()` (cuBLAS),
fp8 row-wise `torch._scaled_mm` and torch's int4 `_weight_int4pack_mm` (tinygemm), as µs per
call (median of CUDA-event timings), GB/s of the bytes the int4 head must move, % of the
measured read roofline and ratios. Then quantize_rows on the GPU beside the seed algorithm in
plain torch, and clip "act" beside "mse". Writes results.md, results.json and a plot into --out.
"""

import argparse
import json
import os
import platform
import subprocess
import time

import torch

import radiance
from seed_torch import seed_quantize

try:
    from triton.testing import do_bench
except ImportError:  # a plain CUDA-event median instead
    do_bench = None

DEV = torch.device("cuda")


def median_us(fn, warmup_ms=50, rep_ms=400):
    if do_bench is not None:
        return 1e3 * do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median")
    for _ in range(10):
        fn()
    times = []
    for _ in range(50):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return sorted(times)[len(times) // 2]


def roofline():
    a = torch.randn(2**30, device=DEV)  # 4 GiB fp32
    read = a.numel() * 4 / (median_us(lambda: a.sum()) * 1e-6) / 1e9
    b = torch.empty_like(a)
    copy = 2 * a.numel() * 4 / (median_us(lambda: b.copy_(a)) * 1e-6) / 1e9
    del a, b
    torch.cuda.empty_cache()
    return read, copy


class Rotation:
    """Several copies of the operands when one set fits in L2, so timings see DRAM, not cache."""

    def __init__(self, make, nbytes, l2_bytes):
        copies = max(1, min(16, (4 * l2_bytes) // max(nbytes, 1) + 1))
        self.sets = [make() for _ in range(copies)]
        self.i = 0

    def next(self):
        self.i = (self.i + 1) % len(self.sets)
        return self.sets[self.i]


def int4_head(n, k, group):
    packed = torch.randint(-(2**31), 2**31 - 1, (n, k // 8), dtype=torch.int32, device=DEV)
    scales = (torch.rand(n, k // group, device=DEV) * 0.01 + 1e-3).to(torch.bfloat16)
    return packed, scales


def peers(n, k, group, l2):
    """Callables f(x) per peer, or the reason it cannot run."""
    out = {}
    w = torch.randn(n, k, device=DEV, dtype=torch.bfloat16) * 0.02
    out["bf16"] = lambda x, w=w: x @ w.t()
    try:
        w8 = w.to(torch.float8_e4m3fn)
        scale_b = torch.rand(1, n, device=DEV, dtype=torch.float32) + 0.5

        def fp8(x, w8=w8, scale_b=scale_b):
            m = x.shape[0]
            x8 = x.to(torch.float8_e4m3fn)
            scale_a = torch.ones(m, 1, device=DEV, dtype=torch.float32)
            return torch._scaled_mm(x8, w8.t(), scale_a=scale_a, scale_b=scale_b,
                                    out_dtype=torch.bfloat16)

        fp8(torch.randn(16, k, device=DEV, dtype=torch.bfloat16))
        out["fp8"] = fp8
    except Exception as error:  # noqa: BLE001 - the table says why
        out["fp8"] = f"n/a ({type(error).__name__})"
    try:
        q = torch.randint(0, 16, (n, k), dtype=torch.int32, device=DEV)
        w_uint8 = (q[:, ::2] << 4 | q[:, 1::2]).to(torch.uint8)
        w_tiny = torch._convert_weight_to_int4pack(w_uint8, 8)
        sz = torch.stack([torch.rand(k // group, n, device=DEV), torch.zeros(k // group, n, device=DEV)],
                         dim=-1).to(torch.bfloat16)

        def tiny(x, w_tiny=w_tiny, sz=sz):
            return torch._weight_int4pack_mm(x, w_tiny, group, sz)

        tiny(torch.randn(1, k, device=DEV, dtype=torch.bfloat16))
        out["int4 tinygemm"] = tiny
    except Exception as error:  # noqa: BLE001
        out["int4 tinygemm"] = f"n/a ({type(error).__name__}: {str(error)[:60]})"
    del w
    return out


def bench_quantize(n, k, read_gbs):
    w = torch.randn(n, k, device=DEV, dtype=torch.bfloat16) * 0.02
    # act's statistics as a vLLM rank would hold them: a GPU tensor (copied to the host and its
    # weights back each call, which the timing includes)
    activation_sq = torch.exp(torch.randn(k, device=DEV))
    rows = {}
    for clip in ("mse", "act", "rtn"):
        packed = torch.empty(n, k // 8, dtype=torch.int32, device=DEV)
        scales = torch.empty(n, k // 128, dtype=torch.bfloat16, device=DEV)
        stats = activation_sq if clip == "act" else None
        ours = median_us(lambda: radiance.quantize_rows(w, 128, clip, activation_sq=stats,
                                                        packed_out=packed, scales_out=scales),
                         rep_ms=300)
        if clip == "act":  # the seed algorithm has no act; the goal is act within 1.2x of mse
            rows[clip] = {"radiance_us": ours, "vs_mse": ours / rows["mse"]["radiance_us"]}
            continue
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        seed = median_us(lambda: seed_quantize(w, 128, clip), warmup_ms=20, rep_ms=300)
        transient = torch.cuda.max_memory_allocated() - base
        rows[clip] = {"radiance_us": ours, "torch_seed_us": seed, "speedup": seed / ours,
                      "torch_seed_transient_GiB": transient / 2**30}
    floor_us = (n * k * 2 + n * k // 2 + n * k // 128 * 2) / (read_gbs * 1e3)
    return rows, floor_us


def environment():
    def run(cmd):
        try:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=20).stdout.strip()
        except Exception:  # noqa: BLE001
            return "?"

    smi = run(["nvidia-smi", "--query-gpu=name,driver_version,clocks.max.sm,memory.total",
               "--format=csv,noheader"])
    nvcc = run(["nvcc", "--version"]).splitlines()
    return {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "gpu": torch.cuda.get_device_name(),
        "nvidia_smi": smi,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "nvcc": nvcc[-1] if nvcc else "?",
        "radiance_backend": radiance.gpu_backend(),
        "python": platform.python_version(),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--heads", default="248320x5120,151936x5120,128256x4096,262144x640,49152x576")
    parser.add_argument("--m", default="1,4,8,16,64,256")
    parser.add_argument("--out", default=".")
    parser.add_argument("--no-quantize", action="store_true")
    parser.add_argument("--only-quantize", action="store_true", help="skip the apply table")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    env = environment()
    l2 = torch.cuda.get_device_properties(DEV).L2_cache_size
    read_gbs, copy_gbs = roofline()
    print(f"# radiance GPU benchmark {env['date']}: {env['gpu']} ({env['nvidia_smi']}), torch "
          f"{env['torch']}, {env['nvcc']}")
    print(f"roofline: read {read_gbs:.0f} GB/s, device copy {copy_gbs:.0f} GB/s (read + write)")
    ms = [int(v) for v in args.m.split(",")]
    results = {"environment": env, "read_GBps": read_gbs, "copy_GBps": copy_gbs, "apply": [],
               "quantize": {}}
    lines = []
    for head in [] if args.only_quantize else args.heads.split(","):
        n, k = (int(v) for v in head.lower().split("x"))
        group = 128 if k % 128 == 0 else 64
        head_bytes = n * k // 2 + n * (k // group) * 2
        rot = Rotation(lambda: int4_head(n, k, group), head_bytes, l2)
        peer_fns = peers(n, k, group, l2)
        lines.append(f"\n## {n} x {k}, group {group}: int4 head {head_bytes / 1e6:.0f} MB, floor "
                     f"{head_bytes / (read_gbs * 1e3):.0f} µs")
        lines.append(f"{'M':>4} {'radiance µs':>12} {'GB/s':>6} {'%roof':>6} | "
                     + " | ".join(f"{p:>13} µs  ratio" for p in peer_fns))
        for m in ms:
            x = torch.randn(m, k, device=DEV, dtype=torch.bfloat16)
            out = torch.empty(m, n, device=DEV, dtype=torch.bfloat16)

            def ours():
                packed, scales = rot.next()
                radiance.apply(x, packed, scales, group_size=group, out=out)

            t = median_us(ours)
            moved = head_bytes + m * k * 2 + m * n * 2
            row = {"head": head, "m": m, "radiance_us": t, "GBps": moved / t / 1e3,
                   "roofline_pct": 100 * moved / t / 1e3 / read_gbs}
            cells = []
            for name, fn in peer_fns.items():
                if isinstance(fn, str):
                    cells.append(f"{fn[:22]:>22}")
                    continue
                pt = median_us(lambda fn=fn: fn(x))
                row[f"{name}_us"] = pt
                cells.append(f"{pt:>13.0f}    {pt / t:>5.2f}x")
            results["apply"].append(row)
            lines.append(f"{m:>4} {t:>12.1f} {row['GBps']:>6.0f} {row['roofline_pct']:>5.0f}% | "
                         + " | ".join(cells))
            print(lines[-1], flush=True)
        del rot, peer_fns
        torch.cuda.empty_cache()
    if not args.no_quantize:
        rows, floor_us = bench_quantize(248320, 5120, read_gbs)
        results["quantize"] = {"head": "248320x5120", "floor_us": floor_us, **rows}
        lines.append("\n## quantize_rows 248320 x 5120 bf16, group 128 (floor "
                     f"{floor_us:.0f} µs: read 2.54 GB, write 0.66 GB)")
        for clip, r in rows.items():
            if "vs_mse" in r:
                lines.append(f"{clip}: radiance {r['radiance_us'] / 1e3:.2f} ms, {r['vs_mse']:.2f}x "
                             f"mse's time (goal: within 1.2x)")
                continue
            lines.append(f"{clip}: radiance {r['radiance_us'] / 1e3:.2f} ms, torch seed "
                         f"{r['torch_seed_us'] / 1e3:.1f} ms ({r['speedup']:.0f}x), seed transient "
                         f"{r['torch_seed_transient_GiB']:.2f} GiB; radiance allocates only its outputs")
    text = (f"# radiance GPU benchmark, {env['date']}\n\n{env}\n\nroofline: read {read_gbs:.0f} GB/s, "
            f"copy {copy_gbs:.0f} GB/s\n" + "\n".join(lines) + "\n")
    print("\n".join(lines))
    with open(os.path.join(args.out, "results.md"), "w") as fh:
        fh.write(text)
    with open(os.path.join(args.out, "results.json"), "w") as fh:
        json.dump(results, fh, indent=1)
    if results["apply"]:
        plot(results, os.path.join(args.out, "apply.png"))


def plot(results, path):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no plot")
        return
    head = results["apply"][0]["head"]
    rows = [r for r in results["apply"] if r["head"] == head]
    ms = [r["m"] for r in rows]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for key, label in (("radiance_us", "radiance int4"), ("bf16_us", "bf16 cuBLAS"),
                       ("fp8_us", "fp8 _scaled_mm"), ("int4 tinygemm_us", "int4 tinygemm")):
        if all(key in r for r in rows):
            ax.plot(ms, [r[key] for r in rows], marker="o", label=label)
    n, k = (int(v) for v in head.split("x"))
    floor = (n * k // 2 + n * k // 64) / (results["read_GBps"] * 1e3)
    ax.axhline(floor, color="gray", linestyle="--", label="int4 read floor")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("tokens M")
    ax.set_ylabel("µs per call")
    ax.set_title(f"lm_head {head}, {results['environment']['gpu']}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"plot: {path}")


if __name__ == "__main__":
    main()
