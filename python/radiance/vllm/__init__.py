"""radiance.vllm: serve a model's lm_head as int4 inside vLLM, and give speculative-decoding
drafters an int4 copy of the target's head.

Installed as the `vllm.general_plugins` entry point `radiance = "radiance.vllm:register"`, so every
vLLM process (API server, engine core, workers) calls `register()` at start-up.

- RADIANCE_LMHEAD_INT4=1: every `ParallelLMHead` that holds a bf16/fp16 weight, whatever the
  checkpoint's quantization, gets `RadianceLMHeadInt4` (hooks.py says where the plugin enters
  vLLM; method.py): vLLM's `UnquantizedEmbeddingMethod` plus one step after loading: each rank
  quantizes its own vocab shard on the layer's device, in row chunks, and `layer.weight` becomes
  the int8 view [N, K/2] of the packed int32 words, beside a new `layer.weight_scale`
  (bf16 [N, K/G]). `apply` runs the registered op `radiance::apply`.
  Weight reloads and tied embeddings: reload.py.
- RADIANCE_DRAFT_LMHEAD_INT4=1 (vLLM >= 0.33): every drafter that shares the target's head gets
  an int4 copy made and kept by vLLM's own lm_head copy machinery (copies.py).

Knobs (settings.py), read when this package is imported; a bad value is raised by `register()`:
    RADIANCE_LMHEAD_INT4        0 (default) or 1
    RADIANCE_LMHEAD_INT4_GS     group size: 32, 64, 128 or 256; unset, the largest of 128, 64,
                                32 that divides the hidden size
    RADIANCE_LMHEAD_INT4_CLIP   mse (default), rtn (also spelled 0) or act
    RADIANCE_LMHEAD_INT4_STATS  clip act's statistics file (radiance calibrate); statistics.py
                                says how it is checked against the head, at every TP size
    RADIANCE_DRAFT_LMHEAD_INT4  0 (default) or 1

vLLM and torch are imported lazily: this package imports with the standard library only.
"""

from .hooks import quant_method_for, register, unregister, warn_if_no_int4_head
from .settings import (CLIP_MODES, ENV_CLIP, ENV_DRAFT, ENV_ENABLE, ENV_GROUP_SIZE, ENV_STATS,
                       GROUP_SIZES, MODEL_GROUP_SIZES, Settings, fitting_group_sizes,
                       model_group_size, read_settings, reload_settings, settings)

__all__ = ["register", "unregister", "Settings", "read_settings", "reload_settings", "settings",
           "fitting_group_sizes", "model_group_size", "quant_method_for", "warn_if_no_int4_head",
           "GROUP_SIZES", "MODEL_GROUP_SIZES", "CLIP_MODES", "ENV_ENABLE", "ENV_GROUP_SIZE", "ENV_CLIP", "ENV_STATS", "ENV_DRAFT",
           "RadianceLMHeadInt4", "RadianceLMHeadInt4Copy"]


def __getattr__(name):
    if name in ("RadianceLMHeadInt4", "RadianceLMHeadInt4Copy"):
        from . import method  # imports vLLM

        return getattr(method, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
