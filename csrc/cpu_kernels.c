/*
 * cpu_kernels.c - the int4 lm_head format on the CPU (see cpu_kernels.h and docs/FORMAT.md).
 *
 * Bit-exactness with the GPU kernels rests on three things, all fixed here:
 *   1. only IEEE-754 fp32 operations that round once (no fused multiply-add: this file is built
 *      with -ffp-contract=off, and no -ffast-math), plus exact conversions;
 *   2. the scale is rounded to bf16 before q is chosen;
 *   3. the squared error of a group is summed in one fixed order (see group_error()); clip "act"
 *      weighs each squared error by its channel's weight in that same order.
 */
#define _GNU_SOURCE
#include "cpu_kernels.h"

#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__)) && !defined(__clang__)
/* One AVX2 clone beside the baseline, picked at load time. Results are identical in both:
 * the arithmetic is plain IEEE mul/add/sub/div with contraction off. */
#define RAD_VECTOR_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define RAD_VECTOR_CLONES
#endif
/* Hot helpers are forced inline so they are compiled inside each clone, with its ISA. */
#if defined(__GNUC__)
#define RAD_INLINE static inline __attribute__((always_inline))
#else
#define RAD_INLINE static inline
#endif

/* ------------------------------------------------------------------------------------------ */
/* Conversions                                                                                */

