"""The places where the plugin enters vLLM, each checked before it is wrapped:

- `ParallelLMHead.__init__(self, num_embeddings, embedding_dim, ...)`: every checkpoint. A head
  that got vLLM's plain `UnquantizedEmbeddingMethod` (no quant config, fp8, compressed-tensors,
  AWQ/GPTQ that leave the head unquantized, ...) and holds a bf16/fp16 weight gets
  `RadianceLMHeadInt4` instead, right after construction: the int4 method is a subclass of the
  plain one and creates the same weight, so nothing built so far changes. A head the checkpoint
  quantized (GPTQ/AWQ `lm_head_quantized`, GGUF, ModelOpt, ...) or a float32 one is left as it is,
  said in one log line.
- `QuarkConfig.get_quant_method(self, layer, prefix)` (a private method): a `ParallelLMHead` of a
  Quark checkpoint gets `RadianceLMHeadInt4` in place of what Quark would give it (a head that
  Quark itself quantizes included); every other layer what Quark gives it.
- `BaseModelLoader.load_model(self, vllm_config, model_config, prefix="")`: after the target's
  weights are loaded, a warning when no lm_head took the int4 method and no log line said why
  already, and the drafter hooks of copies.py when the model has a speculative config.

A vLLM whose methods are missing or have another signature stops start-up with an error naming
radiance and the vLLM version (patching.py): the plugin never runs silently without its hook.
"""

import logging
import threading

from . import copies
from .patching import unsupported, unwrap, vllm_version, wrap
from .settings import (ENV_DRAFT, ENV_ENABLE, ENV_GROUP_SIZE, GROUP_SIZES, MODEL_GROUP_SIZES,
                       fitting_group_sizes, model_group_size, settings)

logger = logging.getLogger("vllm.radiance")
_lock = threading.Lock()

# What the wrapped vLLM methods must look like: their leading parameter names.
_HEAD_INIT_PARAMETERS = ("self", "num_embeddings", "embedding_dim")
_QUANT_METHOD_PARAMETERS = ("self", "layer", "prefix")
_LOAD_MODEL_PARAMETERS = ("self", "vllm_config", "model_config")


def _parallel_lm_head():
    try:
        from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead
    except ImportError as error:
        raise unsupported("no ParallelLMHead", f"({error})") from None
    return ParallelLMHead


def _quark_config():
    try:
        from vllm.model_executor.layers.quantization.quark.quark import QuarkConfig
    except ImportError as error:
        raise unsupported("no QuarkConfig", f"({error})") from None
    return QuarkConfig


def _base_loader():
    try:
        from vllm.model_executor.model_loader.base_loader import BaseModelLoader
    except ImportError as error:
        raise unsupported("no BaseModelLoader", f"({error})") from None
    return BaseModelLoader


def register():
    """The `vllm.general_plugins` entry point: install the hooks once per process.

    A no-op unless RADIANCE_LMHEAD_INT4=1 or RADIANCE_DRAFT_LMHEAD_INT4=1; calling it again
    changes nothing.
    """
    current = settings()
    if not (current.enabled or current.draft):
        logger.debug("radiance: %s and %s are not 1, the lm_head stays as the checkpoint has it",
                     ENV_ENABLE, ENV_DRAFT)
        return
    if current.draft:
        copies.require_copy_support()
    with _lock:
        installed = []
        if current.enabled:
            any_head = wrap(_parallel_lm_head(), "__init__", _head_init_wrapper,
                            _HEAD_INIT_PARAMETERS)
            quark = wrap(_quark_config(), "get_quant_method", _get_quant_method_wrapper,
                         _QUANT_METHOD_PARAMETERS)
            if any_head or quark:
                group = (f"group size {current.group_size}" if current.group_size else
                         "group size from the model")
                installed.append(f"int4 lm_head hooks on ParallelLMHead and QuarkConfig ({group}"
                                 f", clip {current.clip}"
                                 + (f", statistics {current.stats}" if current.stats else "")
                                 + ")")
        if wrap(_base_loader(), "load_model", _load_model_wrapper, _LOAD_MODEL_PARAMETERS):
            installed.append("check after loading")
        if installed:
            logger.info("radiance: installed %s (vLLM %s)", "; ".join(installed), vllm_version())


def unregister():
    """Remove the hooks (tests); layers built meanwhile keep their method."""
    with _lock:
        unwrap(_parallel_lm_head(), "__init__")
        unwrap(_quark_config(), "get_quant_method")
        unwrap(_base_loader(), "load_model")
    copies.uninstall()


def _head_init_wrapper(original):
    def __init__(self, *args, **kwargs):
        original(self, *args, **kwargs)
        # A method the caller chose itself (vLLM >= 0.33's `quant_method=`: the fp8/nvfp4 and
        # radiance int4 copies of a head for drafters) is that caller's decision.
        if settings().enabled and kwargs.get("quant_method") is None:
            take_head(self)

    return __init__


def take_head(layer):
    """Give a just-built ParallelLMHead the int4 method where it holds a plain bf16/fp16 weight;
    otherwise leave it, saying why (once, on rank 0). Returns the reason it was left, or None."""
    from vllm.model_executor.layers.vocab_parallel_embedding import UnquantizedEmbeddingMethod

    from .method import RadianceLMHeadInt4

    method = layer.quant_method
    if isinstance(method, RadianceLMHeadInt4):
        reason = None  # the Quark hook gave it already
    elif type(method) is not UnquantizedEmbeddingMethod:
        reason = (f"the checkpoint quantizes it ({type(method).__name__}); radiance replaces "
                  f"only a bf16 or fp16 head")
    elif layer.weight.dtype not in _float_head_dtypes():
        reason = (f"its weight is {str(layer.weight.dtype).replace('torch.', '')}; radiance "
                  f"replaces only a bf16 or fp16 head")
    else:
        reason = None
        layer.quant_method = quant_method_for(layer, layer.prefix)
    if reason is not None:
        layer._radiance_left = reason
        if getattr(layer, "tp_rank", 0) == 0:
            logger.warning("radiance: %s=1, but the lm_head %r stays as the checkpoint has it: %s",
                           ENV_ENABLE, layer.prefix or "lm_head", reason)
    elif hasattr(layer, "use_fused_embedding"):
        # vLLM's fused lookup reads layer.weight as a float table; the int4 head looks rows up
        # through its method (a head used as an embedding, tied or not).
        layer.use_fused_embedding = False
    return reason


