/*
 * quantize.hip - int4 group quantization of a weight matrix on the GPU, bit-identical to the CPU
 * rule in csrc/ (see docs/FORMAT.md): one pass over the weight, every clip ratio tried in registers.
 *
 * One thread per four packed words (8 consecutive columns each): words j, j + L, j + 2L, j + 3L of
 * a group, L = G/32 lanes per group (1..8), consecutive lanes of one warp. The group's amax and
 * the squared-error tree are in-thread steps plus shuffle-xor reductions inside that lane segment,
 * in exactly the CPU's order: per word e0 + e1 + ... + e7 left to right, then p[i] += p[i + h] for
 * h = G/16 and G/32 (inside the thread), G/64, ..., 1 (lane i and lane i^h add the same two
 * numbers, and a + b == b + a bitwise). Clip "act" multiplies each squared error by its column's
 * weight (rounded once, before the sum), as the CPU does; the weights come from the host, made
 * there by the same C function as the CPU path's (rad_cpu_act_weights, docs/FORMAT.md).
 *
 * bf16 and fp16 weights take the saturating search (ratio_error_sat) and its rebuild
 * (bracket_codes) where a warp's weights allow it; other warps, fp32 and rtn take ratio_error and
 * exact_codes_sat. All compute the values the rule asks for, with fewer instructions than round
 * 18 did (the argument is beside each; docs/PERF_LOG.md, "Quantize, round 19", has the counts).
 */
#include "compat.h"
#include "radiance/format.h"
#include "radiance/radiance_gpu.h"
#include "runtime.h"

namespace {

constexpr int kThreads = 128;
constexpr float kRoundMagic = 12582912.0f; /* 1.5 * 2^23: x + M - M == rint(x) for |x| < 2^22 */

/* Candidate ratio R (index into RAD_CLIP_RATIO, format.h): c_r = (float)(r / 7.0) in double. */
template <int R>
__device__ __forceinline__ float clip_coefficient()
{
    return RAD_CLIP_COEFFICIENT(R);
}

/* bf16_rne(max(amax * c, 1e-8f)) as a float. amax is finite here (or the row is flagged). */
__device__ __forceinline__ float group_scale(float amax, float c)
{
    const float m = fmaxf(rad_mul_rn(amax, c), RAD_MIN_SCALE);
#if defined(RAD_CUDA) && defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 800)
    /* bf16(m) in the upper half and bf16(0) = 0 in the lower: the bits of the rounded float. The
     * same rounding as below for finite m (nearest, ties to even), one instruction for four. */
    uint32_t r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(m), "f"(0.0f));
    return rad_bits_to_float(r);
#else
    uint32_t u = rad_float_to_bits(m);
    u += 0x7fffu + ((u >> 16) & 1u);
    return rad_bits_to_float(u & 0xffff0000u);
#endif
}

/* RN(a * b + c) clamped to [0, 1] (one instruction on NVIDIA, the clamp bit of v_fma_f32 on AMD). */
__device__ __forceinline__ float fma_sat(float a, float b, float c)
{
#if defined(RAD_CUDA) && defined(__CUDA_ARCH__)
    float r;
    asm("fma.rn.sat.f32 %0, %1, %2, %3;" : "=f"(r) : "f"(a), "f"(b), "f"(c));
    return r;
#else
    return fminf(fmaxf(rad_fma_rn(a, b, c), 0.0f), 1.0f);
#endif
}

/* Per 16-bit lane: min(acc, x - 1 mod 2^16), so a zero lane of x counts as 0xffff. */
__device__ __forceinline__ uint32_t min_u16x2_less_one(uint32_t acc, uint32_t x)
{
#if defined(RAD_CUDA) && defined(__CUDA_ARCH__)
    return __viaddmin_u16x2(x, 0xffffffffu, acc);
#else
    const uint32_t lo = (x + 0xffffu) & 0xffffu, hi = ((x >> 16) + 0xffffu) & 0xffffu;
    const uint32_t alo = acc & 0xffffu, ahi = acc >> 16;
    return (lo < alo ? lo : alo) | ((hi < ahi ? hi : ahi) << 16);
#endif
}

/* true in every lane if the predicate holds in any lane of the warp (all lanes call it) */
__device__ __forceinline__ bool warp_any(bool p)
{
#if defined(RAD_HIP)
    return __any(p) != 0;
#else
    return __any_sync(0xffffffffu, p) != 0;
#endif
}

/*
 * Clamps that cannot bind are left out: |w / sf| <= 7 / r * (1 + 2^-8), i.e. < 7.39 for
 * r >= 0.95 (no clamp), < 8.5 in magnitude with rint(-8.25) = -8 for r = 0.9 and 0.85 (upper
 * clamp only), both clamps for 0.8. Clamping before rounding is the same as after, because -8 and
 * 7 are integers and rounding is monotone; so the clamps may also apply to M + rint(t), with the
 * bounds M - 8 and M + 7 (OFFSET = M).
 */
