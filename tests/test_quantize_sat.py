"""The GPU quantizer's saturating search and rebuild (hip/quantize.hip: ratio_error_sat,
exact_codes_sat), emulated here operation by operation with exact rational arithmetic, against the
rule of docs/FORMAT.md computed independently in NumPy float32 (one IEEE rounding per step), on
adversarial groups. No GPU needed: this checks the argument that the kernel's cheaper instructions
(fma with saturation on a grid of [1/2, 1), the fused d * d + p) give the rule's values bit for
bit, for every hardware reciprocal within 2 ulps. tests/test_gpu.py and tests/test_quantize_gpu.py
check the kernel itself against the CPU on a GPU.
"""

import math
import os
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

import radiance
from reference import pack_reference

RATIOS = (1.0, 0.95, 0.9, 0.85, 0.8)
COEF = [float(np.float32(r / 7.0)) for r in RATIOS]  # float32(r / 7), the division in double
BF16 = ml_dtypes.bfloat16


def rn32(x):
    """x (a Fraction, or an int/float) rounded once to float32, nearest, ties to even (as a float)."""
    x = Fraction(x)
    n, d = x.numerator, x.denominator
    if n == 0:
        return 0.0
    neg, n = n < 0, abs(n)
    e = n.bit_length() - d.bit_length()  # 2^e <= n / d < 2^(e + 1), after the fix below
    if (n << max(0, -e)) < (d << max(0, e)):
        e -= 1
    e = max(e, -126)  # subnormals: the unit stays 2^-149
    shift = 23 - e
    num, den = (n << shift, d) if shift >= 0 else (n, d << -shift)
    q, r = divmod(num, den)
    if 2 * r > den or (2 * r == den and q & 1):
        q += 1
    val = math.ldexp(q, e - 23) if q.bit_length() + e - 23 <= 128 else math.inf
    if val >= 2.0**128:
        val = math.inf
    return -val if neg else val


def fma32(a, b, c):
    if not all(math.isfinite(x) for x in (a, b, c)):  # an overflowed sum: IEEE's infinities
        return a * b + c
    return rn32(Fraction(a) * Fraction(b) + Fraction(c))


def add32(a, b):
    return fma32(a, 1.0, b)


def mul32(a, b):
    return fma32(a, b, 0.0)


def sat(x):
    return min(max(x, 0.0), 1.0)


def f32_bits(x):
    return int(np.float32(x).view(np.uint32))


def nudge(y, ulps):
    """y moved by `ulps` float32 ulps (the hardware reciprocal estimate is within about one)."""
    y32 = np.float32(y)
    step = np.float32(np.inf) if ulps > 0 else np.float32(0.0)
    for _ in range(abs(ulps)):
        y32 = np.nextafter(y32, step)
    return float(y32)


# ---- the rule, in NumPy float32 (independent of the emulation below) -----------------------------
def rule_scale(amax, coef):
    m = np.float32(amax) * np.float32(coef)
    m = max(m, np.float32(1e-8))
    return float(np.float32(m).astype(BF16).astype(np.float32))


def rule_codes(v, sf):
    v = np.asarray(v, dtype=np.float32)
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        return np.clip(np.rint(v / np.float32(sf)), -8, 7).astype(np.float32)


def rule_error(v, sf, omega=None):
    """docs/FORMAT.md step 5 (and act's step 3): the terms, then per word left to right, then the halving tree."""
    v = np.asarray(v, dtype=np.float32)
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        q = rule_codes(v, sf)
        d = q * np.float32(sf) - v
        e = d * d
        if omega is not None:
            e = e * omega
    e = e.reshape(-1, 8)
    p = e[:, 0]
    with np.errstate(over="ignore", invalid="ignore"):
        for t in range(1, 8):
            p = p + e[:, t]
        while p.shape[0] > 1:
            h = p.shape[0] // 2
            p = p[:h] + p[h:]
    return float(p[0])


