"""torch.ops.radiance on a GPU: opcheck, torch.compile and CUDA graphs against eager, the vLLM
decode shapes; skipped without a GPU build of radiance and a GPU visible to torch.

Eager, compiled and graph-replayed calls run the same kernel on the same inputs, so they must
agree bit for bit; quantize_rows on the GPU must equal the CPU bit for bit (docs/FORMAT.md); apply on
the GPU is compared with the CPU within one bf16 rounding (the summation order differs).
"""

import pytest

import radiance

torch = pytest.importorskip("torch")

from radiance import torch_ops  # noqa: E402  (needs torch: registers the ops)

pytestmark = pytest.mark.gpu
DEV = torch.device("cuda")
DECODE_M = (1, 4, 16)


def _head(n, k, seed, dtype=torch.bfloat16, device=DEV):
    g = torch.Generator(device="cpu").manual_seed(seed)
    w = torch.randn(n, k, generator=g) * 0.02
    w[:: max(1, n // 5)] = 0.0  # zero rows, like vLLM's vocab padding
    return w.to(dtype).to(device)


def _x(m, k, seed):
    g = torch.Generator(device="cpu").manual_seed(seed)
    return torch.randn(m, k, generator=g).to(torch.bfloat16).to(DEV)


@pytest.fixture(scope="module")
def head():
    n, k = 4096 + 64, 1024  # not a power of two in N
    w = _head(n, k, seed=1)
    packed, scales = torch.ops.radiance.quantize_rows(w, 128, "mse")
    bias = (torch.randn(n, generator=torch.Generator().manual_seed(2)) * 0.1)
    return w, packed, scales, bias.to(torch.bfloat16).to(DEV)


@pytest.mark.parametrize("group_size", [32, 128, 256])
@pytest.mark.parametrize("clip", ["mse", "rtn"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_quantize_gpu_equals_cpu(group_size, clip, dtype):
    w = _head(1000, 512, seed=3, dtype=dtype)
    packed, scales = torch.ops.radiance.quantize_rows(w, group_size, clip)
    assert packed.is_cuda and scales.is_cuda
    ref_packed, ref_scales = torch.ops.radiance.quantize_rows(w.cpu(), group_size, clip)
    assert torch.equal(packed.cpu(), ref_packed)
    assert torch.equal(scales.cpu(), ref_scales)


@pytest.mark.parametrize("m", DECODE_M + (64,))
def test_apply_gpu_close_to_cpu(head, m):
    _, packed, scales, bias = head
    x = _x(m, packed.shape[1] * 8, seed=m)
    y = torch.ops.radiance.apply(x, packed, scales, bias, 128)
    y_cpu = torch.ops.radiance.apply(x.cpu(), packed.cpu(), scales.cpu(), bias.cpu(), 128)
    assert y.is_cuda and y.dtype == torch.bfloat16
    # From 33 tokens the Hopper kernel folds each scale into its weight, bf16_rne(q * s)
    # (docs/FORMAT.md, "Rounding of apply"): up to 2^-9 of every |x * w| term on top of the bf16
    # rounding of both outputs.
    w_hat = radiance.dequantize(packed.cpu(), scales.cpu(), group_size=128).double()
    fold = 2.0**-9 * (x.cpu().double().abs() @ w_hat.abs().T)
    diff = (y.cpu().double() - y_cpu.double()).abs()
    assert (diff <= 2.0**-7 * y_cpu.double().abs() + fold + 1e-3).all(), (diff - fold).max()


def test_opcheck_cuda(head):
    _, packed, scales, bias = head
    x = _x(4, packed.shape[1] * 8, seed=5)
    torch.library.opcheck(torch.ops.radiance.apply.default, (x, packed, scales, bias, 128))
    torch.library.opcheck(torch.ops.radiance.apply.default,
                          (x, packed.view(torch.int8), scales, None, 128))
    torch.library.opcheck(torch.ops.radiance.quantize_rows.default,
                          (_head(64, 256, seed=6), 64, "mse"))


@pytest.mark.parametrize("mode", ["default", "max-autotune-no-cudagraphs", "reduce-overhead"])
def test_compile_fullgraph_equals_eager(head, mode):
    _, packed, scales, bias = head
    torch._dynamo.reset()

    def logits(x, packed, scales, bias):
        return torch.ops.radiance.apply(x * 0.5, packed, scales, bias, 128)

    compiled = torch.compile(logits, fullgraph=True, dynamic=False, mode=mode)
    for m in DECODE_M:
        x = _x(m, packed.shape[1] * 8, seed=10 + m)
        for _ in range(3):  # reduce-overhead records a CUDA graph on a later call, then replays
            y = compiled(x, packed, scales, bias).clone()
        assert torch.equal(y, logits(x, packed, scales, bias)), f"M={m}"


def test_cuda_graph_capture_and_replay(head):
    _, packed, scales, bias = head
    k = packed.shape[1] * 8
    for m in DECODE_M:
        static_x = _x(m, k, seed=20 + m)
        # Warm up on a side stream, as torch's CUDA graph docs ask.
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                torch_ops.apply_int4(static_x, packed.view(torch.int8), scales, bias, 128)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_y = torch.ops.radiance.apply(static_x, packed, scales, bias, 128)
            static_y_fast = torch_ops.apply_int4(static_x, packed.view(torch.int8), scales,
                                                 bias, 128)
        for seed in (30, 31, 32):
            fresh = _x(m, k, seed=seed + m)
            static_x.copy_(fresh)
            graph.replay()
            eager = torch.ops.radiance.apply(fresh, packed, scales, bias, 128)
            assert torch.equal(static_y, eager), f"M={m}, replay with seed {seed}"
            assert torch.equal(static_y_fast, eager), f"M={m}, replay with seed {seed}"


def test_op_runs_on_the_current_stream(head):
    """On a side stream, the op must read an input that the same stream writes late (after a long
    kernel): launched on any other stream it would read that input before it is written."""
    _, packed, scales, bias = head
    x = _x(16, packed.shape[1] * 8, seed=40)
    expected = torch.ops.radiance.apply(x, packed, scales, bias, 128)
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        busy = torch.randn(4096, 4096, device=DEV)
        for _ in range(20):
            busy = busy @ busy.t() * 1e-3
        late_x = torch.where(busy[:1, :1] == busy[:1, :1], x, x)  # written after the matmuls
        ys = [torch.ops.radiance.apply(late_x, packed, scales, bias, 128),
              torch_ops.apply_int4(late_x, packed.view(torch.int8), scales, bias, 128)]
    side.synchronize()
    for y in ys:
        assert torch.equal(y, expected)


def test_apply_int4_eager_fast_path_equals_op(head):
    _, packed, scales, bias = head
    for m in DECODE_M:
        x = _x(m, packed.shape[1] * 8, seed=50 + m)
        assert torch.equal(torch_ops.apply_int4(x, packed.view(torch.int8), scales, bias, 128),
                           torch.ops.radiance.apply(x, packed, scales, bias, 128))


def test_non_bf16_activations_are_rounded_first(head):
    _, packed, scales, bias = head
    x = _x(4, packed.shape[1] * 8, seed=60).float() * 1.001
    assert torch.equal(torch.ops.radiance.apply(x, packed, scales, bias.float(), 128),
                       torch.ops.radiance.apply(x.bfloat16(), packed, scales, bias, 128))


def test_embedding_int4_on_gpu(head):
    _, packed, scales, _ = head
    ids = torch.tensor([0, 5, 4000, 4159], device=DEV)
    rows = torch_ops.embedding_int4(ids, packed, scales, 128, torch.float32)
    table = radiance.dequantize(packed, scales, 128)
    assert torch.equal(rows, table[ids])


def test_vllm_style_chunked_quantize_on_gpu_equals_whole():
    """radiance.vllm quantizes a head in row chunks into one preallocated buffer."""
    from radiance.vllm import shards

    w = _head(3000, 512, seed=70)
    words = torch.empty((3072, 64), dtype=torch.int32, device=DEV)
    scales = torch.empty((3072, 4), dtype=torch.bfloat16, device=DEV)
    old = shards.CHUNK_BYTES
    shards.CHUNK_BYTES = 512 * 2 * 700  # 700 rows a chunk: chunks straddle the padding
    try:
        shards.quantize_into(w, words, scales, 128, "mse")
    finally:
        shards.CHUNK_BYTES = old
    padded = torch.cat([w, torch.zeros(72, 512, dtype=w.dtype, device=DEV)])
    ref_words, ref_scales = torch.ops.radiance.quantize_rows(padded.cpu(), 128, "mse")
    assert torch.equal(words.cpu(), ref_words) and torch.equal(scales.cpu(), ref_scales)
