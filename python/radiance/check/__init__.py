"""What int4 costs a real model: the offline check of a quantized lm_head.

``check(weight, hidden)`` quantizes a head ``[vocab, hidden]`` with each method (int4 ``rtn``,
``mse``, ``act``, the drafter-head formats ``fp8`` and ``nvfp4`` as vLLM computes them, or an int4
method registered with ``register_method``), applies it to real final hidden states
``[tokens, hidden]`` and compares the logits with those of the unquantized head::

    import radiance.check
    result = radiance.check.check(head, hidden_states)
    print(result)            # a table, one column per method
    result.to_dict()         # the same numbers, JSON-ready

NumPy in and out; torch tensors are accepted too (CUDA tensors run quantize and apply on their GPU;
the statistics are always gathered on the host, in float64, over chunks of tokens and rows so that
a 250k-vocab head fits in memory).

The reference logits are ``x @ W.T`` in float32 with the same bf16-rounded activations that the
quantized heads get, so every difference reported comes from the weights (and the bf16 output,
and for fp8 the activations' own quantization). ``act`` calibrates on the first half of the tokens
and every method is evaluated on the other half, unless statistics are given.

The package, by concern: ``methods`` (the methods and the group size), ``peers`` (the fp8 and
nvfp4 heads), ``measure`` (``check()`` itself), ``backends`` (NumPy or torch, and the timing of
one call), ``stats`` (the logit statistics), ``report`` (the result, its table, JSON and the
README's rule), ``plot`` (its figure); for the ``radiance check`` command, ``checkpoint``
(reading a head from a file) and ``hidden`` (running the model for its final hidden states).
"""

from radiance.format import DEFAULT_GROUP_SIZE, GROUP_SIZES

from .measure import DEFAULT_CALIBRATION_FRACTION, TOPK, check, split_tokens
from .methods import DEFAULT_METHODS, METHODS, Method, choose_group_size, register_method
from .report import RULE_KL, RULE_TOP1, CheckResult, MethodResult, meets_rule

__all__ = [
    "check",
    "split_tokens",
    "DEFAULT_CALIBRATION_FRACTION",
    "CheckResult",
    "MethodResult",
    "Method",
    "METHODS",
    "DEFAULT_METHODS",
    "meets_rule",
    "RULE_TOP1",
    "RULE_KL",
    "register_method",
    "choose_group_size",
    "DEFAULT_GROUP_SIZE",
    "GROUP_SIZES",
    "TOPK",
]