static inline uint32_t float_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float bits_float(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static float rad_bf16_to_float(uint16_t bits) { return bits_float((uint32_t)bits << 16); }

static uint16_t rad_float_to_bf16(float value) {
    uint32_t u = float_bits(value);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it a (quiet) NaN */
        return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest, ties to even */
    return (uint16_t)(u >> 16);
}

static float rad_f16_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exponent = (h >> 10) & 0x1fu;
    uint32_t mantissa = h & 0x3ffu;
    if (exponent == 0) { /* zero or subnormal: mantissa * 2^-24 is exact in fp32 */
        float magnitude = (float)mantissa * 5.9604644775390625e-8f;
        return sign ? -magnitude : magnitude;
    }
    if (exponent == 31) /* infinity or NaN */
        return bits_float(sign | 0x7f800000u | (mantissa << 13));
    return bits_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

/* Convert count elements of src (dtype) starting at element offset into dst. An empty src may
 * have no memory at all (a DLPack tensor of no elements may carry a null data pointer), which
 * memcpy must not be handed even for 0 bytes. */
RAD_INLINE void load_floats(const void *src, int dtype, int64_t offset, int64_t count,
                               float *dst) {
    if (count <= 0) return;
    if (dtype == RAD_F32) {
        memcpy(dst, (const float *)src + offset, (size_t)count * sizeof(float));
    } else if (dtype == RAD_BF16) {
        const uint16_t *s = (const uint16_t *)src + offset;
        for (int64_t i = 0; i < count; i++) dst[i] = bits_float((uint32_t)s[i] << 16);
    } else {
        const uint16_t *s = (const uint16_t *)src + offset;
        for (int64_t i = 0; i < count; i++) dst[i] = rad_f16_to_float(s[i]);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Threads: a static split of [0, count) into one contiguous range per thread.               */

typedef void (*range_fn)(void *ctx, int64_t begin, int64_t end);

struct range_job {
    range_fn fn;
    void *ctx;
    int64_t begin, end;
};

static void *range_thread(void *arg) {
    struct range_job *job = (struct range_job *)arg;
    job->fn(job->ctx, job->begin, job->end);
    return NULL;
}

int rad_cpu_threads(void) {
    const char *env = getenv("RADIANCE_NUM_THREADS");
    if (env && *env) {
        long n = strtol(env, NULL, 10);
        if (n >= 1 && n <= 1024) return (int)n;
    }
#ifdef CPU_COUNT
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        int n = CPU_COUNT(&set);
        if (n >= 1) return n;
    }
#endif
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n >= 1 ? (int)n : 1;
}

/* Runs fn over [0, count) on up to rad_cpu_threads() threads, each at least min_chunk items.
 * Returns 0, or -1 if a thread could not be started (the work is then done on this thread).
 * The per-thread bookkeeping lives on the heap: callers may run on small thread stacks
 * (threading.stack_size(32768)), and 1024 threads' worth of it is 40 KB. */
static int parallel_for(int64_t count, int64_t min_chunk, range_fn fn, void *ctx) {
    int threads = rad_cpu_threads();
    if (min_chunk < 1) min_chunk = 1;
    if (count / min_chunk < threads) threads = (int)(count / min_chunk);
    struct range_job *jobs = NULL;
    pthread_t *ids = NULL;
    if (threads > 1) {
        jobs = (struct range_job *)malloc(sizeof *jobs * (size_t)threads);
        ids = (pthread_t *)malloc(sizeof *ids * (size_t)threads);
    }
    if (!jobs || !ids) {
        free(jobs);
        free(ids);
        if (count > 0) fn(ctx, 0, count);
        return threads > 1 ? -1 : 0;
    }
    int started = 0, status = 0;
    int64_t step = count / threads, extra = count % threads, begin = 0;
    for (int t = 0; t < threads; t++) {
        int64_t len = step + (t < extra ? 1 : 0);
        jobs[t] = (struct range_job){fn, ctx, begin, begin + len};
        begin += len;
    }
    for (int t = 1; t < threads; t++) {
        if (pthread_create(&ids[t], NULL, range_thread, &jobs[t]) != 0) break;
        started = t;
    }
    fn(ctx, jobs[0].begin, jobs[0].end);
    for (int t = 1; t <= started; t++) pthread_join(ids[t], NULL);
    for (int t = started + 1; t < threads; t++) { /* threads that did not start */
        status = -1;
        fn(ctx, jobs[t].begin, jobs[t].end);
    }
    free(jobs);
    free(ids);
    return status;
}

/* ------------------------------------------------------------------------------------------ */
/* Non-finite check                                                                           */

static int row_has_nonfinite(const void *w, int dtype, int64_t row, int64_t cols) {
    uint32_t any = 0;
    if (dtype == RAD_F32) {
        const uint32_t *p = (const uint32_t *)w + row * cols;
        for (int64_t i = 0; i < cols; i++) any |= (uint32_t)((p[i] & 0x7f800000u) == 0x7f800000u);
    } else {
        const uint16_t *p = (const uint16_t *)w + row * cols;
        const uint16_t mask = dtype == RAD_BF16 ? 0x7f80u : 0x7c00u;
        for (int64_t i = 0; i < cols; i++) any |= (uint32_t)((p[i] & mask) == mask);
    }
    return any != 0;
}

struct nonfinite_ctx {
    const void *w;
    int dtype;
    int64_t cols;
    int64_t first; /* smallest bad row seen so far, or -1 */
};

static void nonfinite_range(void *arg, int64_t begin, int64_t end) {
    struct nonfinite_ctx *c = (struct nonfinite_ctx *)arg;
    for (int64_t r = begin; r < end; r++) {
        if (!row_has_nonfinite(c->w, c->dtype, r, c->cols)) continue;
        /* An atomic minimum across ranges; a bad row is rare, so contention is not a concern. */
        int64_t seen = __atomic_load_n(&c->first, __ATOMIC_RELAXED);
        while ((seen < 0 || r < seen) &&
               !__atomic_compare_exchange_n(&c->first, &seen, r, 0, __ATOMIC_RELAXED,
                                            __ATOMIC_RELAXED)) {
        }
        return;
    }
}

int64_t rad_cpu_first_nonfinite_row(const void *w, int dtype, int64_t rows, int64_t cols) {
    struct nonfinite_ctx c;
    c.w = w;
    c.dtype = dtype;
    c.cols = cols;
    c.first = -1;
    parallel_for(rows, 1 + (1 << 16) / (cols > 0 ? cols : 1), nonfinite_range, &c);
    return c.first;
}

/* ------------------------------------------------------------------------------------------ */
/* Quantization                                                                               */

/* float32(r / 7) for the candidate clip ratios, in the order they are tried. */
static const float kClipScale[RAD_CLIP_RATIOS] = {RAD_CLIP_COEFFICIENT(0), RAD_CLIP_COEFFICIENT(1),
                                                  RAD_CLIP_COEFFICIENT(2), RAD_CLIP_COEFFICIENT(3),
                                                  RAD_CLIP_COEFFICIENT(4)};

/* Bit shift of element e (0..7) of a word: nibble order 0,2,4,6,1,3,5,7. */
static const int kNibbleShift[8] = RAD_NIBBLE_SHIFTS;

/* Round half to even for |x| < 2^22: adding 1.5 * 2^23 leaves no fraction bits, so the addition
 * itself rounds (to nearest even, the default mode). q = w / s is always below 9 in magnitude. */
RAD_INLINE float round_half_even_small(float x) {
    const float magic = 12582912.0f;
    return (x + magic) - magic;
}

/*
 * The fixed summation order of a group's squared error (the GPU kernels reproduce it):
 *   word partials  p[j] = ((e[8j] + e[8j+1]) + e[8j+2]) + ... + e[8j+7], left to right;
 *   then a halving tree over the group_size/8 partials: p[i] += p[i + h] for i < h,
 *   h = group_size/16, group_size/32, ..., 1; the error is p[0].
 *
 * With clip "act" each term is RN(RN(d * d) * weight) instead of RN(d * d): a weight of exactly 1
 * leaves every term, and so every sum and every comparison, bit for bit as "mse" has it.
 *
 * A group is held transposed, wt[t][j] = w[8j + t] (t: element within word j), so that every
 * step, the word partials included, is elementwise over j and vectorises.
 */
struct group_t {
    float w[8][RAD_MAX_GROUP / 8];
};

RAD_INLINE float scale_for(float amax, int ratio, uint16_t *bits) {
    float clipped = amax * kClipScale[ratio];
    clipped = clipped > RAD_MIN_SCALE ? clipped : RAD_MIN_SCALE;
    *bits = rad_float_to_bf16(clipped);
    return rad_bf16_to_float(*bits);
}

RAD_INLINE float quantize_value(float w, float s) {
    float t = round_half_even_small(w / s);
    t = t < -8.0f ? -8.0f : t;
    return t > 7.0f ? 7.0f : t;
}

/* weights: the group's act weights, held transposed like g, or NULL for the plain error. */
RAD_INLINE float group_error(const struct group_t *g, const struct group_t *weights, int words,
                             float s) {
    float p[RAD_MAX_GROUP / 8];
    for (int j = 0; j < words; j++) {
        const float d = quantize_value(g->w[0][j], s) * s - g->w[0][j];
        const float sq = d * d;
        p[j] = weights ? sq * weights->w[0][j] : sq;
    }
    for (int t = 1; t < 8; t++)
        for (int j = 0; j < words; j++) {
            const float d = quantize_value(g->w[t][j], s) * s - g->w[t][j];
            const float sq = d * d;
            p[j] = p[j] + (weights ? sq * weights->w[t][j] : sq);
        }
    for (int h = words / 2; h >= 1; h /= 2)
        for (int i = 0; i < h; i++) p[i] = p[i] + p[i + h];
    return p[0];
}

/* Quantize one group (held transposed) into its packed words and bf16 scale. */
RAD_INLINE void quantize_group(const struct group_t *g, const struct group_t *weights, int words,
                               int ratios, int32_t nib[8][RAD_MAX_GROUP / 8], int32_t *out,
                               uint16_t *scale_bits) {
    /* |w| compares as its bit pattern (finite values), which vectorises as an integer max. */
    uint32_t amax_bits = 0;
    for (int t = 0; t < 8; t++)
        for (int j = 0; j < words; j++) {
            const uint32_t a = float_bits(g->w[t][j]) & 0x7fffffffu;
            amax_bits = a > amax_bits ? a : amax_bits;
        }
    const float amax = bits_float(amax_bits);
    uint16_t best_bits;
    float best_s = scale_for(amax, 0, &best_bits);
    float best_err = ratios > 1 ? group_error(g, weights, words, best_s) : 0.0f;
    for (int r = 1; r < ratios; r++) {
        uint16_t bits;
        const float s = scale_for(amax, r, &bits);
        const float err = group_error(g, weights, words, s);
        if (err < best_err) { /* strictly smaller: a tie keeps the earlier ratio */
            best_err = err;
            best_s = s;
            best_bits = bits;
        }
    }
    for (int t = 0; t < 8; t++)
        for (int j = 0; j < words; j++) nib[t][j] = (int32_t)(quantize_value(g->w[t][j], best_s) + 8.0f);
    for (int j = 0; j < words; j++) /* element t at bit kNibbleShift[t]: 0,16,4,20,8,24,12,28 */
        out[j] = (int32_t)((uint32_t)nib[0][j] | (uint32_t)nib[1][j] << 16 |
                           (uint32_t)nib[2][j] << 4 | (uint32_t)nib[3][j] << 20 |
                           (uint32_t)nib[4][j] << 8 | (uint32_t)nib[5][j] << 24 |
                           (uint32_t)nib[6][j] << 12 | (uint32_t)nib[7][j] << 28);
    *scale_bits = best_bits;
}

static inline int32_t pack_word(const uint8_t *v) {
    uint32_t word = 0;
    for (int e = 0; e < 8; e++) word |= (uint32_t)v[e] << kNibbleShift[e];
    return (int32_t)word;
}

struct quantize_ctx {
    const void *w;
    int dtype;
    int64_t cols;
    int group_size, ratios;
    const float *act_weights; /* [cols] for clip "act", else NULL */
    int32_t *packed;
    uint16_t *scales;
};

/* One row range at a fixed group size: `words` and `weighted` are constants at each call site
 * below, so every loop over a group has a known trip count and vectorises fully, and the plain
 * error carries no trace of the weights. */
/* The working arrays of one row range (4 KB at G = 256). One set, owned by quantize_range, serves
 * the eight inlined variants below: as locals of each they added up past a 32 KB thread stack
 * under AddressSanitizer, which gives every inlined local a slot of its own. */
struct quantize_scratch {
    float wf[RAD_MAX_GROUP];
    struct group_t g, weights;
    int32_t nib[8][RAD_MAX_GROUP / 8];
};

RAD_INLINE void quantize_rows_fixed(const struct quantize_ctx *c, int64_t begin, int64_t end,
                                    const int words, const int weighted,
                                    struct quantize_scratch *s) {
    const int G = 8 * words;
    const int64_t groups = c->cols / G;
    for (int64_t row = begin; row < end; row++) {
        for (int64_t gi = 0; gi < groups; gi++) {
            load_floats(c->w, c->dtype, row * c->cols + gi * G, G, s->wf);
            for (int j = 0; j < words; j++)
                for (int t = 0; t < 8; t++) s->g.w[t][j] = s->wf[8 * j + t];
            if (weighted)
                for (int j = 0; j < words; j++)
                    for (int t = 0; t < 8; t++)
                        s->weights.w[t][j] = c->act_weights[gi * G + 8 * j + t];
            quantize_group(&s->g, weighted ? &s->weights : NULL, words, c->ratios, s->nib,
                           c->packed + row * (c->cols / 8) + gi * words,
                           &c->scales[row * groups + gi]);
        }
    }
}

RAD_VECTOR_CLONES
static void quantize_range(void *arg, int64_t begin, int64_t end) {
    const struct quantize_ctx *c = (const struct quantize_ctx *)arg;
    struct quantize_scratch scratch;
    memset(&scratch, 0, sizeof scratch);
    if (c->act_weights) {
        switch (c->group_size) {
        case 32: quantize_rows_fixed(c, begin, end, 4, 1, &scratch); break;
        case 64: quantize_rows_fixed(c, begin, end, 8, 1, &scratch); break;
        case 128: quantize_rows_fixed(c, begin, end, 16, 1, &scratch); break;
        default: quantize_rows_fixed(c, begin, end, 32, 1, &scratch); break;
        }
        return;
    }
    switch (c->group_size) {
    case 32: quantize_rows_fixed(c, begin, end, 4, 0, &scratch); break;
    case 64: quantize_rows_fixed(c, begin, end, 8, 0, &scratch); break;
    case 128: quantize_rows_fixed(c, begin, end, 16, 0, &scratch); break;
    default: quantize_rows_fixed(c, begin, end, 32, 0, &scratch); break;
    }
}

int64_t rad_cpu_first_bad_activation_sq(const float *activation_sq, int64_t count) {
    for (int64_t i = 0; i < count; i++) {
        const float a = activation_sq[i];
        if (!(a >= 0.0f) || a > 3.4028234663852886e38f) return i; /* negative, NaN or inf */
    }
    return -1;
}

void rad_cpu_act_weights(const float *activation_sq, int64_t cols, int group_size,
                         float *weights) {
    for (int64_t g0 = 0; g0 < cols; g0 += group_size) {
        float largest = 0.0f;
        for (int i = 0; i < group_size; i++)
            largest = activation_sq[g0 + i] > largest ? activation_sq[g0 + i] : largest;
        for (int i = 0; i < group_size; i++) {
            const float a = activation_sq[g0 + i];
            /* a / a == 1 exactly, so equal entries weigh 1; -0.0 becomes +0.0 */
            weights[g0 + i] = largest > 0.0f ? (a > 0.0f ? a / largest : 0.0f) : 1.0f;
        }
    }
}

int rad_cpu_quantize_rows(const void *w, int dtype, int64_t rows, int64_t cols, int group_size,
                          int clip, const float *act_weights, int32_t *packed, uint16_t *scales) {
    struct quantize_ctx c = {w,
                             dtype,
                             cols,
                             group_size,
                             clip == RAD_CLIP_RTN ? 1 : 5,
                             clip == RAD_CLIP_ACT ? act_weights : NULL,
                             packed,
                             scales};
    return parallel_for(rows, 1 + 4096 / (cols > 0 ? cols : 1), quantize_range, &c);
}

/* ------------------------------------------------------------------------------------------ */
/* Packing                                                                                    */

void rad_cpu_pack_shuffle(const uint8_t *nibbles, int64_t rows, int64_t cols, int32_t *words) {
    const int64_t total = rows * (cols / 8);
    for (int64_t j = 0; j < total; j++) words[j] = pack_word(nibbles + 8 * j);
}

int64_t rad_cpu_first_bad_nibble(const uint8_t *nibbles, int64_t count) {
    for (int64_t i = 0; i < count; i++)
        if (nibbles[i] > 15) return i;
    return -1;
}

void rad_cpu_unpack_shuffle(const int32_t *words, int64_t rows, int64_t cols, uint8_t *nibbles) {
    const int64_t total = rows * (cols / 8);
    for (int64_t j = 0; j < total; j++) {
        const uint32_t word = (uint32_t)words[j];
        for (int e = 0; e < 8; e++) nibbles[8 * j + e] = (uint8_t)((word >> kNibbleShift[e]) & 15u);
    }
}

struct dequantize_ctx {
    const int32_t *packed;
    const uint16_t *scales;
    int64_t cols;
    int group_size;
    float *out;
};

static void dequantize_range(void *arg, int64_t begin, int64_t end) {
    const struct dequantize_ctx *c = (const struct dequantize_ctx *)arg;
    const int64_t words = c->cols / 8, groups = c->cols / c->group_size;
    for (int64_t row = begin; row < end; row++)
        for (int64_t j = 0; j < words; j++) {
            const uint32_t word = (uint32_t)c->packed[row * words + j];
            const float s = rad_bf16_to_float(c->scales[row * groups + (8 * j) / c->group_size]);
            float *o = c->out + row * c->cols + 8 * j;
            for (int e = 0; e < 8; e++)
                o[e] = (float)((int)((word >> kNibbleShift[e]) & 15u) - 8) * s;
        }
}

void rad_cpu_dequantize(const int32_t *packed, const uint16_t *scales, int64_t rows, int64_t cols,
                        int group_size, float *w_hat) {
    struct dequantize_ctx c = {packed, scales, cols, group_size, w_hat};
    parallel_for(rows, 1 + 16384 / (cols > 0 ? cols : 1), dequantize_range, &c);
}

/* ------------------------------------------------------------------------------------------ */
/* apply                                                                                      */

/*
 * Eight lanes at a time through GCC/clang vector extensions: a packed word is broadcast, shifted
 * by (0, 16, 4, 20, 8, 24, 12, 28) lane by lane and masked, which yields its eight nibbles in
 * natural k order (one vpsrlvd on AVX2), converted to float, offset by -8 and multiplied into
 * per-lane fp32 accumulators. Each decoded word serves every row of x in the current block.
 */
typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));

