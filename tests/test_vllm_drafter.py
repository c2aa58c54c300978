"""int4 drafter heads inside vLLM >= 0.33's own lm_head copy lifecycle, on the CPU.

Real vLLM objects throughout: ParallelLMHead heads built by vLLM, the copy made by vLLM's
`quantized_lm_head_copy(head, "int4")`, refreshed and swapped by vLLM's
`refresh_quantized_lm_heads`, `share_source_lm_heads` and `restore_quantized_lm_heads`, and
drafters wired to the target by vLLM's own `load_eagle_model`, `load_dflash_model` and
`load_dspark_model` (only the checkpoint read, `get_model`, hands back a small drafter built here;
for DFlash and DSpark vLLM's config `replace` is an identity, since the drafter's attention and
parallel configs are not under test). Logits go
through vLLM's LogitsProcessor and equal radiance's CPU reference bit for bit.

Run it with `bash .ci/vllm_env.sh` (vLLM 0.33); on vLLM 0.32 it skips, saying why.
"""

import logging
import types

import numpy as np
import pytest

import radiance.vllm as rv
from test_vllm import (GROUP, HIDDEN, QUARK_CONFIG, VOCAB, _activation_sq,  # noqa: F401
                       _hidden_states, _logits, _quantize_act, _reference_logits, _to_numpy,
                       _weights, _write_stats, needs_vllm, vllm_state)


def _copy_skip_reason():
    try:
        import vllm.model_executor.layers.quantization.online.lm_head  # noqa: F401
    except ImportError as error:
        return f"this vLLM has no quantized lm_head copies (vLLM >= 0.33): {error}"
    return None


needs_copies = pytest.mark.skipif(_copy_skip_reason() is not None,
                                  reason=_copy_skip_reason() or "")
pytestmark = [needs_vllm, needs_copies]


@pytest.fixture
def online():
    import vllm.model_executor.layers.quantization.online.lm_head as online

    return online


@pytest.fixture
def switches(monkeypatch, vllm_state):
    """Set the knobs, reinstall the drafter hooks; everything undone afterwards."""
    from vllm.model_executor.layers.quantization.quark.quark import QuarkConfig

    def set_switches(target_int4=False, draft_int4=False, group=None, clip=None, stats=None):
        for name, value in ((rv.ENV_ENABLE, target_int4), (rv.ENV_DRAFT, draft_int4)):
            monkeypatch.setenv(name, "1" if value else "0")
        for name, value in ((rv.ENV_GROUP_SIZE, group), (rv.ENV_CLIP, clip),
                            (rv.ENV_STATS, stats)):
            if value is None:
                monkeypatch.delenv(name, raising=False)
            else:
                monkeypatch.setenv(name, str(value))
        rv.reload_settings()
        rv.register()
        from radiance.vllm import copies

        copies.install()
        return QuarkConfig.from_config(QUARK_CONFIG)

    yield set_switches
    rv.unregister()
    for name in (rv.ENV_ENABLE, rv.ENV_DRAFT, rv.ENV_GROUP_SIZE, rv.ENV_CLIP, rv.ENV_STATS):
        monkeypatch.delenv(name, raising=False)
    rv.reload_settings()


def _head(quant_config=None, seed=1, prefix="lm_head"):
    import torch
    from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead

    head = ParallelLMHead(VOCAB, HIDDEN, params_dtype=torch.bfloat16, quant_config=quant_config,
                          prefix=prefix)
    head.weight.weight_loader(head.weight, _weights(seed))
    head.quant_method.process_weights_after_loading(head)
    return head


def _target(quant_config=None, seed=1):
    """A target model as vLLM's drafter loaders see it: .model.embed_tokens and .lm_head."""
    import torch
    from vllm.model_executor.layers.vocab_parallel_embedding import VocabParallelEmbedding

    target = torch.nn.Module()
    target.model = torch.nn.Module()
    target.model.embed_tokens = VocabParallelEmbedding(VOCAB, HIDDEN,
                                                       params_dtype=torch.bfloat16)
    target.lm_head = _head(quant_config, seed)
    return target