template <int R>
__device__ __forceinline__ float clamp_for_ratio(float t, float offset)
{
    if (R >= 2) t = fminf(t, offset + 7.0f);
    if (R >= 4) t = fmaxf(t, offset - 8.0f);
    return t;
}

/* Words per thread: a thread holds words i and i + G/16 of its group, so the first level of the
 * error tree (p[i] + p[i + G/16]) is inside the thread and the per-ratio work of one lane (the
 * scale, its reciprocal, the shuffles) is shared by 16 weights. */
constexpr int kWords = 4;
constexpr int kElems = 8 * kWords;
/* lanes per group and the word stride between a thread's words */
template <int GROUP>
struct Lanes {
    static constexpr int value = GROUP / (8 * kWords);
};

/*
 * The squared error of ratio R in the CPU's order. q = rint(clamp(RN(v / sf))); when the weights
 * are bf16 or fp16 (EXACT = false) the search takes M + q from one fma, RN(v * y + M) with y the
 * hardware's estimate of 1 / sf (within 1 ulp) and M = 1.5 * 2^23: the sum lies in [2^23, 2^24),
 * where the unit is 1, so it is M + rint(v * y) of the exact product (ties to even). That gives
 * the same q as the correctly rounded quotient except at exact ties: with 8-bit (bf16) or 11-bit
 * (fp16) significands for v and an 8-bit one for sf, a quotient that is not a tie k + 1/2 lies at
 * least 1 / (2 * 255 * 32) ~ 6e-5 from one once it is 1/2 or more (and 1e-3 from 1/2 below it),
 * while v * y is within |v / sf| * 2^-22 < 2.2e-6 of it. At a tie both candidates k and k + 1
 * are sf / 2 from v, so the error is the same bit for bit; the winner's nibbles are then rebuilt
 * from the correctly rounded quotient (exact_codes_sat). fp32 weights (EXACT) take that quotient
 * everywhere: y = RN(1 / sf), q0 = RN(v * y), then one Markstein step q0 + (v - sf * q0) * y (the
 * residual is exact in an fma) rounds correctly, ties and all, and rint is + M - M. The clamps
 * (which commute with rint: -8 and 7 are integers) apply to the quotient, or to M + q with bounds
 * moved by M.
 */
/* RN(v / sf) from y = RN(1 / sf): q0 = RN(v * y), then one Markstein step (see below) */
__device__ __forceinline__ float exact_quotient(float v, float sf, float y)
{
    const float q0 = rad_mul_rn(v, y);
    return rad_fma_rn(rad_fma_rn(-sf, q0, v), y, q0);
}

template <int GROUP, int R, bool EXACT, bool WEIGHTED>
__device__ __forceinline__ float ratio_error(const float v[kElems], const float weight[kElems], float sf)
{
    /* sf is a normal number from 1e-8 to below 2^126, so 1 / sf is normal too */
    const float y = EXACT ? rad_div_rn(1.0f, sf) : rad_rcp_approx(sf);
    float p[kWords];
#pragma unroll
    for (int e = 0; e < kElems; e++) {
        const float s = EXACT ? rad_add_rn(clamp_for_ratio<R>(exact_quotient(v[e], sf, y), 0.0f), kRoundMagic)
                              : clamp_for_ratio<R>(rad_fma_rn(v[e], y, kRoundMagic), kRoundMagic);
        const float q = rad_sub_rn(s, kRoundMagic);
        /* q * sf is exact (4-bit by 8-bit significands), so the fused form rounds once, at the
         * subtraction, exactly like the CPU's separate multiply and subtract. */
        const float d = rad_fma_rn(q, sf, -v[e]);
        const float sq = WEIGHTED ? rad_mul_rn(rad_mul_rn(d, d), weight[e]) : rad_mul_rn(d, d);
        p[e / 8] = (e % 8) == 0 ? sq : rad_add_rn(p[e / 8], sq);
    }
    /* the thread holds words j + w * L (w = 0..3, L = lanes per group): tree levels h = 2L and
     * h = L are inside the thread, the rest are shuffles */
    float err = rad_add_rn(rad_add_rn(p[0], p[2]), rad_add_rn(p[1], p[3]));
#pragma unroll
    for (int h = Lanes<GROUP>::value / 2; h >= 1; h /= 2) err = rad_add_rn(err, rad_shfl_xor(err, h));
    return err;
}

template <int GROUP, int R, bool EXACT, bool WEIGHTED>
__device__ __forceinline__ void try_ratio(const float v[kElems], const float weight[kElems], float amax, float &best_err,
                                          float &best_sf)
{
    const float sf = group_scale(amax, clip_coefficient<R>());
    const float err = ratio_error<GROUP, R, EXACT, WEIGHTED>(v, weight, sf);
    const bool better = err < best_err; /* strictly: on a tie the earlier ratio stays */
    best_err = better ? err : best_err;
    best_sf = better ? sf : best_sf;
}

