"""An independent NumPy reference of the radiance format (docs/FORMAT.md), written from the spec.

Vectorised over rows and groups with explicit float32 steps, so it fixes the same rounding of
every operation and the same summation order as the kernels, without sharing any of their code.
"""

import ml_dtypes
import numpy as np

RATIOS = {"mse": (1.0, 0.95, 0.9, 0.85, 0.8), "rtn": (1.0,), "act": (1.0, 0.95, 0.9, 0.85, 0.8)}
SHIFTS = np.array([0, 16, 4, 20, 8, 24, 12, 28], dtype=np.uint32)


def to_bf16_f32(values):
    """Round float32 values to bf16 (nearest, ties to even) and back to float32."""
    return np.asarray(values, dtype=np.float32).astype(ml_dtypes.bfloat16).astype(np.float32)


def act_weights_reference(activation_sq, group_size):
    """float32 [K] error weights of clip "act": each group of activation_sq over its largest
    entry (rounded once), 0 for entries of 0, 1 throughout a group whose largest entry is 0."""
    a = np.asarray(activation_sq, dtype=np.float32).reshape(-1, group_size)
    largest = a.max(axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        weights = np.where(a > 0, a / np.where(largest > 0, largest, np.float32(1)), np.float32(0))
    return np.where(largest > 0, weights, np.float32(1)).astype(np.float32).reshape(-1)


def candidate_scales(w32, group_size, clip):
    """[ratios, N, K/G] float32 bf16-valued scales, ratio by ratio in the order tried."""
    n, k = w32.shape
    amax = np.abs(w32.reshape(n, k // group_size, group_size)).max(axis=-1)
    return np.stack([
        to_bf16_f32(np.maximum(amax * np.float32(ratio / 7.0), np.float32(1e-8)))
        for ratio in RATIOS[clip]
    ])


def quantize_reference(w, group_size=128, clip="mse", activation_sq=None):
    """(nibbles uint8 [N, K], scales bf16 [N, K/G]) by the rule of docs/FORMAT.md: float32 steps in
    the fixed summation order, bit for bit what the kernels must give."""
    w32 = np.asarray(w).astype(np.float32)
    n, k = w32.shape
    g = w32.reshape(n, k // group_size, group_size)
    weights = None
    if clip == "act":
        weights = act_weights_reference(activation_sq, group_size).reshape(
            1, k // group_size, group_size // 8, 8)
    best_err = best_s = best_q = None
    for s in candidate_scales(w32, group_size, clip):
        with np.errstate(over="ignore", invalid="ignore", under="ignore"):
            q = np.clip(np.rint(g / s[..., None]), -8, 7).astype(np.float32)
            d = q * s[..., None] - g
            e = (d * d).reshape(n, k // group_size, group_size // 8, 8)
            if weights is not None:
                e = e * weights  # each squared error rounded, then weighted and rounded again
        p = e[..., 0]
        for t in range(1, 8):
            p = p + e[..., t]
        while p.shape[-1] > 1:
            h = p.shape[-1] // 2
            p = p[..., :h] + p[..., h:]
        err = p[..., 0]
        if best_err is None:
            best_err, best_s, best_q = err, s, q
        else:
            better = err < best_err
            best_err = np.where(better, err, best_err)
            best_s = np.where(better, s, best_s)
            best_q = np.where(better[..., None], q, best_q)
    nibbles = (best_q + 8).astype(np.uint8).reshape(n, k)
    return nibbles, best_s.astype(ml_dtypes.bfloat16)


def act_errors_float64(w, group_size, activation_sq, scales):
    """[ratios, N, K/G] float64 act errors sum_k a_k (q_k s - w_k)^2 for the given candidate
    scales, with the raw statistics (not normalised) and every sum in float64: an independent
    account of which ratio the rule should pick, up to the rounding of the float32 kernels."""
    w64 = np.asarray(w).astype(np.float32).astype(np.float64)
    n, k = w64.shape
    g = w64.reshape(n, k // group_size, group_size)
    a = np.asarray(activation_sq, dtype=np.float64).reshape(1, k // group_size, group_size)
    errors = []
    for s in scales.astype(np.float64):
        q = np.clip(np.rint(g / s[..., None]), -8, 7)
        errors.append((a * (q * s[..., None] - g) ** 2).sum(axis=-1))
    return np.stack(errors)


def pack_reference(nibbles):
    n, k = nibbles.shape
    v = nibbles.reshape(n, k // 8, 8).astype(np.uint32) << SHIFTS
    return np.bitwise_or.reduce(v, axis=-1).view(np.int32)


def unpack_reference(words):
    n, kw = words.shape
    v = (words.view(np.uint32)[..., None] >> SHIFTS) & 15
    return v.astype(np.uint8).reshape(n, kw * 8)


def dequantize_reference(nibbles, scales, group_size):
    q = nibbles.astype(np.float64) - 8.0
    return q * np.repeat(scales.astype(np.float64), group_size, axis=1)


def folds_on_hopper(m, k, group_size, n, sms):
    """Whether apply rounds each weight to bf16_rne(q * s) before the product on NVIDIA sm_90a
    (docs/FORMAT.md, "Rounding of apply": "Which calls fold"; hip/dispatch.h, decide) for a head of
    n rows on a GPU of sms SMs: more than 32 tokens, 17-32 where k <= 1024 or where n rows make
    192-row tiles that fill their last round over the SMs to 0.99 (fold_32_fills_rounds), 9-32
    where the group is under 128, or 9-16 where k <= 1024 is no multiple of twice the group (no
    split k)."""
    full_rounds = sms > 0 and fold_fill(-(-n // 192), sms) >= 0.99
    return (m > 32 or (m > 16 and (k <= 1024 or full_rounds)) or (m > 8 and group_size < 128)
            or (m > 8 and k <= 1024 and k % (2 * group_size) != 0))


def fold_chunks_of(m):
    """fold_tile's tokens a chunk for m tokens (hip/dispatch.h): equal chunks of at most 256, each
    rounded up to 16 up to 32 tokens, to 48 up to 48 and to 32 beyond."""
    chunks = -(-m // 256)
    per = -(-m // chunks)
    return 16 if per <= 16 else 32 if per <= 32 else 48 if per <= 48 else -(-per // 32) * 32


def fold_fill(tiles, slots):
    """The share of the persistent blocks' slots that `tiles` tiles dealt to `slots` blocks fill over
    all their rounds, as hip/dispatch.h computes it (fold_fill): 1 where they divide evenly."""
    return tiles / (-(-tiles // slots) * slots)


def fold_tail_parts(tiles, slots, k):
    """The parts the folding kernel cuts each tile of its last round in along k, as hip/dispatch.h
    states its rule (fold_tail_parts; one block per SM only): where there are more tiles than
    blocks and the last round would leave at least half of the blocks idle, blocks // (tiles in that
    round), at most 8 and at most k's steps of 128 columns // 4, where a tile has 16 steps or more;
    else 1 (no cut)."""
    rest = tiles % slots if slots > 0 else 0
    steps = -(-k // 128)
    if slots < 2 or tiles <= slots or rest == 0 or steps < 16:
        return 1
    parts = min(slots // rest, 8, steps // 4)
    return parts if parts >= 2 else 1


def expected_fold_launches(m, k):
    """The folding kernel's launches for m tokens as hip/dispatch.h states its rule
    (fold_split_tokens), as tokens a chunk per launch: where k >= 5120, m > 256, the rest of m over
    whole chunks of 256 is 96 or more and its tile would hold fewer tokens past it than the equal
    chunks of m, two launches (the whole chunks, then the rest), else one."""
    rest = m % 256

    def padding(t):
        return -(-t // 256) * fold_chunks_of(t) - t

    if m > 256 and k >= 5120 and rest >= 96 and padding(rest) < padding(m):
        return [fold_chunks_of(m - rest), fold_chunks_of(rest)]
    return [fold_chunks_of(m)]


def apply_reference(x, nibbles, scales, group_size, bias=None):
    """float64 y = x . w_hat^T (+ bias)."""
    y = np.asarray(x).astype(np.float64) @ dequantize_reference(nibbles, scales, group_size).T
    if bias is not None:
        y = y + np.asarray(bias).astype(np.float64)
    return y