def rule_choice(v, omega=None):
    """(scale, codes, errors per ratio) by the rule: the smallest error, the earlier ratio on a tie."""
    amax = float(np.max(np.abs(np.asarray(v, dtype=np.float32))))
    scales = [rule_scale(amax, c) for c in COEF]
    errs = [rule_error(v, s, omega) for s in scales]
    best = 0
    for r in range(1, 5):
        if errs[r] < errs[best]:
            best = r
    return scales[best], rule_codes(v, scales[best]), errs, scales


# ---- the kernel's arithmetic, emulated one rounding at a time ----------------------------------
C_SEARCH = 1.0 - 7.0 * 2.0**-24  # ratio_error_sat: code q at C + q 2^-24, q = 7 at 1.0
C_CODES = 1.0 - 8.0 * 2.0**-24  # exact_codes_sat: -q at C' + (-q) 2^-24, q = -8 at 1.0


def sat_error(v, sf, r, omega=None, rcp_ulps=0):
    """ratio_error_sat<G, r, omega is not None> for one group (the words in FORMAT.md's order)."""
    big = mul32(sf, 2.0**24)
    y = nudge(rn32(1 / Fraction(big)), rcp_ulps)
    terms = []
    for k, x in enumerate(v):
        x = float(x)
        t = sat(fma32(x, y, C_SEARCH))
        if r >= 4:
            t = max(t, C_SEARCH - 8.0 * 2.0**-24)
        qd = add32(t, -C_SEARCH)
        d = fma32(qd, big, -x)
        terms.append(d)
    p = []
    for j in range(len(v) // 8):
        acc = None
        for e in range(8):
            d = terms[8 * j + e]
            if omega is not None:
                sq = mul32(mul32(d, d), float(omega[8 * j + e]))
                acc = sq if acc is None else add32(acc, sq)
            else:
                acc = mul32(d, d) if acc is None else fma32(d, d, acc)
        p.append(acc)
    while len(p) > 1:
        h = len(p) // 2
        p = [add32(p[i], p[i + h]) for i in range(h)]
    return p[0]


def sat_choice(v, omega=None, rcp_ulps=0):
    amax = float(np.max(np.abs(np.asarray(v, dtype=np.float32))))
    scales = [rule_scale(amax, c) for c in COEF]
    errs = [sat_error(v, scales[r], r, omega, rcp_ulps) for r in range(5)]
    best = 0
    for r in range(1, 5):
        if errs[r] < errs[best]:
            best = r
    return scales[best], errs


def sat_codes(v, sf):
    """exact_codes_sat then the nibble 0x3f800000 - bits(t), minus 8: the codes q."""
    y = rn32(1 / Fraction(sf))
    out = []
    for x in v:
        x = float(x)
        q0 = mul32(x, y)
        res = fma32(-sf, q0, x)
        qq = fma32(res, y, q0)
        t = max(sat(fma32(qq, -(2.0**-24), C_CODES)), C_CODES - 7.0 * 2.0**-24)
        out.append(0x3F800000 - f32_bits(t) - 8)
    return np.array(out, dtype=np.float32)


def bracket_codes(v, sf, rcp_ulps=0):
    """bracket_codes (the rebuild of warps that took the saturating search) then the nibble
    0x40000000 - bits(s), minus 8: the codes q, with no correctly rounded quotient."""
    y = nudge(rn32(1 / Fraction(mul32(sf, 2.0**24))), rcp_ulps)
    y_hi, y_lo = mul32(y, 1.0 + 2.0**-20), mul32(y, 1.0 - 2.0**-20)
    out = []
    for x in v:
        x = float(x)
        t1, t2 = sat(fma32(x, -y_hi, C_CODES)), sat(fma32(x, -y_lo, C_CODES))
        s = max(add32(t1, t2), 2.0 - 15.0 * 2.0**-23)
        out.append(0x40000000 - f32_bits(s) - 8)
    return np.array(out, dtype=np.float32)


def sat_search_allowed(v, dtype, weighted):
    """quantize_words' condition for the saturating search: amax < 2^100, and for bf16 mse no weight
    with 0 < |v| < 2^-63."""
    a = np.abs(np.asarray(v, dtype=np.float32))
    if not a.max() < 2.0**100:
        return False
    if dtype == "bf16" and not weighted and ((a > 0) & (a < 2.0**-63)).any():
        return False
    return True


# ---- adversarial groups ------------------------------------------------------------------------
def as_dtype(x, dtype):
    return np.asarray(x, dtype=np.float64).astype(np.float32).astype(BF16 if dtype == "bf16" else np.float16)


def adversarial_groups(rng, g, dtype):
    """Named float32 groups of size g whose values are exact in dtype."""
    big = 2.0**96 if dtype == "bf16" else 2.0**12  # fp16: |v| < 65504 for 16 sigma
    groups = {
        "gauss": rng.standard_normal(g) * 0.02,
        "student": rng.standard_t(3, g) * 0.02,
        "outlier": np.where(rng.random(g) < 0.05, 8.0, 1.0) * rng.standard_normal(g) * 0.02,
        # small integers times powers of two: w / s lands on half-integers, codes tie
        "ties": rng.integers(-40, 41, g) * 2.0**-7,
        "ties_wide": rng.integers(-255, 256, g) * 2.0 ** rng.integers(-9, -5, g),
        "zeros": np.zeros(g),
        "one_value": np.where(np.arange(g) == g // 2, -0.75, 0.0),
        "plateau": np.full(g, 0.3125) * np.where(rng.random(g) < 0.5, 1, -1),
        "tiny_scale": rng.standard_normal(g) * 1e-9,  # the 1e-8 floor of the scale
        "near_floor": rng.standard_normal(g) * 3e-8,  # some ratios floored, others not
        "huge": rng.standard_normal(g) * big,
        "wide_exponents": rng.standard_normal(g) * 2.0 ** rng.integers(-30, 0, g),
    }
    # clamp boundaries: values at k/2 * sf for the scale of each ratio, amax fixed at 1
    amax = 1.0
    for r, c in enumerate(COEF):
        sf = rule_scale(amax, c)
        vals = rng.integers(-17, 18, g) / 2.0 * sf
        vals[0] = amax
        vals[1] = -amax
        groups[f"halves_r{r}"] = vals
    if dtype == "bf16":
        # subnormal squares: 0 < |v| < 2^-63 beside normal weights (the check's case) and alone
        sub = rng.standard_normal(g) * 2.0**-70
        groups["tiny_mixed"] = np.where(rng.random(g) < 0.5, sub, rng.standard_normal(g) * 0.02)
        groups["tiny_only"] = sub
        groups["bf16_subnormal"] = rng.standard_normal(g) * 2.0**-130
    else:
        groups["f16_subnormal"] = np.where(rng.random(g) < 0.5, rng.integers(-8, 9, g) * 2.0**-24, 1e-3)
    return {name: as_dtype(x, dtype).astype(np.float32) for name, x in groups.items()}


def fresh_rng():
    seed = int.from_bytes(os.urandom(4), "little")
    return np.random.default_rng(seed), seed


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
@pytest.mark.parametrize("g", [32, 128])
@pytest.mark.parametrize("weighted", [False, True], ids=["mse", "act"])
def test_saturating_search_gives_the_rules_errors(dtype, g, weighted):
    """Where quantize_words lets a warp take ratio_error_sat, its error of every ratio is the rule's,
    bit for bit, for reciprocal estimates from -2 to +2 ulps; so the choice and tie-break are too."""
    rng, seed = fresh_rng()
    checked = 0
    for name, v in adversarial_groups(rng, g, dtype).items():
        omega = rng.random(g).astype(np.float32) if weighted else None
        if weighted:
            omega[: g // 4] = 1.0
        if not sat_search_allowed(v, dtype, weighted):
            continue
        _, _, want, _ = rule_choice(v, omega)
        for ulps in (0, 1, -1, 2, -2):
            _, got = sat_choice(v, omega, ulps)
            for r in range(5):
                same = got[r] == want[r] or (math.isnan(got[r]) and math.isnan(want[r]))
                assert same, f"seed {seed} {name} ratio {r} rcp {ulps:+d} ulp: {got[r]!r} != {want[r]!r}"
        checked += 1
    assert checked >= 12, f"seed {seed}: only {checked} groups allowed the saturating search"


@pytest.mark.parametrize("dtype", ["bf16", "f16", "f32"])
def test_saturating_rebuild_gives_the_rules_codes(dtype):
    """exact_codes_sat's nibbles are clamp(rint(RN(w / s)), -8, 7) + 8 for every candidate scale of
    every adversarial group (ties to even included), any dtype."""
    rng, seed = fresh_rng()
    for name, v in adversarial_groups(rng, 32, "bf16" if dtype == "bf16" else "f16").items():
        if dtype == "f32":
            v = (v * (1 + rng.standard_normal(v.size) * 1e-3)).astype(np.float32)
        amax = float(np.max(np.abs(v)))
        if not math.isfinite(amax):
            continue
        for c in COEF:
            sf = rule_scale(amax, c)
            np.testing.assert_array_equal(sat_codes(v, sf), rule_codes(v, sf), err_msg=f"seed {seed} {name} sf {sf}")


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_bracket_rebuild_gives_the_rules_codes(dtype):
    """bracket_codes' nibbles are the rule's for every candidate scale of every group that allows
    the saturating search (amax < 2^100), ties to even included, reciprocals from -2 to +2 ulps."""
    rng, seed = fresh_rng()
    for name, v in adversarial_groups(rng, 32, dtype).items():
        if not sat_search_allowed(v, dtype, True):
            continue
        amax = float(np.max(np.abs(v)))
        for c in COEF:
            sf = rule_scale(amax, c)
            want = rule_codes(v, sf)
            for ulps in (0, 1, -1, 2, -2):
                np.testing.assert_array_equal(
                    bracket_codes(v, sf, ulps), want, err_msg=f"seed {seed} {name} sf {sf} rcp {ulps:+d}"
                )


def test_fused_square_needs_the_tiny_check():
    """Why bf16 weights with 0 < |v| < 2^-63 keep ratio_error: there RN(d * d + p) and
    RN(RN(d * d) + p) differ (the word 1.5 * 2^-75, 2^-75: 2^-148 against 2^-149)."""
    a, b = 1.5 * 2.0**-75, 2.0**-75
    p = rn32(Fraction(a) * Fraction(a))
    fused = fma32(b, b, p)
    unfused = rn32(Fraction(p) + Fraction(rn32(Fraction(b) * Fraction(b))))
    assert (p, fused, unfused) == (2.0**-149, 2.0**-148, 2.0**-149)
    assert not sat_search_allowed(np.float32([a, b, 0.5]), "bf16", False)
    assert sat_search_allowed(np.float32([a, b, 0.5]), "f16", False)


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_emulated_rule_is_the_cpu_path(dtype):
    """The rule as emulated here (scale, codes) is what radiance.quantize_rows (the C path) writes for
    the same adversarial groups: so the emulation above is checked against the shipped CPU rule."""
    rng, seed = fresh_rng()
    groups = adversarial_groups(rng, 64, dtype)
    names = list(groups)
    w = np.stack([groups[n] for n in names]).astype(BF16 if dtype == "bf16" else np.float16)
    packed, scales = radiance.quantize_rows(w, 64, "mse")
    for i, name in enumerate(names):
        sf, codes, _, _ = rule_choice(groups[name])
        want_packed = pack_reference((codes + 8).astype(np.uint8)[None, :])[0]
        assert float(np.asarray(scales[i, 0]).astype(np.float32)) == sf, f"seed {seed} {name}"
        np.testing.assert_array_equal(packed[i], want_packed, err_msg=f"seed {seed} {name}")
