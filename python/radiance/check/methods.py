"""The formats ``check`` compares, and the group size it quantizes int4 with.

Two kinds of method:

- **int4** methods return radiance's format (docs/FORMAT.md), so ``radiance.apply`` runs them:
  ``quantize(weight, group_size) -> (packed, scales)``. ``rtn``, ``mse`` and ``act`` are
  radiance's own clip modes; ``act`` also takes ``activation_sq=`` (E[x²] per channel from
  calibration tokens), which ``check`` passes to every method marked ``needs_activation_sq``.
  ``register_method`` adds others of this kind.
- **peer** formats are the other heads a vLLM drafter can take (``fp8``, ``nvfp4``, computed by
  ``radiance.peer_formats`` as vLLM 0.33 computes them); their ``quantize(weight_float32)``
  returns a head object (peers.py) that gives its logits and its dequantized rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict

import numpy as np

import radiance
from radiance.format import DEFAULT_GROUP_SIZE, GROUP_SIZES

from . import peers

INT4 = "int4"


@dataclass(frozen=True)
class Method:
    """A way to turn a head into a cheaper one.

    ``format`` is ``"int4"`` (``quantize(weight, group_size[, activation_sq=])`` returns
    ``(packed, scales)`` in the layout of ``radiance.quantize_rows``) or the name of a peer format
    (``quantize(weight_float32)`` returns a head of peers.py).
    """

    name: str
    quantize: Callable
    description: str = ""
    format: str = INT4
    needs_activation_sq: bool = False


def _clip_method(clip):
    def quantize(weight, group_size, activation_sq=None):
        if activation_sq is None:
            return radiance.quantize_rows(weight, group_size=group_size, clip=clip)
        return radiance.quantize_rows(
            weight, group_size=group_size, clip=clip, activation_sq=activation_sq
        )

    return quantize


METHODS: Dict[str, Method] = {
    "rtn": Method("rtn", _clip_method("rtn"), "int4, round to nearest, scale = absmax / 7"),
    "mse": Method("mse", _clip_method("mse"), "int4, clip ratio per group by least squared error"),
    "act": Method(
        "act",
        _clip_method("act"),
        "int4, clip ratio per group by least logit error (weighted by calibration E[x^2])",
        needs_activation_sq=True,
    ),
    "fp8": Method(
        "fp8",
        peers.Fp8Head,
        "vLLM's fp8 copy: e4m3 weights with a scale per row, activations per token",
        format="fp8",
    ),
    "nvfp4": Method(
        "nvfp4",
        peers.Nvfp4Head,
        "vLLM's nvfp4 copy: E2M1 weights, an e4m3 scale per 16 and a global scale, "
        "bf16 activations",
        format="nvfp4",
    ),
}

# What `check` and `radiance check` compare unless told otherwise.
DEFAULT_METHODS = ("rtn", "mse", "act", "fp8", "nvfp4")


def register_method(name, quantize, description=""):
    """Make ``name`` usable in ``check(methods=...)`` and ``radiance check --methods``.

    ``quantize(weight, group_size) -> (packed, scales)`` in radiance's int4 format."""
    if not isinstance(name, str) or not name:
        raise ValueError("method name must be a non-empty string")
    METHODS[name] = Method(name, quantize, description)
    return METHODS[name]


def resolve_methods(methods):
    if isinstance(methods, (str, Method)):
        methods = [methods]
    resolved = []
    for item in methods:
        if isinstance(item, Method):
            resolved.append(item)
        elif item in METHODS:
            resolved.append(METHODS[item])
        else:
            raise ValueError(f"unknown method {item!r}; known methods: {', '.join(METHODS)}")
    if not resolved:
        raise ValueError("methods is empty: name at least one of " + ", ".join(METHODS))
    names = [m.name for m in resolved]
    if len(set(names)) != len(names):
        raise ValueError(f"methods has duplicates: {names}")
    return resolved


def choose_group_size(hidden_size, group_size=None, argument="group_size"):
    """The group size to use for a head with ``hidden_size`` columns, and a note or None.

    Without a request: 128 (what a deployment uses) when it divides ``hidden_size``, else the
    largest of 64, 32 that does. A requested size must be allowed and divide ``hidden_size``.
    ``argument`` is how errors name the option (``"--group-size"`` on the command line).
    """
    dividing = [g for g in GROUP_SIZES if hidden_size % g == 0]
    if group_size is None:
        if DEFAULT_GROUP_SIZE in dividing:
            return DEFAULT_GROUP_SIZE, None
        smaller = [g for g in dividing if g < DEFAULT_GROUP_SIZE]
        if not smaller:
            raise ValueError(
                f"hidden size {hidden_size} is not a multiple of any allowed group size "
                f"({', '.join(map(str, GROUP_SIZES))}): radiance cannot quantize this head"
            )
        chosen = max(smaller)
        return chosen, (
            f"hidden size {hidden_size} is not a multiple of {DEFAULT_GROUP_SIZE}; "
            f"using group size {chosen} ({argument} chooses another)"
        )
    if isinstance(group_size, bool) or not isinstance(group_size, (int, np.integer)):
        raise TypeError(f"{argument} must be an int, got {type(group_size).__name__}")
    group_size = int(group_size)
    if group_size not in GROUP_SIZES:
        raise ValueError(
            f"{argument} must be one of {', '.join(map(str, GROUP_SIZES))}, got {group_size}"
        )
    if hidden_size % group_size:
        hint = ", ".join(map(str, sorted(dividing, reverse=True))) if dividing else "none"
        raise ValueError(
            f"{argument} {group_size} does not divide the hidden size {hidden_size} "
            f"({hidden_size} = {hidden_size // group_size} * {group_size} + "
            f"{hidden_size % group_size}); group sizes that divide it: {hint}"
        )
    return group_size, None
