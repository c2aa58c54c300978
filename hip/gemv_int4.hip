/*
 * gemv_int4.hip - out[m, n] = sum_k x[m, k] * q[n, k] * s[n, k / G] (+ bias[n]) for the packed
 * int4 format of DESIGN.md, any m. Two paths, chosen inside radiance_gpu_apply:
 *
 * - matrix path (NVIDIA sm_80+): mma.sync m16n8k16 bf16 -> fp32. The weights are the A operand
 *   (16 rows of the head x 16 k), the activations the B operand (16 k x 8 tokens). A thread
 *   (group g = lane / 4, column t = lane % 4) owns rows g and g + 8; one packed word of each gives
 *   it the A fragments of two mmas straight from the nibbles: (w >> 4j) & 0x000F000F | 0x43004300
 *   is two bf16 values 136 + q (elements 2j, 2j+1 of the word, thanks to the shuffled nibble
 *   order), and one bf16x2 fma takes the 136 off exactly. Which k an mma slot holds is free as
 *   long as x is fed in the same order, so thread t feeds x at its own word's columns (one 16-byte
 *   load per word). Each group is summed in its own fp32 accumulator and then scaled into the
 *   total in fp32, so the result is sum_g s_g * (sum_k x_k q_k), fp32 throughout.
 *   A warp walks its rows' whole k range in steps of 128 columns, the packed words of the next
 *   steps already in flight in registers (16-byte loads that bypass L1; the activations stay in
 *   L1 and are read from there). No shared memory, no barriers.
 * - vector path (AMD for now, and NVIDIA before sm_80): one wave per row, 16-byte loads of 4
 *   words, fp32 FMAs, a shuffle reduction per row.
 *
 * Neither allocates or synchronizes, so a call can be captured in a CUDA/HIP graph.
 */
#include "compat.h"
#include "radiance_gpu.h"

namespace {

/* ------------------------------------------------------------------------------------------ */
/* Shared helpers                                                                              */
/* ------------------------------------------------------------------------------------------ */

__device__ __forceinline__ uint16_t out_bf16(float acc, const uint16_t *bias, int64_t row)
{
    if (bias != NULL) acc += rad_bf16_to_float(bias[row]);
    return rad_float_to_bf16_rne(acc);
}

/* ------------------------------------------------------------------------------------------ */
/* Matrix path                                                                                 */
/* ------------------------------------------------------------------------------------------ */
constexpr int kMmaWarps = 4;
constexpr int kStepWords = 16; /* one step = 16 packed words = 128 columns per row */

/* Position (0..15) inside the step of the i-th (0..3) word that lane column t holds. For G >= 128
 * it is 4 consecutive words (one 16-byte load); for smaller groups the 4 lane columns must feed
 * one mma from one group, so the words interleave (2 x 8 bytes for G = 64, 4 x 4 bytes for 32). */
template <int GROUP>
__device__ __forceinline__ int step_word(int i, int t)
{
    return GROUP >= 128 ? 4 * t + i : GROUP == 64 ? (i < 2 ? 2 * t + i : 8 + 2 * t + (i - 2)) : 4 * i + t;
}

/* Whether a group ends after the i-th word of a step (G = 256 also needs an odd step). */
template <int GROUP>
__device__ __forceinline__ bool group_ends_after(int i)
{
    return GROUP == 32 ? true : GROUP == 64 ? (i & 1) == 1 : i == 3;
}

template <int GROUP>
struct GroupsPerStep {
    static constexpr int value = GROUP >= 128 ? 1 : 128 / GROUP;
};

/* The packed words and scales of one step for one warp: MT m-tiles, rows g and g + 8. */
template <int GROUP, int MT>
struct Stage {
    uint32_t words[MT][2][4];
    float scale[MT][2][GroupsPerStep<GROUP>::value];
};

#if defined(RAD_HAS_MMA_BF16)
__device__ __forceinline__ uint32_t dequant_pair(uint32_t w, int shift)
{
    const uint32_t biased = ((w >> shift) & 0x000F000Fu) | 0x43004300u; /* bf16 128 + nibble */
    return rad_fma_bf16x2(biased, 0x3F803F80u /* 1, 1 */, 0xC308C308u /* -136, -136 */);
}
#endif

template <int GROUP, int MT>
__device__ __forceinline__ void load_stage(Stage<GROUP, MT> &st, const int32_t *__restrict__ packed,
                                           const uint16_t *__restrict__ scales, int64_t row0, int64_t n,
                                           int64_t kw, int64_t ng, int64_t step, int g, int t)
{
    constexpr int GPS = GroupsPerStep<GROUP>::value;
    const int64_t word0 = step * kStepWords;
    const bool full = word0 + kStepWords <= kw; /* only G < 128 can have a partial last step */
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
#pragma unroll
        for (int h = 0; h < 2; h++) {
            int64_t row = row0 + 16 * mt + g + 8 * h;
            row = row < n ? row : n - 1; /* rows past the end compute garbage and store nothing */
            const int32_t *wp = packed + row * kw + word0;
            if (GROUP >= 128) {
                const rad_u32x4 v = rad_load_stream_16(wp + 4 * t);
                st.words[mt][h][0] = v.x; st.words[mt][h][1] = v.y;
                st.words[mt][h][2] = v.z; st.words[mt][h][3] = v.w;
            } else if (full) {
                if (GROUP == 64) {
                    const uint2 a = rad_load_stream_8(wp + 2 * t);
                    const uint2 b = rad_load_stream_8(wp + 8 + 2 * t);
                    st.words[mt][h][0] = a.x; st.words[mt][h][1] = a.y;
                    st.words[mt][h][2] = b.x; st.words[mt][h][3] = b.y;
                } else {
#pragma unroll
                    for (int i = 0; i < 4; i++) st.words[mt][h][i] = rad_load_stream_4(wp + 4 * i + t);
                }
            } else {
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    const int pos = step_word<GROUP>(i, t);
                    /* nibble 8 is q = 0: columns past k add nothing */
                    st.words[mt][h][i] = word0 + pos < kw ? rad_load_stream_4(wp + pos) : 0x88888888u;
                }
            }
            const uint16_t *sp = scales + row * ng;
#pragma unroll
            for (int j = 0; j < GPS; j++) {
                const int64_t grp = GROUP == 256 ? step / 2 : step * GPS + j;
                st.scale[mt][h][j] = grp < ng ? rad_bf16_to_float(sp[grp]) : 0.0f;
            }
        }
    }
}

