"""GPU benchmark: radiance's int4 lm_head beside the peers, in one loop, on one GPU.

    python benchmarks/gpu.py [--heads 248320x5120,...] [--m 1,2,4,...] [--peers bf16,fp8,humming]
                             [--out DIR] [--quantize | --only-quantize]

Per head and token count M, radiance.apply (int4 W4A16, group 128; 64 where 128 does not divide
the hidden size) beside bf16 `x @ W.t()` (cuBLAS), fp8 row-wise `torch._scaled_mm` and Humming
(`humming-kernels`, vLLM's W4A16 kernels, on the same format: 4-bit codes with a zero point of 8, a
bf16 scale per group; an optional import, skipped with the reason when missing), optionally torch's
int4 `_weight_int4pack_mm` (`--peers ...,tinygemm`). One timing method for all: each round starts
with a short GPU sleep (so the host has queued every call of the round before the first runs and
no launch gap lands between two events), then one call of each, back to back, each between two
CUDA events, the order rotated from round to round; the median over the rounds. Operands rotate
over copies wherever one set would sit in L2. Prints µs, the roofline fraction (the larger of the
bytes over the measured read bandwidth and the flops over the measured bf16 matmul rate, over the
time) and peer / radiance ratios, then per head the worst ratio against each peer. Per head also the
time of a plain read of the int4 head's bytes in one kernel (torch.sum), the same way: the share of
the roofline that a kernel of that size can reach at all. Ends with issue 22's goals per head
(benchmarks/goals.py, which also reads a saved results.json). Writes
results.md and results.json (and with --plot apply.png) into --out. --quantize adds quantize_rows beside the seed
algorithm in plain torch.
"""

import argparse
import json
import os
import platform
import subprocess
import time

import torch

from goals import evaluate, format_goals, head_shape
from seed_torch import seed_quantize

try:
    import radiance
except ImportError as _error:  # benchmarks/harness/ab_time.py borrows the timing loop without the extension
    radiance, RADIANCE_IMPORT_ERROR = None, _error

try:
    from triton.testing import do_bench
except ImportError:  # a plain CUDA-event median instead
    do_bench = None

DEV = torch.device("cuda")
HEADS = "248320x5120,262144x5376,151936x5120,128256x4096,151936x1024,262144x640,49152x576"
TOKENS = "1,2,4,8,12,16,24,32,48,64,96,128,192,256,384,512,768,1024,2048"
# GPU cycles slept before each round: about 1 ms at the H200's 1.98 GHz, more than the host needs
# to queue one round of four calls (Humming's and radiance's Python layers included)
SLEEP_CYCLES = 2_000_000


def median_us(fn, warmup_ms=50, rep_ms=400):
    """Median of one call (quantize_rows and the ceilings; the apply table uses `rounds`)."""
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


def ceilings():
    """Read bandwidth (sum of 4 GiB fp32), device copy (read + write) and the bf16 matmul rate
    (8192^3 on random data), measured here."""
    a = torch.randn(2**30, device=DEV)
    read = a.numel() * 4 / (median_us(lambda: a.sum()) * 1e-6) / 1e9
    b = torch.empty_like(a)
    copy = 2 * a.numel() * 4 / (median_us(lambda: b.copy_(a)) * 1e-6) / 1e9
    del a, b
    p = torch.randn(8192, 8192, device=DEV, dtype=torch.bfloat16)
    q = torch.randn(8192, 8192, device=DEV, dtype=torch.bfloat16)
    tflops = 2 * 8192**3 / (median_us(lambda: p @ q) * 1e-6) / 1e12
    del p, q
    torch.cuda.empty_cache()
    return read, copy, tflops


def int4_head_bytes(n, k, group):
    """The bytes of an n x k int4 head: its packed codes and one bf16 scale per group."""
    return n * k // 2 + n * (k // group) * 2