/*
 * The saturating search (bf16 and fp16 weights; the same errors as ratio_error, bit for bit, under
 * the conditions that quantize_words checks). Codes live on the fp32 grid of [1/2, 1), unit 2^-24:
 * code q is C + q 2^-24 with C = 1 - 7 * 2^-24, so q = 7 is 1.0 and fma.sat's clamp to [0, 1] is
 * the upper clamp. t = sat(RN(v * y + C)) with y ~ 2^-24 / sf (the hardware estimate of
 * 1 / (sf * 2^24)) is C + rint(v * y * 2^24) 2^-24, the same integer as fma(v, 1/sf, M) of
 * ratio_error, ties apart (where both candidates have the same error); the lower clamp, needed by
 * the ratio 0.8 only, is one fmax at C - 8 * 2^-24. t - C is exact (Sterbenz) and is q 2^-24, so
 * fma(t - C, sf * 2^24, -v) rounds q * sf - v once: the rule's d (q * sf is exact). That needs
 * sf * 2^24 finite and 2^-24 / sf normal: sf < 2^102 (quantize_words asks amax < 2^100).
 * One fma, one subtraction and one fma a weight for the code and d, where ratio_error takes an
 * fma, one or two clamps, a subtraction and an fma.
 *
 * mse: d * d is exact, so fma(d, d, p) = RN(RN(d * d) + p), one instruction for the CPU's two.
 * For 8-bit (bf16) or 11-bit (fp16) v and an 8-bit sf, d = q * sf - v is a multiple of g =
 * min(ulp(sf), ulp(v)) below 2^12 g in magnitude: if q = 0, d = -v; otherwise |d| <= sf / 2
 * (1 + 2^-20) and, unclamped, |v| >= sf / 2 (1 - 2^-20) makes ulp(v) > sf 2^-12, or, clamped,
 * |d| < 1.76 sf with |v| >= 7.5 sf. So d has at most 12 significant bits and d * d at most 24:
 * exact unless it underflows or overflows. Overflow gives +inf both ways (an exact square above
 * FLT_MAX is at least 2^128). Underflow: sf >= bf16(1e-8) > 2^-27, so for q != 0, g >= 2^-36
 * and d * d >= 2^-72; for q = 0, d * d = v * v, normal unless 0 < |v| < 2^-63, which fp16 weights
 * cannot reach (>= 2^-24) and bf16 ones are checked for (raw_amax; the warp then takes
 * ratio_error). act keeps RN(RN(d * d) * w) and its addition: no fused form exists.
 */
template <int GROUP, int R, bool WEIGHTED>
__device__ __forceinline__ float ratio_error_sat(const float v[kElems], const float weight[kElems], float sf)
{
    constexpr float kC = 1.0f - 7.0f * 0x1p-24f;
    const float big_sf = rad_mul_rn(sf, 0x1p24f); /* exact: sf < 2^102 here */
    const float y = rad_rcp_approx(big_sf);       /* normal: big_sf < 2^126 */
    float p[kWords];
#pragma unroll
    for (int e = 0; e < kElems; e++) {
        float t = fma_sat(v[e], y, kC);
        if (R >= 4) t = fmaxf(t, kC - 8.0f * 0x1p-24f);
        const float d = rad_fma_rn(rad_sub_rn(t, kC), big_sf, -v[e]);
        if (WEIGHTED) {
            const float sq = rad_mul_rn(rad_mul_rn(d, d), weight[e]);
            p[e / 8] = (e % 8) == 0 ? sq : rad_add_rn(p[e / 8], sq);
        } else {
            p[e / 8] = (e % 8) == 0 ? rad_mul_rn(d, d) : rad_fma_rn(d, d, p[e / 8]);
        }
    }
    float err = rad_add_rn(rad_add_rn(p[0], p[2]), rad_add_rn(p[1], p[3]));
#pragma unroll
    for (int h = Lanes<GROUP>::value / 2; h >= 1; h /= 2) err = rad_add_rn(err, rad_shfl_xor(err, h));
    return err;
}

template <int GROUP, int R, bool WEIGHTED>
__device__ __forceinline__ void try_ratio_sat(const float v[kElems], const float weight[kElems], float amax,
                                              float &best_err, float &best_sf)
{
    const float sf = group_scale(amax, clip_coefficient<R>());
    const float err = ratio_error_sat<GROUP, R, WEIGHTED>(v, weight, sf);
    const bool better = err < best_err; /* strictly: on a tie the earlier ratio stays */
    best_err = better ? err : best_err;
    best_sf = better ? sf : best_sf;
}

/*
 * The chosen scale's codes from the correctly rounded quotient qq = RN(v / sf), rounded on the
 * grid of [1/2, 1) with unit 2^-24 as well, but negated: t = sat(RN(C' - qq 2^-24)), C' = 1 - 8 *
 * 2^-24, holds -q at index 2^24 - 8 - q of that grid. The index has the parity of q, so the
 * grid's ties-to-even is rint's; 1.0 is q = -8 and the saturation the lower clamp; one fmax at
 * C' - 7 * 2^-24 is the upper. The nibble q + 8 is then 0x3f800000 - bits(t) (q = -8 gives 1.0,
 * 0x3f800000; q = 7 gives 1 - 15 * 2^-24). Five instructions a weight where round 18's codes took six.
 */
