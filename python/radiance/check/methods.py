"""The quantization methods ``check`` compares, and the group size it quantizes with.

A method is any function ``quantize(weight, group_size) -> (packed, scales)`` that returns
radiance's format (docs/FORMAT.md), so ``radiance.apply`` can run it; ``rtn`` and ``mse`` are
radiance's own clip modes, and ``register_method`` adds others.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict

import numpy as np

import radiance
from radiance.format import DEFAULT_GROUP_SIZE, GROUP_SIZES


@dataclass(frozen=True)
class Method:
    """A way to turn a head into radiance's int4 format.

    ``quantize(weight, group_size)`` returns ``(packed, scales)`` in the layout of
    ``radiance.quantize_rows`` so that ``radiance.apply`` can run it.
    """

    name: str
    quantize: Callable
    description: str = ""


def _clip_method(clip):
    def quantize(weight, group_size):
        return radiance.quantize_rows(weight, group_size=group_size, clip=clip)

    return quantize


METHODS: Dict[str, Method] = {
    "rtn": Method("rtn", _clip_method("rtn"), "round to nearest, scale = absmax / 7"),
    "mse": Method("mse", _clip_method("mse"), "clip ratio per group by least squared error"),
}


def register_method(name, quantize, description=""):
    """Make ``name`` usable in ``check(methods=...)`` and ``radiance check --methods``."""
    if not isinstance(name, str) or not name:
        raise ValueError("method name must be a non-empty string")
    METHODS[name] = Method(name, quantize, description)
    return METHODS[name]


def resolve_methods(methods):
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


def choose_group_size(hidden_size, group_size=None):
    """The group size to use for a head with ``hidden_size`` columns, and a note or None.

    Without a request: 128 (what a deployment uses) when it divides ``hidden_size``, else the
    largest of 64, 32 that does. A requested size must be allowed and divide ``hidden_size``.
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
            f"using group size {chosen} (pass group_size / --group-size to choose another)"
        )
    if isinstance(group_size, bool) or not isinstance(group_size, (int, np.integer)):
        raise TypeError(f"group_size must be an int, got {type(group_size).__name__}")
    group_size = int(group_size)
    if group_size not in GROUP_SIZES:
        raise ValueError(
            f"group_size must be one of {', '.join(map(str, GROUP_SIZES))}, got {group_size}"
        )
    if hidden_size % group_size:
        hint = ", ".join(map(str, sorted(dividing, reverse=True))) if dividing else "none"
        raise ValueError(
            f"group size {group_size} does not divide the hidden size {hidden_size} "
            f"({hidden_size} = {hidden_size // group_size} * {group_size} + "
            f"{hidden_size % group_size}); group sizes that divide it: {hint}"
        )
    return group_size, None