template <int GROUP, int MT, int NT, int PF>
__global__ void __launch_bounds__(kMmaWarps * 32)
apply_mma_kernel(const uint16_t *__restrict__ x, int64_t m, int64_t k, const int32_t *__restrict__ packed,
                 const uint16_t *__restrict__ scales, const uint16_t *__restrict__ bias, int64_t n,
                 uint16_t *__restrict__ out, int64_t token_chunks)
{
#if defined(RAD_HAS_MMA_BF16)
    constexpr int GPS = GroupsPerStep<GROUP>::value;
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    /* chunk index fastest: the blocks that share rows run together and share them through L2 */
    const int64_t chunk = (int64_t)blockIdx.x % token_chunks;
    const int64_t row_block = (int64_t)blockIdx.x / token_chunks;
    const int64_t row0 = (row_block * kMmaWarps + warp) * (16 * MT);
    if (row0 >= n) return; /* whole warp: no shuffles or barriers follow */
    const int64_t tok0 = chunk * (8 * NT);
    const int64_t kw = k / 8, ng = k / GROUP;
    const int64_t nsteps = (kw + kStepWords - 1) / kStepWords;

    float total[MT][NT][4], acc[MT][NT][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int c = 0; c < 4; c++) total[mt][nt][c] = acc[mt][nt][c] = 0.0f;

    /* this thread's activation rows (B operand: token = 8 nt + g) */
    const uint16_t *xrow[NT];
    bool xvalid[NT];
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        const int64_t tok = tok0 + 8 * nt + g;
        xvalid[nt] = tok < m;
        xrow[nt] = x + (xvalid[nt] ? tok : 0) * k;
    }

    Stage<GROUP, MT> stage[PF];
