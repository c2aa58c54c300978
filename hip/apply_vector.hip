/*
 * apply_vector.hip - the vector path of apply: fp32 FMAs on the vector (CUDA) cores, every AMD
 * target's path below the WMMA crossover (CDNA at every m) and NVIDIA's before sm_80; any m, any
 * group size, any k.
 *
 * The cost per weight must not grow with the tokens of a call up to a tile, and at 8 tokens the
 * fp32 FMAs alone are 8 instructions per weight, so everything else is kept off the loop
 * (docs/PERF_LOG.md, "The vector kernel, round 3"):
 *  - the activations of a tile of T tokens are staged once, as fp32, in shared memory (LDS):
 *    all of k where it fits in what a block may have (227 KiB on an H200, 64 KiB on AMD), once
 *    per block for all the row blocks it visits (the grid is as large as the GPU holds at once);
 *    else in stages of kStageFloats / T columns between two barriers, per row block;
 *  - each 32 lanes (a wave32, or half a wave64) are 2 x 16: 16 lanes along k, 2 along rows, each
 *    lane owning kRows rows. A lane reads 16 bytes (4 words, 32 columns) of each of its rows per
 *    step, 16 lanes 256 contiguous bytes of a row (the H200 reads 256-byte visits at ~4.3 TB/s,
 *    128-byte ones at ~3.9); the next D steps' words and scales are in flight;
 *  - an activation read from LDS (16 bytes, 4 columns of one token) feeds kRows FMAs, and the two
 *    row lanes of a column read the same address (a broadcast), so a warp's read is 2 LDS
 *    wavefronts (the 16 k-lanes' 256 bytes) instead of 4: the LDS pipe stays under half the FMA
 *    pipe's time even at 8 tokens;
 *  - each word is decoded once into fp32 dequantized weights q * s for all T tokens (exact: a bf16
 *    scale times a 4-bit integer needs 12 significant bits): ~2.4 instructions per weight shared by
 *    T tokens, then one FMA per weight and token;
 *  - m > T loops over tiles of T.
 * Numerics as the other paths: bf16 activations times dequantized weights, fp32 accumulation (one
 * accumulator per lane, row and token, then a tree across the 16 k-lanes), bias added, rounded to
 * bf16.
 */
#include "apply_common.h"
#include "apply_paths.h"
#include "runtime.h"

