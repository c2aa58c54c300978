"""torch tensors at the public API: in-place writes as torch does them (version counter, autograd),
tensors whose bits DLPack cannot carry (negative, conjugate), mixed torch/NumPy arguments, meta
tensors. CPU only; the GPU side is in test_gpu_torch.py."""

import numpy as np
import pytest

import radiance

torch = pytest.importorskip("torch")
import radiance.torch_ops  # noqa: E402  (registers torch.ops.radiance)


@pytest.fixture(scope="module")
def head():
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(24, 256, generator=gen)
    packed, scales = radiance.quantize_rows(w)
    x = torch.randn(3, 256, generator=gen).to(torch.bfloat16)
    return w, packed, scales, x


def test_out_bumps_the_version_counter(head):
    w, packed, scales, x = head
    out = torch.empty(3, 24, dtype=torch.bfloat16)
    before = out._version
    assert radiance.apply(x, packed, scales, out=out) is out
    assert out._version > before
    assert torch.equal(out, radiance.apply(x, packed, scales))
    packed_out = torch.empty_like(packed)
    scales_out = torch.empty_like(scales)
    versions = packed_out._version, scales_out._version
    radiance.quantize_rows(w, packed_out=packed_out, scales_out=scales_out)
    assert packed_out._version > versions[0] and scales_out._version > versions[1]
    assert torch.equal(packed_out, packed)


def test_out_bump_is_seen_by_autograd(head):
    """A tensor saved for backward and then overwritten by radiance: backward must notice."""
    _, packed, scales, x = head
    leaf = torch.ones(3, 24, dtype=torch.bfloat16, requires_grad=True)
    out = torch.zeros(3, 24, dtype=torch.bfloat16)
    y = (leaf * out).sum()  # saves out for backward
    radiance.apply(x, packed, scales, out=out)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()


def test_out_that_requires_grad_is_refused(head):
    w, packed, scales, x = head
    leaf = torch.zeros(3, 24, dtype=torch.bfloat16, requires_grad=True)
    with pytest.raises(ValueError, match="out requires grad"):
        radiance.apply(x, packed, scales, out=leaf)
    assert not leaf.detach().any(), "refused, yet written"
    non_leaf = torch.zeros(3, 24, requires_grad=True).to(torch.bfloat16)
    with pytest.raises(ValueError, match="out requires grad"):
        radiance.apply(x, packed, scales, out=non_leaf)
    with pytest.raises(ValueError, match="scales_out requires grad"):
        radiance.quantize_rows(w, scales_out=torch.zeros(24, 2, requires_grad=True))
    with torch.no_grad():  # as torch allows in-place writes to leaves under no_grad
        assert radiance.apply(x, packed, scales, out=leaf) is leaf
    assert torch.equal(leaf.detach(), radiance.apply(x, packed, scales))


def test_negative_bit_inputs_are_read_with_their_sign(head):
    w, packed, scales, x = head
    expected = radiance.apply(x, packed, scales)
    x_neg = torch._neg_view(-x)  # same values as x, stored negated with the negative bit set
    assert x_neg.is_neg() and torch.equal(x_neg, x)
    assert torch.equal(radiance.apply(x_neg, packed, scales), expected)
    bias = torch.randn(24).to(torch.bfloat16)
    assert torch.equal(radiance.apply(x, packed, scales, torch._neg_view(-bias)),
                       radiance.apply(x, packed, scales, bias))
    for got, want in zip(radiance.quantize_rows(torch._neg_view(-w)), (packed, scales)):
        assert torch.equal(got, want)
    assert torch.equal(radiance.dequantize(packed, torch._neg_view(-scales)),
                       radiance.dequantize(packed, scales))
    # the op: torch's dispatcher resolves the bit before the kernel runs
    assert torch.equal(torch.ops.radiance.apply(x_neg, packed, scales), expected)