def _drafter(own_head_seed=None, mtp_layers=0):
    """An EAGLE/MTP/DFlash-style drafter: .model (with MTP layers' shared_head.head when asked)
    and, when own_head_seed is given, its own checkpoint head (has_own_lm_head)."""
    import torch

    drafter = torch.nn.Module()
    drafter.model = torch.nn.Module()
    drafter.config = types.SimpleNamespace(has_own_lm_head=False)
    if mtp_layers:
        drafter.model.layers = torch.nn.ModuleList()
        for _ in range(mtp_layers):
            layer = torch.nn.Module()
            layer.shared_head = torch.nn.Module()
            layer.shared_head.head = _head(None, seed=99)  # replaced by the target's
            drafter.model.layers.append(layer)
    if own_head_seed is not None:
        drafter.lm_head = _head(None, seed=own_head_seed)
        drafter.has_own_lm_head = True
    return drafter


def _load_eagle(target, drafter, monkeypatch, quantization=None):
    """vLLM's load_eagle_model, with get_model handing back `drafter`."""
    from vllm.model_executor.layers.quantization.online.lm_head import (  # noqa: F401
        quantized_lm_head_copy)
    from vllm.v1.worker.gpu.spec_decode.eagle import utils as eagle

    monkeypatch.setattr(eagle, "get_model", lambda **kwargs: drafter)
    from vllm.config import LoadConfig

    speculative = types.SimpleNamespace(apply_draft_overrides=lambda config: config,
                                        draft_model_config=None, draft_load_config=None,
                                        draft_lm_head_quantization=quantization)
    config = types.SimpleNamespace(speculative_config=speculative, load_config=LoadConfig())
    return eagle.load_eagle_model(target, config)


def _load_dflash(target, drafter, monkeypatch):
    """vLLM's load_dflash_model, with get_model handing back `drafter`."""
    from vllm.config import LoadConfig
    from vllm.v1.worker.gpu.spec_decode.dflash import utils as dflash

    monkeypatch.setattr(dflash, "get_model", lambda **kwargs: drafter)
    monkeypatch.setattr(dflash, "replace", lambda config, **changes: config)
    draft_model_config = types.SimpleNamespace(hf_config=types.SimpleNamespace(
        num_hidden_layers=0))
    speculative = types.SimpleNamespace(draft_model_config=draft_model_config,
                                        draft_load_config=None, attention_backend=None,
                                        kv_cache_dtype=None)
    config = types.SimpleNamespace(speculative_config=speculative, load_config=LoadConfig(),
                                   attention_config=None, cache_config=None)
    return dflash.load_dflash_model(target, config)


def _load_dspark(target, drafter, monkeypatch):
    """vLLM's load_dspark_model, with get_model handing back `drafter`."""
    import vllm.model_executor.model_loader as model_loader
    import vllm.model_executor.models.utils as model_utils
    from vllm.config import LoadConfig
    from vllm.v1.worker.gpu.spec_decode.dspark import utils as dspark

    monkeypatch.setattr(model_loader, "get_model", lambda **kwargs: drafter)
    monkeypatch.setattr(model_utils, "get_draft_quant_config", lambda config: None)
    monkeypatch.setattr(dspark, "replace", lambda config, **changes: config)
    namespace = types.SimpleNamespace
    draft_model_config = namespace(hf_config=namespace(num_hidden_layers=0, model_type="qwen3"),
                                   get_vocab_size=lambda: VOCAB)
    speculative = namespace(draft_model_config=draft_model_config, draft_load_config=None,
                            attention_backend=None, kv_cache_dtype=None,
                            draft_parallel_config=namespace(tensor_parallel_size=1))
    config = namespace(speculative_config=speculative, load_config=LoadConfig(),
                       attention_config=namespace(backend=None), cache_config=None,
                       parallel_config=namespace(enable_eplb=False, eplb_config=None),
                       model_config=namespace(get_vocab_size=lambda: VOCAB))
    return dspark.load_dspark_model(target, config)


# --- the copy in vLLM's lifecycle ----------------------------------------------------------------


