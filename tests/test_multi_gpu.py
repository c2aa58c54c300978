"""Two GPUs in one process: every call runs on its tensors' GPU, whichever GPU is current.

radiance.quantize_rows, radiance.apply, torch.ops.radiance.* and torch_ops.apply_int4 (the vLLM
path) on tensors of cuda:1 while cuda:0 is current, and the reverse; on a side stream of the
tensors' GPU; inside a CUDA graph captured on cuda:1; in a fresh process whose first call is on
cuda:1 (the per-device caches of the SM version, the wgmma probe and the shared memory); from two
threads at once. A call made on the wrong GPU, on the wrong stream or with another GPU's cached
attributes gives wrong logits or a hang, not an error, so every result is compared bit for bit:
quantize with the CPU, apply with the same call on the other GPU (same kernel, same inputs), and
apply within one bf16 rounding of a float64 reference (tests/reference.py).

Skipped below two GPUs and without a GPU build; the CPU checks of the helpers always run.
"""

import concurrent.futures
import os
import subprocess
import sys
import textwrap

import ml_dtypes
import numpy as np
import pytest

import radiance
from reference import apply_reference, pack_reference, quantize_reference

torch = pytest.importorskip("torch")
from radiance import torch_ops  # noqa: E402  (needs torch: registers torch.ops.radiance)
from torch_helpers import fresh_rng, to_numpy, to_torch  # noqa: E402  (needs torch)

BF16 = ml_dtypes.bfloat16
CALL_TIMEOUT_S = 300  # a fresh process or a thread that takes longer is hung


# (current device, tensors' device)
PAIRS = [pytest.param(0, 1, id="current0-tensors1"), pytest.param(1, 0, id="current1-tensors0")]
# (M, K, group size): one case for every kernel the dispatcher picks on an H200 (M <= 2, <= 6,
# <= 8 below and above K = 2048, <= 16, <= 32, <= 64, above), K from 128 to 8192.
APPLY_CASES = [(1, 1152, 128), (2, 8192, 256), (5, 2944, 64), (8, 1152, 128), (8, 4096, 128),
               (13, 128, 32), (32, 2944, 128), (64, 8192, 128), (100, 1152, 128)]


# --- helpers (checked on the CPU below) ---------------------------------------------------------


