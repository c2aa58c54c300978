"""torch.ops.radiance on the CPU: opcheck, bit-exactness against the NumPy API, fake kernels,
torch.compile(fullgraph=True) with dynamic shapes, the eager fast path and the lookup helper."""

import importlib

import ml_dtypes
import numpy as np
import pytest

import radiance

torch = pytest.importorskip("torch", reason="torch is not installed (pip install torch)")
torch_ops = importlib.import_module("radiance.torch_ops")

K = 256


def _np(t):
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def _head(n=48, k=K, seed=0, dtype=torch.bfloat16):
    g = torch.Generator().manual_seed(seed)
    w = (torch.randn(n, k, generator=g) * 0.05).to(dtype)
    w[3] = 0
    return w


def _x(m=3, k=K, seed=1, dtype=torch.bfloat16):
    return torch.randn(m, k, generator=torch.Generator().manual_seed(seed)).to(dtype)


@pytest.fixture(scope="module")
def head():
    w = _head()
    packed, scales = torch.ops.radiance.quantize_rows(w, 128, "mse")
    return w, packed, scales


def test_schemas():
    assert str(torch.ops.radiance.apply.default._schema) == (
        "radiance::apply(Tensor x, Tensor packed, Tensor scales, Tensor? bias=None, "
        "int group_size=128) -> Tensor")
    assert str(torch.ops.radiance.quantize_rows.default._schema) == (
        "radiance::quantize_rows(Tensor w, int group_size=128, str clip=\"mse\", "
        "Tensor? activation_sq=None) -> (Tensor, Tensor)")


@pytest.mark.parametrize("group_size, clip", [(128, "mse"), (32, "rtn"), (256, "mse")])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_quantize_matches_numpy_api(group_size, clip, dtype):
    w = _head(dtype=dtype)
    packed, scales = torch.ops.radiance.quantize_rows(w, group_size, clip)
    assert packed.dtype == torch.int32 and scales.dtype == torch.bfloat16
    ref_packed, ref_scales = radiance.quantize_rows(_np(w), group_size=group_size, clip=clip)
    np.testing.assert_array_equal(packed.numpy(), ref_packed)
    np.testing.assert_array_equal(_np(scales), ref_scales)


@pytest.mark.parametrize("m", [0, 1, 4, 16])
@pytest.mark.parametrize("with_bias", [False, True])
def test_apply_matches_numpy_api(head, m, with_bias):
    w, packed, scales = head
    x = _x(m)
    bias = torch.randn(w.shape[0]).to(torch.bfloat16) if with_bias else None
    y = torch.ops.radiance.apply(x, packed, scales, bias, 128)
    assert y.dtype == torch.bfloat16 and tuple(y.shape) == (m, w.shape[0])
    ref = radiance.apply(_np(x), packed.numpy(), _np(scales),
                         None if bias is None else _np(bias), group_size=128)
    np.testing.assert_array_equal(_np(y), ref)


def test_int8_view_of_packed_is_the_same_head(head):
    _, packed, scales = head
    x = _x()
    assert torch.equal(torch.ops.radiance.apply(x, packed.view(torch.int8), scales),
                       torch.ops.radiance.apply(x, packed, scales))


def test_x_and_bias_round_to_bf16_first(head):
    w, packed, scales = head
    x32 = _x(dtype=torch.float32)
    b32 = torch.randn(w.shape[0])
    assert torch.equal(torch.ops.radiance.apply(x32, packed, scales, b32),
                       torch.ops.radiance.apply(x32.bfloat16(), packed, scales, b32.bfloat16()))


def test_non_contiguous_x(head):
    _, packed, scales = head
    wide = _x(k=2 * K)
    x = wide[:, ::2]
    assert not x.is_contiguous()
    assert torch.equal(torch.ops.radiance.apply(x, packed, scales),
                       torch.ops.radiance.apply(x.contiguous(), packed, scales))


@pytest.mark.parametrize("args, kwargs", [
    ((), {}),
    ((), {"with_bias": True}),
    ((), {"int8": True}),
])
def test_opcheck_apply(head, args, kwargs):
    w, packed, scales = head
    if kwargs.get("int8"):
        packed = packed.view(torch.int8)
    bias = torch.randn(w.shape[0]).to(torch.bfloat16) if kwargs.get("with_bias") else None
    torch.library.opcheck(torch.ops.radiance.apply.default, (_x(), packed, scales, bias, 128))


