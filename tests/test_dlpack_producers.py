"""DLPack producers that lie (built with ctypes): every field of a capsule is checked before its
memory is touched, the deleter of a taken capsule runs exactly once, and a deleter that raises
never turns the error being raised into a SystemError."""

import sys

import numpy as np
import pytest

import radiance
from dlpack_forge import KDL_BFLOAT, KDL_CPU, KDL_CUDA, KDL_FLOAT, KDL_INT, ForgedProducer

BF16 = radiance.bfloat16

# (lie, error, message): each as the capsule of any argument
LIES = [
    (dict(shape=(2, -1024)), ValueError, "negative dimension in its DLPack shape"),
    (dict(shape=(-1, 0)), ValueError, "negative dimension"),
    (dict(shape=(2**62, 2**62)), ValueError, "overflow 64 bits"),
    (dict(shape=(2**61, 2**2 + 1)), ValueError, "overflow 64 bits"),
    (dict(shape=(2**31, 2**31)), ValueError, "larger than any memory"),
    (dict(shape=(0, 2**62)), ValueError, "larger than any memory"),
    (dict(ndim=5), ValueError, "has 5 dimensions"),
    (dict(ndim=-1), ValueError, "has -1 dimensions"),
    (dict(null_shape=True), ValueError, "dimensions but no shape"),
    (dict(strides=(3, 3)), ValueError, "must be contiguous"),
    (dict(strides=(-1, 1)), ValueError, "must be contiguous"),
    (dict(data=0), ValueError, "data pointer is null"),
    (dict(byte_offset=2**64 - 8), ValueError, "byte_offset runs past the end"),
    (dict(data=2**64 - 2), ValueError, "byte_offset runs past the end"),
    (dict(device=(KDL_CUDA, 0), announced=(KDL_CPU, 0)), ValueError,
     r"capsule is on device \(2, 0\) but __dlpack_device__\(\) says \(1, 0\)"),
    (dict(device=(KDL_CPU, 3), announced=(KDL_CPU, 0)), ValueError, "capsule is on device"),
    (dict(dtype=(KDL_FLOAT, 32, 4)), TypeError, "unsupported dtype"),
    (dict(dtype=(KDL_FLOAT, 64, 1)), TypeError, "unsupported dtype"),
    (dict(dtype=(KDL_FLOAT, 0, 1)), TypeError, "unsupported dtype"),
    (dict(dtype=(99, 16, 1)), TypeError, "unsupported dtype"),
]


@pytest.fixture(scope="module")
def head():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((6, 256)).astype(np.float32)
    packed, scales = radiance.quantize_rows(w)
    x = rng.standard_normal((3, 256)).astype(BF16)
    return w, packed, scales, x


def calls(head):
    """(argument name, its array, call(producer)) for every argument radiance reads or writes."""
    w, packed, scales, x = head
    bias = np.zeros(6, np.float32)
    return [
        ("w", w, lambda p: radiance.quantize_rows(p)),
        ("packed_out", np.zeros((6, 32), np.int32), lambda p: radiance.quantize_rows(w, packed_out=p)),
        ("scales_out", np.zeros((6, 2), BF16), lambda p: radiance.quantize_rows(w, scales_out=p)),
        ("x", x, lambda p: radiance.apply(p, packed, scales)),
        ("packed", packed, lambda p: radiance.apply(x, p, scales)),
        ("scales", scales, lambda p: radiance.apply(x, packed, p)),
        ("bias", bias, lambda p: radiance.apply(x, packed, scales, p)),
        ("out", np.zeros((3, 6), BF16), lambda p: radiance.apply(x, packed, scales, out=p)),
        ("words", packed, lambda p: radiance.unpack_shuffle(p)),
    ]


