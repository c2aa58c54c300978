"""torch.ops.radiance.apply: host overhead per call, and a decode-like loop against bf16.

1. Host overhead: the host time of one call on a tiny head, so that the GPU never holds the host
   back (a burst of calls shorter than the launch queue, timed before synchronizing). Compared:
     - torch.ops.radiance.apply.default   the op through torch's dispatcher (what compile traces)
     - radiance.torch_ops.apply_int4      the eager path vLLM's apply takes: the op's kernel direct
     - torch.library.custom_op wrapper    the same kernel behind torch's custom_op machinery
     - radiance._C.apply, out given       the C call alone (no allocation, no stream lookup)
     - x @ W.t()                          a plain bf16 matmul, for scale
2. Decode loop: M = 1, 4, 16 rows against a vocab x hidden head, int4 vs bf16 (x @ W.t()), timed on
   the device (CUDA graph of 20 calls replayed, CUDA events), with the bytes each reads. Each call
   reads the next of several copies of the head, so that no copy comes back within 250 MB: in a
   model the other layers' weights pass through the cache between two lm_head calls. (Reading one
   copy over and over lets part of the int4 head stay in the H200's 60 MB L2: 171 us per call at
   M = 1 on 2026-11-30, where benchmarks/harness/timing_methods.py's loop over rotating copies gave 182.)

    python benchmarks/torch_op.py                     # GPU if there is one, else the CPU
    python benchmarks/torch_op.py --vocab 248320 --hidden 5120 --device cuda
"""

import argparse
import statistics
import time

import torch

import radiance
from radiance import _C, torch_ops


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def host_overhead(device, calls, repeats):
    k, n = 256, 64
    w = (torch.randn(n, k) * 0.02).to(torch.bfloat16).to(device)
    packed, scales = torch.ops.radiance.quantize_rows(w, 128, "mse")
    packed8 = packed.view(torch.int8)
    x = torch.randn(1, k, device=device).to(torch.bfloat16)
    out = torch.empty((1, n), dtype=torch.bfloat16, device=device)
    stream = torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else None

    @torch.library.custom_op("radiance_bench::apply", mutates_args=())
    def custom_apply(x: torch.Tensor, packed: torch.Tensor, scales: torch.Tensor,
                     group_size: int) -> torch.Tensor:
        kernel = torch_ops._apply_gpu if x.is_cuda else torch_ops._apply_cpu
        return kernel(x, packed, scales, None, group_size)

    @custom_apply.register_fake
    def _(x, packed, scales, group_size):
        return x.new_empty((x.shape[0], packed.shape[0]), dtype=torch.bfloat16)

    op = torch.ops.radiance.apply.default
    candidates = {
        "torch.ops.radiance.apply (dispatcher)": lambda: op(x, packed, scales, None, 128),
        "torch_ops.apply_int4 (eager path, int8 view)":
            lambda: torch_ops.apply_int4(x, packed8, scales, None, 128),
        "torch.library.custom_op wrapper": lambda: custom_apply(x, packed, scales, 128),
        "radiance._C.apply (out given)":
            lambda: _C.apply(x, packed, scales, None, 128, out=out, stream=stream),
        "x @ W.t() (bf16)": lambda: x @ w.t(),
    }
    print(f"host overhead per call, {device}, x [1, {k}], head [{n}, {k}] "
          f"(median of {repeats} bursts of {calls} calls):")
    for name, call in candidates.items():
        for _ in range(20):
            call()
        _sync(device)
        samples = []
        for _ in range(repeats):
            _sync(device)
            start = time.perf_counter_ns()
            for _ in range(calls):
                call()
            samples.append((time.perf_counter_ns() - start) / calls / 1e3)
        _sync(device)
        print(f"  {name:48s} {statistics.median(samples):7.2f} us   (min {min(samples):.2f})")


def _device_time_us(call, device, inner=20, repeats=10):
    """Device time of one call: a CUDA graph of `inner` calls (call(i) for i < inner), replayed,
    timed by events."""
    if device.type != "cuda":
        call(0)
        samples = []
        for _ in range(repeats):
            start = time.perf_counter_ns()
            for i in range(inner):
                call(i)
            samples.append((time.perf_counter_ns() - start) / inner / 1e3)
        return statistics.median(samples)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for i in range(3):
            call(i)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(inner):
            call(i)
    graph.replay()
    torch.cuda.synchronize()
    samples = []
    for _ in range(repeats):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        stop.record()
        stop.synchronize()
        samples.append(start.elapsed_time(stop) * 1e3 / inner)
    return statistics.median(samples)


def decode_loop(device, vocab, hidden, group_size):
    w = (torch.randn(vocab, hidden, device=device) * 0.02).to(torch.bfloat16)
    packed, scales = torch.ops.radiance.quantize_rows(w, group_size, "mse")
    int4_bytes = packed.numel() * 4 + scales.numel() * 2
    bf16_bytes = w.numel() * 2
    # copies read in turn, so that at least 250 MB pass between two reads of one copy
    ws = [w] + [w.clone() for _ in range(-(-250_000_000 // bf16_bytes))]
    heads = [(packed, scales)] + [(packed.clone(), scales.clone())
                                  for _ in range(-(-250_000_000 // int4_bytes))]
    print(f"\ndecode loop, {device}, head [{vocab}, {hidden}] (bf16 {bf16_bytes / 1e6:.0f} MB, "
          f"int4 g{group_size} {int4_bytes / 1e6:.0f} MB), device time per call:")
    print(f"  {'M':>3s} {'bf16 us':>10s} {'GB/s':>7s} {'int4 us':>10s} {'GB/s':>7s} {'speed-up':>9s}")
    for m in (1, 4, 16):
        x = torch.randn(m, hidden, device=device).to(torch.bfloat16)
        bf16 = _device_time_us(lambda i: x @ ws[i % len(ws)].t(), device)
        int4 = _device_time_us(lambda i: torch.ops.radiance.apply(x, *heads[i % len(heads)], None,
                                                                group_size), device)
        print(f"  {m:3d} {bf16:10.1f} {bf16_bytes / bf16 / 1e3:7.0f} {int4:10.1f} "
              f"{int4_bytes / int4 / 1e3:7.0f} {bf16 / int4:8.2f}x")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default_device = "cuda" if torch.cuda.is_available() and radiance.gpu_backend() != "none" \
        else "cpu"
    parser.add_argument("--device", default=default_device)
    parser.add_argument("--vocab", type=int, default=None,
                        help="head rows (default 248320 on a GPU, 32768 on the CPU)")
    parser.add_argument("--hidden", type=int, default=None,
                        help="head columns (default 5120 on a GPU, 2048 on the CPU)")
    parser.add_argument("--group-size", type=int, default=128)
    parser.add_argument("--calls", type=int, default=200, help="calls per timed burst")
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    device = torch.device(args.device)
    on_gpu = device.type == "cuda"
    print(f"torch {torch.__version__}, radiance GPU backend {radiance.gpu_backend()}, "
          f"{torch.cuda.get_device_name(device) if on_gpu else 'CPU'}")
    host_overhead(device, args.calls, args.repeats)
    decode_loop(device, args.vocab or (248320 if on_gpu else 32768),
                args.hidden or (5120 if on_gpu else 2048), args.group_size)


if __name__ == "__main__":
    main()