__device__ __forceinline__ void exact_codes_sat(const float v[kElems], float sf, float t[kElems])
{
    constexpr float kC = 1.0f - 8.0f * 0x1p-24f;
    const float y = rad_div_rn(1.0f, sf);
#pragma unroll
    for (int e = 0; e < kElems; e++)
        t[e] = fmaxf(fma_sat(exact_quotient(v[e], sf, y), -0x1p-24f, kC), kC - 7.0f * 0x1p-24f);
}

/*
 * The same codes for bf16 and fp16 weights without the correctly rounded quotient, where the warp
 * took the saturating search (so sf < 2^102). y_hi > 1 / sf > y_lo, both within 2^-19 of it: for
 * |v / sf| < 8.8 both products lie within 2e-5 of v / sf, and a quotient that is not a tie lies at
 * least 6e-5 from every half-integer (see ratio_error), so t1 = sat(RN(C' - v y_hi 2^-24)) and
 * t2 (y_lo) both hold its rint. At a tie v / sf = k + 1/2 exactly, |v y_hi| > k + 1/2 > |v y_lo|,
 * so t1 and t2 are the two neighbours, one grid unit apart. Their sum, in [1, 2] where the unit is
 * two grid units, is exact when they agree and otherwise a tie that RN sends to the even index:
 * rint's choice (the index has q's parity). So s = RN(t1 + t2) = 2 (1 - (8 + q) 2^-24), clamped
 * above (q <= 7) by one fmax, and the nibble is 0x40000000 - bits(s). Four instructions a weight.
 */
__device__ __forceinline__ void bracket_codes(const float v[kElems], float sf, float s[kElems])
{
    constexpr float kC = 1.0f - 8.0f * 0x1p-24f;
    const float y = rad_rcp_approx(rad_mul_rn(sf, 0x1p24f)); /* ~2^-24 / sf, normal: sf < 2^102 */
    const float y_hi = rad_mul_rn(y, 1.0f + 0x1p-20f), y_lo = rad_mul_rn(y, 1.0f - 0x1p-20f);
#pragma unroll
    for (int e = 0; e < kElems; e++) {
        const float t1 = fma_sat(v[e], -y_hi, kC), t2 = fma_sat(v[e], -y_lo, kC);
        s[e] = fmaxf(rad_add_rn(t1, t2), 2.0f - 15.0f * 0x1p-23f);
    }
}

/* The packed word of 8 codes t: nibble e is ONE - bits(t[e]) (ONE = the bits of 1.0 for
 * exact_codes_sat, of 2.0 for bracket_codes), so the word is a constant minus the shifted bits,
 * mod 2^32 (one shift-and-add per code instead of a mask, a shift and an or). */
template <uint32_t ONE>
__device__ __forceinline__ uint32_t pack_codes_sat(const float t[8])
{
    constexpr int kShift[8] = {0, 16, 4, 20, 8, 24, 12, 28}; /* nibble order 0, 2, 4, 6, 1, 3, 5, 7 */
    constexpr uint32_t kOne = ONE;
    constexpr uint32_t kOffset = kOne + (kOne << 16) + (kOne << 4) + (kOne << 20) + (kOne << 8) + (kOne << 24) +
                                 (kOne << 12) + (kOne << 28);
    uint32_t w = rad_float_to_bits(t[0]);
#pragma unroll
    for (int e = 1; e < 8; e++) w += rad_float_to_bits(t[e]) * (1u << kShift[e]);
    return kOffset - w;
}

/* The raw bits of one thread's weights: 16 bytes a word for 16-bit types, 32 for fp32. */
template <int DTYPE>
struct Raw {
    uint32_t u[kWords][DTYPE == RADIANCE_F32 ? 8 : 4];
};

template <int DTYPE, bool VEC>
__device__ __forceinline__ void load_word_raw(const void *w, int64_t word, uint32_t *u)
{
    if (DTYPE == RADIANCE_F32) {
        const uint32_t *p = (const uint32_t *)w + word * 8;
        if (VEC) {
            const rad_u32x4 a = rad_load_stream_16(p);
            const rad_u32x4 b = rad_load_stream_16(p + 4);
            u[0] = a.x; u[1] = a.y; u[2] = a.z; u[3] = a.w;
            u[4] = b.x; u[5] = b.y; u[6] = b.z; u[7] = b.w;
        } else {
#pragma unroll
            for (int e = 0; e < 8; e++) u[e] = p[e];
        }
    } else {
        const uint16_t *p = (const uint16_t *)w + word * 8;
        if (VEC) {
            const rad_u32x4 a = rad_load_stream_16(p);
            u[0] = a.x; u[1] = a.y; u[2] = a.z; u[3] = a.w;
        } else {
#pragma unroll
            for (int i = 0; i < 4; i++) u[i] = (uint32_t)p[2 * i] | ((uint32_t)p[2 * i + 1] << 16);
        }
    }
}