@pytest.mark.parametrize("versioned", [False, True])
@pytest.mark.parametrize("lie, error, match", LIES)
def test_lying_capsules_are_refused(head, lie, error, match, versioned):
    for name, array, call in calls(head):
        producer = ForgedProducer(array, versioned=versioned, **lie)
        with pytest.raises(error, match=f"^{name}\\b.*{match}"):
            call(producer)
        assert producer.taken() == 1 and producer.deleted == 1, name


@pytest.mark.parametrize("versioned", [False, True])
def test_honest_capsules_compute_what_numpy_arrays_do(head, versioned):
    w, packed, scales, x = head
    expected = radiance.apply(x, packed, scales).view(np.uint16)
    producers = [ForgedProducer(a, versioned=versioned) for a in (x, packed, scales)]
    got = radiance.apply(*producers)
    np.testing.assert_array_equal(got.view(np.uint16), expected)
    assert [(p.taken(), p.deleted) for p in producers] == [(1, 1)] * 3
    out = np.zeros((3, 6), BF16)
    producer = ForgedProducer(out, versioned=versioned)
    radiance.apply(x, packed, scales, out=producer)
    np.testing.assert_array_equal(out.view(np.uint16), expected)


def test_empty_tensors_may_have_a_null_data_pointer(head):
    w = np.zeros((0, 256), np.float32)
    packed, scales = radiance.quantize_rows(ForgedProducer(w, data=0))
    assert packed.shape == (0, 32) and scales.shape == (0, 2)


def test_misaligned_host_inputs_are_copied_outputs_refused(head):
    w, packed, scales, x = head
    buffer = np.zeros(x.nbytes + 4, np.uint8)
    buffer[1 : 1 + x.nbytes] = x.view(np.uint8).reshape(-1)
    shifted = ForgedProducer(x, data=buffer.ctypes.data, byte_offset=1)
    np.testing.assert_array_equal(radiance.apply(shifted, packed, scales).view(np.uint16),
                                  radiance.apply(x, packed, scales).view(np.uint16))
    out = np.zeros(3 * 6 + 1, BF16)
    with pytest.raises(ValueError, match="out is not aligned to its element size"):
        radiance.apply(x, packed, scales, out=ForgedProducer(out[1:].reshape(3, 6), byte_offset=1))


def test_read_only_flag(head):
    w, *_ = head
    out = np.zeros((6, 32), np.int32)
    with pytest.raises(ValueError, match="packed_out is read-only"):
        radiance.quantize_rows(w, packed_out=ForgedProducer(out, versioned=True, flags=1))
    assert not out.any()


def test_unsupported_version_is_left_to_its_owner(head):
    w, *_ = head
    producer = ForgedProducer(w, versioned=True, version=(2, 0))
    with pytest.raises(ValueError, match="DLPack version 2.0 is not supported"):
        radiance.quantize_rows(producer)
    assert producer.taken() == 0 and producer.deleted == 0


@pytest.mark.parametrize("versioned", [False, True])
def test_a_deleter_that_raises(head, versioned, monkeypatch):
    """The error being raised stays that error; on success the call still returns its result.
    The deleter's own exception is reported through sys.unraisablehook."""
    w, packed, scales, x = head
    reported = []
    monkeypatch.setattr(sys, "unraisablehook", reported.append)
    producer = ForgedProducer(w, shape=(6, -256), versioned=versioned, deleter_raises=True)
    with pytest.raises(ValueError, match="negative dimension"):
        radiance.quantize_rows(producer)
    assert producer.deleted == 1
    with pytest.raises(ValueError, match=r"out must have shape \(M, N\) = \(3, 6\)"):
        radiance.apply(x, packed, scales, out=ForgedProducer(np.zeros((3, 7), BF16),
                                                                   versioned=versioned,
                                                                   deleter_raises=True))
    got = radiance.apply(ForgedProducer(x, versioned=versioned, deleter_raises=True), packed,
                         scales)
    np.testing.assert_array_equal(got.view(np.uint16),
                                  radiance.apply(x, packed, scales).view(np.uint16))
    assert [type(r.exc_value) for r in reported] == [RuntimeError] * 3
