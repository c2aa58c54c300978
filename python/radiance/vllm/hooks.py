"""The two places where the plugin enters vLLM, both checked before they are wrapped:

- `QuarkConfig.get_quant_method(self, layer, prefix)` (a private method): a `ParallelLMHead`
  gets `RadianceLMHeadInt4`, every other layer what Quark would give it.
- `BaseModelLoader.load_model(self, vllm_config, model_config, prefix="")`: after the target's
  weights are loaded, a warning when no lm_head took the int4 method (model files that build
  their head without the quant config), and the drafter hooks of copies.py when the model has a
  speculative config.

A vLLM whose methods are missing or have another signature stops start-up with an error naming
radiance and the vLLM version (patching.py): the plugin never runs silently without its hook.
"""

import logging
import threading

from . import copies
from .patching import unsupported, unwrap, wrap
from .settings import (ENV_DRAFT, ENV_ENABLE, ENV_GROUP_SIZE, GROUP_SIZES, fitting_group_sizes,
                       settings)

logger = logging.getLogger("vllm.radiance")
_lock = threading.Lock()

# What the wrapped vLLM methods must look like: parameter names after self.
_QUANT_METHOD_PARAMETERS = ("self", "layer", "prefix")
_LOAD_MODEL_PARAMETERS = ("self", "vllm_config", "model_config")


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
        if current.enabled and wrap(_quark_config(), "get_quant_method",
                                    _get_quant_method_wrapper, _QUANT_METHOD_PARAMETERS):
            installed.append(f"int4 lm_head hook on QuarkConfig (group size {current.group_size}"
                             f", clip {current.clip}"
                             + (f", statistics {current.stats}" if current.stats else "") + ")")
        if wrap(_base_loader(), "load_model", _load_model_wrapper, _LOAD_MODEL_PARAMETERS):
            installed.append("check after loading")
        if installed:
            logger.info("radiance: installed %s", "; ".join(installed))


def unregister():
    """Remove the hooks (tests); layers built meanwhile keep their method."""
    with _lock:
        unwrap(_quark_config(), "get_quant_method")
        unwrap(_base_loader(), "load_model")
    copies.uninstall()


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
    found = (", ".join(f"{head.prefix or 'lm_head'} ({type(head.quant_method).__name__})"
                       for head in heads) or "no ParallelLMHead at all")
    logger.warning("radiance: %s=1, but no lm_head of %s took the int4 method (%s); its lm_head "
                   "stays as the checkpoint has it. radiance reaches heads built with a Quark "
                   "quant config: the model file must pass its quant_config to ParallelLMHead",
                   ENV_ENABLE, type(model).__name__, found)


def quant_method_for(layer, prefix, config=None):
    """The RadianceLMHeadInt4 for a ParallelLMHead under construction, or a clear error.

    `config` (Settings) defaults to the knobs read at import. Refuses what it would compute
    wrongly: a hidden size that the group size does not divide, and a head_dtype override.
    """
    from .method import RadianceLMHeadInt4

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
    if config.stats:  # a file of another head's shape stops start-up before any weight loads
        from . import statistics

        statistics.load(config.stats, hidden, int(layer.org_vocab_size))
    return RadianceLMHeadInt4(config.group_size, config.clip, config.stats)


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