def copies_for(nbytes, l2_bytes):
    """How many operand sets keep a rotation out of L2 (4x the L2 between two reads of one)."""
    return max(1, min(16, (4 * l2_bytes) // max(nbytes, 1) + 1))


class Rotating:
    """fn(x) over several operand sets, the next set each call (from set `start` + 1 on)."""

    def __init__(self, sets, call, start=0):
        self.sets, self.call, self.i = sets, call, start % len(sets)

    def __call__(self, x, out):
        self.i = (self.i + 1) % len(self.sets)
        return self.call(x, out, *self.sets[self.i])


def int4_head_sets(n, k, group, l2):
    """Random packed words and bf16 scales of an n x k int4 head, as many copies as keep a
    rotation out of L2."""
    def make():
        packed = torch.randint(-(2**31), 2**31 - 1, (n, k // 8), dtype=torch.int32, device=DEV)
        scales = (torch.rand(n, k // group, device=DEV) * 0.01 + 1e-3).to(torch.bfloat16)
        return packed, scales

    return [make() for _ in range(copies_for(int4_head_bytes(n, k, group), l2))]


def read_fn(nbytes, l2):
    """One plain read of nbytes (torch.sum over fp32 words, one kernel), rotated over copies like
    the heads: the time a kernel of that size needs to read its bytes, launch and ramp included
    (the roofline's read rate is measured on 4 GiB)."""
    sets = [(torch.rand(nbytes // 4, device=DEV),) for _ in range(copies_for(nbytes, l2))]
    return Rotating(sets, lambda x, out, words: torch.sum(words))


def radiance_fn(n, k, group, l2):
    return Rotating(int4_head_sets(n, k, group, l2),
                    lambda x, out, p, s: radiance.apply(x, p, s, group_size=group, out=out))


def bf16_fn(n, k, l2):
    sets = [(torch.randn(n, k, device=DEV, dtype=torch.bfloat16) * 0.02,) for _ in range(copies_for(2 * n * k, l2))]
    return Rotating(sets, lambda x, out, w: torch.matmul(x, w.t(), out=out))


def fp8_fn(n, k, l2):
    def make():
        w8 = (torch.randn(n, k, device=DEV, dtype=torch.bfloat16) * 0.02).to(torch.float8_e4m3fn)
        return w8, torch.rand(1, n, device=DEV, dtype=torch.float32) + 0.5

    def call(x, out, w8, scale_b):
        # the activations' cast and row scales are part of what an fp8 head costs per call
        x8 = x.to(torch.float8_e4m3fn)
        scale_a = torch.ones(x.shape[0], 1, device=DEV, dtype=torch.float32)
        return torch._scaled_mm(x8, w8.t(), scale_a=scale_a, scale_b=scale_b, out_dtype=torch.bfloat16)

    fn = Rotating([make() for _ in range(copies_for(n * k, l2))], call)
    fn(torch.randn(16, k, device=DEV, dtype=torch.bfloat16), None)
    return fn


def tinygemm_fn(n, k, group, l2):
    def make():
        q = torch.randint(0, 16, (n, k), dtype=torch.int32, device=DEV)
        w_tiny = torch._convert_weight_to_int4pack((q[:, ::2] << 4 | q[:, 1::2]).to(torch.uint8), 8)
        sz = torch.stack([torch.rand(k // group, n, device=DEV), torch.zeros(k // group, n, device=DEV)],
                         dim=-1).to(torch.bfloat16)
        return w_tiny, sz

    fn = Rotating([make() for _ in range(copies_for(n * k // 2, l2))],
                  lambda x, out, w, sz: torch._weight_int4pack_mm(x, w, group, sz))
    fn(torch.randn(1, k, device=DEV, dtype=torch.bfloat16), None)
    return fn


def humming_layer(codes, scales, group):
    """A Humming layer holding `codes` (int32 [N, K], 0..15, value = code - 8) and `scales` (bf16
    [N, K / group]): its own W4A16 format, uint4 with the implicit zero point, bf16 group scales."""
    from humming.layer import HummingLayer
    from humming import ops

    n, k = codes.shape
    layer = HummingLayer(shape_n=n, shape_k=k, torch_dtype=torch.bfloat16,
                         weight_config={"quant_method": "humming", "b_dtype": "uint4", "bs_dtype": "bfloat16",
                                        "weight_scale_group_size": group})
    layer.weight = torch.nn.Parameter(ops.pack_weight(codes, 4), requires_grad=False)
    layer.weight_scale = torch.nn.Parameter(scales, requires_grad=False)
    layer.transform()
    return layer


def humming_fn(n, k, group, l2):
    def make():
        codes = torch.randint(0, 16, (n, k), dtype=torch.int32, device=DEV)
        scales = (torch.rand(n, k // group, device=DEV) * 0.01 + 1e-3).to(torch.bfloat16)
        layer = humming_layer(codes, scales, group)
        del codes
        return (layer,)

    return Rotating([make() for _ in range(copies_for(n * k // 2, l2))], lambda x, out, layer: layer(x, outputs=out))


def humming_same_format(group=128):
    """Humming and radiance on the same codes and scales (2048 x 1024): their relative difference
    (both accumulate in fp32 from bf16 products; Humming folds the scale into the weight first)."""
    n, k = 2048, 1024
    codes = torch.randint(0, 16, (n, k), dtype=torch.int32, device=DEV)
    scales = (torch.rand(n, k // group, device=DEV) * 0.01 + 1e-3).to(torch.bfloat16)
    packed = torch.from_numpy(radiance.pack_shuffle(codes.to(torch.uint8).cpu().numpy())).to(DEV)
    x = torch.randn(64, k, device=DEV, dtype=torch.bfloat16)
    ours = radiance.apply(x, packed, scales, group_size=group).float()
    theirs = humming_layer(codes, scales, group)(x).float()
    w = (codes.float() - 8) * scales.float().repeat_interleave(group, dim=1)
    ref = x.double() @ w.double().t()
    rel = lambda y: ((y.double() - ref).norm() / ref.norm()).item()  # noqa: E731
    return rel(ours), rel(theirs)


def make_peers(names, n, k, group, l2):
    """Callables f(x, out) per peer, or the reason it cannot run."""
    out = {}
    for name in names:
        try:
            if name == "bf16":
                out[name] = bf16_fn(n, k, l2)
            elif name == "fp8":
                out[name] = fp8_fn(n, k, l2)
            elif name == "humming":
                out[name] = humming_fn(n, k, group, l2)
            elif name == "tinygemm":
                out[name] = tinygemm_fn(n, k, group, l2)
            else:
                raise ValueError(f"--peers: unknown peer {name!r} (bf16, fp8, humming, tinygemm)")
        except ValueError:
            raise
        except Exception as error:  # noqa: BLE001 - the table says why
            out[name] = f"n/a ({type(error).__name__}: {str(error)[:80]})"
    return out


def rounds(fns, x, outs, budget_s):
    """The table's timing method (module docstring): µs per callable, median over rounds."""
    names = list(fns)
    for name in names:  # warm-up, run-time compilation included (Humming's NVRTC kernels)
        for _ in range(2):
            fns[name](x, outs[name])
    torch.cuda.synchronize()
    start = time.perf_counter()
    for name in names:
        fns[name](x, outs[name])
    torch.cuda.synchronize()
    per_round = time.perf_counter() - start + SLEEP_CYCLES / 1.98e9
    count = int(min(40, max(7, budget_s / per_round)))
    times = {name: [] for name in names}
    for r in range(count):
        order = names[r % len(names):] + names[:r % len(names)]
        events = [torch.cuda.Event(enable_timing=True) for _ in range(len(order) + 1)]
        torch.cuda._sleep(SLEEP_CYCLES)
        events[0].record()
        for i, name in enumerate(order):
            fns[name](x, outs[name])
            events[i + 1].record()
        events[-1].synchronize()
        for i, name in enumerate(order):
            times[name].append(events[i].elapsed_time(events[i + 1]) * 1e3)
    return {name: sorted(v)[len(v) // 2] for name, v in times.items()}


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


def humming_version():
    try:
        from importlib.metadata import version

        return version("humming-kernels")
    except Exception:  # noqa: BLE001
        return "not installed"


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
        "humming": humming_version(),
        "python": platform.python_version(),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--heads", default=HEADS)
    parser.add_argument("--m", default=TOKENS)
    parser.add_argument("--peers", default="bf16,fp8,humming")
    parser.add_argument("--out", default=".")
    parser.add_argument("--round-budget", type=float, default=0.25,
                        help="seconds of rounds per cell (7 rounds at least, 40 at most)")
    parser.add_argument("--quantize", action="store_true", help="also time quantize_rows")
    parser.add_argument("--plot", action="store_true",
                        help="also draw apply.png (matplotlib's first import on a fresh machine outlasted a "
                             "150 s limit once)")
    parser.add_argument("--only-quantize", action="store_true", help="skip the apply table")
    args = parser.parse_args()
    if radiance is None:
        raise RADIANCE_IMPORT_ERROR
    os.makedirs(args.out, exist_ok=True)
    env = environment()
    l2 = torch.cuda.get_device_properties(DEV).L2_cache_size
    read_gbs, copy_gbs, mm_tflops = ceilings()
    print(f"# radiance GPU benchmark {env['date']}: {env['gpu']} ({env['nvidia_smi']}), torch "
          f"{env['torch']}, {env['nvcc']}, humming {env['humming']}", flush=True)
    print(f"ceilings: read {read_gbs:.0f} GB/s, device copy {copy_gbs:.0f} GB/s (read + write), bf16 matmul "
          f"{mm_tflops:.0f} TFLOP/s", flush=True)
    ms = [int(v) for v in args.m.split(",")]
    peer_names = [p for p in args.peers.split(",") if p]
    results = {"environment": env, "read_GBps": read_gbs, "copy_GBps": copy_gbs, "matmul_TFLOPs": mm_tflops,
               "apply": [], "worst": {}, "read_limit": {}, "quantize": {}}
    lines = []
    if "humming" in peer_names and not args.only_quantize:
        try:
            ours_err, theirs_err = humming_same_format()
            lines.append(f"same codes and scales (2048 x 1024, 64 tokens), relative error against float64: "
                         f"radiance {ours_err:.2e}, Humming {theirs_err:.2e}")
        except Exception as error:  # noqa: BLE001
            lines.append(f"Humming on radiance's codes: n/a ({type(error).__name__}: {str(error)[:80]})")
        print(lines[-1], flush=True)
    for head in [] if args.only_quantize else args.heads.split(","):
        head_start = time.perf_counter()
        n, k = head_shape(head)
        group = 128 if k % 128 == 0 else 64
        head_bytes = int4_head_bytes(n, k, group)
        fns = {"radiance": radiance_fn(n, k, group, l2)}
        peers = make_peers(peer_names, n, k, group, l2)
        fns.update({p: f for p, f in peers.items() if not isinstance(f, str)})
        lines.append(f"\n## {n} x {k}, group {group}: int4 head {head_bytes / 1e6:.0f} MB, read floor "
                     f"{head_bytes / (read_gbs * 1e3):.0f} µs")
        read_us = rounds({"read": read_fn(head_bytes, l2)}, None, {"read": None}, args.round_budget)["read"]
        results["read_limit"][head] = {"us": read_us, "pct_of_floor": 100 * head_bytes / (read_gbs * 1e3) / read_us}
        lines.append(f"a plain read of those bytes (torch.sum, one kernel): {read_us:.1f} µs, "
                     f"{results['read_limit'][head]['pct_of_floor']:.0f}% of the read floor")
        lines.append(f"{'M':>5} {'radiance µs':>11} {'%roof':>6} | "
                     + " | ".join(f"{p:>8} µs  ratio" for p in peer_names))
        print("\n".join(lines[-3:]), flush=True)
        worst = {}
        for m in ms:
            x = torch.randn(m, k, device=DEV, dtype=torch.bfloat16)
            outs = {name: torch.empty(m, n, device=DEV, dtype=torch.bfloat16) for name in fns}
            t = rounds(fns, x, outs, args.round_budget)
            moved = head_bytes + m * k * 2 + m * n * 2
            floor_us = max(moved / (read_gbs * 1e3), 2 * m * n * k / (mm_tflops * 1e6))
            row = {"head": head, "m": m, "radiance_us": t["radiance"], "roofline_pct": 100 * floor_us / t["radiance"]}
            cells = []
            for name in peer_names:
                if isinstance(peers[name], str):
                    cells.append(f"{peers[name][:17]:>17}")
                    continue
                row[f"{name}_us"] = t[name]
                ratio = t[name] / t["radiance"]
                if name not in worst or ratio < worst[name][0]:
                    worst[name] = (ratio, m)
                cells.append(f"{t[name]:>8.1f}    {ratio:>5.2f}x")
            results["apply"].append(row)
            lines.append(f"{m:>5} {t['radiance']:>11.1f} {row['roofline_pct']:>5.0f}% | " + " | ".join(cells))
            print(lines[-1], flush=True)
            del x, outs
        results["worst"][head] = {p: {"ratio": r, "m": m} for p, (r, m) in worst.items()}
        lines.append("worst ratio (peer / radiance, below 1: radiance slower): "
                     + ", ".join(f"{p} {r:.2f}x at M = {m}" for p, (r, m) in worst.items())
                     + f"  [{time.perf_counter() - head_start:.0f} s]")
        print(lines[-1], flush=True)
        del fns, peers
        torch.cuda.empty_cache()
    if results["worst"]:
        lines.append("\n## worst cell per head (peer µs / radiance µs; below 1.00: radiance slower)")
        lines.append(f"{'head':>13} | " + " | ".join(f"{p:>16}" for p in peer_names))
        for head, worst in results["worst"].items():
            lines.append(f"{head:>13} | " + " | ".join(
                f"{worst[p]['ratio']:>6.2f}x at {worst[p]['m']:>5}" if p in worst else f"{'n/a':>16}"
                for p in peer_names))
        results["goals"] = evaluate(results)
        lines.extend(format_goals(results["goals"]))
    if args.quantize or args.only_quantize:
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
    text = (f"# radiance GPU benchmark, {env['date']}\n\n{env}\n\nceilings: read {read_gbs:.0f} GB/s, "
            f"copy {copy_gbs:.0f} GB/s, bf16 matmul {mm_tflops:.0f} TFLOP/s\n" + "\n".join(lines) + "\n")
    worst_at = next((i for i, ln in enumerate(lines) if ln.startswith("\n## worst")), None)
    print("\n".join(lines[worst_at:] if worst_at is not None else lines[-8:]))
    with open(os.path.join(args.out, "results.md"), "w") as fh:
        fh.write(text)
    with open(os.path.join(args.out, "results.json"), "w") as fh:
        json.dump(results, fh, indent=1)
    if results["apply"] and args.plot:
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
    for key, label in (("radiance_us", "radiance int4"), ("bf16_us", "bf16 cuBLAS"), ("fp8_us", "fp8 _scaled_mm"),
                       ("humming_us", "Humming int4"), ("tinygemm_us", "int4 tinygemm")):
        if all(key in r for r in rows):
            ax.plot(ms, [r[key] for r in rows], marker="o", label=label)
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
