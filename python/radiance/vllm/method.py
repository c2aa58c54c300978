"""RadianceLMHeadInt4: vLLM's unquantized lm_head method, with the weight swapped to int4 after
loading; and RadianceLMHeadInt4Copy, the same method as an entry of vLLM's table of lm_head copy
methods (drafter heads). Imports vLLM: only register() and the hooks import this module.

The format (nibble order, scales, padding rows) is documented in docs/FORMAT.md.
"""

import logging

import torch
from torch.nn import Parameter
from vllm.model_executor.layers.vocab_parallel_embedding import UnquantizedEmbeddingMethod
from vllm.model_executor.utils import set_weight_attrs

from radiance import torch_ops

from . import reload, statistics
from .settings import (CLIP_MODES, ENV_CLIP, ENV_STATS, GROUP_SIZES, fitting_group_sizes,
                       model_group_size, settings)
from .shards import check_gpu_build, fingerprint, is_packed, megabytes, quantize_into

logger = logging.getLogger("vllm.radiance")


class RadianceLMHeadInt4(UnquantizedEmbeddingMethod):
    """vLLM's unquantized lm_head method, with the weight swapped to int4 after loading."""

    # The weight-cache IPC loader would hand back already-packed tensors to bf16 parameters.
    supports_pre_processed_weights = False
    # The target's head: its float weight is fingerprinted before the swap, so a drafter whose
    # checkpoint ships the same head can still be recognised and share it (copies.py).
    is_copy = False

    def __init__(self, group_size=128, clip="mse", stats=""):
        """group_size None: the largest of 128, 64, 32 that divides the head's hidden size, chosen
        when the weight is quantized (a drafter copy, whose hidden size comes with its source)."""
        super().__init__()
        if group_size is not None and group_size not in GROUP_SIZES:
            raise ValueError(f"group_size must be one of {GROUP_SIZES}, got {group_size}")
        if clip not in CLIP_MODES:
            raise ValueError(f"clip must be one of {CLIP_MODES}, got {clip!r}")
        if (clip == "act") != bool(stats):
            raise ValueError(f"radiance: clip 'act' and a statistics file go together ({ENV_CLIP}"
                             f"=act with {ENV_STATS}); got clip {clip!r}, statistics {stats!r}")
        self.group_size = group_size
        self.clip = clip
        self.stats = stats  # the path of clip act's statistics file
        # float32 [hidden], read and checked against the head when it is quantized; kept for
        # reloads (statistics of the head as first loaded: an RL update changes the weights a
        # little, not which channels carry the large activations).
        self.activation_sq = None

    def process_weights_after_loading(self, layer):
        if is_packed(layer):
            return  # second pass: the weight is int4 already
        weight = layer.weight
        if weight.dim() != 2 or not weight.dtype.is_floating_point:
            raise ValueError(f"radiance: expected a float [vocab, hidden] lm_head weight, "
                             f"got {weight.dtype} {tuple(weight.shape)}")
        rows, cols = weight.shape
        if self.group_size is None:
            self.group_size = model_group_size(cols) or GROUP_SIZES[0]  # refused just below
        if cols % self.group_size:
            raise ValueError(f"radiance: lm_head hidden size {cols} is not a multiple of the "
                             f"group size {self.group_size}; group sizes that fit: "
                             f"{fitting_group_sizes(cols)}")
        check_gpu_build(weight.device)
        tied = not self.is_copy and reload.is_tied(layer)
        if self.stats and self.activation_sq is None:  # a reload keeps the first statistics
            found = statistics.load(self.stats, cols, layer.org_vocab_size)
            statistics.check_identity(found, self.stats, layer, weight.data)
            self.activation_sq = found.activation_sq
        if not self.is_copy:
            layer._radiance_fingerprint = (weight.dtype, fingerprint(weight.data))

        words = torch.empty((rows, cols // 8), dtype=torch.int32, device=weight.device)
        scales = torch.empty((rows, cols // self.group_size), dtype=torch.bfloat16,
                             device=weight.device)
        quantize_into(weight.data, words, scales, self.group_size, self.clip, self.activation_sq)

        before = weight.numel() * weight.element_size()
        dtype, device = weight.dtype, weight.device
        packed = Parameter(words.view(torch.int8), requires_grad=False)
        set_weight_attrs(packed, {"input_dim": 1, "output_dim": 0,
                                  "weight_loader": reload.packed_weight_loader(layer, self)})
        weight_scale = Parameter(scales, requires_grad=False)
        if tied:
            reload.follow_tied_embedding(layer, weight, packed, weight_scale, self)
        del weight
        # Rebinding the name drops this layer's reference to the float tensor; a tied
        # embedding (or, for a copy, the source head) keeps its own reference.
        layer.weight = packed
        layer.weight_scale = weight_scale
        if self.is_copy:
            return  # copies.py says what the copy saves, once, for the whole drafter
        if device.type == "cuda":
            torch.cuda.empty_cache()  # hand the bf16 blocks back before vLLM profiles memory

        after = words.numel() * 4 + scales.numel() * 2
        rank = f"rank {getattr(layer, 'tp_rank', 0)}/{getattr(layer, 'tp_size', 1)}"
        kind = str(dtype).replace("torch.", "")
        shape = f"[{rows}, {cols}] {kind}"
        if tied:
            logger.info("radiance: lm_head %s on %s (%s) -> int4 g%d (%s): the weight is tied "
                        "to the input embeddings, whose %.1f MB %s table stays for the lookup; "
                        "the int4 head adds %.1f MB and reads %.1fx fewer bytes per step",
                        shape, device, rank, self.group_size, self.clip, megabytes(before),
                        kind, megabytes(after), before / after)
        else:
            logger.info("radiance: lm_head %s on %s (%s) -> int4 g%d (%s): %.1f MB -> %.1f MB, "
                        "saved %.1f MB", shape, device, rank, self.group_size, self.clip,
                        megabytes(before), megabytes(after), megabytes(before - after))

    def apply(self, layer, x, bias=None):
        # Once per decode step: in eager mode the parameters come straight from the module's
        # dict (nn.Module.__getattr__ costs about a microsecond a name); torch.compile sees
        # plain attributes. torch_ops.apply_int4 is the registered op (or, in eager mode on
        # a GPU, its CUDA kernel without the dispatcher).
        if torch.compiler.is_compiling():
            weight, scales = layer.weight, getattr(layer, "weight_scale", None)
        else:
            params = layer._parameters
            weight, scales = params["weight"], params.get("weight_scale")
        if scales is None:  # not processed yet (never the case once vLLM has loaded)
            return super().apply(layer, x, bias)
        two_d = x.dim() == 2
        x2 = x if two_d else x.reshape(-1, x.shape[-1])
        y = torch_ops.apply_int4(x2, weight, scales, bias, self.group_size)
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


class RadianceLMHeadInt4Copy(RadianceLMHeadInt4):
    """The int4 method as vLLM's lm_head copy machinery builds it: `_LM_HEAD_METHODS["int4"]()`,
    no arguments, so group size, clip and statistics come from RADIANCE_LMHEAD_INT4_GS / _CLIP /
    _STATS. The copy's weight is a new Parameter on the source's storage; it is quantized from
    there, so the source stays as it is and no float copy is made."""

    is_copy = True

    def __init__(self):
        current = settings()
        super().__init__(current.group_size, current.clip, current.stats)
