/*
 * quantize.hip - int4 group quantization of a weight matrix on the GPU, bit-identical to the CPU
 * rule in csrc/ (see DESIGN.md): one pass over the weight, every clip ratio tried in registers.
 *
 * One thread per packed word (8 consecutive columns). The words of one group (group_size / 8 of
 * them, 4..32) sit in consecutive lanes of one warp, so the group's amax and the squared-error
 * tree are shuffle-xor reductions inside that lane segment, in exactly the CPU's order:
 * per word e0 + e1 + ... + e7 left to right, then p[i] += p[i + h] for h = G/16, G/32, ..., 1
 * (lane i and lane i^h add the same two numbers, and a + b == b + a bitwise).
 */
#include "compat.h"
#include "radiance_gpu.h"

namespace {

constexpr int kThreads = 256;
constexpr float kRoundMagic = 12582912.0f; /* 1.5 * 2^23: x + M - M == rint(x) for |x| < 2^22 */

/* Load the 8 weights of word `word` as fp32 (exact conversions). */
template <int DTYPE, bool VEC>
__device__ __forceinline__ void load_word(const void *w, int64_t word, float v[8])
{
    if (DTYPE == RADIANCE_F32) {
        const float *p = (const float *)w + word * 8;
        if (VEC) {
            const rad_u32x4 a = rad_load_stream_16(p);
            const rad_u32x4 b = rad_load_stream_16(p + 4);
            v[0] = rad_bits_to_float(a.x); v[1] = rad_bits_to_float(a.y);
            v[2] = rad_bits_to_float(a.z); v[3] = rad_bits_to_float(a.w);
            v[4] = rad_bits_to_float(b.x); v[5] = rad_bits_to_float(b.y);
            v[6] = rad_bits_to_float(b.z); v[7] = rad_bits_to_float(b.w);
        } else {
#pragma unroll
            for (int e = 0; e < 8; e++) v[e] = p[e];
        }
    } else {
        const uint16_t *p = (const uint16_t *)w + word * 8;
        uint32_t u[4];
        if (VEC) {
            const rad_u32x4 a = rad_load_stream_16(p);
            u[0] = a.x; u[1] = a.y; u[2] = a.z; u[3] = a.w;
        } else {
#pragma unroll
            for (int i = 0; i < 4; i++) u[i] = (uint32_t)p[2 * i] | ((uint32_t)p[2 * i + 1] << 16);
        }
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

/* Candidate ratio R (index into 1.0, 0.95, 0.9, 0.85, 0.8): c_r = (float)(r / 7.0) in double. */
template <int R>
__device__ __forceinline__ float clip_coefficient()
{
    return R == 0 ? (float)(1.0 / 7.0)
         : R == 1 ? (float)(0.95 / 7.0)
         : R == 2 ? (float)(0.9 / 7.0)
         : R == 3 ? (float)(0.85 / 7.0)
                  : (float)(0.8 / 7.0);
}

/* bf16_rne(max(amax * c, 1e-8f)) as a float. amax is finite here (or the row is flagged). */
__device__ __forceinline__ float group_scale(float amax, float c)
{
    const float m = fmaxf(rad_mul_rn(amax, c), 1e-8f);
    uint32_t u = rad_float_to_bits(m);
    u += 0x7fffu + ((u >> 16) & 1u);
    return rad_bits_to_float(u & 0xffff0000u);
}

/*
 * q[e] = clamp(rint(v[e] / sf), -8, 7) for ratio R.
 *
 * Fast path: t = v * RN(1/sf) is within 2e-6 of RN(v / sf) (|t| < 9), so rint(t) is the CPU's
 * answer unless t lies within 2e-5 of a half-integer; then the 8 elements are redone with the
 * correctly rounded division. The clamp is applied to t before rounding, which gives the same
 * result because -8 and 7 are integers and rounding is monotone. Clamps that cannot bind are
 * left out: |v / sf| <= 7 / r * (1 + 2^-8), i.e. < 7.39 for r >= 0.95 and > -8.5 for r >= 0.85.
 */
template <int R>
__device__ __forceinline__ float clamp_for_ratio(float t)
{
    if (R >= 2) t = fminf(t, 7.0f);
    if (R >= 4) t = fmaxf(t, -8.0f);
    return t;
}

template <int R>
__device__ __forceinline__ void quantize_word(const float v[8], float sf, float q[8])
{
    const float inv = rad_div_rn(1.0f, sf);
    float worst = 0.0f;
#pragma unroll
    for (int e = 0; e < 8; e++) {
        const float t = clamp_for_ratio<R>(rad_mul_rn(v[e], inv));
        q[e] = rad_sub_rn(rad_add_rn(t, kRoundMagic), kRoundMagic);
        worst = fmaxf(worst, fabsf(rad_sub_rn(t, q[e])));
    }
    if (worst > 0.49998f) {
#pragma unroll
        for (int e = 0; e < 8; e++) {
            const float t = clamp_for_ratio<R>(rad_div_rn(v[e], sf));
            q[e] = rad_sub_rn(rad_add_rn(t, kRoundMagic), kRoundMagic);
        }
    }
}

/* Squared error of one group for ratio R, in the CPU's summation order (see the file comment). */
template <int GROUP, int R>
__device__ __forceinline__ float group_error(const float v[8], float sf, const float q[8])
{
    float p = 0.0f;
#pragma unroll
    for (int e = 0; e < 8; e++) {
        /* q * sf is exact (4-bit by 8-bit significands), so the fused form rounds once, at the
         * subtraction, exactly like the CPU's separate multiply and subtract. */
        const float d = rad_fma_rn(q[e], sf, -v[e]);
        const float sq = rad_mul_rn(d, d);
        p = e == 0 ? sq : rad_add_rn(p, sq);
    }
#pragma unroll
    for (int h = GROUP / 16; h >= 1; h /= 2) p = rad_add_rn(p, rad_shfl_xor(p, h));
    return p;
}

template <int GROUP, int R>
__device__ __forceinline__ void try_ratio(const float v[8], float amax, float &best_err, float &best_sf,
                                          float best_q[8])
{
    const float sf = group_scale(amax, clip_coefficient<R>());
    float q[8];
    quantize_word<R>(v, sf, q);
    const float err = group_error<GROUP, R>(v, sf, q);
    if (err < best_err) {
        best_err = err;
        best_sf = sf;
#pragma unroll
        for (int e = 0; e < 8; e++) best_q[e] = q[e];
    }
}

template <int DTYPE, bool VEC, int GROUP, bool MSE>
__global__ void __launch_bounds__(kThreads)
quantize_kernel(const void *__restrict__ w, int64_t total_words, int64_t words_per_row,
                int32_t *__restrict__ packed, uint16_t *__restrict__ scales,
                unsigned long long *__restrict__ first_bad_row)
{
    constexpr int kLanesPerGroup = GROUP / 8;
    const int64_t word = (int64_t)blockIdx.x * kThreads + threadIdx.x;
    /* total_words is a multiple of the lane segment, so a segment is wholly in or out; lanes out
     * of range still run the shuffles with zeros and store nothing. */
    const bool active = word < total_words;

    float v[8];
    if (active) {
        load_word<DTYPE, VEC>(w, word, v);
    } else {
#pragma unroll
        for (int e = 0; e < 8; e++) v[e] = 0.0f;
    }

    float amax = 0.0f;
    uint32_t nonfinite = 0;
#pragma unroll
    for (int e = 0; e < 8; e++) {
        amax = fmaxf(amax, fabsf(v[e]));
        nonfinite |= (rad_float_to_bits(v[e]) & 0x7f800000u) == 0x7f800000u;
    }
    if (nonfinite) rad_atomic_min_u64(first_bad_row, (unsigned long long)(word / words_per_row));
#pragma unroll
    for (int h = kLanesPerGroup / 2; h >= 1; h /= 2) amax = fmaxf(amax, rad_shfl_xor(amax, h));

    float best_q[8];
    float best_sf;
    if (MSE) {
        float best_err;
        {
            best_sf = group_scale(amax, clip_coefficient<0>());
            quantize_word<0>(v, best_sf, best_q);
            best_err = group_error<GROUP, 0>(v, best_sf, best_q);
        }
        try_ratio<GROUP, 1>(v, amax, best_err, best_sf, best_q);
        try_ratio<GROUP, 2>(v, amax, best_err, best_sf, best_q);
        try_ratio<GROUP, 3>(v, amax, best_err, best_sf, best_q);
        try_ratio<GROUP, 4>(v, amax, best_err, best_sf, best_q);
    } else {
        best_sf = group_scale(amax, clip_coefficient<0>());
        quantize_word<0>(v, best_sf, best_q);
    }

    if (!active) return;
    /* q + M has the integer q in its low mantissa bits: nibble = (bits + 8) & 15. */
    constexpr int kShift[8] = {0, 16, 4, 20, 8, 24, 12, 28};
    uint32_t out = 0;
#pragma unroll
    for (int e = 0; e < 8; e++) {
        const uint32_t bits = rad_float_to_bits(rad_add_rn(best_q[e], kRoundMagic));
        out |= ((bits + 8u) & 15u) << kShift[e];
    }
    packed[word] = (int32_t)out;
    if ((threadIdx.x & (kLanesPerGroup - 1)) == 0)
        scales[word / kLanesPerGroup] = (uint16_t)(rad_float_to_bits(best_sf) >> 16);
}

template <int DTYPE, bool VEC, int GROUP>
rad_error_t launch_group(const void *w, int64_t total_words, int64_t words_per_row, int clip,
                         int32_t *packed, uint16_t *scales, unsigned long long *flag, rad_stream_t stream)
{
    const int64_t blocks = (total_words + kThreads - 1) / kThreads;
    if (clip == RADIANCE_CLIP_MSE)
        quantize_kernel<DTYPE, VEC, GROUP, true>
            <<<(unsigned)blocks, kThreads, 0, stream>>>(w, total_words, words_per_row, packed, scales, flag);
    else
        quantize_kernel<DTYPE, VEC, GROUP, false>
            <<<(unsigned)blocks, kThreads, 0, stream>>>(w, total_words, words_per_row, packed, scales, flag);
    return rad_get_last_error();
}

template <int DTYPE, bool VEC>
rad_error_t launch_dtype(const void *w, int64_t total_words, int64_t words_per_row, int group_size,
                         int clip, int32_t *packed, uint16_t *scales, unsigned long long *flag,
                         rad_stream_t stream)
{
    switch (group_size) {
    case 32: return launch_group<DTYPE, VEC, 32>(w, total_words, words_per_row, clip, packed, scales, flag, stream);
    case 64: return launch_group<DTYPE, VEC, 64>(w, total_words, words_per_row, clip, packed, scales, flag, stream);
    case 128: return launch_group<DTYPE, VEC, 128>(w, total_words, words_per_row, clip, packed, scales, flag, stream);
    default: return launch_group<DTYPE, VEC, 256>(w, total_words, words_per_row, clip, packed, scales, flag, stream);
    }
}

} // namespace

extern "C" int radiance_gpu_quantize_rows(const void *w, int w_dtype, int64_t rows, int64_t cols,
                                          int group_size, int clip, int32_t *packed, uint16_t *scales,
                                          int64_t *first_bad_row, void *stream_ptr)
{
    if (first_bad_row != NULL) *first_bad_row = -1;
    if (rows < 0 || cols <= 0) return RADIANCE_GPU_EINVAL;
    if (group_size != 32 && group_size != 64 && group_size != 128 && group_size != 256) return RADIANCE_GPU_EINVAL;
    if (cols % group_size != 0) return RADIANCE_GPU_EINVAL;
    if (clip != RADIANCE_CLIP_RTN && clip != RADIANCE_CLIP_MSE) return RADIANCE_GPU_EINVAL;
    if (w_dtype != RADIANCE_F32 && w_dtype != RADIANCE_F16 && w_dtype != RADIANCE_BF16) return RADIANCE_GPU_EINVAL;
    if (rows == 0) return 0;
    if (w == NULL || packed == NULL || scales == NULL) return RADIANCE_GPU_EINVAL;

    const int64_t words_per_row = cols / 8;
    const int64_t total_words = rows * words_per_row;
    if ((total_words + kThreads - 1) / kThreads > 0x7fffffffLL) return RADIANCE_GPU_EINVAL;
    rad_stream_t stream = (rad_stream_t)stream_ptr;

    unsigned long long *flag = NULL;
    rad_error_t err = rad_malloc((void **)&flag, sizeof(unsigned long long));
    if (err != RAD_SUCCESS) return (int)err;
    err = rad_memset_async(flag, 0xff, sizeof(unsigned long long), stream);

    const bool vec = ((uintptr_t)w & 15u) == 0;
    if (err == RAD_SUCCESS) {
        if (w_dtype == RADIANCE_BF16)
            err = vec ? launch_dtype<RADIANCE_BF16, true>(w, total_words, words_per_row, group_size, clip, packed, scales, flag, stream)
                      : launch_dtype<RADIANCE_BF16, false>(w, total_words, words_per_row, group_size, clip, packed, scales, flag, stream);
        else if (w_dtype == RADIANCE_F16)
            err = vec ? launch_dtype<RADIANCE_F16, true>(w, total_words, words_per_row, group_size, clip, packed, scales, flag, stream)
                      : launch_dtype<RADIANCE_F16, false>(w, total_words, words_per_row, group_size, clip, packed, scales, flag, stream);
        else
            err = vec ? launch_dtype<RADIANCE_F32, true>(w, total_words, words_per_row, group_size, clip, packed, scales, flag, stream)
                      : launch_dtype<RADIANCE_F32, false>(w, total_words, words_per_row, group_size, clip, packed, scales, flag, stream);
    }
    unsigned long long bad = ~0ull;
    if (err == RAD_SUCCESS) err = rad_memcpy_async(&bad, flag, sizeof bad, RAD_MEMCPY_D2H, stream);
    if (err == RAD_SUCCESS) err = rad_stream_synchronize(stream);
    const rad_error_t free_err = rad_free(flag);
    if (err != RAD_SUCCESS) return (int)err;
    if (free_err != RAD_SUCCESS) return (int)free_err;
    if (first_bad_row != NULL && bad != ~0ull) *first_bad_row = (int64_t)bad;
    return 0;
}