enum { APPLY_M_BLOCK = 8 };

struct apply_ctx {
    const float *x; /* [m, k] fp32 */
    int64_t m, k, n;
    const int32_t *packed;
    const uint16_t *scales;
    const float *bias; /* [n] or NULL */
    int group_size;
    uint16_t *out;
};

RAD_INLINE float sum_lanes(v8f v) {
    return ((v[0] + v[4]) + (v[1] + v[5])) + ((v[2] + v[6]) + (v[3] + v[7]));
}

RAD_INLINE v8f load_v8f(const float *p) {
    v8f v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* One row of the head against rows [m0, m0 + mb) of x. */
RAD_INLINE void apply_block(const struct apply_ctx *c, int64_t row, int64_t m0, int mb) {
    const v8i shifts = RAD_NIBBLE_SHIFTS;
    const v8i mask = {15, 15, 15, 15, 15, 15, 15, 15};
    const v8f eight = {8, 8, 8, 8, 8, 8, 8, 8};
    const int G = c->group_size, words_per_group = G / 8;
    const int64_t groups = c->k / G;
    const int32_t *words = c->packed + row * (c->k / 8);
    float y[APPLY_M_BLOCK] = {0};
    for (int64_t g = 0; g < groups; g++) {
        v8f acc[APPLY_M_BLOCK];
        for (int i = 0; i < mb; i++) acc[i] = (v8f){0};
        for (int j = 0; j < words_per_group; j++) {
            const int32_t word = words[g * words_per_group + j];
            const v8i lanes = (v8i){word, word, word, word, word, word, word, word};
            const v8f q = __builtin_convertvector((lanes >> shifts) & mask, v8f) - eight;
            const float *xk = c->x + m0 * c->k + (g * words_per_group + j) * 8;
            for (int i = 0; i < mb; i++) acc[i] = acc[i] + q * load_v8f(xk + i * c->k);
        }
        const float s = rad_bf16_to_float(c->scales[row * groups + g]);
        for (int i = 0; i < mb; i++) y[i] = y[i] + sum_lanes(acc[i]) * s;
    }
    const float b = c->bias ? c->bias[row] : 0.0f;
    for (int i = 0; i < mb; i++) c->out[(m0 + i) * c->n + row] = rad_float_to_bf16(y[i] + b);
}

RAD_VECTOR_CLONES
static void apply_range(void *arg, int64_t begin, int64_t end) {
    const struct apply_ctx *c = (const struct apply_ctx *)arg;
    for (int64_t m0 = 0; m0 < c->m; m0 += APPLY_M_BLOCK) {
        const int64_t left = c->m - m0;
        const int mb = left < APPLY_M_BLOCK ? (int)left : APPLY_M_BLOCK;
        for (int64_t row = begin; row < end; row++) {
            if (mb == 1) apply_block(c, row, m0, 1); /* constant block sizes unroll fully */
            else if (mb == APPLY_M_BLOCK) apply_block(c, row, m0, APPLY_M_BLOCK);
            else apply_block(c, row, m0, mb);
        }
    }
}

int rad_cpu_apply(const void *x, int x_dtype, int64_t m, int64_t k, const int32_t *packed,
                  const uint16_t *scales, const void *bias, int bias_dtype, int64_t n,
                  int group_size, uint16_t *out) {
    float *xf = (float *)malloc(sizeof(float) * (size_t)(m * k > 0 ? m * k : 1));
    float *biasf = bias ? (float *)malloc(sizeof(float) * (size_t)(n > 0 ? n : 1)) : NULL;
    if (!xf || (bias && !biasf)) {
        free(xf);
        free(biasf);
        return -1;
    }
    load_floats(x, x_dtype, 0, m * k, xf);
    if (bias) load_floats(bias, bias_dtype, 0, n, biasf);
    struct apply_ctx c = {xf, m, k, n, packed, scales, biasf, group_size, out};
    parallel_for(n, 64, apply_range, &c);
    free(xf);
    free(biasf);
    return 0;
}