#pragma unroll
    for (int p = 0; p < PF; p++)
        if (p < nsteps) load_stage<GROUP, MT>(stage[p], packed, scales, row0, n, kw, ng, p, g, t);

    for (int64_t s0 = 0; s0 < nsteps; s0 += PF) {
#pragma unroll
        for (int p = 0; p < PF; p++) {
            const int64_t step = s0 + p;
            if (step >= nsteps) break;
            Stage<GROUP, MT> &st = stage[p];
            const int64_t col0 = step * (kStepWords * 8);
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int pos = step_word<GROUP>(i, t);
                const bool in_k = GROUP >= 128 || col0 + 8 * pos < k;
                uint32_t a_lo[MT][4], a_hi[MT][4];
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    const uint32_t w0 = st.words[mt][0][i], w1 = st.words[mt][1][i];
                    a_lo[mt][0] = dequant_pair(w0, 0);
                    a_lo[mt][1] = dequant_pair(w1, 0);
                    a_lo[mt][2] = dequant_pair(w0, 4);
                    a_lo[mt][3] = dequant_pair(w1, 4);
                    a_hi[mt][0] = dequant_pair(w0, 8);
                    a_hi[mt][1] = dequant_pair(w1, 8);
                    a_hi[mt][2] = dequant_pair(w0, 12);
                    a_hi[mt][3] = dequant_pair(w1, 12);
                }
#pragma unroll
                for (int nt = 0; nt < NT; nt++) {
                    rad_u32x4 xv = {0u, 0u, 0u, 0u};
                    if (xvalid[nt] && in_k) xv = rad_load_cached_16(xrow[nt] + col0 + 8 * pos);
#pragma unroll
                    for (int mt = 0; mt < MT; mt++) {
                        rad_mma_bf16_m16n8k16(acc[mt][nt], a_lo[mt], xv.x, xv.y);
                        rad_mma_bf16_m16n8k16(acc[mt][nt], a_hi[mt], xv.z, xv.w);
                    }
                }
                if (group_ends_after<GROUP>(i) && (GROUP != 256 || (step & 1) == 1)) {
                    const int j = GROUP >= 128 ? 0 : (GROUP == 64 ? i >> 1 : i);
#pragma unroll
                    for (int mt = 0; mt < MT; mt++) {
                        const float s_lo = st.scale[mt][0][j], s_hi = st.scale[mt][1][j];
#pragma unroll
                        for (int nt = 0; nt < NT; nt++) {
                            total[mt][nt][0] += s_lo * acc[mt][nt][0];
                            total[mt][nt][1] += s_lo * acc[mt][nt][1];
                            total[mt][nt][2] += s_hi * acc[mt][nt][2];
                            total[mt][nt][3] += s_hi * acc[mt][nt][3];
#pragma unroll
                            for (int c = 0; c < 4; c++) acc[mt][nt][c] = 0.0f;
                        }
                    }
                }
            }
            (void)GPS;
            if (step + PF < nsteps)
                load_stage<GROUP, MT>(st, packed, scales, row0, n, kw, ng, step + PF, g, t);
        }
    }

#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
#pragma unroll
            for (int c = 0; c < 4; c++) {
                const int64_t row = row0 + 16 * mt + g + 8 * (c >> 1);
                const int64_t tok = tok0 + 8 * nt + 2 * t + (c & 1);
                if (row < n && tok < m) out[tok * n + row] = out_bf16(total[mt][nt][c], bias, row);
            }
        }
    }
#endif
}

/* ------------------------------------------------------------------------------------------ */
/* Vector path                                                                                 */
/* ------------------------------------------------------------------------------------------ */
constexpr int kVecThreads = 256;
constexpr int kVecTokens = 4;