template <int DTYPE>
__device__ __forceinline__ void word_to_float(const uint32_t *u, float *v)
{
    if (DTYPE == RADIANCE_F32) {
#pragma unroll
        for (int e = 0; e < 8; e++) v[e] = rad_bits_to_float(u[e]);
    } else {
#pragma unroll
        for (int i = 0; i < 4; i++) {
            if (DTYPE == RADIANCE_BF16) {
                v[2 * i] = rad_bits_to_float(u[i] << 16);
                v[2 * i + 1] = rad_bits_to_float(u[i] & 0xffff0000u);
            } else {
                v[2 * i] = rad_half_to_float((uint16_t)(u[i] & 0xffffu));
                v[2 * i + 1] = rad_half_to_float((uint16_t)(u[i] >> 16));
            }
        }
    }
}

/* First word of this thread (the second is G/16 words later) for tile `tile`. */
template <int GROUP>
__device__ __forceinline__ int64_t first_word(int64_t tile)
{
    constexpr int kLanesPerGroup = Lanes<GROUP>::value;
    return tile * (kThreads * kWords) + (threadIdx.x / kLanesPerGroup) * (GROUP / 8) + threadIdx.x % kLanesPerGroup;
}

/*
 * amax of the thread's weights, straight from their bits: for finite values the order of the
 * magnitude bits is the order of the magnitudes, and Inf/NaN sort above every finite value, so one
 * integer maximum gives both the amax and the non-finite flag.
 */
template <int DTYPE, bool TINY = false>
__device__ __forceinline__ float raw_amax(const Raw<DTYPE> &r, bool &nonfinite, bool *tiny = nullptr)
{
    if (DTYPE == RADIANCE_F32) {
        uint32_t m = 0;
#pragma unroll
        for (int wi = 0; wi < kWords; wi++)
#pragma unroll
            for (int e = 0; e < 8; e++) {
                const uint32_t a = r.u[wi][e] & 0x7fffffffu;
                m = a > m ? a : m;
            }
        nonfinite = m >= 0x7f800000u;
        return rad_bits_to_float(m);
    } else {
        uint32_t m2 = 0, t2 = 0xffffffffu;
#pragma unroll
        for (int wi = 0; wi < kWords; wi++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const uint32_t mag = r.u[wi][i] & 0x7fff7fffu;
                m2 = rad_max_u16x2(m2, mag);
                if (TINY) t2 = min_u16x2_less_one(t2, mag);
            }
        /* TINY (bf16): whether a weight has 0 < |v| < 2^-63, magnitude bits 1 to 0x1fff: the one
         * case where d * d of ratio_error_sat's mse search can be subnormal (see there) */
        if (TINY) *tiny = (t2 & 0xffffu) < 0x1fffu || (t2 >> 16) < 0x1fffu;
        const uint32_t lo = m2 & 0xffffu, hi = m2 >> 16;
        const uint32_t m = lo > hi ? lo : hi;
        if (DTYPE == RADIANCE_BF16) {
            nonfinite = m >= 0x7f80u;
            return rad_bits_to_float(m << 16);
        }
        nonfinite = m >= 0x7c00u;
        return rad_half_to_float((uint16_t)m);
    }
}

/* The act weights of this thread's columns: word w's eight columns start at 8 * col_word, col_word = w mod
 * words_per_row, a multiple of 32 bytes into a 256-byte aligned buffer, so two 16-byte loads a word (cached: every
 * row reads them). The thread's words lie in one group, so they are `stride` words apart in the row as well. */
__device__ __forceinline__ void load_act_weights(const float *__restrict__ act_weights, int64_t col_word, int stride,
                                                 float weight[kElems])
{
    const float *row_part = act_weights + col_word * 8;
#pragma unroll
    for (int wi = 0; wi < kWords; wi++) {
        const float *p = row_part + wi * stride * 8;
        const rad_u32x4 a = rad_load_cached_16(p), b = rad_load_cached_16(p + 4);
        weight[8 * wi + 0] = rad_bits_to_float(a.x); weight[8 * wi + 1] = rad_bits_to_float(a.y);
        weight[8 * wi + 2] = rad_bits_to_float(a.z); weight[8 * wi + 3] = rad_bits_to_float(a.w);
        weight[8 * wi + 4] = rad_bits_to_float(b.x); weight[8 * wi + 5] = rad_bits_to_float(b.y);
        weight[8 * wi + 6] = rad_bits_to_float(b.z); weight[8 * wi + 7] = rad_bits_to_float(b.w);
    }
}

/* Quantize this thread's words (all lanes of the warp call this together). CLIP is a radiance_clip.
 * The search: ratio_error_sat and bracket_codes where the warp allows it, else ratio_error and
 * exact_codes_sat ("Quantize, round 19" in docs/PERF_LOG.md; round 18's ratio_error and exact
 * codes everywhere, slower, were deleted: docs/PERF_LOG.md seventh round).
 * Once the raw words are converted, the next tile's (from next_word) are loaded into `raw`: the
 * loop carries one set of raw registers and copies none. */