def test_negative_bit_output_is_refused(head):
    _, packed, scales, x = head
    out = torch._neg_view(torch.zeros(3, 24, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="out has torch's negative or conjugate bit set"):
        radiance.apply(x, packed, scales, out=out)


def test_mixed_torch_and_numpy_arguments(head):
    w, packed, scales, x = head
    expected = radiance.apply(x, packed, scales)
    np_packed, np_scales = packed.numpy(), scales.view(torch.int16).numpy().view(radiance.bfloat16)
    got = radiance.apply(x, np_packed, np_scales)
    assert isinstance(got, torch.Tensor) and torch.equal(got, expected)
    got = radiance.apply(x.view(torch.int16).numpy().view(radiance.bfloat16), packed, scales)
    assert isinstance(got, np.ndarray)
    assert torch.equal(torch.from_numpy(got.view(np.int16)).view(torch.bfloat16), expected)
    w_hat = radiance.dequantize(packed, scales)
    assert torch.equal(radiance.dequantize(packed, np_scales), w_hat)
    assert np.array_equal(radiance.dequantize(np_packed, scales), w_hat.numpy())
    out = np.zeros((3, 24), radiance.bfloat16)
    radiance.apply(x, packed, scales, out=out)
    assert torch.equal(torch.from_numpy(out.view(np.int16)).view(torch.bfloat16), expected)
    got = radiance.quantize_rows(w, packed_out=np.zeros((24, 32), np.int32))
    assert np.array_equal(got[0], packed.numpy()) and torch.equal(got[1], scales)


@pytest.mark.parametrize("which", ["x", "packed", "scales", "bias", "out"])
def test_meta_tensors_give_one_clear_error(head, which):
    _, packed, scales, x = head
    args = {"x": x, "packed": packed, "scales": scales, "bias": torch.zeros(24, dtype=torch.bfloat16),
            "out": torch.empty(3, 24, dtype=torch.bfloat16)}
    args[which] = args[which].to("meta")
    with pytest.raises(ValueError, match=f"^{which} is a meta tensor") as error:
        radiance.apply(args["x"], args["packed"], args["scales"], args["bias"], out=args["out"])
    assert "\n" not in str(error.value)


def test_meta_tensors_elsewhere(head):
    w, packed, scales, _ = head
    with pytest.raises(ValueError, match="^w is a meta tensor"):
        radiance.quantize_rows(w.to("meta"))
    with pytest.raises(ValueError, match="^packed is a meta tensor"):
        radiance.dequantize(packed.to("meta"), scales)
    with pytest.raises(ValueError, match="^words is a meta tensor"):
        radiance.unpack_shuffle(packed.to("meta"))
    # _C itself: torch's C++ message is cut to its first line and names the argument
    with pytest.raises(ValueError, match="^w could not be read through DLPack: [^\n]*$"):
        radiance._C.quantize_rows(w.to("meta"))
    # the op infers shapes on meta tensors
    y = torch.ops.radiance.apply(torch.empty(5, 256, dtype=torch.bfloat16, device="meta"),
                                 packed.to("meta"), scales.to("meta"))
    assert y.shape == (5, 24) and y.device.type == "meta"


def test_x_with_an_empty_dimension(head):
    _, packed, scales, x = head
    with pytest.raises(ValueError, match="x has K = 0 columns, but packed holds K = 256"):
        radiance.apply(torch.zeros(2, 3, 0), packed, scales)
    assert radiance.apply(torch.zeros(0, 3, 256), packed, scales).shape == (0, 3, 24)


@pytest.mark.gpu
def test_on_the_gpu_overlap_negative_bit_and_version():
    gen = torch.Generator(device="cuda").manual_seed(1)
    w = torch.randn(24, 256, device="cuda", generator=gen)
    packed, scales = radiance.quantize_rows(w)
    x = torch.randn(3, 256, device="cuda", generator=gen).to(torch.bfloat16)
    expected = radiance.apply(x, packed, scales)
    buffer = torch.zeros(3 * 256 + 64, dtype=torch.bfloat16, device="cuda")
    buffer[:768].copy_(x.reshape(-1))
    with pytest.raises(ValueError, match="out and x overlap in memory"):  # out at byte 1504
        radiance.apply(buffer[:768].view(3, 256), packed, scales, out=buffer[752:824].view(3, 24))
    assert torch.equal(radiance.apply(torch._neg_view(-x), packed, scales), expected)
    out = torch.empty(3, 24, dtype=torch.bfloat16, device="cuda")
    before = out._version
    radiance.apply(x, packed, scales, out=out)
    assert out._version > before and torch.equal(out, expected)
    with pytest.raises(ValueError, match="scales_out and packed_out overlap in memory"):
        words = torch.zeros(24 * 32 + 16, dtype=torch.int32, device="cuda")
        radiance.quantize_rows(w, packed_out=words[:768].view(24, 32),
                               scales_out=words[760:784].view(torch.bfloat16).view(24, 2))
