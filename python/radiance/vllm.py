"""radiance.vllm: serve a model's lm_head as int4 inside vLLM.

Installed as the `vllm.general_plugins` entry point `radiance = "radiance.vllm:register"`, so every
vLLM process (API server, engine core, workers) calls `register()` at start-up. With
`RADIANCE_LMHEAD_INT4=1` it wraps `QuarkConfig.get_quant_method`: a `ParallelLMHead` gets a
`RadianceLMHeadInt4` ahead of anything else, every other layer what Quark would give it.

`RadianceLMHeadInt4` is vLLM's `UnquantizedEmbeddingMethod` (the bf16 weight is created and
loaded exactly as usual) plus one step after loading: each rank quantizes its own vocab shard on
the layer's device, in row chunks, and `layer.weight` becomes the int8 view [N, K/2] of the packed
int32 words, beside a new `layer.weight_scale` (bf16 [N, K/G]). `apply` runs `radiance::apply`.

Knobs, read when this module is imported (a bad value is raised by `register()`, which vLLM does
not swallow, unlike an exception raised while it imports a plugin):
    RADIANCE_LMHEAD_INT4       0 (default) or 1
    RADIANCE_LMHEAD_INT4_GS    group size: 32, 64, 128 (default) or 256
    RADIANCE_LMHEAD_INT4_CLIP  mse (default) or rtn (also spelled 0)

vLLM and torch are imported lazily: this module imports with the standard library only.
"""

import functools
import logging
import os
import threading
from dataclasses import dataclass

ENV_ENABLE = "RADIANCE_LMHEAD_INT4"
ENV_GROUP_SIZE = "RADIANCE_LMHEAD_INT4_GS"
ENV_CLIP = "RADIANCE_LMHEAD_INT4_CLIP"

GROUP_SIZES = (32, 64, 128, 256)  # radiance.GROUP_SIZES, without importing NumPy here
_CLIP_SPELLINGS = {"mse": "mse", "rtn": "rtn", "0": "rtn"}
_ENABLE_SPELLINGS = {"0": False, "1": True}

# Bytes of bf16 weight quantized per step: bounds the temporary memory of the GPU quantizer.
CHUNK_BYTES = 64 << 20

# A child of vLLM's logger, so the line goes wherever vLLM's own log lines go.
logger = logging.getLogger("vllm.radiance")


@dataclass(frozen=True)
class Settings:
    enabled: bool = False
    group_size: int = 128
    clip: str = "mse"


def read_settings(environ=None):
    """Settings from the environment; ValueError naming the variable and its allowed values."""
    environ = os.environ if environ is None else environ

    def get(name, default):
        value = environ.get(name)
        return default if value is None or value.strip() == "" else value.strip().lower()

    enabled = get(ENV_ENABLE, "0")
    if enabled not in _ENABLE_SPELLINGS:
        raise ValueError(f"{ENV_ENABLE}={environ.get(ENV_ENABLE)!r}: expected 0 or 1")
    group = get(ENV_GROUP_SIZE, "128")
    if group not in {str(g) for g in GROUP_SIZES}:
        raise ValueError(f"{ENV_GROUP_SIZE}={environ.get(ENV_GROUP_SIZE)!r}: expected one of "
                         f"{', '.join(map(str, GROUP_SIZES))}")
    clip = get(ENV_CLIP, "mse")
    if clip not in _CLIP_SPELLINGS:
        raise ValueError(f"{ENV_CLIP}={environ.get(ENV_CLIP)!r}: expected mse, or rtn (also "
                         f"spelled 0) for plain round-to-nearest")
    return Settings(_ENABLE_SPELLINGS[enabled], int(group), _CLIP_SPELLINGS[clip])


def reload_settings(environ=None):
    """Read the knobs again (tests, notebooks): the Settings, or read_settings' ValueError."""
    global _settings, _settings_error
    try:
        _settings, _settings_error = read_settings(environ), None
    except ValueError as error:
        _settings, _settings_error = None, error
        raise
    return _settings