def weights(rng, n, k):
    """Gaussian rows with 1 % outliers and an all-zero row (vLLM's vocab padding)."""
    w = rng.standard_normal((n, k)) * 0.02
    w[rng.random((n, k)) < 0.01] *= 8
    w[n // 2] = 0.0
    return w


def float64_excess(y, x, packed, scales, group_size, bias=None):
    """The worst |y - ref| over its bound, ref the float64 logits of the quantized head: within
    one bf16 rounding of ref (2^-8 relative) plus fp32 accumulation over K. <= 1 passes."""
    ref = apply_reference(x, radiance.unpack_shuffle(packed), scales, group_size, bias)
    w_hat = radiance.dequantize(packed, scales, group_size).astype(np.float64)
    bound = (2.0**-8 * np.abs(ref) + 2e-6 * (np.abs(x.astype(np.float64)) @ np.abs(w_hat).T)
             + 1e-6)
    return float((np.abs(np.asarray(y).astype(np.float64) - ref) / bound).max())


def bits(a):
    """The bit pattern of an array, for bit-for-bit comparisons that NaN cannot fool."""
    a = np.asarray(a)
    return a.view(np.uint16) if a.dtype == BF16 else a


def problem(rng, n, k, group_size, m, bias):
    w = weights(rng, n, k).astype(BF16)
    packed, scales = radiance.quantize_rows(w, group_size)
    x = (rng.standard_normal((m, k)) * 2).astype(BF16)
    b = rng.standard_normal(n).astype(BF16) if bias else None
    return x, packed, scales, b


def on(device, *arrays):
    return [None if a is None else to_torch(a, device) for a in arrays]


def three_calls(x, packed, scales, bias, group_size):
    """The same logits through the public function, the registered op and the vLLM fast path
    (int8 view of the words, as vLLM stores them)."""
    return {
        "radiance.apply": radiance.apply(x, packed, scales, bias, group_size),
        "torch.ops.radiance.apply": torch.ops.radiance.apply(x, packed, scales, bias, group_size),
        "torch_ops.apply_int4": torch_ops.apply_int4(x, packed.view(torch.int8), scales, bias,
                                                     group_size),
    }


def test_helpers_on_the_cpu():
    """What the GPU tests compare with: the CPU quantizer equals the independent reference on
    the same kind of inputs, the float64 bound passes the CPU's logits and fails logits that are
    off by a few bf16 steps."""
    rng, seed = fresh_rng()
    w = weights(rng, 301, 384).astype(BF16)
    packed, scales = radiance.quantize_rows(w, 128)
    nibbles, ref_scales = quantize_reference(w, 128, "mse")
    np.testing.assert_array_equal(packed, pack_reference(nibbles), err_msg=f"seed {seed}")
    np.testing.assert_array_equal(bits(scales), bits(ref_scales), err_msg=f"seed {seed}")
    x, packed, scales, b = problem(rng, 301, 384, 128, 5, bias=True)
    y = radiance.apply(x, packed, scales, b, 128)
    assert float64_excess(y, x, packed, scales, 128, b) <= 1.0, f"seed {seed}"
    off = (y.astype(np.float32) * np.float32(1 + 2**-5)).astype(BF16)
    assert float64_excess(off, x, packed, scales, 128, b) > 1.0, f"seed {seed}"
    t = to_torch(y, "cpu")
    assert t.dtype == torch.bfloat16 and np.array_equal(bits(to_numpy(t)), bits(y))
    calls = three_calls(*on("cpu", x, packed, scales, b), 128)
    for name, got in calls.items():
        np.testing.assert_array_equal(bits(to_numpy(got)), bits(y), err_msg=name)


# --- quantize_rows ------------------------------------------------------------------------------


@pytest.mark.gpu(2)
@pytest.mark.parametrize("current, target", PAIRS)
@pytest.mark.parametrize("k, group_size, clip, dtype", [
    (1152, 128, "mse", BF16), (128, 32, "rtn", np.float32), (8192, 256, "mse", np.float16),
    (2944, 64, "mse", BF16)], ids=["bf16-g128", "f32-g32-rtn", "f16-g256", "bf16-g64"])
def test_quantize_rows_on_the_tensors_gpu(current, target, k, group_size, clip, dtype):
    rng, seed = fresh_rng()
    n = int(rng.integers(1000, 4000)) | 1
    w = weights(rng, n, k).astype(dtype)
    want_packed, want_scales = radiance.quantize_rows(w, group_size, clip)
    w_gpu = to_torch(w, f"cuda:{target}")
    with torch.cuda.device(current):
        calls = {"radiance.quantize_rows": radiance.quantize_rows(w_gpu, group_size, clip),
                 "torch.ops.radiance.quantize_rows":
                     torch.ops.radiance.quantize_rows(w_gpu, group_size, clip)}
        assert torch.cuda.current_device() == current, "the call changed the current device"
    for name, (packed, scales) in calls.items():
        assert packed.device == w_gpu.device and scales.device == w_gpu.device, name
        np.testing.assert_array_equal(to_numpy(packed), want_packed, err_msg=f"{name} seed {seed}")
        np.testing.assert_array_equal(bits(to_numpy(scales)), bits(want_scales),
                                      err_msg=f"{name} seed {seed}")


# --- apply --------------------------------------------------------------------------------------


@pytest.mark.gpu(2)
@pytest.mark.parametrize("current, target", PAIRS)
@pytest.mark.parametrize("m, k, group_size", APPLY_CASES)
def test_apply_on_the_tensors_gpu(current, target, m, k, group_size):
    """On the tensors' GPU with the other one current, bit for bit the single-GPU call (the same
    kernel on the same inputs on the other GPU, with that GPU current)."""
    rng, seed = fresh_rng()
    n = int(rng.integers(1000, 5000)) | 1  # never a multiple of a tile
    x, packed, scales, b = problem(rng, n, k, group_size, m, bias=m % 2 == 1)
    results = {}
    for device, current_device in ((target, current), (1 - target, 1 - target)):
        args = on(f"cuda:{device}", x, packed, scales, b)
        with torch.cuda.device(current_device):
            calls = three_calls(*args, group_size)
            assert torch.cuda.current_device() == current_device, "the current device changed"
        for name, y in calls.items():
            assert y.device == torch.device("cuda", device), f"{name} on {y.device}"
            assert tuple(y.shape) == (m, n) and y.dtype == torch.bfloat16, name
            results[f"{name} on cuda:{device} (cuda:{current_device} current)"] = to_numpy(y)
    first_name, first = next(iter(results.items()))
    for name, y in results.items():
        np.testing.assert_array_equal(bits(y), bits(first),
                                      err_msg=f"{name} against {first_name}, seed {seed}")
    excess = float64_excess(first, x, packed, scales, group_size, b)
    assert excess <= 1.0, f"seed {seed}: worst error {excess:.2f}x the bf16 bound"


# --- streams ------------------------------------------------------------------------------------


def _late(busy, value):
    """value, computed only once `busy` is: written by the stream that computes busy, after it."""
    return torch.where(busy[:1, :1] == busy[:1, :1], value, value)


@pytest.mark.gpu(2)
@pytest.mark.parametrize("current, target", PAIRS)
def test_side_stream_of_the_tensors_gpu(current, target):
    """The tensors' GPU has a side stream current, another GPU is the current device. The inputs
    are overwritten on that side stream after a long chain of matmuls; calls launched there read
    the new inputs, a call launched on any other stream (the legacy default, the other GPU's)
    reads the old ones or fails. Only the side stream is synchronized before the check."""
    rng, seed = fresh_rng()
    dev = torch.device("cuda", target)
    n, k, m, g = 3001, 2944, 16, 128
    x_old, packed, scales, b = problem(rng, n, k, g, m, bias=True)
    x_new = (rng.standard_normal((m, k)) * 2).astype(BF16)
    w_old, w_new = weights(rng, 999, k).astype(BF16), weights(rng, 999, k).astype(BF16)
    want_packed, want_scales = radiance.quantize_rows(w_new, g)
    packed_t, scales_t, b_t, x_new_t, w_new_t = on(dev, packed, scales, b, x_new, w_new)
    with torch.cuda.device(target):
        want = to_numpy(radiance.apply(x_new_t, packed_t, scales_t, b_t, g))
    x_buf, w_buf = on(dev, x_old, w_old)
    torch.cuda.synchronize(dev)

    side = torch.cuda.Stream(device=dev)
    side.wait_stream(torch.cuda.current_stream(dev))
    with torch.cuda.stream(side), torch.cuda.device(current):
        assert torch.cuda.current_device() == current
        assert torch.cuda.current_stream(dev) == side
        busy = torch.randn(4096, 4096, device=dev)
        for _ in range(20):
            busy = busy @ busy.t() * 1e-3
        x_buf.copy_(_late(busy, x_new_t))
        w_buf.copy_(_late(busy, w_new_t))
        calls = three_calls(x_buf, packed_t, scales_t, b_t, g)
        quantized = radiance.quantize_rows(w_buf, g)
        quantized_op = torch.ops.radiance.quantize_rows(w_buf, g, "mse")
        assert torch.cuda.current_device() == current
    side.synchronize()
    for name, y in calls.items():
        assert y.device == dev
        np.testing.assert_array_equal(bits(to_numpy(y)), bits(want), err_msg=f"{name} seed {seed}")
    for name, (p, s) in (("radiance.quantize_rows", quantized),
                         ("torch.ops.radiance.quantize_rows", quantized_op)):
        np.testing.assert_array_equal(to_numpy(p), want_packed, err_msg=f"{name} seed {seed}")
        np.testing.assert_array_equal(bits(to_numpy(s)), bits(want_scales), err_msg=name)


# --- CUDA graphs --------------------------------------------------------------------------------


@pytest.mark.gpu(2)
@pytest.mark.parametrize("current_in_capture", [1, 0], ids=["cuda1-current", "cuda0-current"])
def test_cuda_graph_captured_on_gpu_1(current_in_capture):
    """A graph captured on a stream of cuda:1 (cuda:0 current outside; inside, cuda:1 current or
    cuda:0 made current again) holds the three calls for several M; replayed on fresh inputs it
    gives the eager logits bit for bit."""
    rng, seed = fresh_rng()
    dev = torch.device("cuda", 1)
    n, k, g = 3001, 1152, 128
    _, packed, scales, b = problem(rng, n, k, g, 1, bias=True)
    packed_t, scales_t, b_t = on(dev, packed, scales, b)
    static_x = {m: torch.zeros((m, k), dtype=torch.bfloat16, device=dev) for m in (1, 5, 16, 64)}
    capture = torch.cuda.Stream(device=dev)
    with torch.cuda.device(0):
        capture.wait_stream(torch.cuda.current_stream(dev))
        with torch.cuda.stream(capture), torch.cuda.device(current_in_capture):
            for x in static_x.values():  # warm-up outside the capture, as torch asks
                three_calls(x, packed_t, scales_t, b_t, g)
        torch.cuda.current_stream(dev).wait_stream(capture)
        torch.cuda.synchronize(dev)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=capture):
            with torch.cuda.device(current_in_capture):
                static_y = {m: three_calls(x, packed_t, scales_t, b_t, g)
                            for m, x in static_x.items()}
        assert torch.cuda.current_device() == 0
        for replay in range(3):
            fresh = {m: (rng.standard_normal((m, k)) * 2).astype(BF16) for m in static_x}
            for m, x in static_x.items():
                x.copy_(to_torch(fresh[m], dev))
            with torch.cuda.device(1):
                graph.replay()
            torch.cuda.synchronize(dev)
            for m, calls in static_y.items():
                with torch.cuda.device(1):
                    want = to_numpy(radiance.apply(to_torch(fresh[m], dev), packed_t, scales_t,
                                                   b_t, g))
                for name, y in calls.items():
                    np.testing.assert_array_equal(
                        bits(to_numpy(y)), bits(want),
                        err_msg=f"{name}, M={m}, replay {replay}, seed {seed}")
                if replay == 0:
                    excess = float64_excess(want, fresh[m], packed, scales, g, b)
                    assert excess <= 1.0, f"M={m} seed {seed}: {excess:.2f}x the bf16 bound"