template <int DTYPE, bool VEC, int GROUP, int CLIP>
__device__ __forceinline__ void quantize_words(Raw<DTYPE> &raw, const void *w, int64_t next_word, int64_t word,
                                               bool active, int64_t words_per_row,
                                               int64_t col_word, const float *__restrict__ act_weights,
                                               int32_t *__restrict__ packed,
                                               uint16_t *__restrict__ scales,
                                               unsigned long long *__restrict__ first_bad_row)
{
    constexpr int kLanesPerGroup = Lanes<GROUP>::value;
    constexpr bool kExact = DTYPE == RADIANCE_F32;
    constexpr bool kWeighted = CLIP == RADIANCE_CLIP_ACT;
    constexpr bool kSat = !kExact && CLIP != RADIANCE_CLIP_RTN;
    constexpr bool kTiny = kSat && DTYPE == RADIANCE_BF16 && !kWeighted;
    bool nonfinite, tiny = false;
    float amax = raw_amax<DTYPE, kTiny>(raw, nonfinite, &tiny);
    if (nonfinite && active) rad_atomic_min_u64(first_bad_row, (unsigned long long)(word / words_per_row));
#pragma unroll
    for (int h = kLanesPerGroup / 2; h >= 1; h /= 2) amax = fmaxf(amax, rad_shfl_xor(amax, h));

    float v[kElems];
#pragma unroll
    for (int wi = 0; wi < kWords; wi++) word_to_float<DTYPE>(raw.u[wi], v + 8 * wi);

    float best_sf = group_scale(amax, clip_coefficient<0>());
    /* warp-uniform, for the shuffles: a warp with a group of amax >= 2^100 (or not finite: the row
     * is refused) or, for bf16 mse, a tiny weight takes ratio_error and exact_codes_sat */
    bool sat = false;
    if (kSat) sat = !warp_any(tiny || !(amax < 0x1p100f));
#pragma unroll
    for (int wi = 0; wi < kWords; wi++) load_word_raw<DTYPE, VEC>(w, next_word + wi * kLanesPerGroup, raw.u[wi]);
    if (CLIP != RADIANCE_CLIP_RTN) {
        float weight[kElems];
        if (kWeighted) load_act_weights(act_weights, col_word, kLanesPerGroup, weight);
        if (sat) {
            float best_err = ratio_error_sat<GROUP, 0, kWeighted>(v, weight, best_sf);
            try_ratio_sat<GROUP, 1, kWeighted>(v, weight, amax, best_err, best_sf);
            try_ratio_sat<GROUP, 2, kWeighted>(v, weight, amax, best_err, best_sf);
            try_ratio_sat<GROUP, 3, kWeighted>(v, weight, amax, best_err, best_sf);
            try_ratio_sat<GROUP, 4, kWeighted>(v, weight, amax, best_err, best_sf);
        } else {
            float best_err = ratio_error<GROUP, 0, kExact, kWeighted>(v, weight, best_sf);
            try_ratio<GROUP, 1, kExact, kWeighted>(v, weight, amax, best_err, best_sf);
            try_ratio<GROUP, 2, kExact, kWeighted>(v, weight, amax, best_err, best_sf);
            try_ratio<GROUP, 3, kExact, kWeighted>(v, weight, amax, best_err, best_sf);
            try_ratio<GROUP, 4, kExact, kWeighted>(v, weight, amax, best_err, best_sf);
        }
    }
    float best_s[kElems];
    if (sat) {
        bracket_codes(v, best_sf, best_s);
        if (!active) return;
#pragma unroll
        for (int wi = 0; wi < kWords; wi++)
            packed[word + wi * kLanesPerGroup] = (int32_t)pack_codes_sat<0x40000000u>(best_s + 8 * wi);
    } else {
        exact_codes_sat(v, best_sf, best_s);
        if (!active) return;
#pragma unroll
        for (int wi = 0; wi < kWords; wi++)
            packed[word + wi * kLanesPerGroup] = (int32_t)pack_codes_sat<0x3f800000u>(best_s + 8 * wi);
    }
    if (threadIdx.x % kLanesPerGroup == 0) scales[word / (GROUP / 8)] = (uint16_t)(rad_float_to_bits(best_sf) >> 16);
}

/* Blocks per SM the launch bounds ask for. On AMD (gfx942) four of them cap a thread at 128 registers, AGPRs
 * included: act's 32 column weights pushed it past that into scratch, and so did mse's two searches
 * (saturating and ratio_error, both in the kernel: 64-160 bytes of scratch in the bf16/fp16 kernels);
 * two leave them room. On NVIDIA (sm_90a, nvcc 13.0) mse fits five blocks: 96 registers, no spills,
 * and the same instructions as at 128 (ptxas takes 128 when four blocks allow it). */
#if defined(RAD_HIP)
constexpr bool kAmd = true;
#else
constexpr bool kAmd = false;
#endif
constexpr int min_blocks_per_sm(int dtype, int group, int clip)
{
    return (dtype == RADIANCE_F32 || group < 64)  ? 1
           : (kAmd && clip != RADIANCE_CLIP_RTN) ? 2
           : clip == RADIANCE_CLIP_MSE           ? 5
                                                 : 4;
}