def _float_head_dtypes():
    import torch

    return (torch.bfloat16, torch.float16)


def _get_quant_method_wrapper(original):
    def get_quant_method(self, layer, prefix):
        if is_lm_head(layer) and settings().enabled:
            return quant_method_for(layer, prefix)
        return original(self, layer, prefix)

    return get_quant_method


def _load_model_wrapper(original):
    def load_model(self, vllm_config, model_config, *args, **kwargs):
        model = original(self, vllm_config, model_config, *args, **kwargs)
        if model_config is getattr(vllm_config, "model_config", model_config):  # the target
            current = settings()
            if current.enabled:
                warn_if_no_int4_head(model)
            if getattr(vllm_config, "speculative_config", None) is not None:
                if current.draft and getattr(vllm_config, "use_v2_model_runner", True) is False:
                    # vLLM's V1 runner loads drafters elsewhere: the switch would do nothing.
                    raise ValueError(f"radiance: {ENV_DRAFT}=1 works with vLLM's GPU model "
                                     f"runner V2 (VLLM_USE_V2_MODEL_RUNNER=1), which loads the "
                                     f"drafter; this engine runs V1. Use V2 or unset {ENV_DRAFT}")
                copies.install()
        return model

    return load_model


def is_lm_head(layer):
    from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead

    return isinstance(layer, ParallelLMHead)


def warn_if_no_int4_head(model):
    """Say at warning level when RADIANCE_LMHEAD_INT4=1 reached no lm_head of the model."""
    from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead

    from .method import RadianceLMHeadInt4

    try:
        from vllm.distributed import get_pp_group

        if not get_pp_group().is_last_rank:
            return  # earlier pipeline stages have no head
    except (AssertionError, ImportError):  # no model-parallel groups (offline tools)
        pass
    heads = [m for m in model.modules() if isinstance(m, ParallelLMHead)]
    if any(isinstance(head.quant_method, RadianceLMHeadInt4) for head in heads):
        return
    if heads and all(hasattr(head, "_radiance_left") for head in heads):
        return  # each was left with a log line saying why when it was built
    found = (", ".join(f"{head.prefix or 'lm_head'} ({type(head.quant_method).__name__})"
                       for head in heads) or "no ParallelLMHead at all")
    logger.warning("radiance: %s=1, but no lm_head of %s took the int4 method (%s); its lm_head "
                   "stays as the checkpoint has it. radiance reaches the model's "
                   "ParallelLMHead: a head of another class (or one swapped after it was "
                   "built) is not reached", ENV_ENABLE, type(model).__name__, found)


def quant_method_for(layer, prefix, config=None):
    """The RadianceLMHeadInt4 for a ParallelLMHead under construction, or a clear error.

    `config` (Settings) defaults to the knobs read at import. Refuses what it would compute
    wrongly: a hidden size that the group size does not divide, and a head_dtype override.
    """
    from .method import RadianceLMHeadInt4

    config = config or settings()
    hidden = int(layer.embedding_dim)
    group_size = group_size_for(hidden, prefix, config.group_size,
                                announce=getattr(layer, "tp_rank", 0) == 0)
    _refuse_head_dtype_override(prefix)
    if config.stats:  # a file of another head's shape stops start-up before any weight loads
        from . import statistics

        statistics.load(config.stats, hidden, int(layer.org_vocab_size))
    return RadianceLMHeadInt4(group_size, config.clip, config.stats)


def group_size_for(hidden, prefix, requested=None, announce=True):
    """The group size of a head with `hidden` columns: `requested` (RADIANCE_LMHEAD_INT4_GS),
    which must divide it, or without one the largest of 128, 64, 32 that does, said in the log
    (`announce`: rank 0 says it for all ranks). ValueError naming the variable otherwise."""
    if requested is None:
        chosen = model_group_size(hidden)
        if chosen is None:
            raise ValueError(f"radiance: the lm_head {prefix!r} has hidden size {hidden}, which "
                             f"no group size ({', '.join(map(str, GROUP_SIZES))}) divides; unset "
                             f"{ENV_ENABLE} to keep the checkpoint's lm_head")
        if announce:
            logger.info("radiance: %s unset: group size %d (the largest of %s that divides "
                        "hidden size %d of the lm_head %r)", ENV_GROUP_SIZE, chosen,
                        ", ".join(map(str, MODEL_GROUP_SIZES)), hidden, prefix)
        return chosen
    if hidden % requested:
        fits = fitting_group_sizes(hidden)
        advice = (f"set {ENV_GROUP_SIZE} to one of {', '.join(map(str, fits))} (or unset it)"
                  if fits else f"no group size ({', '.join(map(str, GROUP_SIZES))}) divides "
                  f"it; unset {ENV_ENABLE} to keep the checkpoint's lm_head")
        raise ValueError(f"radiance: the lm_head {prefix!r} has hidden size {hidden}, which is "
                         f"not a multiple of the group size {requested} ({ENV_GROUP_SIZE}); "
                         f"{advice}")
    return requested


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