# --- bad input ----------------------------------------------------------------------------------


@pytest.mark.gpu(2)
@pytest.mark.parametrize("moved, where", [("packed", "cuda:1"), ("scales", "cuda:1"),
                                          ("bias", "cuda:1"), ("out", "cuda:1"),
                                          ("packed", "cpu"), ("x", "cuda:0")])
def test_inputs_on_two_devices_are_refused(moved, where):
    """Everything on one GPU but `moved`: a ValueError that names x and the moved argument, the
    caller's output untouched and the current device unchanged."""
    rng, _ = fresh_rng()
    home = "cuda:0" if moved != "x" else "cuda:1"
    n, k, g, m = 1001, 1152, 128, 4
    x, packed, scales, b = problem(rng, n, k, g, m, bias=True)
    args = dict(zip(("x", "packed", "scales", "bias"), on(home, x, packed, scales, b)))
    args["out"] = torch.full((m, n), 3.0, dtype=torch.bfloat16, device=home)
    args[moved] = (args[moved].to(where) if moved != "out" else
                   torch.full((m, n), 3.0, dtype=torch.bfloat16, device=where))
    other = "packed" if moved == "x" else moved
    pattern = rf"x and {other} are on different devices|{other} and x are on different devices"
    with torch.cuda.device(1):
        with pytest.raises(ValueError, match=pattern):
            radiance.apply(args["x"], args["packed"], args["scales"], args["bias"], g,
                           out=args["out"])
        assert (args["out"] == 3.0).all(), "out was written by a refused call"
        if moved != "out":
            for op in (torch.ops.radiance.apply, torch_ops.apply_int4):
                with pytest.raises(ValueError, match=pattern):
                    op(args["x"], args["packed"], args["scales"], args["bias"], g)
        assert torch.cuda.current_device() == 1