@pytest.mark.parametrize("clip", ["mse", "rtn"])
def test_opcheck_quantize_rows(clip):
    torch.library.opcheck(torch.ops.radiance.quantize_rows.default, (_head(), 64, clip))


def test_fake_kernels_shapes(head):
    from torch._subclasses.fake_tensor import FakeTensorMode

    _, packed, scales = head
    with FakeTensorMode() as mode:
        x = mode.from_tensor(_x(7))
        y = torch.ops.radiance.apply(x, mode.from_tensor(packed), mode.from_tensor(scales))
        assert tuple(y.shape) == (7, 48) and y.dtype == torch.bfloat16
        p, s = torch.ops.radiance.quantize_rows(mode.from_tensor(_head(n=10)), 32, "mse")
        assert tuple(p.shape) == (10, 32) and p.dtype == torch.int32
        assert tuple(s.shape) == (10, 8) and s.dtype == torch.bfloat16


@pytest.mark.parametrize("bad, match", [
    (lambda x, p, s: (x[:, :128], p, s), "K=128"),
    (lambda x, p, s: (x, p, s[:, :1]), "scales must be"),
    (lambda x, p, s: (x, p.float(), s), "int32 or int8"),
    (lambda x, p, s: (x[0], p, s), "2-D"),
])
def test_fake_kernel_errors(head, bad, match):
    from torch._subclasses.fake_tensor import FakeTensorMode

    _, packed, scales = head
    with FakeTensorMode() as mode:
        args = bad(*(mode.from_tensor(t) for t in (_x(), packed, scales)))
        with pytest.raises(Exception, match=match):
            torch.ops.radiance.apply(*args)


def test_real_kernel_errors_name_the_problem(head):
    _, packed, scales = head
    with pytest.raises(ValueError, match="K"):
        torch.ops.radiance.apply(_x(k=128), packed, scales)
    with pytest.raises(TypeError, match="int32"):
        torch.ops.radiance.apply(_x(), packed.float(), scales)
    with pytest.raises(RuntimeError, match="multiple of group_size"):
        torch.ops.radiance.quantize_rows(_head(k=96), 64, "mse")


def test_reimport_keeps_one_registration(head):
    _, packed, scales = head
    x = _x()
    before = torch.ops.radiance.apply(x, packed, scales)
    importlib.reload(torch_ops)
    assert torch.equal(torch_ops.apply(x, packed, scales), before)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compile_fullgraph_dynamic(head, backend):
    _, packed, scales = head
    torch._dynamo.reset()

    def logits(x, packed, scales, bias):
        y = torch.ops.radiance.apply(x * 2, packed, scales, bias, 128)
        return y, y.float().softmax(-1)

    compiled = torch.compile(logits, fullgraph=True, dynamic=True, backend=backend)
    bias = torch.randn(48).to(torch.bfloat16)
    for m in (1, 4, 16):
        x = _x(m, seed=m)
        y, p = compiled(x, packed, scales, bias)
        y_eager, p_eager = logits(x, packed, scales, bias)
        assert torch.equal(y, y_eager)  # the op's own output: bit for bit
        torch.testing.assert_close(p, p_eager)  # inductor's fused softmax may round differently


def test_compile_quantize_then_apply(head):
    torch._dynamo.reset()
    w, _, _ = head

    def quantize_and_apply(w, x):
        packed, scales = torch.ops.radiance.quantize_rows(w, 128, "mse")
        return torch.ops.radiance.apply(x, packed, scales)

    x = _x()
    compiled = torch.compile(quantize_and_apply, fullgraph=True, backend="aot_eager")
    assert torch.equal(compiled(w, x), quantize_and_apply(w, x))


def test_apply_int4_is_the_op(head):
    _, packed, scales = head
    x = _x(5)
    assert torch.equal(torch_ops.apply_int4(x, packed.view(torch.int8), scales, None, 128),
                       torch.ops.radiance.apply(x, packed, scales, None, 128))


def test_embedding_int4_gives_dequantized_rows(head):
    _, packed, scales = head
    ids = torch.tensor([[0, 3], [47, 5]])
    rows = torch_ops.embedding_int4(ids, packed.view(torch.int8), scales, 128, torch.float32)
    table = radiance.dequantize(packed.numpy(), _np(scales), 128)
    assert tuple(rows.shape) == (2, 2, K)
    np.testing.assert_array_equal(rows.numpy(), table[ids.numpy()])