def test_int4_copy_through_vllm_quantized_lm_head_copy(switches, online):
    import torch

    switches()
    source = _head(seed=2)
    weight, before = source.weight, source.weight.detach().clone()
    copy = online.quantized_lm_head_copy(source, "int4")
    assert type(copy.quant_method).__name__ == "RadianceLMHeadInt4Copy"
    assert source.weight is weight and torch.equal(source.weight, before)  # source untouched
    assert copy.weight.dtype == torch.int8 and tuple(copy.weight.shape) == (1024, HIDDEN // 2)
    tensors = {name: (t.dtype, tuple(t.shape)) for name, t in
               list(copy.named_parameters()) + list(copy.named_buffers())}
    assert tensors == {"weight": (torch.int8, (1024, HIDDEN // 2)),  # no float copy of the head
                       "weight_scale": (torch.bfloat16, (1024, HIDDEN // GROUP))}
    assert copy.weight.untyped_storage().data_ptr() != weight.untyped_storage().data_ptr()
    x = _hidden_states(3)
    expected, packed, scales = _reference_logits(_weights(2), x)
    np.testing.assert_array_equal(copy.weight.view(torch.int32)[:VOCAB].numpy(), packed)
    np.testing.assert_array_equal(_to_numpy(_logits(copy, x)), expected)


def test_copy_follows_group_size_and_clip(switches, online):
    switches(group=64, clip="rtn")
    copy = online.quantized_lm_head_copy(_head(seed=4), "int4")
    assert (copy.quant_method.group_size, copy.quant_method.clip) == (64, "rtn")
    x = _hidden_states(5)
    expected, _, _ = _reference_logits(_weights(4), x, group_size=64, clip="rtn")
    np.testing.assert_array_equal(_to_numpy(_logits(copy, x)), expected)


def test_copy_with_act_uses_the_statistics_file(switches, online, tmp_path):
    """clip act: the copy quantizes with the file's statistics, bit for bit as radiance does;
    a file of another head is refused naming the variable, and the source stays as it was."""
    import torch

    w, a = _weights(80), _activation_sq(81)
    path = _write_stats(tmp_path / "stats.safetensors", w, a)
    switches(group=64, clip="act", stats=path)
    source = _head(seed=80)
    copy = online.quantized_lm_head_copy(source, "int4")
    assert (copy.quant_method.clip, copy.quant_method.stats) == ("act", path)
    packed, scales = _quantize_act(w, a, 64)
    np.testing.assert_array_equal(copy.weight.view(torch.int32)[:VOCAB].numpy(), packed)
    np.testing.assert_array_equal(_to_numpy(copy.weight_scale[:VOCAB]), scales)
    x = _hidden_states(82)
    expected = __import__("radiance").apply(_to_numpy(x), packed, scales, None, group_size=64)
    np.testing.assert_array_equal(_to_numpy(_logits(copy, x)), expected)

    other = _write_stats(tmp_path / "other.safetensors", _weights(83), a)
    switches(group=64, clip="act", stats=other)
    source = _head(seed=80)
    with pytest.raises(ValueError, match="RADIANCE_LMHEAD_INT4_STATS.*another head"):
        online.quantized_lm_head_copy(source, "int4")
    assert source.weight.dtype == torch.bfloat16 and torch.equal(source.weight[:VOCAB], w)


def test_refresh_in_place_and_share_restore_around_update(switches, online, monkeypatch):
    """vLLM's refresh after the source changes (reload_weights, weight transfer): same storages;
    share/restore around an RL update of the drafter: the drafter loads through the source.
    The copy comes from vLLM's EAGLE loader itself, asked for "int4" as it is for "fp8"."""
    import torch

    switches()
    target = _target(seed=6)
    drafter = _load_eagle(target, _drafter(), monkeypatch, quantization="int4")
    copy = drafter.lm_head
    assert copy is not target.lm_head and copy in online._SOURCES
    pointers = (copy.weight.data_ptr(), copy.weight_scale.data_ptr())
    x = _hidden_states(7)

    target.lm_head.weight.data.copy_(torch.cat([_weights(8), torch.zeros(24, HIDDEN).bfloat16()]))
    online.refresh_quantized_lm_heads(drafter)
    assert drafter.lm_head is copy
    assert (copy.weight.data_ptr(), copy.weight_scale.data_ptr()) == pointers
    np.testing.assert_array_equal(_to_numpy(_logits(copy, x)), _reference_logits(_weights(8), x)[0])

    online.share_source_lm_heads(drafter)
    assert drafter.lm_head is target.lm_head  # the update loads the float head
    drafter.lm_head.weight.weight_loader(drafter.lm_head.weight, _weights(9))
    online.restore_quantized_lm_heads(drafter)
    assert drafter.lm_head is copy
    assert (copy.weight.data_ptr(), copy.weight_scale.data_ptr()) == pointers
    np.testing.assert_array_equal(_to_numpy(_logits(copy, x)), _reference_logits(_weights(9), x)[0])
    np.testing.assert_array_equal(_to_numpy(_logits(target.lm_head, x)),
                                  _to_numpy(_logits(_head(seed=9), x)))  # the target: bf16


# --- RADIANCE_DRAFT_LMHEAD_INT4=1: drafters that share the target head ---------------------------


@pytest.mark.parametrize("style", ["eagle", "mtp", "dflash", "dspark"])
def test_switch_gives_shared_drafters_an_int4_copy(switches, online, monkeypatch, caplog, style):
    import torch

    from radiance.vllm import copies

    switches(draft_int4=True)
    target = _target(seed=10)
    drafter = _drafter(mtp_layers=2 if style == "mtp" else 0)
    if style == "dflash":
        drafter = _load_dflash(target, drafter, monkeypatch)
    elif style == "dspark":
        drafter = _load_dspark(target, drafter, monkeypatch)
    else:
        drafter = _load_eagle(target, drafter, monkeypatch)
    assert drafter.lm_head is target.lm_head  # vLLM shared the head
    with caplog.at_level(logging.INFO, logger="vllm.radiance"):
        copy = copies.give_drafter_int4_head(drafter, target)
    assert drafter.lm_head is copy and copy is not target.lm_head
    assert online._SOURCES[copy] == (target.lm_head, "int4")
    if style == "mtp":
        assert all(layer.shared_head.head is copy for layer in drafter.model.layers)
    assert target.lm_head.weight.dtype == torch.bfloat16  # the target keeps its head
    assert "int4 g128 (mse) copy" in caplog.text and "MB less" in caplog.text
    x = _hidden_states(11)
    np.testing.assert_array_equal(_to_numpy(_logits(drafter.lm_head, x)),
                                  _reference_logits(_weights(10), x)[0])


def test_drafter_with_its_own_head_is_a_clear_error(switches, monkeypatch):
    from radiance.vllm import copies

    switches(draft_int4=True)
    target = _target(seed=12)
    drafter = _load_eagle(target, _drafter(own_head_seed=13), monkeypatch)
    assert drafter.lm_head is not target.lm_head  # a different head: vLLM keeps the drafter's
    with pytest.raises(ValueError, match="RADIANCE_DRAFT_LMHEAD_INT4=1 .* has its own lm_head"):
        copies.give_drafter_int4_head(drafter, target)


def test_switch_and_vllm_quantization_together_is_a_clear_error(switches, online, monkeypatch):
    import torch

    from radiance.vllm import copies

    switches(draft_int4=True)
    target = _target(seed=14)
    drafter = _load_eagle(target, _drafter(), monkeypatch)
    fp8_copy = torch.nn.Module()  # stands for vLLM's fp8 copy (no fp8 kernel on this CPU)
    online._SOURCES[fp8_copy] = (target.lm_head, "fp8")
    drafter.lm_head = fp8_copy
    with pytest.raises(ValueError, match="draft_lm_head_quantization='fp8'.*keep one"):
        copies.give_drafter_int4_head(drafter, target)


def test_speculator_load_model_makes_the_copy_after_the_drafter_is_built(switches):
    """The wrapper on DraftModelSpeculator.load_model: vLLM's base load_model calls
    self.load_draft_model(...) first; the copy is in place when that returns."""
    import inspect

    from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator

    from radiance.vllm import copies

    switches(draft_int4=True)
    original = DraftModelSpeculator.load_model._radiance_original
    assert "self.load_draft_model(" in inspect.getsource(original)
    target = _target(seed=15)
    seen = {}

    class Speculator:
        def load_draft_model(self, target_model, names):
            drafter = _drafter()
            drafter.lm_head = target_model.lm_head  # shared, as vLLM's loaders do
            return drafter

        def load_model(self, target_model):  # the part of vLLM's base that matters here
            self.model = self.load_draft_model(target_model, set())
            seen["head"] = self.model.lm_head

    speculator = Speculator()
    copies._load_model_wrapper(Speculator.load_model)(speculator, target)
    assert seen["head"] is speculator.model.lm_head is not target.lm_head
    assert "load_draft_model" not in speculator.__dict__  # the class's method again


# --- RADIANCE_LMHEAD_INT4=1 with a drafter -------------------------------------------------------


@pytest.mark.parametrize("quantization", [None, "fp8", "nvfp4"])
def test_int4_target_is_shared_with_or_without_draft_quantization(switches, monkeypatch,
                                                                  quantization, caplog):
    import torch

    quark = switches(target_int4=True)
    target = _target(quark, seed=16)
    assert target.lm_head.weight.dtype == torch.int8
    with caplog.at_level(logging.INFO, logger="vllm.radiance"):
        drafter = _load_eagle(target, _drafter(), monkeypatch, quantization)
    assert drafter.lm_head is target.lm_head  # shared: no copy, no float head
    if quantization:
        assert "shares it" in caplog.text


def test_vllm_alone_refuses_an_int4_target_for_draft_quantization(switches, online):
    """Why the wrapper exists: vLLM's own copy refuses radiance's int4 head."""
    quark = switches(target_int4=True)
    target = _target(quark, seed=17)
    with pytest.raises(ValueError, match="unquantized fp16/bf16"):
        online.quantized_lm_head_copy(target.lm_head, "fp8")  # radiance wraps only the loader's


def test_both_switches_drafter_shares_the_int4_head(switches, monkeypatch):
    from radiance.vllm import copies

    quark = switches(target_int4=True, draft_int4=True)
    target = _target(quark, seed=18)
    drafter = _load_dflash(target, _drafter(), monkeypatch)
    assert copies.give_drafter_int4_head(drafter, target) is target.lm_head
    assert drafter.lm_head is target.lm_head


@pytest.mark.parametrize("same", [True, False], ids=["identical", "different"])
def test_drafter_checkpoint_head_recognised_before_the_swap(switches, monkeypatch, same):
    """A drafter that ships a copy of the target's bf16 head: vLLM compares it with the target's
    weight, int8 words by then; radiance compares it with the head as it was before the swap."""
    quark = switches(target_int4=True)
    target = _target(quark, seed=19)
    drafter = _drafter(own_head_seed=19 if same else 20)
    own = drafter.lm_head
    drafter = _load_eagle(target, drafter, monkeypatch)
    assert (drafter.lm_head is target.lm_head) == same
    assert (drafter.lm_head is own) == (not same)


def test_target_load_installs_the_drafter_hooks_only_with_a_speculative_config(monkeypatch,
                                                                                vllm_state):
    """register() wraps BaseModelLoader.load_model; after the target loads, the drafter hooks
    go in when the model has a speculative config, and not otherwise."""
    import torch
    from vllm.model_executor.layers.quantization.online import lm_head as online
    from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator

    from radiance.vllm import copies, hooks

    monkeypatch.setenv(rv.ENV_DRAFT, "1")
    rv.reload_settings()
    rv.unregister()
    try:
        model = torch.nn.Module()
        model_config = object()
        load = hooks._load_model_wrapper(lambda self, vllm_config, model_config: model)
        plain = types.SimpleNamespace(model_config=model_config, speculative_config=None)
        assert load(None, plain, model_config) is model
        assert not hasattr(DraftModelSpeculator.load_model, "_radiance_original")
        assert "int4" not in online._LM_HEAD_METHODS
        drafted = types.SimpleNamespace(model_config=model_config, speculative_config=object())
        load(None, drafted, model_config)
        assert DraftModelSpeculator.load_model._radiance_original is not None
        assert online._LM_HEAD_METHODS["int4"].__name__ == "RadianceLMHeadInt4Copy"
        v1 = types.SimpleNamespace(model_config=model_config, speculative_config=object(),
                                   use_v2_model_runner=False)
        with pytest.raises(ValueError, match="RADIANCE_DRAFT_LMHEAD_INT4=1 works with vLLM's GPU "
                                             "model runner V2"):
            load(None, v1, model_config)
    finally:
        copies.uninstall()
        assert "int4" not in online._LM_HEAD_METHODS
        monkeypatch.delenv(rv.ENV_DRAFT)
        rv.reload_settings()