@pytest.mark.gpu(2)
@pytest.mark.parametrize("moved", ["packed_out", "scales_out"])
def test_quantize_outputs_on_another_gpu_are_refused(moved):
    rng, _ = fresh_rng()
    w = to_torch(weights(rng, 500, 256).astype(BF16), "cuda:1")
    outs = {"packed_out": torch.full((500, 32), 0x1234567, dtype=torch.int32, device="cuda:1"),
            "scales_out": torch.full((500, 2), 3.0, dtype=torch.bfloat16, device="cuda:1")}
    outs[moved] = outs[moved].to("cuda:0")
    before = {name: t.clone() for name, t in outs.items()}
    with torch.cuda.device(0):
        with pytest.raises(ValueError, match=f"w and {moved} are on different devices"):
            radiance.quantize_rows(w, 128, **outs)
        assert torch.cuda.current_device() == 0
    for name, t in outs.items():
        assert torch.equal(t, before[name]), f"{name} was written by a refused call"


# --- fresh processes and threads ----------------------------------------------------------------

# Run in a new interpreter: the per-device caches (SM version, wgmma probe, shared memory and SM
# count) are filled by the first call on each GPU, so here the first call of the process is on
# cuda:1 with cuda:0 current, then cuda:0 follows with its own entries.
_FIRST_CALL_ON_GPU_1 = textwrap.dedent("""
    import sys
    import numpy as np
    import torch
    import radiance
    from radiance import torch_ops

    # A context on cuda:0 first, so that torch really makes cuda:0 current again after each of
    # its own calls on cuda:1 (without one it only pretends to, leaving the runtime on cuda:1).
    torch.zeros(1, device="cuda:0")
    assert torch.cuda.current_device() == 0
    rng = np.random.default_rng(int(sys.argv[1]))
    k, g = 4096, 128
    w = torch.from_numpy(rng.standard_normal((2053, k)) * 0.02).to(torch.bfloat16)
    xs = [torch.from_numpy(rng.standard_normal((m, k))).to(torch.bfloat16)
          for m in (1, 4, 8, 16, 32, 64, 100)]
    results = {}
    for device in (1, 0):
        packed, scales = radiance.quantize_rows(w.to(f"cuda:{device}"), g)
        ys = [torch_ops.apply_int4(x.to(f"cuda:{device}"), packed.view(torch.int8), scales, None, g)
              for x in xs]
        assert all(y.device.index == device for y in ys)
        results[device] = (packed.cpu(), scales.cpu(), [y.cpu() for y in ys])
        assert torch.cuda.current_device() == 0, "the current device changed"
    packed_cpu, scales_cpu = radiance.quantize_rows(w, g)
    for device, (packed, scales, ys) in results.items():
        assert torch.equal(packed, packed_cpu) and torch.equal(scales, scales_cpu), device
        for x, y, y0 in zip(xs, ys, results[1][2]):
            assert torch.equal(y.view(torch.int16), y0.view(torch.int16)), (device, x.shape[0])
    print("first call on cuda:1: ok")
""")


