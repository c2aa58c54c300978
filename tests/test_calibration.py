"""Calibration statistics: E[x^2] per channel and the safetensors file that carries them."""

import ml_dtypes
import numpy as np
import pytest

import radiance
from radiance import calibration

pytest.importorskip("safetensors")


def test_activation_sq_is_the_float64_mean_of_squares():
    rng = np.random.default_rng(1)
    h = (rng.standard_normal((1001, 77)) * rng.lognormal(0, 2, size=77)).astype(np.float32)
    a = calibration.compute_activation_sq(h)
    assert a.dtype == np.float32 and a.shape == (77,)
    np.testing.assert_array_equal(a, (h.astype(np.float64) ** 2).mean(axis=0).astype(np.float32))
    # [batch, seq, hidden] and bf16 give the same as the flat float32 states
    np.testing.assert_array_equal(calibration.compute_activation_sq(h[:1000].reshape(10, 100, 77)),
                                  calibration.compute_activation_sq(h[:1000]))
    hb = h.astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(calibration.compute_activation_sq(hb),
                                  calibration.compute_activation_sq(hb.astype(np.float32)))


@pytest.mark.parametrize("bad, match", [
    (np.zeros((0, 8), np.float32), "no tokens"),
    (np.zeros(8, np.float32), r"\[tokens, hidden\]"),
    (np.array([[1.0, np.nan]], np.float32), "non-finite"),
    (np.array([["a", "b"]]), "real numbers"),
])
def test_activation_sq_bad_hidden_states(bad, match):
    with pytest.raises((ValueError, TypeError), match=match):
        calibration.compute_activation_sq(bad)


def test_save_load_round_trip_and_identity(tmp_path):
    rng = np.random.default_rng(2)
    head = rng.standard_normal((300, 64)).astype(ml_dtypes.bfloat16)
    a = calibration.compute_activation_sq(rng.standard_normal((50, 64)))
    path = tmp_path / "stats.safetensors"
    calibration.save_stats(path, a, tokens=50, head=head, model_path="/models/x.gguf")
    ident = calibration.head_id(head)
    stats = calibration.load_stats(path, expected_hidden=64, expected_head_id=ident)
    np.testing.assert_array_equal(stats.activation_sq, a)
    assert stats.tokens == 50 and stats.head == ident and stats.model_path == "/models/x.gguf"
    assert (ident.vocab, ident.hidden) == (300, 64)
    # usable as is
    radiance.quantize_rows(head, 64, "act", activation_sq=stats.activation_sq)

    other = head.copy()
    other[17, 3] = other[17, 3] + ml_dtypes.bfloat16(1.0)  # one weight differs
    with pytest.raises(ValueError, match="statistics of another head"):
        calibration.load_stats(path, expected_head_id=calibration.head_id(other))
    with pytest.raises(ValueError, match="hidden size 64, but the model has 65"):
        calibration.load_stats(path, expected_hidden=65)
    # the same values in another dtype are another head's bytes
    assert calibration.head_id(head.astype(np.float32)) != ident


def test_save_refuses_mismatched_or_bad_statistics(tmp_path):
    head = np.ones((10, 32), np.float32)
    with pytest.raises(ValueError, match=r"\[hidden\] = \[32\]"):
        calibration.save_stats(tmp_path / "s", np.ones(31, np.float32), tokens=5, head=head)
    bad = np.ones(32, np.float32)
    bad[4] = -1
    with pytest.raises(ValueError, match=r"activation_sq\[4\]"):
        calibration.save_stats(tmp_path / "s", bad, tokens=5, head=head)
    with pytest.raises(ValueError, match="tokens must be a positive int"):
        calibration.save_stats(tmp_path / "s", np.ones(32, np.float32), tokens=0, head=head)


def test_load_refuses_files_that_are_not_statistics(tmp_path):
    from safetensors.numpy import save_file

    with pytest.raises(ValueError, match="no such statistics file"):
        calibration.load_stats(tmp_path / "missing.safetensors")
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"\x00" * 64)
    with pytest.raises(ValueError, match="not a safetensors file"):
        calibration.load_stats(junk)
    plain = tmp_path / "plain.safetensors"
    save_file({"activation_sq": np.ones(8, np.float32)}, str(plain))
    with pytest.raises(ValueError, match="not a radiance statistics file"):
        calibration.load_stats(plain)
    wrong = tmp_path / "wrong.safetensors"
    save_file({"activation_sq": np.ones(8, np.float32)}, str(wrong),
              metadata={"format": calibration.FORMAT, "version": "1", "tokens": "3", "vocab": "4",
                        "hidden": "9", "head_sha256": "00"})
    with pytest.raises(ValueError, match=r"expected float32 \[9\]"):
        calibration.load_stats(wrong)


def test_source_of_the_tokens_round_trips(tmp_path):
    head = np.ones((10, 32), np.float32)
    text = "The same text gives the same source; another text another."
    source = calibration.text_source(text)
    assert source.startswith("text sha256:") and source == calibration.text_source(text)
    assert source != calibration.text_source(text + " ")
    path = tmp_path / "s.safetensors"
    calibration.save_stats(path, np.ones(32, np.float32), tokens=7, head=head, source=source)
    assert calibration.load_stats(path).source == source
    # a file without a source (older, or made elsewhere) reads as an unknown source
    calibration.save_stats(path, np.ones(32, np.float32), tokens=7, head=head)
    assert calibration.load_stats(path).source == ""
    h = np.arange(64, dtype=np.float32).reshape(2, 32)
    assert calibration.array_source(h) == calibration.array_source(h.copy())
    assert calibration.array_source(h) != calibration.array_source(h.astype(np.float16))
    assert calibration.array_source(h) != calibration.array_source(h.reshape(4, 16))


def test_head_id_of_a_torch_bf16_head_is_that_of_its_numpy_copy():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    head = rng.standard_normal((40, 16)).astype(ml_dtypes.bfloat16)
    tensor = torch.from_numpy(head.view(np.int16)).view(torch.bfloat16)
    assert calibration.head_id(tensor) == calibration.head_id(head)
    assert calibration.head_id(tensor.float()) == calibration.head_id(head.astype(np.float32))
    assert calibration.head_id(tensor) != calibration.head_id(tensor.float())
