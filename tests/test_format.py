"""radiance.format, the Python definition of the format, against what the C core does."""

import inspect
import os
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

import radiance
from radiance import format as fmt

BF16 = ml_dtypes.bfloat16


def _bf16_bits(values):
    return np.asarray(values, dtype=np.float32).astype(BF16).view(np.uint16)


def test_imports_with_the_standard_library_only():
    # Loaded as a plain file, with NumPy and torch made unimportable: radiance/__init__ (which
    # needs NumPy) is not run, so only format.py's own imports count.
    path = os.path.abspath(fmt.__file__)
    code = (
        "import importlib.util, sys\n"
        "sys.modules['numpy'] = None; sys.modules['torch'] = None\n"
        f"spec = importlib.util.spec_from_file_location('radiance_format', {path!r})\n"
        "module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module)\n"
        "print(module.GROUP_SIZES)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(fmt.GROUP_SIZES)


def test_package_exports_the_same_objects():
    assert radiance.GROUP_SIZES is fmt.GROUP_SIZES
    assert radiance.CLIP_MODES is fmt.CLIP_MODES
    assert radiance.NIBBLE_SHIFTS is fmt.NIBBLE_SHIFTS
    assert set(fmt.CLIP_RATIOS) == set(fmt.CLIP_MODES)


def test_defaults_are_the_api_defaults():
    params = inspect.signature(radiance.quantize_rows).parameters
    assert params["group_size"].default == fmt.DEFAULT_GROUP_SIZE
    assert params["clip"].default == fmt.DEFAULT_CLIP
    assert fmt.DEFAULT_GROUP_SIZE in fmt.GROUP_SIZES and fmt.DEFAULT_CLIP in fmt.CLIP_MODES


def test_group_sizes_are_what_the_c_core_accepts():
    w = np.ones((2, 1024), np.float32)
    for group_size in fmt.GROUP_SIZES:
        _, scales = radiance.quantize_rows(w, group_size=group_size)
        assert scales.shape == (2, 1024 // group_size)
    for group_size in (8, 16, 48, 96, 512, 1024):
        with pytest.raises(ValueError, match="group_size"):
            radiance.quantize_rows(w, group_size=group_size)


def test_nibble_layout_is_what_pack_shuffle_does():
    for element, shift in enumerate(fmt.NIBBLE_SHIFTS):
        for value in (1, 9, 15):
            nibbles = np.zeros((1, fmt.ELEMENTS_PER_WORD), np.uint8)
            nibbles[0, element] = value
            word = radiance.pack_shuffle(nibbles)
            assert word.shape == (1, 1)
            assert int(word.view(np.uint32)[0, 0]) == value << shift


def test_zero_groups_get_the_minimum_scale_and_the_offset_nibble():
    w = np.zeros((3, 256), np.float32)
    w[1, 128:] = 1.0  # one group that is not zero
    for clip in fmt.CLIP_MODES:
        stats = {"activation_sq": np.linspace(0.5, 2.0, 256, dtype=np.float32)} if clip == "act" else {}
        packed, scales = radiance.quantize_rows(w, group_size=128, clip=clip, **stats)
        nibbles = radiance.unpack_shuffle(packed)
        zero_groups = np.array([[1, 1], [1, 0], [1, 1]], bool)
        assert (scales.view(np.uint16)[zero_groups] == _bf16_bits(fmt.MIN_SCALE)).all()
        assert (nibbles.reshape(3, 2, 128)[zero_groups] == fmt.NIBBLE_OFFSET).all()


@pytest.mark.parametrize("clip", ["mse", "rtn", "act"])
def test_clip_ratios_are_the_ones_the_c_core_chooses_from(clip):
    # Every group's scale is bf16(max(amax * float32(r / 7), MIN_SCALE)) for a ratio r of the
    # table, and on heavy-tailed weights every ratio of the table wins somewhere: a ratio the C
    # core has and the table lacks, or the other way round, fails one of the two.
    rng = np.random.default_rng(int.from_bytes(os.urandom(4), "little"))
    group_size = 32
    w = (rng.standard_t(2, size=(512, 64 * group_size)) * 0.02).astype(np.float32)
    stats = {"activation_sq": rng.exponential(size=64 * group_size).astype(np.float32)} if clip == "act" else {}
    packed, scales = radiance.quantize_rows(w, group_size=group_size, clip=clip, **stats)
    amax = np.abs(w.reshape(512, 64, group_size)).max(axis=-1)
    candidates = [
        _bf16_bits(np.maximum(amax * np.float32(r / fmt.Q_MAX), np.float32(fmt.MIN_SCALE)))
        for r in fmt.CLIP_RATIOS[clip]
    ]
    got = scales.view(np.uint16)
    matches = np.stack([got == c for c in candidates])
    assert matches.any(axis=0).all(), "a scale that no ratio of the table gives"
    # Where two ratios round to the same bf16 scale the group does not tell them apart.
    unique = np.stack([matches[i] & ~np.delete(matches, i, axis=0).any(axis=0)
                       for i in range(len(candidates))])
    chosen = unique.reshape(len(candidates), -1).any(axis=1)
    assert chosen.all(), f"ratios never chosen alone: {np.asarray(fmt.CLIP_RATIOS[clip])[~chosen]}"
    nibbles = radiance.unpack_shuffle(packed)
    assert nibbles.min() >= fmt.Q_MIN + fmt.NIBBLE_OFFSET
    assert nibbles.max() == fmt.Q_MAX + fmt.NIBBLE_OFFSET
    if clip != "rtn":  # clipping below the absmax reaches the lowest level
        assert nibbles.min() == fmt.Q_MIN + fmt.NIBBLE_OFFSET