def run_fresh_python(code, *args):
    """code in a new interpreter that imports this radiance; its CompletedProcess. A run past
    CALL_TIMEOUT_S (a hang) fails the test."""
    package_root = os.path.dirname(os.path.dirname(radiance.__file__))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [package_root] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    try:
        return subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True,
                              text=True, timeout=CALL_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the fresh process hung (> {CALL_TIMEOUT_S} s), arguments {args}")


def test_run_fresh_python_uses_this_radiance():
    run = run_fresh_python("import sys, radiance; print(radiance.__file__, sys.argv[1])", "x")
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == [radiance.__file__, "x"]


@pytest.mark.gpu(2)
def test_fresh_process_first_call_on_gpu_1():
    seed = int.from_bytes(os.urandom(4), "little")
    run = run_fresh_python(_FIRST_CALL_ON_GPU_1, str(seed))
    assert run.returncode == 0 and "ok" in run.stdout, (
        f"seed {seed}, exit {run.returncode}:\n{run.stdout}\n{run.stderr[-4000:]}")


@pytest.mark.gpu(2)
def test_two_threads_drive_two_gpus_at_once():
    """One thread per GPU, cuda:0 current in both (torch's current device is per thread): every
    quantize and apply lands on its tensors' GPU, with the same bits as on the CPU/alone."""
    rng, seed = fresh_rng()
    n, k, g = 2053, 2944, 128
    w = weights(rng, n, k).astype(BF16)
    want_packed, want_scales = radiance.quantize_rows(w, g)
    x = (rng.standard_normal((8, k)) * 2).astype(BF16)
    with torch.cuda.device(0):
        want_y = to_numpy(radiance.apply(*on("cuda:0", x, want_packed, want_scales), None, g))

    def drive(device):
        w_t, x_t = on(f"cuda:{device}", w, x)
        for _ in range(25):
            packed, scales = radiance.quantize_rows(w_t, g)
            y = torch_ops.apply_int4(x_t, packed.view(torch.int8), scales, None, g)
            if not (np.array_equal(to_numpy(packed), want_packed)
                    and np.array_equal(bits(to_numpy(scales)), bits(want_scales))
                    and np.array_equal(bits(to_numpy(y)), bits(want_y))):
                return f"cuda:{device}: different bits"
            if torch.cuda.current_device() != 0:
                return f"cuda:{device}: the current device changed"
        return "ok"

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(drive, device) for device in (0, 1)]
        outcomes = [f.result(timeout=CALL_TIMEOUT_S) for f in futures]
    assert outcomes == ["ok", "ok"], f"seed {seed}: {outcomes}"