template <int WAVE>
__device__ __forceinline__ void apply_vector_rows(const uint16_t *__restrict__ x, int64_t m, int64_t k,
                                                  const int32_t *__restrict__ packed,
                                                  const uint16_t *__restrict__ scales,
                                                  const uint16_t *__restrict__ bias, int64_t n, int group,
                                                  uint16_t *__restrict__ out)
{
    const int lane = threadIdx.x % WAVE;
    const int waves = blockDim.x / WAVE;
    const int64_t kw = k / 8, ng = k / group, chunks = k / 32;
    for (int64_t row = (int64_t)blockIdx.x * waves + threadIdx.x / WAVE; row < n; row += (int64_t)gridDim.x * waves) {
        const int32_t *wrow = packed + row * kw;
        const uint16_t *srow = scales + row * ng;
        for (int64_t tok0 = 0; tok0 < m; tok0 += kVecTokens) {
            float acc[kVecTokens];
#pragma unroll
            for (int b = 0; b < kVecTokens; b++) acc[b] = 0.0f;
            for (int64_t c = lane; c < chunks; c += WAVE) {
                /* 4 words = 32 columns, always inside one group (G >= 32, aligned) */
                const rad_u32x4 wv = rad_load_stream_16(wrow + 4 * c);
                const uint32_t words[4] = {wv.x, wv.y, wv.z, wv.w};
                const float s = rad_bf16_to_float(srow[(32 * c) / group]);
                float part[kVecTokens];
#pragma unroll
                for (int b = 0; b < kVecTokens; b++) part[b] = 0.0f;
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    float q[8];
#pragma unroll
                    for (int e = 0; e < 8; e++) {
                        constexpr int kShift[8] = {0, 16, 4, 20, 8, 24, 12, 28};
                        q[e] = (float)((int)((words[i] >> kShift[e]) & 15u) - 8);
                    }
#pragma unroll
                    for (int b = 0; b < kVecTokens; b++) {
                        if (tok0 + b >= m) break;
                        const rad_u32x4 xv = rad_load_cached_16(x + (tok0 + b) * k + 32 * c + 8 * i);
                        const uint32_t xs[4] = {xv.x, xv.y, xv.z, xv.w};
#pragma unroll
                        for (int e2 = 0; e2 < 4; e2++) {
                            part[b] += rad_bits_to_float(xs[e2] << 16) * q[2 * e2];
                            part[b] += rad_bits_to_float(xs[e2] & 0xffff0000u) * q[2 * e2 + 1];
                        }
                    }
                }
#pragma unroll
                for (int b = 0; b < kVecTokens; b++) acc[b] += s * part[b];
            }
#pragma unroll
            for (int b = 0; b < kVecTokens; b++)
#pragma unroll
                for (int h = WAVE / 2; h >= 1; h /= 2) acc[b] += rad_shfl_xor(acc[b], h);
            if (lane == 0) {
#pragma unroll
                for (int b = 0; b < kVecTokens; b++)
                    if (tok0 + b < m) out[(tok0 + b) * n + row] = out_bf16(acc[b], bias, row);
            }
        }
    }
}

__global__ void __launch_bounds__(kVecThreads)
apply_vector_kernel(const uint16_t *__restrict__ x, int64_t m, int64_t k, const int32_t *__restrict__ packed,
                    const uint16_t *__restrict__ scales, const uint16_t *__restrict__ bias, int64_t n, int group,
                    uint16_t *__restrict__ out)
{
    apply_vector_rows<RAD_WAVE>(x, m, k, packed, scales, bias, n, group, out);
}

/* ------------------------------------------------------------------------------------------ */
/* Launchers                                                                                   */
/* ------------------------------------------------------------------------------------------ */
struct Args {
    const uint16_t *x;
    int64_t m, k;
    const int32_t *packed;
    const uint16_t *scales, *bias;
    int64_t n;
    int group;
    uint16_t *out;
    rad_stream_t stream;
};

template <int GROUP, int MT, int NT, int PF>
rad_error_t launch_mma(const Args &a)
{
    const int64_t rows_per_block = 16 * MT * kMmaWarps;
    const int64_t row_blocks = (a.n + rows_per_block - 1) / rows_per_block;
    const int64_t chunks = (a.m + 8 * NT - 1) / (8 * NT);
    const int64_t blocks = row_blocks * chunks;
    if (blocks > 0x7fffffffLL) return (rad_error_t)RADIANCE_GPU_EINVAL;
    apply_mma_kernel<GROUP, MT, NT, PF><<<(unsigned)blocks, kMmaWarps * 32, 0, a.stream>>>(
        a.x, a.m, a.k, a.packed, a.scales, a.bias, a.n, a.out, chunks);
    return rad_get_last_error();
}

template <int MT, int NT, int PF>
rad_error_t launch_mma_group(const Args &a)
{
    switch (a.group) {
    case 32: return launch_mma<32, MT, NT, PF>(a);
    case 64: return launch_mma<64, MT, NT, PF>(a);
    case 128: return launch_mma<128, MT, NT, PF>(a);
    default: return launch_mma<256, MT, NT, PF>(a);
    }
}

rad_error_t launch_vector(const Args &a)
{
    /* enough blocks to fill any current GPU; each loops over rows */
    const int64_t waves_per_block = kVecThreads / 32;
    int64_t blocks = (a.n + waves_per_block - 1) / waves_per_block;
    if (blocks > 65536) blocks = 65536;
    apply_vector_kernel<<<(unsigned)blocks, kVecThreads, 0, a.stream>>>(a.x, a.m, a.k, a.packed, a.scales, a.bias,
                                                                        a.n, a.group, a.out);
    return rad_get_last_error();
}