def settings():
    """The Settings read at import; raises the ValueError of a bad knob."""
    if _settings_error is not None:
        raise ValueError(str(_settings_error))
    return _settings


_settings, _settings_error = None, None
try:
    reload_settings()
except ValueError:
    pass


# --- the hook ------------------------------------------------------------------------------------

_lock = threading.Lock()


def register():
    """The `vllm.general_plugins` entry point: install the lm_head hook once per process.

    A no-op unless RADIANCE_LMHEAD_INT4=1; calling it again changes nothing.
    """
    current = settings()
    if not current.enabled:
        logger.debug("radiance: %s is not 1, the lm_head stays as the checkpoint has it",
                     ENV_ENABLE)
        return
    from vllm.model_executor.layers.quantization.quark.quark import QuarkConfig

    with _lock:
        if _wrap_get_quant_method(QuarkConfig):
            logger.info("radiance: int4 lm_head hook installed on QuarkConfig (group size %d, "
                        "clip %s)", current.group_size, current.clip)


def unregister():
    """Remove the hook (tests); layers built meanwhile keep their method."""
    from vllm.model_executor.layers.quantization.quark.quark import QuarkConfig

    with _lock:
        wrapper = QuarkConfig.__dict__.get("get_quant_method")
        original = getattr(wrapper, "_radiance_original", None)
        if original is not None:
            QuarkConfig.get_quant_method = original


def _wrap_get_quant_method(config_class):
    """Wrap config_class.get_quant_method; False when it is wrapped already."""
    original = config_class.__dict__["get_quant_method"]
    if getattr(original, "_radiance_original", None) is not None:
        return False

    @functools.wraps(original)
    def get_quant_method(self, layer, prefix):
        if _is_lm_head(layer):
            return quant_method_for(layer, prefix)
        return original(self, layer, prefix)

    get_quant_method._radiance_original = original
    config_class.get_quant_method = get_quant_method
    return True


def _is_lm_head(layer):
    from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead

    return isinstance(layer, ParallelLMHead)


def fitting_group_sizes(hidden_size):
    return [g for g in GROUP_SIZES if hidden_size % g == 0]


def quant_method_for(layer, prefix, config=None):
    """The RadianceLMHeadInt4 for a ParallelLMHead under construction, or a clear error.

    `config` (Settings) defaults to the knobs read at import. Refuses what it would compute
    wrongly: a hidden size that the group size does not divide, and a head_dtype override.
    """
    config = config or settings()
    hidden = int(layer.embedding_dim)
    if hidden % config.group_size:
        fits = fitting_group_sizes(hidden)
        advice = (f"set {ENV_GROUP_SIZE} to one of {', '.join(map(str, fits))}" if fits else
                  f"no group size ({', '.join(map(str, GROUP_SIZES))}) divides it; unset "
                  f"{ENV_ENABLE} to keep the checkpoint's lm_head")
        raise ValueError(f"radiance: the lm_head {prefix!r} has hidden size {hidden}, which is "
                         f"not a multiple of the group size {config.group_size} "
                         f"({ENV_GROUP_SIZE}); {advice}")
    _refuse_head_dtype_override(prefix)
    return method_class()(config.group_size, config.clip)


def _refuse_head_dtype_override(prefix):
    from vllm.config import get_current_vllm_config_or_none

    vllm_config = get_current_vllm_config_or_none()
    model_config = getattr(vllm_config, "model_config", None)
    if model_config is None:
        return
    head_dtype, dtype = model_config.head_dtype, model_config.dtype
    if head_dtype is not None and head_dtype != dtype:
        raise ValueError(f"radiance: the lm_head {prefix!r} is configured to run in {head_dtype} "
                         f"(head_dtype override, model dtype {dtype}), but the int4 head computes "
                         f"bf16 logits; drop the head_dtype override or unset {ENV_ENABLE}")


