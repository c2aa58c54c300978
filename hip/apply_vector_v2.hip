/*
 * apply_vector_v2.hip - the second vector kernel (issue 17, round 2), kept for the benchmark build
 * only (RADIANCE_KERNEL_VARIANTS: the variant "vector2" of benchmarks/harness/gpu_kernels.py), so
 * that the harness times it against the library's vector kernel (apply_vector.hip) in one run.
 * docs/PERF_LOG.md, "The vector kernel, round 3", says what changed and why.
 *
 * What it does: a block of 256 threads stages the activations of T tokens as fp32 in LDS (at most
 * 8192 / T columns at a time); each 32 lanes own 4 rows and read 512 contiguous bytes of each per
 * step (a lane 16 bytes, 32 columns), the next step's words and scales prefetched; each word is
 * decoded once for all T tokens; m > T loops over tiles; fp32 accumulation, a tree across the
 * 32 lanes, bias, bf16.
 */
#if defined(RADIANCE_KERNEL_VARIANTS)
#include "apply_common.h"
#include "apply_paths.h"

namespace radiance {
namespace {

constexpr int kVecThreads = 256;
constexpr int kLanes = 32; /* lanes sharing a row: the unit is the same for wave32 and wave64 */
constexpr int kRows = 4;   /* rows per 32 lanes */
constexpr int kBlockRows = kVecThreads / kLanes * kRows;
constexpr int kStepCols = kLanes * 32;  /* columns of a row that 32 lanes read in one step */
constexpr int kStageFloats = 8192;      /* tokens x columns staged at once: 36 KB with the pad */
constexpr int kChunkFloats = 36;        /* LDS floats per 32-column chunk: 4 of pad, so that the
                                           16-byte reads of 8 consecutive lanes hit all 32 banks */
constexpr int kMaxTokens = kStageFloats / kStepCols; /* 8: a stage spans at least one step */

static_assert(kRows * kMaxTokens <= kLanes, "one lane writes each (row, token) sum");

/* Columns per stage for a tile of T tokens: all of k where it fits, else a multiple of a step. */
template <int T>
constexpr int stage_cols() { return kStageFloats / T; }

/* Whether a load still in flight lets a barrier pass. NVIDIA: yes, bar.sync waits for no load
 * (only a use of its register does), so the next step's words and a stage's activations are
 * loaded before the barriers and travel while the block waits there. AMD: __syncthreads carries
 * a workgroup release fence, which may wait for the wave's outstanding loads (it must where the
 * waves of a workgroup do not share a cache: RDNA's WGP mode), so the order stays as it was
 * (stage first, then the next words; not run on AMD hardware either way). */
#if defined(RAD_CUDA)
constexpr bool kLoadsOutliveBarrier = true;
#else
constexpr bool kLoadsOutliveBarrier = false;
#endif

/* A stage is one pass of kStageLoads 16-byte loads per thread (T * cols <= kStageFloats). */
constexpr int kStageLoads = kStageFloats / 8 / kVecThreads;
static_assert(kStageLoads * kVecThreads * 8 == kStageFloats, "a stage is one pass of kStageLoads loads");

/* Load q of this thread of x[t0 .. t0 + T)[col .. col + cols) as bf16 (zeros past m and past
 * the stage). 8 columns = one 16-byte load; cols is a multiple of 32. */
template <int T>
__device__ __forceinline__ rad_u32x4 fetch_activations(const uint16_t *__restrict__ x, int64_t m, int64_t k,
                                                       int64_t t0, int64_t col, int cols, int q)
{
    const int units = cols / 8, idx = threadIdx.x + q * kVecThreads;
    const int t = idx / units, u = idx - t * units;
    rad_u32x4 v = {0u, 0u, 0u, 0u};
    if (idx < T * units && t0 + t < m) v = rad_load_cached_16_now(x + (t0 + t) * k + col + 8 * u);
    return v;
}

/* Load q of this thread, as fp32, into xs (token-major, chunks of 32 columns padded to
 * kChunkFloats). */
template <int T>
__device__ __forceinline__ void store_activations(float *xs, int xstride, rad_u32x4 v, int cols, int q)
{
    const int units = cols / 8, idx = threadIdx.x + q * kVecThreads;
    if (idx >= T * units) return;
    const int t = idx / units, u = idx - t * units;
    const uint32_t p[4] = {v.x, v.y, v.z, v.w};
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

/* The activations x[t0 .. t0 + T)[col .. col + cols) as fp32 into xs, between two barriers (the
 * first: every lane is done with the previous stage). Where loads outlive a barrier, all of a
 * thread's loads are issued before the first: one trip to L2 per stage instead of one per load,
 * made while the block waits there (ptxas sinks ld.global.nc below a bar.sync:
 * rad_load_cached_16_now). */
template <int T>
__device__ __forceinline__ void stage_activations(float *xs, int xstride, const uint16_t *__restrict__ x,
                                                  int64_t m, int64_t k, int64_t t0, int64_t col, int cols)
{
    if constexpr (kLoadsOutliveBarrier) {
        rad_u32x4 v[kStageLoads];
#pragma unroll
        for (int q = 0; q < kStageLoads; q++) v[q] = fetch_activations<T>(x, m, k, t0, col, cols, q);
        __syncthreads();
#pragma unroll
        for (int q = 0; q < kStageLoads; q++) store_activations<T>(xs, xstride, v[q], cols, q);
    } else {
        __syncthreads();
        for (int q = 0; q < kStageLoads; q++)
            store_activations<T>(xs, xstride, fetch_activations<T>(x, m, k, t0, col, cols, q), cols, q);
    }
    __syncthreads();
}

/* One step's 16 bytes of each of the lane's rows and the scales of those 32 columns (zeros past
 * the end of k and for rows past n: the first `rows` rows exist). Rows are kw words and ng scales
 * apart from wrow and srow. The scales travel with the words, a step ahead of their use: loaded
 * where they are used, each step waited a memory round trip (a row's scales are 1/64 of its
 * bytes, but a new sector nearly every step) that the prefetched words were meant to hide. */
__device__ __forceinline__ void load_words(rad_u32x4 (&w)[kRows], uint32_t (&sc)[kRows], const int32_t *wrow,
                                           const uint16_t *srow, int64_t kw, int64_t ng, int rows, int c,
                                           int chunks, int group_shift)
{
#pragma unroll
    for (int r = 0; r < kRows; r++) {
        w[r] = rad_u32x4{0u, 0u, 0u, 0u};
        sc[r] = 0u;
        if (c < chunks && r < rows) {
            w[r] = rad_load_stream_16(wrow + r * kw + 4 * c);
            /* 32 columns never straddle a group */
            sc[r] = srow[r * ng + ((32 * c) >> group_shift)];
        }
    }
}

/* acc[r][t] += the lane's 32 columns (chunk c) of row r against token t; xl: the chunk in LDS. */
template <int T>
__device__ __forceinline__ void fma_chunk(float (&acc)[kRows][T], const rad_u32x4 (&w)[kRows],
                                          const uint32_t (&sc)[kRows], const float *xl, int xstride)
{
    constexpr int kShift[8] = RAD_NIBBLE_SHIFTS;
    float s[kRows], off[kRows];
#pragma unroll
    for (int r = 0; r < kRows; r++) {
        /* rows past n: scale 0, zero weights, never written */
        s[r] = rad_bf16_to_float(sc[r]);
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

/* WAVE only matters to the compiler's view of the shuffles: the kernel works in units of 32
 * lanes, whole wave32s or the halves of a wave64 (xor masks below 32 stay inside a half). */
template <int WAVE, int T>
__device__ __forceinline__ void apply_vector_tiles(const uint16_t *__restrict__ x, int64_t m, int64_t k,
                                                   const int32_t *__restrict__ packed,
                                                   const uint16_t *__restrict__ scales,
                                                   const uint16_t *__restrict__ bias, int64_t n, int group,
                                                   int kc, uint16_t *__restrict__ out, float *xs)
{
    static_assert(WAVE % kLanes == 0, "a wave holds whole 32-lane units");
    const int lane = threadIdx.x % kLanes;
    const int64_t kw = k / 8, ng = k / group;
    const int chunks = (int)(k / 32), steps = (int)((k + kStepCols - 1) / kStepCols);
    const int group_shift = group == 32 ? 5 : group == 64 ? 6 : group == 128 ? 7 : 8; /* RAD_GROUP_OK */
    const int xstride = (kc / 32) * kChunkFloats;
    const int64_t row_blocks = (n + kBlockRows - 1) / kBlockRows;
    for (int64_t rb = blockIdx.x; rb < row_blocks; rb += gridDim.x) {
        const int64_t row0 = rb * kBlockRows + (threadIdx.x / kLanes) * kRows;
        const int rows = n - row0 < kRows ? (int)(n - row0) : kRows; /* <= 0 past n */
        const int32_t *wrow = packed + (rows > 0 ? row0 : 0) * kw;
        const uint16_t *srow = scales + (rows > 0 ? row0 : 0) * ng;
        for (int64_t t0 = 0; t0 < m; t0 += T) {
            float acc[kRows][T];
#pragma unroll
            for (int r = 0; r < kRows; r++)
#pragma unroll
                for (int t = 0; t < T; t++) acc[r][t] = 0.0f;
            rad_u32x4 cur[kRows], nxt[kRows];
            uint32_t cur_sc[kRows], nxt_sc[kRows];
            load_words(cur, cur_sc, wrow, srow, kw, ng, rows, lane, chunks, group_shift);
            int in_stage = 0; /* columns of this stage before step j */
            for (int j = 0; j < steps; j++, in_stage += kStepCols) {
                const int64_t col = (int64_t)j * kStepCols;
                if (in_stage == kc) in_stage = 0;
                /* the next step's words (NVIDIA: before a stage, their trip to memory overlapping its
                 * barriers) */
                const int next_c = (j + 1) * kLanes + lane, next_chunks = j + 1 < steps ? chunks : 0;
                if (kLoadsOutliveBarrier)
                    load_words(nxt, nxt_sc, wrow, srow, kw, ng, rows, next_c, next_chunks, group_shift);
                if (in_stage == 0)
                    stage_activations<T>(xs, xstride, x, m, k, t0, col, (int)(k - col < kc ? k - col : kc));
                if (!kLoadsOutliveBarrier)
                    load_words(nxt, nxt_sc, wrow, srow, kw, ng, rows, next_c, next_chunks, group_shift);
                const int c = j * kLanes + lane;
                if (c < chunks)
                    fma_chunk<T>(acc, cur, cur_sc, xs + (in_stage / 32 + lane) * kChunkFloats, xstride);
#pragma unroll
                for (int r = 0; r < kRows; r++) {
                    cur[r] = nxt[r];
                    cur_sc[r] = nxt_sc[r];
                }
            }
#pragma unroll
            for (int r = 0; r < kRows; r++)
#pragma unroll
                for (int t = 0; t < T; t++) {
                    float v = acc[r][t];
#pragma unroll
                    for (int h = kLanes / 2; h >= 1; h /= 2) v += rad_shfl_xor(v, h);
                    if (lane == r * T + t && row0 + r < n && t0 + t < m)
                        out[(t0 + t) * n + row0 + r] = out_bf16(v, bias, row0 + r);
                }
        }
    }
}

/* NVIDIA: two blocks per SM (128 registers) where that needs no spill; the 8-token tile's 32
 * accumulators and 32 decoded weights per lane need more (at 128 it spilled). HIP reads the
 * second argument as waves per SIMD, a bound these kernels meet anyway. */
template <int T>
__global__ void __launch_bounds__(kVecThreads, T < kMaxTokens ? 2 : 1)
apply_vector_kernel(const uint16_t *__restrict__ x, int64_t m, int64_t k, const int32_t *__restrict__ packed,
                    const uint16_t *__restrict__ scales, const uint16_t *__restrict__ bias, int64_t n, int group,
                    int kc, uint16_t *__restrict__ out)
{
    extern __shared__ float4 vector_xs[];
    apply_vector_tiles<RAD_WAVE, T>(x, m, k, packed, scales, bias, n, group, kc, out, (float *)vector_xs);
}

template <int T>
rad_error_t launch_tokens(const ApplyArgs &a)
{
    /* all of k in one stage where it fits; else stages of a whole number of steps */
    const int kc = a.k < stage_cols<T>() ? (int)a.k : stage_cols<T>();
    const size_t smem = (size_t)T * (kc / 32) * kChunkFloats * sizeof(float);
    int64_t blocks = (a.n + kBlockRows - 1) / kBlockRows;
    if (blocks > (1 << 20)) blocks = 1 << 20; /* the blocks loop over row blocks */
    apply_vector_kernel<T><<<(unsigned)blocks, kVecThreads, smem, a.stream>>>(a.x, a.m, a.k, a.packed, a.scales,
                                                                             a.bias, a.n, a.group, kc, a.out);
    return rad_get_last_error();
}

} // namespace

rad_error_t launch_vector_v2(const ApplyArgs &a)
{
    static_assert(stage_cols<kMaxTokens>() % kStepCols == 0, "a stage boundary is a step boundary");
    /* the smallest tile that holds m: the FMAs of tokens past m are wasted work */
    if (a.m == 1) return launch_tokens<1>(a);
    if (a.m == 2) return launch_tokens<2>(a);
    if (a.m <= 4) return launch_tokens<4>(a);
    return launch_tokens<kMaxTokens>(a);
}

} // namespace radiance
#endif /* RADIANCE_KERNEL_VARIANTS */