/* Variants, for benchmarks/gpu_kernels.py; 0 picks by m. */
enum {
    kAuto = 0,
    kVector = 1,
    kMma1x1 = 2,
    kMma1x2 = 3,
    kMma2x2 = 4,
    kMma1x4 = 5,
    kMma2x4 = 6,
    kMma1x8 = 7,
    kMma2x8 = 8,
    kMma2x1 = 9,
    kVariants = 10
};

int device_sm_cached(void)
{
    static int cache[64];
    int dev = 0;
    if (rad_get_device(&dev) != RAD_SUCCESS || dev < 0 || dev >= 64) return rad_device_sm();
    if (cache[dev] == 0) cache[dev] = rad_device_sm() + 1; /* +1: 0 means "not looked up" */
    return cache[dev] - 1;
}

rad_error_t dispatch(const Args &a, int variant)
{
    const bool has_mma = device_sm_cached() >= 80;
    if (variant == kAuto) {
        if (!has_mma) variant = kVector;
        else if (a.m <= 8) variant = kMma1x1;
        else if (a.m <= 16) variant = kMma1x2;
        else if (a.m <= 32) variant = kMma1x4;
        else variant = kMma1x8;
    }
    if (variant != kVector && !has_mma) return (rad_error_t)RADIANCE_GPU_EINVAL;
    switch (variant) {
    case kVector: return launch_vector(a);
    case kMma1x1: return launch_mma_group<1, 1, 4>(a);
    case kMma1x2: return launch_mma_group<1, 2, 4>(a);
    case kMma2x2: return launch_mma_group<2, 2, 2>(a);
    case kMma1x4: return launch_mma_group<1, 4, 2>(a);
    case kMma2x4: return launch_mma_group<2, 4, 2>(a);
    case kMma1x8: return launch_mma_group<1, 8, 2>(a);
    case kMma2x8: return launch_mma_group<2, 8, 1>(a);
    case kMma2x1: return launch_mma_group<2, 1, 2>(a);
    default: return (rad_error_t)RADIANCE_GPU_EINVAL;
    }
}

int apply_checked(const uint16_t *x, int64_t m, int64_t k, const int32_t *packed, const uint16_t *scales,
                  const uint16_t *bias, int64_t n, int group_size, uint16_t *out, void *stream, int variant)
{
    if (m < 0 || n < 0 || k <= 0) return RADIANCE_GPU_EINVAL;
    if (group_size != 32 && group_size != 64 && group_size != 128 && group_size != 256) return RADIANCE_GPU_EINVAL;
    if (k % group_size != 0) return RADIANCE_GPU_EINVAL;
    if (m == 0 || n == 0) return 0;
    if (x == NULL || packed == NULL || scales == NULL || out == NULL) return RADIANCE_GPU_EINVAL;
    if (((uintptr_t)x & 15u) != 0 || ((uintptr_t)packed & 15u) != 0) return RADIANCE_GPU_EINVAL;
    if (((uintptr_t)scales & 1u) != 0 || ((uintptr_t)out & 1u) != 0 || ((uintptr_t)bias & 1u) != 0)
        return RADIANCE_GPU_EINVAL;
    if (variant < 0 || variant >= kVariants) return RADIANCE_GPU_EINVAL;
    const Args a = {x, m, k, packed, scales, bias, n, group_size, out, (rad_stream_t)stream};
    return (int)dispatch(a, variant);
}

} // namespace

extern "C" int radiance_gpu_apply(const uint16_t *x, int64_t m, int64_t k, const int32_t *packed,
                                  const uint16_t *scales, const uint16_t *bias, int64_t n, int group_size,
                                  uint16_t *out, void *stream)
{
    return apply_checked(x, m, k, packed, scales, bias, n, group_size, out, stream, kAuto);
}

/* Not part of radiance_gpu.h: lets the benchmark time and check each kernel variant. */
extern "C" int radiance_gpu_apply_variant(int variant, const uint16_t *x, int64_t m, int64_t k,
                                          const int32_t *packed, const uint16_t *scales, const uint16_t *bias,
                                          int64_t n, int group_size, uint16_t *out, void *stream)
{
    return apply_checked(x, m, k, packed, scales, bias, n, group_size, out, stream, variant);
}