namespace radiance {
namespace {

constexpr int kUnit = 32;     /* lanes that work together: a wave32, or half a wave64 */
constexpr int kKLanes = 16;   /* lanes of a unit along k */
constexpr int kRowLanes = kUnit / kKLanes;
constexpr int kRows = 4;      /* rows per lane: an LDS read of activations feeds kRows FMAs */
constexpr int kUnitRows = kRowLanes * kRows;
constexpr int kStepCols = kKLanes * 32; /* columns of a row that a unit reads per step */
/* the shapes the planner sizes the kernel by (dispatch.h): LDS floats per 32-column chunk (4 of
 * pad, so that the 16-byte reads of 8 consecutive k-lanes hit all 32 banks), tokens x columns of
 * a stage where all of k does not fit, tokens of the largest tile */
constexpr int kChunkFloats = kVectorChunkFloats;
constexpr int kStageFloats = kVectorStageFloats;
constexpr int kMaxTokens = kVectorMaxTokens;

static_assert((kStageFloats / kMaxTokens) % kStepCols == 0, "a stage boundary is a step boundary");
static_assert(kRows * kMaxTokens <= 2 * kKLanes, "a k-lane writes at most two (row, token) sums");

/* Launch shapes per tile of T tokens: D steps of words in flight, THREADS per block, MINB blocks
 * per multiprocessor that the register budget must allow (NVIDIA; HIP: VEC_MIN_BLOCKS). NVIDIA:
 * 24 warps per SM at 1 token (85 registers: 48 KB of words in flight per SM at one step ahead), 16
 * at 2 and 4 (128), 12 at 8 (168: 32 accumulators, 32 decoded weights, 32 words). Two steps in
 * flight and staging per row block where all of k fits were slower (docs/PERF_LOG.md seventh
 * round). */
template <int T>
struct VecShape;
template <> struct VecShape<1> { static constexpr int D = 1, THREADS = 256, MINB = 3; };
template <> struct VecShape<2> { static constexpr int D = 1, THREADS = 256, MINB = 2; };
template <> struct VecShape<4> { static constexpr int D = 1, THREADS = 256, MINB = 2; };
/* AMD: 384 threads are 6 wave64 on a CDNA CU's 4 SIMDs: two on some, which halves their registers
 * (gfx942 then parked ~90 in AGPRs) */
template <> struct VecShape<8> { static constexpr int D = 1, THREADS = rad_amd ? 256 : 384, MINB = 1; };

/* The second __launch_bounds__ argument. HIP reads it as waves per SIMD (EU), not blocks per
 * CU, and any bound above 1 made clang-19 park registers in gfx942's AGPRs (41-66 of them, ~46
 * v_accvgpr moves per step at 1 token); the LDS of a block bounds the blocks per CU anyway. */
#define VEC_MIN_BLOCKS(minb) (rad_amd ? ((minb) < 1 ? (minb) : 1) : (minb))

/* The activations x[t0 .. t0 + T)[col .. col + cols) as fp32 into xs (token-major, xstride floats
 * apart; chunks of 32 columns padded to kChunkFloats), zeros for tokens past m; between two
 * barriers (the first: every lane is done with the previous stage). cols is a multiple of 32. */
template <int T, int THREADS>
__device__ __forceinline__ void stage_activations(float *xs, int xstride, const uint16_t *__restrict__ x,
                                                  int64_t m, int64_t k, int64_t t0, int64_t col, int cols)
{
    constexpr int B = T >= 4 ? 1 : 4 / T; /* 16-byte loads per token in flight per thread */
    const int units = cols / 8;           /* 16-byte units per token */
    __syncthreads();
    for (int u0 = threadIdx.x; u0 < units; u0 += B * THREADS) {
        rad_u32x4 v[T][B];
#pragma unroll
        for (int t = 0; t < T; t++)
#pragma unroll
            for (int b = 0; b < B; b++) {
                const int u = u0 + b * THREADS;
                v[t][b] = rad_u32x4{0u, 0u, 0u, 0u};
                if (u < units && t0 + t < m) v[t][b] = rad_load_cached_16_now(x + (t0 + t) * k + col + 8 * u);
            }
#pragma unroll
        for (int t = 0; t < T; t++)
#pragma unroll
            for (int b = 0; b < B; b++) {
                const int u = u0 + b * THREADS;
                if (u >= units) continue;
                const uint32_t p[4] = {v[t][b].x, v[t][b].y, v[t][b].z, v[t][b].w};
                float f[8];
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    f[2 * j] = rad_bits_to_float(p[j] << 16);
                    f[2 * j + 1] = rad_bits_to_float(p[j] & 0xffff0000u);
                }
                float4 *d = (float4 *)(xs + t * xstride + (u / 4) * kChunkFloats + (u % 4) * 8);
                d[0] = make_float4(f[0], f[1], f[2], f[3]);
                d[1] = make_float4(f[4], f[5], f[6], f[7]);
            }
    }
    __syncthreads();
}

/* Chunk c (4 words, 32 columns) of each of the lane's rows and its scale (32 columns never
 * straddle a group). Loads are never predicated (a predicated load makes the compiler keep and
 * copy the registers' old values): a chunk past the end of k reads the row's last chunk, whose
 * FMAs the lane then skips. wo[r] and so[r]: the lane's rows from wp and sp (a row past n reads
 * the lane's first row, or the matrix's last where the lane has none; its sums are never
 * written). */
__device__ __forceinline__ void load_words(rad_u32x4 (&w)[kRows], uint32_t (&sc)[kRows], const int32_t *wp,
                                           const uint16_t *sp, const int (&wo)[kRows], const int (&so)[kRows],
                                           int c, int chunks, int group_shift)
{
    const int cc = c < chunks ? c : chunks - 1;
    const int g = (32 * cc) >> group_shift;
#pragma unroll
    for (int r = 0; r < kRows; r++) {
        w[r] = rad_load_stream_16(wp + (wo[r] + 4 * cc));
        sc[r] = sp[so[r] + g];
    }
}

/* acc[r][t] += the lane's 32 columns of row r against token t; xl: those columns of token 0 in LDS. */
template <int T>
__device__ __forceinline__ void fma_chunk(float (&acc)[kRows][T], const rad_u32x4 (&w)[kRows],
                                          const uint32_t (&sc)[kRows], const float *xl, int xstride)
{
    constexpr int kShift[8] = RAD_NIBBLE_SHIFTS;
    float s[kRows], off[kRows];
#pragma unroll
    for (int r = 0; r < kRows; r++) {
        s[r] = rad_bf16_to_float(sc[r]); /* a row past n: another row's, its sums never written */
        /* (b + q + 8) * s - (b + 8) * s = q * s: the product and the sum are exact (q * s and
         * (b + 8) * s need at most 13 significant bits), so the FMA's one rounding changes nothing */
        off[r] = -(float)(RAD_BYTE_FLOAT_BIAS + RAD_NIBBLE_ZERO) * s[r];
    }
#pragma unroll
    for (int i = 0; i < 4; i++) {
        float wq[kRows][8];
#pragma unroll
        for (int r = 0; r < kRows; r++) {
            const uint32_t word = i == 0 ? w[r].x : i == 1 ? w[r].y : i == 2 ? w[r].z : w[r].w;
            /* the nibbles at shifts 0, 8, 16, 24 and 4, 12, 20, 28 as the bytes of two words */
            const uint32_t lo = word & 0x0F0F0F0Fu, hi = (word >> 4) & 0x0F0F0F0Fu;
#pragma unroll
            for (int e = 0; e < 8; e++) {
                const uint32_t src = (kShift[e] & 4) ? hi : lo;
                wq[r][e] = rad_fma_rn(rad_byte_to_float(src, kShift[e] / 8), s[r], off[r]);
            }
        }
#pragma unroll
        for (int t = 0; t < T; t++) {
            const float4 a = *(const float4 *)(xl + t * xstride + 8 * i);
            const float4 b = *(const float4 *)(xl + t * xstride + 8 * i + 4);
            const float xv[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
            for (int r = 0; r < kRows; r++)
#pragma unroll
                for (int e = 0; e < 8; e++) acc[r][t] = rad_fma_rn(xv[e], wq[r][e], acc[r][t]);
        }
    }
}

/* One pass over k of the lane's kRows rows (from row `first`, `rows` of them that exist, <= 0 past
 * n) for the tokens t0 .. t0 + T: the sums written to out. STAGED: the activations are staged here,
 * stage by stage (kc columns each); else xs holds all of k for this tile. */
template <int T, int D, int THREADS, bool STAGED>
__device__ __forceinline__ void rows_pass(const uint16_t *__restrict__ x, int64_t m, int64_t k,
                                          const int32_t *__restrict__ packed, const uint16_t *__restrict__ scales,
                                          const uint16_t *__restrict__ bias, int64_t n, int group_shift, int kc,
                                          uint16_t *__restrict__ out, float *xs, int xstride, int64_t first,
                                          int64_t t0)
{
    const int kl = threadIdx.x % kKLanes;
    const int kw = (int)(k / 8), ng = (int)(k >> group_shift), chunks = (int)(k / 32);
    const int steps = (int)((k + kStepCols - 1) / kStepCols);
    const int rows = n - first < kRows ? (int)(n - first) : kRows; /* <= 0 past n */
    /* the lane's rows from wp and sp (load_words) */
    const int64_t base_row = rows > 0 ? first : n - 1;
    const int32_t *wp = packed + base_row * kw;
    const uint16_t *sp = scales + base_row * ng;
    int wo[kRows], so[kRows];
#pragma unroll
    for (int r = 0; r < kRows; r++) {
        const int rr = r < rows ? r : 0;
        wo[r] = rr * kw;
        so[r] = rr * ng;
    }
    float acc[kRows][T];
#pragma unroll
    for (int r = 0; r < kRows; r++)
#pragma unroll
        for (int t = 0; t < T; t++) acc[r][t] = 0.0f;
    rad_u32x4 buf[D][kRows];
    uint32_t sbuf[D][kRows];
#pragma unroll
    for (int d = 0; d < D; d++) load_words(buf[d], sbuf[d], wp, sp, wo, so, d * kKLanes + kl, chunks, group_shift);
    int stage_c0 = 0, stage_left = 0; /* STAGED: the stage's first chunk, its steps not yet run */
    for (int j = 0; j < steps; j += D) {
#pragma unroll
        for (int d = 0; d < D; d++) {
            const int jj = j + d;
            if (jj >= steps) break; /* the same for every thread: no barrier is skipped by some */
            if (STAGED) {
                if (stage_left == 0) {
                    const int64_t col = (int64_t)jj * kStepCols;
                    stage_activations<T, THREADS>(xs, xstride, x, m, k, t0, col, (int)(k - col < kc ? k - col : kc));
                    stage_c0 = jj * kKLanes;
                    stage_left = (kc + kStepCols - 1) / kStepCols;
                }
                stage_left--;
            }
            rad_u32x4 w[kRows];
            uint32_t sc[kRows];
#pragma unroll
            for (int r = 0; r < kRows; r++) {
                w[r] = buf[d][r];
                sc[r] = sbuf[d][r];
            }
            load_words(buf[d], sbuf[d], wp, sp, wo, so, (jj + D) * kKLanes + kl, chunks, group_shift);
            const int c = jj * kKLanes + kl;
            if (c < chunks) fma_chunk<T>(acc, w, sc, xs + (c - stage_c0) * kChunkFloats, xstride);
        }
    }
#pragma unroll
    for (int r = 0; r < kRows; r++)
#pragma unroll
        for (int t = 0; t < T; t++) {
            float v = acc[r][t];
#pragma unroll
            for (int h = kKLanes / 2; h >= 1; h /= 2) v += rad_shfl_xor(v, h);
            if (kl == (r * T + t) % kKLanes && r < rows && t0 + t < m)
                out[(t0 + t) * n + first + r] = out_bf16(v, bias, first + r);
        }
}

/* kc: columns staged at once: all of k (!STAGED: once per tile and block), or kStageFloats / T
 * (a multiple of kStepCols) or k where that is less (STAGED: per row block). */
template <int T, class S, bool STAGED> /* S: VecShape<T> (HIP's __launch_bounds__ takes no commas) */
__global__ void __launch_bounds__(S::THREADS, VEC_MIN_BLOCKS(S::MINB))
apply_vector_kernel(const uint16_t *__restrict__ x, int64_t m, int64_t k, const int32_t *__restrict__ packed,
                    const uint16_t *__restrict__ scales, const uint16_t *__restrict__ bias, int64_t n, int group,
                    int kc, uint16_t *__restrict__ out)
{
    static_assert(RAD_WAVE % kUnit == 0, "a wave holds whole 32-lane units; xor masks below 16 stay in one");
    extern __shared__ float4 vector_xs[];
    float *xs = (float *)vector_xs;
    constexpr int kBlockRows = S::THREADS / kUnit * kUnitRows;
    const int group_shift = group == 32 ? 5 : group == 64 ? 6 : group == 128 ? 7 : 8; /* RAD_GROUP_OK */
    const int xstride = (kc / 32) * kChunkFloats;
    const int64_t row_blocks = (n + kBlockRows - 1) / kBlockRows;
    const int lane_row = (threadIdx.x / kUnit) * kUnitRows + (threadIdx.x % kUnit) / kKLanes * kRows;
    if (STAGED) {
        for (int64_t rb = blockIdx.x; rb < row_blocks; rb += gridDim.x)
            for (int64_t t0 = 0; t0 < m; t0 += T)
                rows_pass<T, S::D, S::THREADS, true>(x, m, k, packed, scales, bias, n, group_shift, kc, out, xs,
                                                     xstride, rb * kBlockRows + lane_row, t0);
    } else {
        /* all of k in LDS: staged once per tile for every row block of this block */
        for (int64_t t0 = 0; t0 < m; t0 += T) {
            stage_activations<T, S::THREADS>(xs, xstride, x, m, k, t0, 0, (int)k);
            for (int64_t rb = blockIdx.x; rb < row_blocks; rb += gridDim.x)
                rows_pass<T, S::D, S::THREADS, false>(x, m, k, packed, scales, bias, n, group_shift, kc, out, xs,
                                                      xstride, rb * kBlockRows + lane_row, t0);
        }
    }
}

template <int T, bool STAGED>
rad_error_t launch_kernel(const ApplyArgs &a, int kc, size_t smem)
{
    typedef VecShape<T> S;
    constexpr int kBlockRows = S::THREADS / kUnit * kUnitRows;
    auto kernel = apply_vector_kernel<T, S, STAGED>;
    if (smem > 48 * 1024) {
        const rad_error_t err = rad_func_set_max_dynamic_smem(kernel, (int)smem);
        if (err != RAD_SUCCESS) return err;
    }
    int64_t blocks = (a.n + kBlockRows - 1) / kBlockRows;
    /* no more blocks than run at once: each stages the activations once for all its row blocks */
    int per_sm = 0;
    if (rad_occupancy_blocks_per_sm(&per_sm, kernel, S::THREADS, smem) == RAD_SUCCESS && per_sm > 0) {
        const int64_t resident = (int64_t)per_sm * per_device_cached<rad_sm_count>();
        if (blocks > resident) blocks = resident;
    } else {
        (void)rad_get_last_error();
    }
    if (blocks > (1 << 20)) blocks = 1 << 20;
    kernel<<<(unsigned)blocks, S::THREADS, smem, a.stream>>>(a.x, a.m, a.k, a.packed, a.scales, a.bias, a.n, a.group,
                                                             kc, a.out);
    return rad_get_last_error();
}

template <int T>
rad_error_t launch_tokens(const ApplyArgs &a, const ApplyPlan &p)
{
    return p.vector_staged ? launch_kernel<T, true>(a, p.stage_cols, (size_t)p.smem)
                           : launch_kernel<T, false>(a, p.stage_cols, (size_t)p.smem);
}

} // namespace

rad_error_t launch_vector(const ApplyArgs &a, const ApplyPlan &p)
{
    switch (p.tokens) {
    case 1: return launch_tokens<1>(a, p);
    case 2: return launch_tokens<2>(a, p);
    case 4: return launch_tokens<4>(a, p);
    case kMaxTokens: return launch_tokens<kMaxTokens>(a, p);
    default: return (rad_error_t)RADIANCE_GPU_EINVAL;
    }
}

} // namespace radiance
