"""The plugin's environment knobs, read once at import; standard library only.

    RADIANCE_LMHEAD_INT4        0 (default) or 1: the model's own lm_head becomes int4
    RADIANCE_LMHEAD_INT4_GS     group size: 32, 64, 128 or 256; unset, the largest of 128, 64,
                                32 that divides the model's hidden size
    RADIANCE_LMHEAD_INT4_CLIP   mse (default), rtn (also spelled 0) or act
    RADIANCE_LMHEAD_INT4_STATS  the calibration statistics file that clip act needs (written by
                                `radiance calibrate`); required with act, refused without it
    RADIANCE_DRAFT_LMHEAD_INT4  0 (default) or 1: a speculative-decoding drafter that shares the
                                target's lm_head gets an int4 copy of it (vLLM >= 0.33)

A bad value is kept and raised by `settings()`, which `register()` calls: vLLM does not swallow an
exception raised there, unlike one raised while it imports a plugin.
"""

import os
from dataclasses import dataclass
from typing import Optional

from radiance import format as _format

ENV_ENABLE = "RADIANCE_LMHEAD_INT4"
ENV_GROUP_SIZE = "RADIANCE_LMHEAD_INT4_GS"
ENV_CLIP = "RADIANCE_LMHEAD_INT4_CLIP"
ENV_DRAFT = "RADIANCE_DRAFT_LMHEAD_INT4"
ENV_STATS = "RADIANCE_LMHEAD_INT4_STATS"

GROUP_SIZES = _format.GROUP_SIZES
CLIP_MODES = _format.CLIP_MODES
_CLIP_SPELLINGS = {**{mode: mode for mode in CLIP_MODES}, "0": "rtn"}
_SWITCH_SPELLINGS = {"0": False, "1": True}


@dataclass(frozen=True)
class Settings:
    enabled: bool = False
    group_size: Optional[int] = None  # None: from the head's hidden size (model_group_size)
    clip: str = _format.DEFAULT_CLIP
    draft: bool = False
    stats: str = ""  # the statistics file of clip act; "" for the other clips


def read_settings(environ=None):
    """Settings from the environment; ValueError naming the variable and its allowed values."""
    environ = os.environ if environ is None else environ

    def get(name, default):
        value = environ.get(name)
        return default if value is None or value.strip() == "" else value.strip().lower()

    switches = {}
    for name in (ENV_ENABLE, ENV_DRAFT):
        value = get(name, "0")
        if value not in _SWITCH_SPELLINGS:
            raise ValueError(f"{name}={environ.get(name)!r}: expected 0 or 1")
        switches[name] = _SWITCH_SPELLINGS[value]
    group = get(ENV_GROUP_SIZE, None)
    if group is not None and group not in {str(g) for g in GROUP_SIZES}:
        raise ValueError(f"{ENV_GROUP_SIZE}={environ.get(ENV_GROUP_SIZE)!r}: expected one of "
                         f"{', '.join(map(str, GROUP_SIZES))}")
    clip = get(ENV_CLIP, _format.DEFAULT_CLIP)
    if clip not in _CLIP_SPELLINGS:
        raise ValueError(f"{ENV_CLIP}={environ.get(ENV_CLIP)!r}: expected mse, rtn (also "
                         f"spelled 0) for plain round-to-nearest, or act (with {ENV_STATS})")
    clip = _CLIP_SPELLINGS[clip]
    stats = _stats_path(environ, clip)
    return Settings(switches[ENV_ENABLE], None if group is None else int(group), clip,
                    switches[ENV_DRAFT], stats)


def _stats_path(environ, clip):
    """The statistics file: required with clip act and refused without it (an error rather than
    a warning: statistics that are silently ignored would leave a user believing the head is
    activation-aware). Only its existence is checked here; its contents when the head is built."""
    path = (environ.get(ENV_STATS) or "").strip()
    if clip == "act" and not path:
        raise ValueError(f"{ENV_CLIP}=act needs {ENV_STATS}: the path of a statistics file "
                         f"written by `radiance calibrate MODEL --out FILE`")
    if clip != "act" and path:
        raise ValueError(f"{ENV_STATS}={path!r} is set, but {ENV_CLIP} is {clip}, which uses no "
                         f"statistics: set {ENV_CLIP}=act or unset {ENV_STATS}")
    if path and not os.path.isfile(path):
        raise ValueError(f"{ENV_STATS}={path!r}: no such file")
    return path


def reload_settings(environ=None):
    """Read the knobs again (tests, notebooks): the Settings, or read_settings' ValueError."""
    global _settings, _settings_error
    try:
        _settings, _settings_error = read_settings(environ), None
    except ValueError as error:
        _settings, _settings_error = None, error
        raise
    return _settings


def settings():
    """The Settings last read; raises the ValueError of a bad knob."""
    if _settings_error is not None:
        raise ValueError(str(_settings_error))
    return _settings


def fitting_group_sizes(hidden_size):
    return [g for g in GROUP_SIZES if hidden_size % g == 0]


# What RADIANCE_LMHEAD_INT4_GS unset picks from, first fit wins: 128 is what deployments use (and
# what `radiance check` picks); 256 only when asked for, as check does.
MODEL_GROUP_SIZES = (128, 64, 32)


def model_group_size(hidden_size):
    """The group size for a head of `hidden_size` columns when RADIANCE_LMHEAD_INT4_GS is unset:
    the largest of 128, 64, 32 that divides it; None when none does."""
    return next((g for g in MODEL_GROUP_SIZES if hidden_size % g == 0), None)


_settings, _settings_error = None, None
try:
    reload_settings()
except ValueError:
    pass