# --- the quantization method ---------------------------------------------------------------------


def is_packed(layer):
    """Whether layer.weight already holds the int4 words (second pass, reload)."""
    return getattr(layer, "weight_scale", None) is not None and layer.weight.dtype == _torch().int8


def _torch():
    import torch

    return torch


def _check_gpu_build(device):
    """Refuse a head on a GPU that this build of radiance has no kernels for."""
    if device.type == "cpu":
        return
    import radiance

    torch = _torch()
    backend = radiance.gpu_backend()
    wanted = "rocm" if getattr(torch.version, "hip", None) else "cuda"
    if device.type != "cuda" or backend != wanted:
        raise RuntimeError(f"radiance: the lm_head is on {device} ({wanted} torch), but radiance "
                           f"was built with GPU backend {backend!r}; reinstall radiance where "
                           f"{'hipcc' if wanted == 'rocm' else 'nvcc'} is found (RADIANCE_GPU="
                           f"{wanted}) or unset {ENV_ENABLE}")


def _quantize_into(source, words, scales, group_size, clip):
    """Quantize source [n, K] into words [N, K/8] and scales [N, K/G] in place, in row chunks on
    words' device; rows n..N (vocab padding, absent from source) quantize as zeros."""
    import radiance

    torch = _torch()
    rows, cols = words.shape[0], words.shape[1] * 8
    step = max(1, CHUNK_BYTES // max(1, cols * source.element_size()))
    for start in range(0, rows, step):
        stop = min(rows, start + step)
        have = max(0, min(stop, source.shape[0]) - start)
        piece = source[start:start + have].to(words.device, non_blocking=False)
        if have < stop - start:
            padding = torch.zeros((stop - start - have, cols), dtype=source.dtype,
                                  device=words.device)
            piece = torch.cat([piece, padding]) if have else padding
        radiance.quantize_rows(piece.contiguous(), group_size=group_size, clip=clip,
                               packed_out=words[start:stop], scales_out=scales[start:stop])


def _megabytes(nbytes):
    return nbytes / 1e6


@functools.cache
def method_class():
    """RadianceLMHeadInt4, built on first use so that importing this module needs no vLLM."""
    torch = _torch()
    from torch.nn import Parameter
    from vllm.model_executor.layers.vocab_parallel_embedding import UnquantizedEmbeddingMethod
    from vllm.model_executor.utils import set_weight_attrs

    from radiance import torch_ops

    class RadianceLMHeadInt4(UnquantizedEmbeddingMethod):
        """vLLM's unquantized lm_head method, with the weight swapped to int4 after loading."""

        # The weight-cache IPC loader would hand back already-packed tensors to bf16 parameters.
        supports_pre_processed_weights = False

        def __init__(self, group_size=128, clip="mse"):
            super().__init__()
            if group_size not in GROUP_SIZES:
                raise ValueError(f"group_size must be one of {GROUP_SIZES}, got {group_size}")
            if clip not in ("mse", "rtn"):
                raise ValueError(f"clip must be 'mse' or 'rtn', got {clip!r}")
            self.group_size = group_size
            self.clip = clip

        def process_weights_after_loading(self, layer):
            if is_packed(layer):
                return  # second pass: the weight is int4 already
            weight = layer.weight
            if weight.dim() != 2 or not weight.dtype.is_floating_point:
                raise ValueError(f"radiance: expected a float [vocab, hidden] lm_head weight, "
                                 f"got {weight.dtype} {tuple(weight.shape)}")
            rows, cols = weight.shape
            if cols % self.group_size:
                fits = fitting_group_sizes(cols)
                raise ValueError(f"radiance: lm_head hidden size {cols} is not a multiple of the "
                                 f"group size {self.group_size}; group sizes that fit: {fits}")
            _check_gpu_build(weight.device)
            tied = _is_tied(layer)

            words = torch.empty((rows, cols // 8), dtype=torch.int32, device=weight.device)
            scales = torch.empty((rows, cols // self.group_size), dtype=torch.bfloat16,
                                 device=weight.device)
            _quantize_into(weight.data, words, scales, self.group_size, self.clip)

            before = weight.numel() * weight.element_size()
            dtype, device = weight.dtype, weight.device
            packed = Parameter(words.view(torch.int8), requires_grad=False)
            set_weight_attrs(packed, {"input_dim": 1, "output_dim": 0,
                                      "weight_loader": _packed_weight_loader(layer, self)})
            weight_scale = Parameter(scales, requires_grad=False)
            if tied:
                _follow_tied_embedding(layer, weight, packed, weight_scale, self)
            del weight
            # Rebinding the name drops this layer's reference to the bf16 tensor; a tied
            # embedding keeps its own reference and so its lookup table.
            layer.weight = packed
            layer.weight_scale = weight_scale
            if device.type == "cuda":
                torch.cuda.empty_cache()  # hand the bf16 blocks back before vLLM profiles memory

            after = words.numel() * 4 + scales.numel() * 2
            rank = f"rank {getattr(layer, 'tp_rank', 0)}/{getattr(layer, 'tp_size', 1)}"
            shape = f"[{rows}, {cols}] {str(dtype).replace('torch.', '')}"
            if tied:
                logger.info("radiance: lm_head %s on %s (%s) -> int4 g%d (%s): the weight is tied "
                            "to the input embeddings, whose %.1f MB %s table stays for the lookup; "
                            "the int4 head adds %.1f MB and reads %.1fx fewer bytes per step",
                            shape, device, rank, self.group_size, self.clip, _megabytes(before),
                            str(dtype).replace("torch.", ""), _megabytes(after), before / after)
            else:
                logger.info("radiance: lm_head %s on %s (%s) -> int4 g%d (%s): %.1f MB -> %.1f MB, "
                            "saved %.1f MB", shape, device, rank, self.group_size, self.clip,
                            _megabytes(before), _megabytes(after), _megabytes(before - after))

        def apply(self, layer, x, bias=None):
            # Once per decode step: in eager mode the parameters come straight from the module's
            # dict (nn.Module.__getattr__ costs about a microsecond a name) and the op's GPU
            # kernel is called without the dispatcher; torch.compile sees plain attributes and
            # the op.
            compiling = torch.compiler.is_compiling()
            if compiling:
                weight, scales = layer.weight, getattr(layer, "weight_scale", None)
            else:
                params = layer._parameters
                weight, scales = params["weight"], params.get("weight_scale")
            if scales is None:  # not processed yet (never the case once vLLM has loaded)
                return super().apply(layer, x, bias)
            two_d = x.dim() == 2
            x2 = x if two_d else x.reshape(-1, x.shape[-1])
            if x2.is_cuda and not compiling:
                y = torch_ops._apply_gpu(x2, weight, scales, bias, self.group_size)
            else:
                y = torch_ops.apply(x2, weight, scales, bias, self.group_size)
            if y.dtype != x.dtype:
                y = y.to(x.dtype)
            return y if two_d else y.reshape(*x.shape[:-1], y.shape[-1])

        def embedding(self, layer, input_):
            if not is_packed(layer):
                return super().embedding(layer, input_)
            # The head itself used as a lookup table: the dequantized int4 rows.
            return torch_ops.embedding_int4(input_, layer.weight, layer.weight_scale,
                                            self.group_size, layer.params_dtype)

        def tie_weights(self, layer, embed_tokens):
            if is_packed(layer):
                raise RuntimeError("radiance: cannot tie an lm_head that is already int4 to the "
                                   "input embeddings; tie before process_weights_after_loading")
            layer._radiance_tied = True
            return super().tie_weights(layer, embed_tokens)

    RadianceLMHeadInt4.__module__ = __name__
    return RadianceLMHeadInt4


def __getattr__(name):
    if name == "RadianceLMHeadInt4":
        return method_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _is_tied(layer):
    """Whether layer.weight is shared with another module (the input embeddings)."""
    if getattr(layer, "_radiance_tied", False):
        return True
    owner = _loader_owner(layer.weight)
    return owner is not None and owner is not layer


def _loader_owner(param):
    """The module whose weight_loader the parameter carries (the module that created it)."""
    loader = getattr(param, "weight_loader", None)
    return getattr(loader, "_radiance_owner", None) or getattr(loader, "__self__", None)


def _follow_tied_embedding(head, source, packed, weight_scale, method):
    """Keep a tied head's int4 copy in step with the embedding table it was tied to.

    The checkpoint of a tied model holds only the embeddings, so a weight reload writes the
    embedding and never reaches the head. Two reload paths are followed: vLLM's layerwise reload
    (reload_weights) runs the embedding method's process_weights_after_loading again, and a plain
    second load_weights calls the embedding parameter's weight_loader; after either, the head is
    re-quantized in place from the new table.
    """
    loader = getattr(source, "weight_loader", None)
    embedding = _loader_owner(source)
    if embedding is None or embedding is head:
        logger.warning("radiance: %s is tied to a table whose owner is unknown; a later weight "
                       "reload will not reach the int4 head", head.prefix or "lm_head")
        return
    torch = _torch()
    words = packed.data.view(torch.int32)

    def requantize(table):
        if tuple(table.shape) != (words.shape[0], words.shape[1] * 8):
            raise ValueError(f"radiance: the embedding table tied to {head.prefix or 'lm_head'} "
                             f"changed shape to {tuple(table.shape)}; the int4 head holds "
                             f"[{words.shape[0]}, {words.shape[1] * 8}]")
        _quantize_into(table.data, words, weight_scale.data, method.group_size, method.clip)

    embedding_method = embedding.quant_method
    original_process = embedding_method.process_weights_after_loading

    def process_weights_after_loading(layer):
        original_process(layer)
        requantize(layer.weight)

    embedding_method.process_weights_after_loading = process_weights_after_loading

    def radiance_tied_embedding_loader(param, loaded_weight):
        loader(param, loaded_weight)
        requantize(param)

    radiance_tied_embedding_loader._radiance_owner = embedding
    source.weight_loader = radiance_tied_embedding_loader


def _packed_weight_loader(layer, method):
    """Loads a checkpoint's float [vocab, hidden] lm_head weight into an already-int4 head.

    vLLM's layerwise reload restores the bf16 parameter and runs process_weights_after_loading
    again; this loader serves a plain second `load_weights` instead: it takes this rank's rows
    the way VocabParallelEmbedding.weight_loader does and re-quantizes them in place, so the
    tensors that CUDA graphs captured keep their addresses.
    """

    def radiance_packed_weight_loader(param, loaded_weight):
        torch = _torch()
        words = param.data.view(torch.int32)
        rows, cols = words.shape[0], words.shape[1] * 8
        if (loaded_weight.dim() != 2 or not loaded_weight.dtype.is_floating_point
                or loaded_weight.shape != (layer.org_vocab_size, cols)):
            raise ValueError(f"radiance: {layer.prefix or 'lm_head'}.weight is int4 now (int8 "
                             f"[{rows}, {cols // 2}]); it reloads from a float [vocab="
                             f"{layer.org_vocab_size}, hidden={cols}] checkpoint weight, got "
                             f"{loaded_weight.dtype} {tuple(loaded_weight.shape)}")
        start = layer.shard_indices.org_vocab_start_index
        stop = layer.shard_indices.org_vocab_end_index
        shard = loaded_weight.narrow(0, start, stop - start)
        _quantize_into(shard, words, layer.weight_scale.data, method.group_size, method.clip)

    return radiance_packed_weight_loader
