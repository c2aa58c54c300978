"""int4 copies of the target's lm_head for speculative-decoding drafters, inside vLLM's own copy
lifecycle (vLLM >= 0.33, `vllm/model_executor/layers/quantization/online/lm_head.py`).

radiance adds one entry, "int4" -> RadianceLMHeadInt4Copy, to vLLM's table of lm_head copy
methods, so `quantized_lm_head_copy(lm_head, "int4")` builds the copy and vLLM's own
`refresh_quantized_lm_heads` (in place, after reload_weights, weight transfer and LoRA reset),
`share_source_lm_heads` and `restore_quantized_lm_heads` (around an RL weight update of the
drafter) treat it as they treat their fp8 and nvfp4 copies.

After the target has loaded (hooks.py), three wrappers go in, each on a function vLLM's drafter
loaders look up by module global:
- `DraftModelSpeculator.load_model`: with RADIANCE_DRAFT_LMHEAD_INT4=1, right after the drafter
  is built, every reference of the drafter to the target's head (EAGLE, EAGLE3, MTP's per-layer
  heads, DFlash, DSpark) is pointed at one int4 copy; the target keeps its head.
- `_should_share` of the EAGLE loader (also used by DFlash and DSpark): a drafter checkpoint that
  ships its own copy of the head is compared with the target's head as it was before the swap
  to int4 (a fingerprint taken then), not with the int8 words it holds now.
- `quantized_lm_head_copy` as the EAGLE loader calls it (draft_lm_head_quantization): a target
  head that is radiance int4 already is shared as it is, not refused.
"""

import logging

from .patching import unwrap, vllm_version, wrap
from .settings import ENV_DRAFT, ENV_ENABLE, settings

logger = logging.getLogger("vllm.radiance")

INT4 = "int4"
_ONLINE = "vllm.model_executor.layers.quantization.online.lm_head"
_EAGLE = "vllm.v1.worker.gpu.spec_decode.eagle.utils"
_DFLASH = "vllm.v1.worker.gpu.spec_decode.dflash.utils"
_SPECULATOR = "vllm.v1.worker.gpu.spec_decode.speculator"

# (module or class, attribute) of every wrapper installed, for uninstall().
_installed = []


def require_copy_support():
    """Refuse RADIANCE_DRAFT_LMHEAD_INT4=1 on a vLLM without lm_head copies (before 0.33)."""
    import importlib.util

    try:
        found = importlib.util.find_spec(_ONLINE) is not None
    except ModuleNotFoundError:
        found = False
    if not found:
        raise RuntimeError(f"radiance: {ENV_DRAFT}=1 needs vLLM >= 0.33 (its quantized lm_head "
                           f"copies, {_ONLINE}); this is vLLM {vllm_version()}. Upgrade vLLM "
                           f"or unset {ENV_DRAFT}")


def register_int4_method():
    """Add "int4" to vLLM's table of lm_head copy methods; returns the table."""
    import importlib

    from .method import RadianceLMHeadInt4Copy

    online = importlib.import_module(_ONLINE)
    methods = online._LM_HEAD_METHODS
    if methods.get(INT4) not in (None, RadianceLMHeadInt4Copy):
        raise RuntimeError(f"radiance: vLLM already has an lm_head copy method named {INT4!r} "
                           f"({methods[INT4].__name__}); radiance would replace it")
    methods[INT4] = RadianceLMHeadInt4Copy
    return methods


def install():
    """Register the int4 copy method (vLLM >= 0.33) and wrap the drafter loaders; idempotent.
    A vLLM without the speculative-decoding loaders of the GPU model runner V2 gets nothing but
    the method."""
    import importlib

    try:
        importlib.import_module(_ONLINE)
    except ImportError:
        return  # vLLM 0.32: no copies, no drafter hooks (require_copy_support says so)
    register_int4_method()
    eagle = importlib.import_module(_EAGLE)
    wrap(eagle, "_should_share", _should_share_wrapper, installed=_installed)
    wrap(eagle, "quantized_lm_head_copy", _copy_wrapper, installed=_installed)
    try:
        dflash = importlib.import_module(_DFLASH)
    except ImportError:
        dflash = None
    if dflash is not None and hasattr(dflash, "_should_share"):
        wrap(dflash, "_should_share", _should_share_wrapper, installed=_installed)
    speculator = importlib.import_module(_SPECULATOR).DraftModelSpeculator
    wrap(speculator, "load_model", _load_model_wrapper, ("self", "target_model"),
         installed=_installed)


def uninstall():
    """Undo install() (tests); copies made meanwhile keep their method."""
    import sys

    while _installed:
        unwrap(*_installed.pop())
    online = sys.modules.get(_ONLINE)
    if online is not None and getattr(online._LM_HEAD_METHODS.get(INT4), "__module__",
                                      "").startswith("radiance."):
        del online._LM_HEAD_METHODS[INT4]


# --- the wrappers --------------------------------------------------------------------------------


def _should_share_wrapper(original):
    def _should_share(eagle, flag, draft, target):
        if getattr(eagle, flag, False) and flag == "has_own_lm_head":
            same = same_as_float_target(draft, target)
            if same is not None:
                if same:
                    logger.info("radiance: %s ships its own lm_head, identical to the target's "
                                "before the target's became int4: shared",
                                type(eagle).__name__)
                return same
        return original(eagle, flag, draft, target)

    return _should_share