/*
 * Persistent: block b handles tiles b, b + grid, ... of kThreads * 2 words, the raw weights of its
 * next tile already loading while it computes the current one (the arithmetic of five clip
 * ratios is what this kernel spends its time on; the loads hide behind it).
 */
template <int DTYPE, bool VEC, int GROUP, int CLIP>
__global__ void __launch_bounds__(kThreads, min_blocks_per_sm(DTYPE, GROUP, CLIP))
quantize_kernel(const void *__restrict__ w, int64_t total_words, int64_t words_per_row, int64_t tiles,
                const float *__restrict__ act_weights, int32_t *__restrict__ packed, uint16_t *__restrict__ scales,
                unsigned long long *__restrict__ first_bad_row)
{
    /* A lane past the end loads its group's first words of row 0 instead (there are always
     * G / 8 words): data it computes on and never stores, flags no row for (active is false), and
     * no tile pays for a predicated load or for zeroing the registers. */
    const int64_t past_end = threadIdx.x % Lanes<GROUP>::value;
    Raw<DTYPE> cur;
    int64_t tile = blockIdx.x;
    if (tile >= tiles) return;
    /* act: the thread's first word's position in its row, word mod words_per_row, kept up to date as the tile
     * advances by gridDim.x (first_word is linear in the tile): two 64-bit remainders per thread instead of one
     * per tile, each a long software routine that the other clips do not pay */
    int64_t col_word = 0, col_step = 0;
    if (CLIP == RADIANCE_CLIP_ACT) {
        col_word = first_word<GROUP>(tile) % words_per_row;
        col_step = ((int64_t)gridDim.x * (kThreads * kWords)) % words_per_row;
    }
    {
        int64_t word = first_word<GROUP>(tile);
        word = word < total_words ? word : past_end;
#pragma unroll
        for (int wi = 0; wi < kWords; wi++) load_word_raw<DTYPE, VEC>(w, word + wi * Lanes<GROUP>::value, cur.u[wi]);
    }
    for (; tile < tiles; tile += gridDim.x) {
        /* total_words is a multiple of the group's words, so a group is wholly in or out; lanes
         * out of range still run the shuffles and the vote, and store nothing. */
        const int64_t word = first_word<GROUP>(tile);
        const bool active = word < total_words;
        int64_t next_word = first_word<GROUP>(tile + gridDim.x);
        next_word = next_word < total_words ? next_word : past_end;
        quantize_words<DTYPE, VEC, GROUP, CLIP>(cur, w, next_word, word, active, words_per_row, col_word, act_weights,
                                                packed, scales, first_bad_row);
        if (CLIP == RADIANCE_CLIP_ACT) {
            col_word += col_step; /* both < words_per_row, so one subtraction brings it back in range */
            if (col_word >= words_per_row) col_word -= words_per_row;
        }
    }
}

/* The kernel's arguments past its template parameters. */
struct QuantizeArgs {
    const void *w;
    int64_t total_words, words_per_row;
    const float *act_weights; /* device copy of the act weights [cols], or NULL */
    int32_t *packed;
    uint16_t *scales;
    unsigned long long *flag;
    rad_stream_t stream;
};

template <int DTYPE, bool VEC, int GROUP, int CLIP>
rad_error_t launch_kernel(const QuantizeArgs &a)
{
    const int64_t tiles = (a.total_words + kThreads * kWords - 1) / (kThreads * kWords);
    int per_sm = 0;
    if (rad_occupancy_blocks_per_sm(&per_sm, quantize_kernel<DTYPE, VEC, GROUP, CLIP>, kThreads, 0) != RAD_SUCCESS ||
        per_sm < 1)
        per_sm = 1;
    int64_t blocks = (int64_t)per_sm * rad_sm_count();
    if (blocks > tiles) blocks = tiles;
    quantize_kernel<DTYPE, VEC, GROUP, CLIP><<<(unsigned)blocks, kThreads, 0, a.stream>>>(
        a.w, a.total_words, a.words_per_row, tiles, a.act_weights, a.packed, a.scales, a.flag);
    return rad_get_last_error();
}

template <int DTYPE, bool VEC, int GROUP>
rad_error_t launch_clip(const QuantizeArgs &a, int clip)
{
    if (clip == RADIANCE_CLIP_ACT) return launch_kernel<DTYPE, VEC, GROUP, RADIANCE_CLIP_ACT>(a);
    if (clip == RADIANCE_CLIP_MSE) return launch_kernel<DTYPE, VEC, GROUP, RADIANCE_CLIP_MSE>(a);
    return launch_kernel<DTYPE, VEC, GROUP, RADIANCE_CLIP_RTN>(a);
}

template <int DTYPE, bool VEC>
rad_error_t launch_dtype(const QuantizeArgs &a, int group_size, int clip)
{
    switch (group_size) {
    case 32: return launch_clip<DTYPE, VEC, 32>(a, clip);
    case 64: return launch_clip<DTYPE, VEC, 64>(a, clip);
    case 128: return launch_clip<DTYPE, VEC, 128>(a, clip);
    default: return launch_clip<DTYPE, VEC, 256>(a, clip);
    }
}