# A process that works on cuda:1 alone must not make a context on cuda:0 (hundreds of MB of that
# GPU's memory, in every rank of a TP deployment). The calls come from a thread of their own,
# whose CUDA runtime device is 0 with no context, with outputs given (no torch allocation moves
# that thread's device first): a device guard that restores the caller's device with
# cudaSetDevice(0) creates the context there (CUDA 12 initializes it on cudaSetDevice).
_NO_CONTEXT_ON_GPU_0 = textwrap.dedent("""
    import sys
    import threading
    import torch
    import radiance

    has_context = getattr(torch._C, "_cuda_hasPrimaryContext", None)
    if has_context is None:
        print("SKIP: this torch cannot tell whether a GPU has a context")
        sys.exit(0)
    k, g, n, m = 1024, 128, 999, 4
    w = torch.randn(n, k, device="cuda:1").to(torch.bfloat16)
    x = torch.randn(m, k, device="cuda:1").to(torch.bfloat16)
    packed = torch.empty((n, k // 8), dtype=torch.int32, device="cuda:1")
    scales = torch.empty((n, k // g), dtype=torch.bfloat16, device="cuda:1")
    out = torch.empty((m, n), dtype=torch.bfloat16, device="cuda:1")
    torch.cuda.synchronize(1)
    if has_context(0):
        print("SKIP: torch itself made a context on cuda:0")
        sys.exit(0)
    errors = []

    def work():
        try:
            radiance.quantize_rows(w, g, packed_out=packed, scales_out=scales)
            radiance.apply(x, packed, scales, None, g, out=out)
        except BaseException as error:
            errors.append(repr(error))

    thread = threading.Thread(target=work)
    thread.start()
    thread.join(120)
    assert not thread.is_alive() and not errors, errors
    context_after = has_context(0)  # before this thread calls anything again
    torch.cuda.synchronize(1)
    want_packed, want_scales = radiance.quantize_rows(w.cpu(), g)
    assert torch.equal(packed.cpu(), want_packed) and torch.equal(scales.cpu(), want_scales)
    want = radiance.apply(x, packed, scales, None, g)
    assert torch.equal(out.view(torch.int16), want.view(torch.int16))
    print("context on cuda:0:", context_after)
""")


@pytest.mark.gpu(2)
def test_work_on_gpu_1_makes_no_context_on_gpu_0():
    run = run_fresh_python(_NO_CONTEXT_ON_GPU_0)
    if "SKIP:" in run.stdout:
        pytest.skip(run.stdout.split("SKIP:", 1)[1].strip())
    assert run.returncode == 0, f"exit {run.returncode}:\n{run.stdout}\n{run.stderr[-4000:]}"
    assert "context on cuda:0: False" in run.stdout, (
        "radiance's device guard made a context on cuda:0 while restoring the caller's device "
        f"(csrc/module.c leave_device):\n{run.stdout}")