def same_as_float_target(draft, target):
    """Whether a drafter's float head equals the float head the radiance int4 target had before
    its swap; None where that question does not arise (the target is not radiance int4)."""
    import torch

    from .shards import fingerprint, is_packed

    if draft is None or target is None or not is_packed(target):
        return None
    recorded = getattr(target, "_radiance_fingerprint", None)
    if recorded is None or is_packed(draft):
        return None  # two int4 heads compare as vLLM compares them: word by word
    dtype, prints = recorded
    weight = draft.weight
    if weight.dtype != dtype or tuple(weight.shape) != (prints.shape[0],
                                                        target.weight.shape[1] * 2):
        return False
    return bool(torch.equal(fingerprint(weight.data.to(prints.device)), prints))


def _copy_wrapper(original):
    def quantized_lm_head_copy(lm_head, quantization):
        from .method import RadianceLMHeadInt4
        from .shards import is_packed

        if isinstance(lm_head.quant_method, RadianceLMHeadInt4) and is_packed(lm_head):
            logger.info("radiance: draft_lm_head_quantization=%r, but the target lm_head is int4 "
                        "already (%s=1): the drafter shares it, no %s copy", quantization,
                        ENV_ENABLE, quantization)
            return lm_head
        return original(lm_head, quantization)

    return quantized_lm_head_copy


def _load_model_wrapper(original):
    def load_model(self, target_model, *args, **kwargs):
        if not settings().draft:
            return original(self, target_model, *args, **kwargs)
        load_draft_model = self.load_draft_model

        def load_draft_model_with_copy(*a, **k):
            drafter = load_draft_model(*a, **k)
            give_drafter_int4_head(drafter, target_model)
            return drafter

        # An instance attribute shadows the class's method for this one call of load_model:
        # the copy is made right after the drafter is built, whatever the speculator class.
        self.load_draft_model = load_draft_model_with_copy
        try:
            return original(self, target_model, *args, **kwargs)
        finally:
            self.__dict__.pop("load_draft_model", None)

    return load_model


# --- the drafter's head --------------------------------------------------------------------------


def target_head(target_model):
    """The target's lm_head, found as vLLM's drafter loaders find it; None on a PP stage
    without one."""
    from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead

    language = (target_model.get_language_model()
                if hasattr(target_model, "get_language_model") else target_model)
    head = getattr(language, "lm_head", None) or getattr(target_model, "lm_head", None)
    return head if isinstance(head, ParallelLMHead) else None


def _references(model, head):
    """(parent, attribute) of every place in `model` that holds `head` as a submodule."""
    return [(parent, name) for parent in model.modules()
            for name, child in list(parent._modules.items()) if child is head]


def give_drafter_int4_head(drafter, target_model):
    """Point every reference of `drafter` to the target's lm_head at one int4 copy of it (made by
    vLLM's quantized_lm_head_copy, so vLLM refreshes and swaps it); a target head that is int4
    already is left shared. Returns the copy, the target head, or raises ValueError naming
    RADIANCE_DRAFT_LMHEAD_INT4 when the drafter does not share the head."""
    import importlib

    from .shards import is_packed, megabytes

    online = importlib.import_module(_ONLINE)
    source = target_head(target_model)
    name = type(drafter).__name__
    if source is None:
        return None  # a pipeline stage without the head: nothing to share
    references = _references(drafter, source)
    copies = [(parent, attribute, child) for parent in drafter.modules()
              for attribute, child in parent._modules.items()
              if child is not None and child in online._SOURCES
              and online._SOURCES[child][0] is source]
    if copies:
        kinds = sorted({online._SOURCES[child][1] for _, _, child in copies})
        raise ValueError(f"radiance: {ENV_DRAFT}=1 and speculative_config."
                         f"draft_lm_head_quantization={kinds[0]!r} both ask for a quantized "
                         f"copy of the target lm_head for {name}; keep one of the two")
    if not references:
        raise ValueError(f"radiance: {ENV_DRAFT}=1 gives an int4 copy of the target lm_head to a "
                         f"drafter that shares it, but {name} has its own lm_head (or none); "
                         f"unset {ENV_DRAFT} for this drafter")
    rank = f"rank {getattr(source, 'tp_rank', 0)}/{getattr(source, 'tp_size', 1)}"
    rows, cols = source.weight.shape[0], source.weight.shape[1]
    if is_packed(source):
        logger.info("radiance: %s (%s) shares the target's int4 lm_head (%s=1 and %s=1): no copy",
                    name, rank, ENV_ENABLE, ENV_DRAFT)
        return source
    copy = online.quantized_lm_head_copy(source, INT4)
    for parent, attribute in references:
        setattr(parent, attribute, copy)
    before = source.weight.numel() * source.weight.element_size()
    after = copy.weight.numel() * copy.weight.element_size() + copy.weight_scale.numel() * 2
    method = copy.quant_method
    logger.info("radiance: %s (%s) drafts with an int4 g%d (%s) copy of the target lm_head "
                "[%d, %d]; the target keeps its own. Per draft step it reads %.1f MB instead of "
                "%.1f MB (%.1f MB less); the copy holds %.1f MB", name, rank, method.group_size,
                method.clip, rows, cols, megabytes(after), megabytes(before),
                megabytes(before - after), megabytes(after))
    return copy