int quantize_rows(const void *w, int w_dtype, int64_t rows, int64_t cols, int group_size, int clip,
                  const float *act_weights_host, int32_t *packed, uint16_t *scales, int64_t *first_bad_row,
                  void *stream_ptr)
{
    if (first_bad_row != NULL) *first_bad_row = -1;
    if (rows < 0 || cols <= 0) return RADIANCE_GPU_EINVAL;
    if (group_size != 32 && group_size != 64 && group_size != 128 && group_size != 256) return RADIANCE_GPU_EINVAL;
    if (cols % group_size != 0) return RADIANCE_GPU_EINVAL;
    if (clip != RADIANCE_CLIP_RTN && clip != RADIANCE_CLIP_MSE && clip != RADIANCE_CLIP_ACT) return RADIANCE_GPU_EINVAL;
    if ((clip == RADIANCE_CLIP_ACT) != (act_weights_host != NULL)) return RADIANCE_GPU_EINVAL;
    if (w_dtype != RADIANCE_F32 && w_dtype != RADIANCE_F16 && w_dtype != RADIANCE_BF16) return RADIANCE_GPU_EINVAL;
    if (rows == 0) return 0;
    if (w == NULL || packed == NULL || scales == NULL) return RADIANCE_GPU_EINVAL;

    QuantizeArgs args;
    args.w = w;
    args.words_per_row = cols / 8;
    args.total_words = rows * args.words_per_row;
    args.act_weights = NULL;
    args.packed = packed;
    args.scales = scales;
    args.stream = (rad_stream_t)stream_ptr;

    /* One allocation: the flag, then (act) the weights at a 256-byte offset, 16-byte aligned for their loads. */
    const size_t weights_offset = 256;
    const size_t bytes = act_weights_host ? weights_offset + sizeof(float) * (size_t)cols : sizeof(unsigned long long);
    void *scratch = NULL;
    rad_error_t err = rad_malloc_async(&scratch, bytes, args.stream);
    if (err != RAD_SUCCESS) return (int)err;
    args.flag = (unsigned long long *)scratch;
    err = rad_memset_async(args.flag, 0xff, sizeof(unsigned long long), args.stream);
    if (err == RAD_SUCCESS && act_weights_host != NULL) {
        args.act_weights = (const float *)((char *)scratch + weights_offset);
        /* pageable memory: the copy is staged before the call returns, and the stream is synchronized below */
        err = rad_memcpy_async((void *)args.act_weights, act_weights_host, sizeof(float) * (size_t)cols, RAD_MEMCPY_H2D,
                               args.stream);
    }

    const bool vec = ((uintptr_t)w & 15u) == 0;
    if (err == RAD_SUCCESS) {
        if (w_dtype == RADIANCE_BF16)
            err = vec ? launch_dtype<RADIANCE_BF16, true>(args, group_size, clip)
                      : launch_dtype<RADIANCE_BF16, false>(args, group_size, clip);
        else if (w_dtype == RADIANCE_F16)
            err = vec ? launch_dtype<RADIANCE_F16, true>(args, group_size, clip)
                      : launch_dtype<RADIANCE_F16, false>(args, group_size, clip);
        else
            err = vec ? launch_dtype<RADIANCE_F32, true>(args, group_size, clip)
                      : launch_dtype<RADIANCE_F32, false>(args, group_size, clip);
    }
    unsigned long long bad = ~0ull;
    if (err == RAD_SUCCESS) err = rad_memcpy_async(&bad, args.flag, sizeof bad, RAD_MEMCPY_D2H, args.stream);
    const rad_error_t free_err = rad_free_async(scratch, args.stream);
    if (err == RAD_SUCCESS) err = rad_stream_synchronize(args.stream);
    if (err != RAD_SUCCESS) return (int)err;
    if (free_err != RAD_SUCCESS) return (int)free_err;
    if (first_bad_row != NULL && bad != ~0ull) *first_bad_row = (int64_t)bad;
    return 0;
}

} // namespace

extern "C" int radiance_gpu_quantize_rows(const void *w, int w_dtype, int64_t rows, int64_t cols,
                                          int group_size, int clip, int32_t *packed, uint16_t *scales,
                                          int64_t *first_bad_row, void *stream_ptr)
{
    if (clip == RADIANCE_CLIP_ACT) return RADIANCE_GPU_EINVAL; /* needs its weights: radiance_gpu_quantize_rows_act */
    return quantize_rows(w, w_dtype, rows, cols, group_size, clip, NULL, packed, scales, first_bad_row, stream_ptr);
}

extern "C" int radiance_gpu_quantize_rows_act(const void *w, int w_dtype, int64_t rows, int64_t cols,
                                              int group_size, const float *act_weights, int32_t *packed,
                                              uint16_t *scales, int64_t *first_bad_row, void *stream_ptr)
{
    if (act_weights == NULL) return RADIANCE_GPU_EINVAL;
    return quantize_rows(w, w_dtype, rows, cols, group_size, RADIANCE_CLIP_ACT, act_weights, packed, scales,
                         first_bad_row, stream_ptr);
}
