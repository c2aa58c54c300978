"""What int4 costs a real model: the offline check of a quantized lm_head.

``check(weight, hidden)`` quantizes a head ``[vocab, hidden]`` with each method (``rtn``, ``mse``,
or any registered with ``register_method``), applies it to real final hidden states
``[tokens, hidden]`` and compares the logits with those of the unquantized head::

    import radiance.check
    result = radiance.check.check(head, hidden_states)
    print(result)            # a table, one column per method
    result.to_dict()         # the same numbers, JSON-ready

NumPy in and out; torch tensors are accepted too (CUDA tensors run quantize and apply on their GPU;
the statistics are always gathered on the host, in float64, over chunks of tokens and rows so that
a 250k-vocab head fits in memory).

The reference logits are ``x @ W.T`` in float32 with the same bf16-rounded activations that the
int4 head gets, so every difference reported comes from the weights (and the bf16 output that
``apply`` returns).

The package, by concern: ``methods`` (the quantization methods and the group size), ``measure``
(``check()`` itself), ``backends`` (NumPy or torch, and the timing of one call), ``stats`` (the
logit statistics), ``report`` (the result, its table and JSON), ``plot`` (its figure); for the
``radiance check`` command, ``checkpoint`` (reading a head from a file) and ``hidden`` (running
the model for its final hidden states).
"""

from radiance.format import DEFAULT_GROUP_SIZE, GROUP_SIZES

from .measure import TOPK, check
from .methods import METHODS, Method, choose_group_size, register_method
from .report import CheckResult, MethodResult

__all__ = [
    "check",
    "CheckResult",
    "MethodResult",
    "Method",
    "METHODS",
    "register_method",
    "choose_group_size",
    "DEFAULT_GROUP_SIZE",
    "GROUP_SIZES",
    "TOPK",
]
