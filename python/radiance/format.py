"""radiance's int4 format, defined once for Python (docs/FORMAT.md is the full description).

The C core and the GPU kernels carry the same numbers in their own header; the tests check that
the two agree. This module imports the standard library only, so code that must not pull in
NumPy or torch at import time (the vLLM plugin's settings) can read it.
"""

# Input columns per bf16 scale. K must be a multiple of the group size (and of 8).
GROUP_SIZES = (32, 64, 128, 256)
# What a deployment uses, and what tools pick when it divides the hidden size.
DEFAULT_GROUP_SIZE = 128

# Clip modes and the ratios of the group absmax each one tries, in order: the ratio with the
# least squared error wins, and on a tie the earlier ratio.
CLIP_MODES = ("mse", "rtn", "act")
DEFAULT_CLIP = "mse"
CLIP_RATIOS = {
    "mse": (1.0, 0.95, 0.9, 0.85, 0.8),
    "rtn": (1.0,),
    # as mse, each squared error weighted by the channel's calibration statistic E[x^2]
    "act": (1.0, 0.95, 0.9, 0.85, 0.8),
}

# Quantized values and how they are stored: nibble = q + NIBBLE_OFFSET, eight nibbles per
# int32 word, element e of a word at bit shift NIBBLE_SHIFTS[e] (nibble order 0,2,4,6,1,3,5,7).
Q_MIN, Q_MAX = -8, 7
NIBBLE_OFFSET = 8
ELEMENTS_PER_WORD = 8
NIBBLE_SHIFTS = (0, 16, 4, 20, 8, 24, 12, 28)

# The scale of a group is never below this (float32, before the bf16 rounding): an all-zero
# group, such as a padded vocabulary row, gets scale bf16(MIN_SCALE) and nibble NIBBLE_OFFSET.
MIN_SCALE = 1e-8
