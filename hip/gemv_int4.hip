/*
 * gemv_int4.hip - out[m, n] = sum_k x[m, k] * q[n, k] * s[n, k / G] (+ bias[n]) for the packed
 * int4 format of DESIGN.md, any m. The path is chosen by m inside radiance_gpu_apply:
 *
 * NVIDIA sm_80+ (matrix cores, mma.sync m16n8k16 bf16 -> fp32). The weights are the A operand
 * (16 rows of the head x 16 k), the activations the B operand (16 k x 8 tokens). A thread (group
 * g = lane / 4, column t = lane % 4) owns rows g and g + 8; one packed word of each gives it the A
 * fragments of two mmas straight from the nibbles: (w >> 4j) & 0x000F000F | 0x43004300 is two
 * bf16 values 136 + q (elements 2j, 2j+1 of the word, thanks to the shuffled nibble order), and
 * one bf16x2 fma takes the 136 off exactly. Which k an mma slot holds is free as long as x is fed
 * in the same order, so thread t feeds x at its own word's columns (one 16-byte load per word).
 * Each group is summed in fp32 accumulators of its own and then scaled into the fp32 total.
 *   m <= 6    apply_stream_kernel (also 7-8 tokens when k < 2048): a warp per 16 rows, the
 *             packed words streamed through a per-warp cp.async ring in shared memory in 256-byte
 *             visits to each row, the activations read from L1 one step ahead. G >= 128;
 *             smaller groups use apply_mma_kernel (the same with a register pipeline).
 *   m > 6     sm_90a, G >= 128: apply_wgmma_pipe_kernel, wgmma m64nTk16 with the weights as
 *             register A, 256 rows x T tokens per block: T = 8, 16, 32 (m <= 32; 4 warpgroups of
 *             64 rows), 64 (2 warpgroups alternating two 64-row halves; each group folded into
 *             an fp32 total) or 128 (m > 64, a running scale); weights and activations brought in
 *             by the TMA engine through a full/empty mbarrier ring. More tokens are more blocks,
 *             adjacent in launch order so they share the weights through L2.
 *             Elsewhere (other GPUs, G < 128, or no tensor maps) the stream kernel up to 8
 *             tokens and beyond that apply_tile_kernel: the
 *             activations of 512 columns x 8 * NT tokens staged in shared memory once per block
 *             (cp.async, double-buffered) and shared by 8 warps.
 * AMD (and NVIDIA before sm_80): apply_vector_kernel, one wave per row, fp32 FMAs, for every m.
 *
 * Nothing here allocates or synchronizes, so a call can be captured in a CUDA/HIP graph.
 */
#include <string.h>

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

/* q (-8..7) of element e (0..7) of a packed word: nibble order 0, 2, 4, 6, 1, 3, 5, 7 (DESIGN.md) */
__device__ __forceinline__ float word_q(uint32_t w, int e)
{
    constexpr int kShift[8] = {0, 16, 4, 20, 8, 24, 12, 28};
    return (float)((int)((w >> kShift[e]) & 15u) - 8);
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
    /* one LOP3: (w >> shift) & 0x000F000F | 0x43004300 is two bf16 values 128 + nibble */
    const uint32_t biased = rad_nibble_pair_or(w >> shift, 0x43004300u);
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

constexpr int kStreamWarps = 4;
constexpr int kStreamXsMaxWarps = 16; /* apply_stream_xs_kernel: one block per SM */

/* ------------------------------------------------------------------------------------------ */
/* Matrix path, streaming (m <= 8, G >= 128): a warp owns 16 * MT rows and 8 * NT tokens. The      */
/* packed words travel through a per-warp ring of D super-steps in shared memory, a super-step    */
/* being SS steps (64 SS bytes of each row), copied by cp.async with 4 SS lanes per row so that  */
/* each copy instruction reads 64 SS contiguous bytes of a row. Reading 64 bytes of 16 rows per   */
/* step holds the H200 to about 3.3 TB/s, 128 bytes to 4.0, 256 bytes and more to the full      */
/* 4.3-4.4 TB/s (benchmarks/read_probe.cu). In the ring, 16-byte chunk c of row r sits at        */
/* c ^ 4 (r & 1), so that the 16-byte reads of a step (rows g and g + 1 in one phase) fall on    */
/* distinct banks. Lanes read what other lanes copied: __syncwarp after the cp.async wait.       */
/* ------------------------------------------------------------------------------------------ */
template <int MT, int SS>
struct StreamSmem {
    static constexpr int slot = 16 * MT * 64 * SS; /* one ring slot: a super-step of a warp's rows */
};

/* How a stream warp reads the activations of its tokens: from global memory (through L1), lanes
 * of tokens past m loading token m - 1 (kXClamp: the addresses of a lane of the last token, so no
 * extra traffic and no per-step test; faster for 1-2 tokens) or loading nothing (kXSkip: faster
 * for 3-6 tokens, H200); or from shared memory (kXShared), where the block has put them in the
 * order the lanes read them (see apply_stream_xs_kernel). */
enum { kXClamp = 0, kXSkip = 1, kXShared = 2 };

/* The rows row0 .. row0 + 16 MT - 1 (those below n) of a stream warp, for the tokens tok0 ..
 * tok0 + 8 NT - 1 (those below m), through this warp's ring. XMODE kXShared: xs is the block's
 * copy of the activations of these tokens (16 k bytes per 8 tokens). */
template <int GROUP, int MT, int NT, int SS, int D, int XMODE>
__device__ __forceinline__ void stream_warp_rows(const uint16_t *__restrict__ x, int64_t m, int64_t k,
                                                 const int32_t *__restrict__ packed,
                                                 const uint16_t *__restrict__ scales,
                                                 const uint16_t *__restrict__ bias, int64_t n,
                                                 uint16_t *__restrict__ out, int64_t row0, int64_t tok0,
                                                 unsigned char *ring, const unsigned char *xs)
{
#if defined(RAD_HAS_MMA_BF16)
    static_assert(GROUP >= 128, "one scale per row and step");
    static_assert(SS % 2 == 0, "the activation register set of step j SS + p is p & 1");
    constexpr int kRowsW = 16 * MT;
    constexpr int kRowBytes = 64 * SS;                 /* one visit */
    constexpr int kSlot = StreamSmem<MT, SS>::slot;
    constexpr int kLanesPerRow = 4 * SS;               /* 16-byte pieces per visit */
    constexpr int kCopies = kRowsW * kLanesPerRow / 32; /* per lane and super-step */
    constexpr bool XS = XMODE == kXShared;
    const int lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;
    const int64_t kw = k / 8, ng = k / GROUP;
    const int nsteps = (int)(kw / kStepWords);
    const int nsuper = (nsteps + SS - 1) / SS;

    /* copies: piece c = lane % kLanesPerRow (step c / 4 of the super-step) of rows
     * crow + kRowStep i, crow = lane / kLanesPerRow (all of the same parity, so one swizzle). A
     * warp whose rows are all inside copies with no per-copy test; past the end, rows read as
     * zeros and are never stored. */
    constexpr int kRowStep = 32 / kLanesPerRow;
    static_assert(kRowStep % 2 == 0, "a lane's copy rows share one parity, so one swizzle");
    const int cpiece = lane % kLanesPerRow, crow = lane / kLanesPerRow;
    const bool all_rows = row0 + kRowsW <= n;
    const int rows_left = (int)(all_rows ? kRowsW : n - row0) - crow; /* copy i: a row if kRowStep i < */
    const unsigned char *csrc = (const unsigned char *)(packed + (row0 + crow) * kw + 4 * cpiece);
    const int64_t cstride = (int64_t)kRowStep * kw * 4; /* bytes between a lane's copies */
    const int cdst = crow * kRowBytes + ((cpiece ^ ((crow & 1) << 2)) << 4);
    const unsigned ring_s = (unsigned)__cvta_generic_to_shared(ring);
    auto issue = [&](int j) __attribute__((always_inline)) {
        if (j < nsuper && j * SS + (cpiece >> 2) < nsteps) {
            const int dst = (j % D) * kSlot + cdst;
            const unsigned char *src = csrc + (int64_t)j * (SS * kStepWords * 4);
            if (all_rows) {
#pragma unroll
                for (int i = 0; i < kCopies; i++, src += cstride)
                    rad_cp_async_16_full(ring_s + dst + i * kRowStep * kRowBytes, src);
            } else {
#pragma unroll
                for (int i = 0; i < kCopies; i++, src += cstride) {
                    const bool ok = kRowStep * i < rows_left;
                    rad_cp_async_16(ring + dst + i * kRowStep * kRowBytes, ok ? (const void *)src : packed, ok);
                }
            }
        }
        rad_cp_async_commit();
    };
    /* scales of this thread's rows (16 mt + g + 8 hi) for the SS steps of a super-step, as pairs
     * (row g | row g + 8 << 16), loaded a super-step ahead; rows past the end read row n - 1 */
    const uint16_t *srow[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int hi = 0; hi < 2; hi++) {
            int64_t row = row0 + 16 * mt + g + 8 * hi;
            row = row < n ? row : n - 1;
            srow[mt][hi] = scales + row * ng;
        }
    uint32_t scur[SS][MT], snext[SS][MT];
    auto load_scales = [&](uint32_t (&dst)[SS][MT], int j) __attribute__((always_inline)) {
#pragma unroll
        for (int p = 0; p < SS; p++) {
            const int step = j * SS + p;
            const int grp = GROUP == 256 ? step >> 1 : step;
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
                dst[p][mt] = step < nsteps ? (uint32_t)srow[mt][0][grp] | ((uint32_t)srow[mt][1][grp] << 16)
                                                         : 0u;
        }
    };

    float total[MT][NT][4], acc[2][MT][NT][4]; /* two mma chains (the low and high k8 of each k16) */
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int c = 0; c < 4; c++) total[mt][nt][c] = acc[0][mt][nt][c] = acc[1][mt][nt][c] = 0.0f;
    /* activations from global memory: loaded one step ahead into alternating register sets (4
     * words x 16 bytes per token). Whatever lanes of tokens past m hold only reaches that token's
     * column of the mma result, which is never stored. From shared memory: loaded in the step. */
    const uint16_t *xsrc[NT];
    bool xvalid[NT];
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        const int64_t tok = tok0 + 8 * nt + g;
        xvalid[nt] = XMODE == kXClamp || tok < m;
        xsrc[nt] = x + (tok < m ? tok : m - 1) * k + 32 * t;
    }
    /* kXShared: lanes of tokens past m read token m - 1 (a broadcast: one wavefront per load for
     * 1-2 tokens, two for 3-4, four for 5-8) */
    const unsigned char *xs_lane[NT];
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        const int64_t last = m - 1 - tok0 - 8 * nt; /* the chunk's last token, if below 8 */
        const int gx = last < 0 ? 0 : last < g ? (int)last : g;
        xs_lane[nt] = XS ? xs + nt * (nsteps * 2048) + 16 * (4 * gx + t) : nullptr;
    }
    rad_u32x4 xb[2][NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
#pragma unroll
        for (int i = 0; i < 4; i++) {
            uint32_t junk; /* defined but arbitrary contents (no instruction) */
            asm("" : "=r"(junk));
            xb[0][nt][i] = rad_u32x4{junk, junk, junk, junk};
            xb[1][nt][i] = rad_u32x4{junk, junk, junk, junk};
            if (!XS && xvalid[nt]) xb[0][nt][i] = rad_load_cached_16(xsrc[nt] + 8 * i);
        }
        xsrc[nt] += kStepWords * 8;
    }

#pragma unroll
    for (int p = 0; p < D - 1; p++) issue(p);
    load_scales(snext, 0);

    for (int j = 0; j < nsuper; j++) {
        rad_cp_async_wait<D - 2>(); /* this lane's copies of super-step j have landed */
        __syncwarp();                /* and everyone's; everyone is done with super-step j - 1 */
        issue(j + D - 1);           /* into the slot of super-step j - 1 */
#pragma unroll
        for (int p = 0; p < SS; p++)
#pragma unroll
            for (int mt = 0; mt < MT; mt++) scur[p][mt] = snext[p][mt];
        if (j + 1 < nsuper) load_scales(snext, j + 1);
        const unsigned char *slot = ring + (j % D) * kSlot;
#pragma unroll
        for (int p = 0; p < SS; p++) {
            const int step = j * SS + p;
            if (step >= nsteps) break;
            rad_u32x4 (&xcur)[NT][4] = xb[XS ? 0 : p & 1];
            rad_u32x4 (&xnext)[NT][4] = xb[(p + 1) & 1];
            if (XS) {
#pragma unroll
                for (int nt = 0; nt < NT; nt++)
#pragma unroll
                    for (int i = 0; i < 4; i++)
                        xcur[nt][i] = rad_load_cached_16(xs_lane[nt] + (4 * step + i) * 512);
            } else if (step + 1 < nsteps) {
#pragma unroll
                for (int nt = 0; nt < NT; nt++) {
                    if (xvalid[nt]) {
#pragma unroll
                        for (int i = 0; i < 4; i++) xnext[nt][i] = rad_load_cached_16(xsrc[nt] + 8 * i);
                    }
                    xsrc[nt] += kStepWords * 8;
                }
            }
            uint32_t wv[2 * MT][4];
#pragma unroll
            for (int r = 0; r < 2 * MT; r++) {
                const int row = 16 * (r >> 1) + g + 8 * (r & 1);
                const uint4 v = *(const uint4 *)(slot + row * kRowBytes + (((4 * p + t) ^ ((g & 1) << 2)) << 4));
                wv[r][0] = v.x; wv[r][1] = v.y; wv[r][2] = v.z; wv[r][3] = v.w;
            }
#pragma unroll
            for (int i = 0; i < 4; i++) {
                uint32_t a_lo[MT][4], a_hi[MT][4];
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    const uint32_t w0 = wv[2 * mt][i], w1 = wv[2 * mt + 1][i];
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
                for (int nt = 0; nt < NT; nt++)
#pragma unroll
                    for (int mt = 0; mt < MT; mt++) {
                        if (GROUP == 128 && i == 0) { /* first of its chain in this group */
                            rad_mma_bf16_m16n8k16_zero(acc[0][mt][nt], a_lo[mt], xcur[nt][i].x, xcur[nt][i].y);
                            rad_mma_bf16_m16n8k16_zero(acc[1][mt][nt], a_hi[mt], xcur[nt][i].z, xcur[nt][i].w);
                        } else {
                            rad_mma_bf16_m16n8k16(acc[0][mt][nt], a_lo[mt], xcur[nt][i].x, xcur[nt][i].y);
                            rad_mma_bf16_m16n8k16(acc[1][mt][nt], a_hi[mt], xcur[nt][i].z, xcur[nt][i].w);
                        }
                    }
            }
            if (GROUP == 128 || (step & 1) == 1) {
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    const float s_lo = rad_bf16_to_float(scur[p][mt] & 0xffffu);
                    const float s_hi = rad_bf16_to_float(scur[p][mt] >> 16);
#pragma unroll
                    for (int nt = 0; nt < NT; nt++) {
#pragma unroll
                        for (int c = 0; c < 4; c++) {
                            const float sum = acc[0][mt][nt][c] + acc[1][mt][nt][c];
                            total[mt][nt][c] += (c < 2 ? s_lo : s_hi) * sum;
                            if (GROUP != 128) acc[0][mt][nt][c] = acc[1][mt][nt][c] = 0.0f;
                        }
                    }
                }
            }
        }
    }
    rad_cp_async_wait<0>();

#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int c = 0; c < 4; c++) {
                const int64_t row = row0 + 16 * mt + g + 8 * (c >> 1);
                const int64_t tok = tok0 + 8 * nt + 2 * t + (c & 1);
                if (row < n && tok < m) out[tok * n + row] = out_bf16(total[mt][nt][c], bias, row);
            }
#endif
}

template <int GROUP, int MT, int NT, int SS, int D, int XMODE = kXClamp>
__global__ void __launch_bounds__(kStreamWarps * 32, MT * NT == 1 ? 4 : 1)
apply_stream_kernel(const uint16_t *__restrict__ x, int64_t m, int64_t k, const int32_t *__restrict__ packed,
                    const uint16_t *__restrict__ scales, const uint16_t *__restrict__ bias, int64_t n,
                    uint16_t *__restrict__ out, int64_t token_chunks)
{
    static_assert(XMODE != kXShared, "apply_stream_xs_kernel");
    extern __shared__ __align__(16) unsigned char smem[];
    const int warp = threadIdx.x >> 5;
    const int64_t chunk = (int64_t)blockIdx.x % token_chunks;
    const int64_t row_block = (int64_t)blockIdx.x / token_chunks;
    const int64_t row0 = (row_block * kStreamWarps + warp) * (16 * MT);
    if (row0 >= n) return; /* whole warp; no block-wide barriers in this kernel */
    stream_warp_rows<GROUP, MT, NT, SS, D, XMODE>(x, m, k, packed, scales, bias, n, out, row0, chunk * (8 * NT),
                                                  smem + warp * (D * StreamSmem<MT, SS>::slot), nullptr);
}

/* The stream kernel with the activations in shared memory, for heads whose activations fit there
 * beside the rings (16 k bytes per 8 tokens; m <= 8 NT). One block per SM, each warp with its own
 * ring, loops over 16 MT-row units of the head (unit = warp + warps in the grid x i). First the
 * block copies x into shared memory, once, in the order the lanes read it: for step s, load i
 * (columns 8 i .. 8 i + 7 of each lane's 32) and lane L = 4 g + t, the 16 bytes of token 8 nt + g
 * at column 128 s + 32 t + 8 i sit at nt * 16 k + ((4 s + i) * 32 + L) * 16. A load of the warp
 * reads at most 512 contiguous bytes: 4 shared-memory wavefronts, where 8 tokens' rows in global
 * memory took 16 L1 requests. Tokens past m are zeros (and not read: see stream_warp_rows).
 * Variants streamxs, streamxs2 and streamxs2ss2 only, not in the automatic dispatch: not yet run on
 * a GPU (benchmarks/PERF_LOG.md, run 26). */
template <int GROUP, int MT, int NT, int SS, int D>
__global__ void __launch_bounds__(kStreamXsMaxWarps * 32, 1)
apply_stream_xs_kernel(const uint16_t *__restrict__ x, int64_t m, int64_t k, const int32_t *__restrict__ packed,
                       const uint16_t *__restrict__ scales, const uint16_t *__restrict__ bias, int64_t n,
                       uint16_t *__restrict__ out)
{
#if defined(RAD_HAS_MMA_BF16)
    extern __shared__ __align__(16) unsigned char smem[];
    const int warps = (int)(blockDim.x >> 5), warp = (int)(threadIdx.x >> 5);
    const int kk = (int)k; /* the copy fits in shared memory, so k is small */
    unsigned char *xs = smem + warps * (D * StreamSmem<MT, SS>::slot);
    for (int q = (int)threadIdx.x; q < NT * kk; q += (int)blockDim.x) { /* 16-byte pieces, k per 8 tokens */
        const int nt = q / kk, r = q % kk; /* r = (4 s + i) * 32 + L */
        const int lane = r & 31, i = (r >> 5) & 3, s = r >> 7;
        const int64_t tok = 8 * nt + (lane >> 2);
        const bool ok = tok < m;
        rad_cp_async_16(xs + 16 * q, ok ? (const void *)(x + tok * k + (128 * s + 32 * (lane & 3) + 8 * i)) : x, ok);
    }
    rad_cp_async_commit();
    rad_cp_async_wait<0>();
    __syncthreads();
    const int64_t units = (n + 16 * MT - 1) / (16 * MT);
    unsigned char *ring = smem + warp * (D * StreamSmem<MT, SS>::slot);
    for (int64_t u = (int64_t)blockIdx.x * warps + warp; u < units; u += (int64_t)gridDim.x * warps) {
        __syncwarp(); /* every lane is done with the ring (the last unit's reads) before it refills */
        stream_warp_rows<GROUP, MT, NT, SS, D, kXShared>(x, m, k, packed, scales, bias, n, out, u * (16 * MT), 0,
                                                         ring, xs);
    }
#endif
}

/* ------------------------------------------------------------------------------------------ */
/* Matrix path, tiled: for more tokens. The activations of a chunk of 4 steps (512 columns) for  */
/* all 8 * NT tokens of the block are copied to shared memory once (cp.async, double-buffered)  */
/* and shared by the block's warps, so each warp reads them from there instead of every warp     */
/* pulling the whole activation matrix through L1/L2. Each warp still owns 16 * MT rows and     */
/* dequantizes its weights straight from registers into A fragments, as above.                  */
/* ------------------------------------------------------------------------------------------ */
constexpr int kTileWarps = 8;
constexpr int kChunkSteps = 4;
/* per token in shared memory: kChunkSteps steps of 16 x 16-byte slots, then 64 bytes of padding
 * so that tokens g and g + 1 fall 16 banks apart (conflict-free 16-byte reads) */
constexpr int kTokenBytes = kChunkSteps * 256 + 64;

template <int NT>
struct TileSmem {
    static constexpr int bytes = 2 * 8 * NT * kTokenBytes;
};

/* Slot (i * 4 + t) in shared memory of the word at step position pos (inverse of step_word). */
template <int GROUP>
__device__ __forceinline__ int slot_of_pos(int pos)
{
    int i, t;
    if (GROUP >= 128) {
        i = pos & 3; t = pos >> 2;
    } else if (GROUP == 64) {
        t = (pos & 7) >> 1; i = (pos & 1) + (pos >= 8 ? 2 : 0);
    } else {
        i = pos >> 2; t = pos & 3;
    }
    return i * 4 + t;
}

template <int GROUP, int NT>
__device__ __forceinline__ void load_x_chunk(unsigned char *buf, const uint16_t *__restrict__ x, int64_t m,
                                             int64_t k, int64_t tok0, int64_t chunk)
{
#if defined(RAD_HAS_MMA_BF16)
    constexpr int kPieces = 8 * NT * kChunkSteps * 16;
    const int64_t kw = k / 8;
    for (int piece = threadIdx.x; piece < kPieces; piece += kTileWarps * 32) {
        const int tok = piece / (kChunkSteps * 16);
        const int rem = piece % (kChunkSteps * 16);
        const int st = rem >> 4, pos = rem & 15;
        const int64_t word = (chunk * kChunkSteps + st) * kStepWords + pos;
        const bool valid = tok0 + tok < m && word < kw;
        const uint16_t *src = valid ? x + (tok0 + tok) * k + word * 8 : x;
        rad_cp_async_16(buf + tok * kTokenBytes + st * 256 + slot_of_pos<GROUP>(pos) * 16, src, valid);
    }
#endif
}

template <int GROUP, int MT, int NT, int PF>
__global__ void __launch_bounds__(kTileWarps * 32, 1)
apply_tile_kernel(const uint16_t *__restrict__ x, int64_t m, int64_t k, const int32_t *__restrict__ packed,
                  const uint16_t *__restrict__ scales, const uint16_t *__restrict__ bias, int64_t n,
                  uint16_t *__restrict__ out, int64_t token_chunks)
{
#if defined(RAD_HAS_MMA_BF16)
    static_assert(kChunkSteps % PF == 0, "stage index must be a compile-time constant");
    extern __shared__ __align__(16) unsigned char smem[];
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int64_t chunk_tok = (int64_t)blockIdx.x % token_chunks;
    const int64_t row_block = (int64_t)blockIdx.x / token_chunks;
    /* warps past the last row still take part in the copies and barriers */
    const int64_t row0 = (row_block * kTileWarps + warp) * (16 * MT);
    const int64_t tok0 = chunk_tok * (8 * NT);
    const int64_t kw = k / 8, ng = k / GROUP;
    const int64_t nsteps = (kw + kStepWords - 1) / kStepWords;
    const int64_t nchunks = (nsteps + kChunkSteps - 1) / kChunkSteps;
    constexpr int kBufBytes = 8 * NT * kTokenBytes;

    float total[MT][NT][4], acc[MT][NT][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int c = 0; c < 4; c++) total[mt][nt][c] = acc[mt][nt][c] = 0.0f;

    load_x_chunk<GROUP, NT>(smem, x, m, k, tok0, 0);
    rad_cp_async_commit();

    Stage<GROUP, MT> stage[PF];
#pragma unroll
    for (int p = 0; p < PF; p++)
        if (p < nsteps) load_stage<GROUP, MT>(stage[p], packed, scales, row0, n, kw, ng, p, g, t);

    for (int64_t c = 0; c < nchunks; c++) {
        const unsigned char *buf = smem + (c & 1) * kBufBytes;
        __syncthreads(); /* everyone is done with the buffer the next copy overwrites */
        if (c + 1 < nchunks) {
            load_x_chunk<GROUP, NT>(smem + ((c + 1) & 1) * kBufBytes, x, m, k, tok0, c + 1);
            rad_cp_async_commit();
            rad_cp_async_wait<1>();
        } else {
            rad_cp_async_wait<0>();
        }
        __syncthreads(); /* chunk c is in shared memory for all */
#pragma unroll
        for (int st = 0; st < kChunkSteps; st++) {
            const int64_t step = c * kChunkSteps + st;
            if (step >= nsteps) break;
            Stage<GROUP, MT> &sg = stage[st % PF];
#pragma unroll
            for (int i = 0; i < 4; i++) {
                uint32_t a_lo[MT][4], a_hi[MT][4];
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    const uint32_t w0 = sg.words[mt][0][i], w1 = sg.words[mt][1][i];
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
                    const uint4 xv = *(const uint4 *)(buf + (8 * nt + g) * kTokenBytes + st * 256 + (i * 4 + t) * 16);
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
                        const float s_lo = sg.scale[mt][0][j], s_hi = sg.scale[mt][1][j];
#pragma unroll
                        for (int nt = 0; nt < NT; nt++) {
                            total[mt][nt][0] += s_lo * acc[mt][nt][0];
                            total[mt][nt][1] += s_lo * acc[mt][nt][1];
                            total[mt][nt][2] += s_hi * acc[mt][nt][2];
                            total[mt][nt][3] += s_hi * acc[mt][nt][3];
#pragma unroll
                            for (int q = 0; q < 4; q++) acc[mt][nt][q] = 0.0f;
                        }
                    }
                }
            }
            if (step + PF < nsteps) load_stage<GROUP, MT>(sg, packed, scales, row0, n, kw, ng, step + PF, g, t);
        }
    }

#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
#pragma unroll
            for (int q = 0; q < 4; q++) {
                const int64_t row = row0 + 16 * mt + g + 8 * (q >> 1);
                const int64_t tok = tok0 + 8 * nt + 2 * t + (q & 1);
                if (row < n && tok < m) out[tok * n + row] = out_bf16(total[mt][nt][q], bias, row);
            }
        }
    }
#endif
}

/* ------------------------------------------------------------------------------------------ */
/* Matrix path, Hopper, pipelined (sm_90a, G >= 128).                                         */
/* ------------------------------------------------------------------------------------------ */
/*
 * A block of 2 warpgroups owns 256 rows and T (32, 64 or 128) tokens; each warpgroup owns two
 * halves of 64 rows and alternates between them, so that one half's 8 wgmmas (m64nTk16, A = the
 * dequantized weights in registers, B = the activations in shared memory) run on the tensor cores
 * while the other half's finished group is scaled (into an fp32 total, or by the running scale
 * of RS below) and its next A fragments are built: wgmma.wait_group 1 gives exact per-group
 * scaling without stalling the tensor cores. One step (128 columns) of weights and activations
 * per slot of an S-stage ring shared by the block; 256 rows per block keep the activation traffic
 * through L2 no larger than the weight traffic.
 *
 * Copies (COPY): kCopyTma, the one dispatched, has one thread issue a step's three TMA boxes (the
 * weights, 256 rows x 64 bytes, no swizzle; the activations, two 64-column x T-token boxes in the
 * 128-byte swizzle layout) on the slot's full mbarrier, after the slot's empty mbarrier says all
 * 8 warps are done with its previous step; no block barrier. Where the driver refuses a tensor
 * map, kCopyTmaX (activations by TMA, weights by 16-byte cp.async from every thread, a block
 * barrier per step) or kCopyAsync (both by cp.async, the activations in the no-swizzle layout).
 * Per-thread cp.async of the weights cost 40-60 us and of the activations 50-170 us on the
 * 248320 x 5120 head (benchmarks/wgmma_probe.cu, PERF_LOG.md). The k-slots follow the natural
 * column order, so the activations are a plain K-major copy, and thread t takes nibble pair t of
 * every word ((w >> 4t) & 0x000F000F is columns 2t, 2t + 1): the 4 threads of a quad read the
 * same words and each dequantizes a quarter of them.
 */
constexpr int kWgpRows = 256;
constexpr int kWgpWBytes = kWgpRows * 64; /* the weights of one step: 256 rows x 16 words */

template <int T>
struct WgpCfg {
    static constexpr int stages = T == 128 ? 4 : 6;
    static constexpr int xbytes = T * 256; /* 128 columns x T tokens x 2 bytes */
    static constexpr int stage_bytes = kWgpWBytes + xbytes;
    static constexpr int smem = 1024 + stages * stage_bytes + 16 * stages; /* + alignment, barriers */
};

/* steps per straight pipeline (see the kernel): more overlap, more registers (T = 64 spills at 4) */
template <int T>
constexpr int kWgpChunk = T <= 32 ? 4 : 2;

template <int V>
struct IntConstant {
    static constexpr int value = V;
};

/* Running-scale mode (RS): a row's accumulator holds its sum so far divided by the scale of the
 * group in flight, so that each group's products enter with weight 1 and no fp32 total is kept:
 * at a group boundary acc *= s_old / s_new (a reciprocal refined by one Newton step, then one
 * multiply: fp32 rounding of the same order as adding s * acc into a total), and the output is
 * s_last * acc. That halves the registers of the fold and lets a warpgroup hold 128 tokens. A row
 * with a scale that is zero, subnormal, 2^126 or more, not finite, or more than 2^24 below the
 * row's largest earlier scale (quantize_rows makes none of these) could lose its sum to overflow
 * or a division by zero: such rows are flagged and recomputed at the end of the block by a plain
 * exact loop (wgp_exact_rows). */
constexpr float kRsMaxRatio = 16777216.0f; /* 2^24 */

__device__ __forceinline__ bool rs_scale_bad(uint32_t bits, float s, float runmax)
{
    const uint32_t mag = bits & 0x7fffu;
    return mag < 0x0080u || mag >= 0x7e80u || runmax > kRsMaxRatio * fabsf(s);
}

/* s_old / s_new for normal s_new, within a few ulp */
__device__ __forceinline__ float rs_ratio(float s_old, float s_new)
{
    float r = rad_rcp_approx(s_new);
    r = rad_fma_rn(r, rad_fma_rn(-s_new, r, 1.0f), r);
    return s_old * r;
}

/* out[tok, row] for the listed rows (local indices into the block's 256) and the block's tokens,
 * in fp32 with the per-group fold: a warp per (row, token), a lane per group. */
template <int GROUP, int T>
__device__ void wgp_exact_rows(const int *rows, int nrows, int64_t rbase, int64_t tok0, int64_t m, const uint16_t *x,
                               int64_t k, const int32_t *packed, const uint16_t *scales, const uint16_t *bias,
                               int64_t n, uint16_t *out)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t kw = k / 8, ng = k / GROUP;
    for (int p = warp; p < nrows * T; p += (int)(blockDim.x / 32)) {
        const int64_t row = rbase + rows[p / T];
        const int64_t tok = tok0 + p % T;
        if (tok >= m) continue; /* whole warp */
        const int32_t *wrow = packed + row * kw;
        const uint16_t *xrow = x + tok * k;
        float acc = 0.0f;
        for (int64_t grp = lane; grp < ng; grp += 32) {
            float part = 0.0f;
            for (int j = 0; j < GROUP / 8; j++) {
                const int64_t word = grp * (GROUP / 8) + j;
                const uint32_t w = (uint32_t)wrow[word];
#pragma unroll
                for (int e = 0; e < 8; e++) part += word_q(w, e) * rad_bf16_to_float(xrow[8 * word + e]);
            }
            acc += rad_bf16_to_float(scales[row * ng + grp]) * part;
        }
#pragma unroll
        for (int h = 16; h >= 1; h /= 2) acc += rad_shfl_xor(acc, h);
        if (lane == 0) out[tok * n + row] = out_bf16(acc, bias, row);
    }
}

/* How a step's weights and activations reach shared memory: all by 16-byte cp.async and a block
 * barrier per step; the activations by TMA; or both by TMA, with a full and an empty mbarrier per
 * ring slot and no block barrier (one thread issues, every warp releases the slots it has read). */
enum { kCopyAsync = 0, kCopyTmaX = 1, kCopyTma = 2 };

/* NH: 64-row halves per warpgroup, 2 (ping-pong, 2 warpgroups) or 1 (4 warpgroups, each waiting
 * for its own group before the fold: 16 warps to hide latency, <= 128 registers, TMA copies
 * only). 256 rows per block either way. */
template <int GROUP, int T, int COPY, bool RS, int NH = 2>
__global__ void __launch_bounds__(512 / NH, 1)
apply_wgmma_pipe_kernel(const uint16_t *__restrict__ x, int64_t m, int64_t k, const int32_t *__restrict__ packed,
                        const uint16_t *__restrict__ scales, const uint16_t *__restrict__ bias, int64_t n,
                        uint16_t *__restrict__ out, int64_t token_chunks, const RAD_GRID_CONSTANT rad_tma_desc_t xmap,
                        const RAD_GRID_CONSTANT rad_tma_desc_t wmap)
{
#if defined(RAD_HAS_WGMMA)
    constexpr bool TMA = COPY >= kCopyTmaX, PIPE = COPY == kCopyTma;
    static_assert(GROUP >= 128, "one scale per row and step");
    static_assert(RS || T <= 64, "the fold keeps a total per accumulator: 64 tokens at most");
    static_assert(NH == 2 || (NH == 1 && COPY == kCopyTma), "4 warpgroups take their copies from TMA only");
    static_assert(COPY != kCopyAsync || T >= 16, "the cp.async activation layout covers 16 tokens");
    using Cfg = WgpCfg<T>;
    constexpr int S = Cfg::stages;
    constexpr int NA = T / 2; /* accumulator floats per thread for one 64-row half */
    extern __shared__ __align__(16) unsigned char smem_raw[];
    /* stages 1024-byte aligned (the 128-byte swizzle of the TMA activations needs it) */
    unsigned char *smem = smem_raw + ((1024u - ((unsigned)__cvta_generic_to_shared(smem_raw) & 1023u)) & 1023u);
    uint64_t *xbar = (uint64_t *)(smem + S * Cfg::stage_bytes); /* full: the slot's copies landed */
    uint64_t *ebar = xbar + S;                                   /* PIPE, empty: every warp read it */
    const int tid = threadIdx.x;
    const int wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31;
    const int g = lane >> 2, t = lane & 3;
    const int64_t chunk_tok = (int64_t)blockIdx.x % token_chunks;
    const int64_t row_block = (int64_t)blockIdx.x / token_chunks;
    const int64_t rbase = row_block * kWgpRows;
    const int64_t tok0 = chunk_tok * T;
    const int64_t kw = k / 8, ng = k / GROUP;
    const int nsteps = (int)(kw / kStepWords);
    const int xtokens = (int)(m - tok0 < T ? m - tok0 : T);
    const int shift = 4 * t;

    /* copies of one step by this thread: 4 x 16 bytes of weights (rows tid / 4 + 64 j, bytes
     * 16 (tid % 4) of the row's 64) and T / 16 x 16 bytes of activations (word tid % 16 of tokens
     * tid / 16 + 16 j), the latter placed as the K-major no-swizzle B operand: core matrices of
     * 8 tokens x 8 columns (128 bytes), the two of a k16 slice 128 bytes apart, 8-token groups
     * 256 bytes apart, slices 32 T bytes apart. Rows and tokens past the end read nothing: zeros,
     * never stored. One base pointer each and validity bits keep registers for the accumulators. */
    const int32_t *wsrc = packed + (rbase + (tid >> 2)) * kw + 4 * (tid & 3);
    const int64_t wstride = 64 * kw;
    unsigned wok = 0;
#pragma unroll
    for (int j = 0; j < 4; j++) wok |= (rbase + (tid >> 2) + 64 * j < n ? 1u : 0u) << j;
    const int wdst = (tid >> 2) * 64 + (tid & 3) * 16;
    constexpr int XJ = T / 16;
    const int xw = tid & 15, xt = tid >> 4;
    const uint16_t *xsrc = x + (tok0 + xt) * k + 8 * xw;
    const int64_t xstride = 16 * k;
    const int xdst = kWgpWBytes + (xw >> 1) * (32 * T) + (xt >> 3) * 256 + (xw & 1) * 128 + (xt & 7) * 16;
    auto issue = [&](int step) __attribute__((always_inline)) {
        if (PIPE) {
            if (tid == 0 && step < nsteps) {
                /* the slot's previous step (step - S) released by every warp */
                if (step >= S) rad_mbarrier_wait(ebar + step % S, (unsigned)(step / S - 1) & 1u);
                unsigned char *st = smem + (step % S) * Cfg::stage_bytes;
                uint64_t *bar = xbar + step % S;
                rad_mbarrier_arrive_expect_tx(bar, kWgpWBytes + T * 256);
                rad_tma_load_2d(st, &wmap, step * kStepWords, (int)rbase, bar);
                rad_tma_load_2d(st + kWgpWBytes, &xmap, step * 128, (int)tok0, bar);
                rad_tma_load_2d(st + kWgpWBytes + T * 128, &xmap, step * 128 + 64, (int)tok0, bar);
            }
            __syncwarp();
            return;
        }
        if (step < nsteps) {
            unsigned char *st = smem + (step % S) * Cfg::stage_bytes;
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const bool ok = (wok >> j) & 1u;
                rad_cp_async_16(st + wdst + j * 64 * 64, ok ? wsrc + j * wstride + (int64_t)step * kStepWords : packed,
                                ok);
            }
            if (TMA) {
                /* the activations as two boxes of 64 columns x T tokens (tokens past m: zeros) */
                if (tid == 0) {
                    uint64_t *bar = xbar + step % S;
                    rad_mbarrier_arrive_expect_tx(bar, T * 256);
                    rad_tma_load_2d(st + kWgpWBytes, &xmap, step * 128, (int)tok0, bar);
                    rad_tma_load_2d(st + kWgpWBytes + T * 128, &xmap, step * 128 + 64, (int)tok0, bar);
                }
            } else {
#pragma unroll
                for (int j = 0; j < XJ; j++) {
                    const bool ok = xt + 16 * j < xtokens;
                    rad_cp_async_16(st + xdst + j * 512, ok ? xsrc + j * xstride + (int64_t)step * 128 : x, ok);
                }
            }
        }
        rad_cp_async_commit();
    };

    /* this thread's rows: half h, rows g (hi = 0) and g + 8 (hi = 1) of its warp's 16; scales of
     * rows past the end read as 0 */
    const int local0 = wg * (64 * NH) + warp * 16 + g;
    const uint16_t *srow = scales + (rbase + local0) * ng;
    unsigned sok = 0;
#pragma unroll
    for (int h = 0; h < NH; h++)
#pragma unroll
        for (int hi = 0; hi < 2; hi++) sok |= (rbase + local0 + 64 * h + 8 * hi < n ? 1u : 0u) << (2 * h + hi);

    float total[NH][RS ? 1 : NA], acc[NH][NA];
#pragma unroll
    for (int h = 0; h < NH; h++) {
#pragma unroll
        for (int r = 0; r < NA; r++) acc[h][r] = 0.0f;
#pragma unroll
        for (int r = 0; r < (RS ? 1 : NA); r++) total[h][r] = 0.0f;
    }
    uint32_t afr[NH][8][4];
    float sc[NH][2]; /* fold: scales of the group in flight per half (rows lo, hi); RS: the reference */
    /* RS: the next step's scale bits (loaded a step ahead), each row's largest |scale| so far, and
     * the rows (bit 2 h + hi) that need the exact loop */
    uint32_t snext[NH][2];
    float runmax[NH][2];
    unsigned bad = 0;
    auto load_scale_bits = [&](int s, int h, int hi) __attribute__((always_inline)) {
        const int grp = GROUP == 256 ? s >> 1 : s;
        return (sok >> (2 * h + hi)) & 1u ? (uint32_t)srow[(64 * h + 8 * hi) * ng + grp] : 0x3f80u; /* 1.0 */
    };
    if (RS) {
#pragma unroll
        for (int h = 0; h < NH; h++)
#pragma unroll
            for (int hi = 0; hi < 2; hi++) {
                snext[h][hi] = load_scale_bits(0, h, hi);
                sc[h][hi] = rad_bf16_to_float((uint16_t)snext[h][hi]);
                runmax[h][hi] = 0.0f;
            }
    }

    if (TMA) {
        if (tid < S) rad_mbarrier_init(xbar + tid, 1);
        if (PIPE && tid < S) rad_mbarrier_init(ebar + tid, 16 / NH); /* one arrival per warp */
        rad_fence_mbarrier_init();
        __syncthreads();
    }
#pragma unroll
    for (int p = 0; p < S - 2; p++) issue(p);

    /* Step s: this thread's copies of it have landed (S - 3 younger groups may be in flight);
     * after the barrier everyone's have, and every warpgroup has seen the wgmmas of step s - 2
     * finish (see run_half), so that slot takes the copies of step s + S - 2. PIPE: the step's
     * full barrier, and the issuing thread waits for the slot's empty barrier instead. */
    auto begin_step = [&](int s) __attribute__((always_inline)) {
        if (!PIPE) rad_cp_async_wait<S - 3>();
        if (TMA) rad_mbarrier_wait(xbar + s % S, (unsigned)(s / S) & 1u);
        if (!PIPE) {
            rad_fence_proxy_async_smem();
            __syncthreads();
        }
        issue(s + S - 2);
        return (const unsigned char *)(smem + (s % S) * Cfg::stage_bytes);
    };
    auto fold_half = [&](int h) __attribute__((always_inline)) {
        if (!RS) {
#pragma unroll
            for (int r = 0; r < NA; r++) total[h][r] += ((r & 2) ? sc[h][1] : sc[h][0]) * acc[h][r];
        }
    };
    /* RS: move half h's accumulators to the scale of step s (its previous group is done) */
    auto rescale_half = [&](int s, int h) __attribute__((always_inline)) {
        float ratio[2];
#pragma unroll
        for (int hi = 0; hi < 2; hi++) {
            const uint32_t bits = snext[h][hi];
            const float s_new = rad_bf16_to_float((uint16_t)bits);
            runmax[h][hi] = fmaxf(runmax[h][hi], fabsf(s_new));
            if (rs_scale_bad(bits, s_new, runmax[h][hi])) bad |= 1u << (2 * h + hi);
            ratio[hi] = rs_ratio(sc[h][hi], s_new);
            sc[h][hi] = s_new;
            if (s + 1 < nsteps) snext[h][hi] = load_scale_bits(s + 1, h, hi);
        }
#pragma unroll
        for (int r = 0; r < NA; r++) {
            acc[h][r] *= (r & 2) ? ratio[1] : ratio[0];
            /* keeps the multiply ahead of wgmma.fence (volatile asm is not reordered): after it,
             * ptxas would wait for every wgmma in flight before this half's */
            asm volatile("" : "+f"(acc[h][r]));
        }
    };
    /* half h of step s: scale the half's previous group in (once it is done), build the A
     * fragments from the packed words in shared memory, and queue 8 wgmmas */
    auto run_half = [&](const unsigned char *st, int s, int h, bool wait_prev) __attribute__((always_inline)) {
        if (wait_prev) { /* all but the most recent group: this half's previous one */
            if (NH == 2) rad_wgmma_wait<1>();
            else rad_wgmma_wait<0>();
        }
        /* PIPE: this warpgroup's wgmmas of step s - 1 are done (or drained at the end of a
         * chunk), and so are this warp's reads of its weights: release the slot */
        if (PIPE && h == NH - 1 && s > 0 && lane == 0) rad_mbarrier_arrive(ebar + (s - 1) % S);
        if (RS) {
            rescale_half(s, h);
        } else {
            if (wait_prev) fold_half(h);
#pragma unroll
            for (int hi = 0; hi < 2; hi++) {
                const int grp = GROUP == 256 ? s >> 1 : s;
                sc[h][hi] = (sok >> (2 * h + hi)) & 1u ? rad_bf16_to_float(srow[(64 * h + 8 * hi) * ng + grp]) : 0.0f;
            }
        }
#pragma unroll
        for (int q = 0; q < 4; q++)
#pragma unroll
            for (int hi = 0; hi < 2; hi++) {
                const uint4 v = *(const uint4 *)(st + (local0 + 64 * h + 8 * hi) * 64 + q * 16);
                const uint32_t w4[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    const int word = 4 * q + i; /* slice word / 2, k-half word % 2 */
                    afr[h][word >> 1][2 * (word & 1) + hi] = dequant_pair(w4[i], shift);
                }
            }
        rad_wgmma_fence();
        /* the fold starts each group from zero; RS accumulates from the zeros set above */
        if (TMA) { /* slice sl: box sl / 4, 32 bytes per slice inside its swizzled rows */
            const uint64_t bdesc = rad_wgmma_desc_sw128(st + kWgpWBytes);
#pragma unroll
            for (int sl = 0; sl < 8; sl++)
                rad_wgmma_rs(acc[h], afr[h][sl], bdesc + (uint64_t)(((sl >> 2) * T * 128 + (sl & 3) * 32) >> 4),
                             RS || sl > 0);
        } else {
            const uint64_t bdesc = rad_wgmma_desc(st + kWgpWBytes, 128, 256);
#pragma unroll
            for (int sl = 0; sl < 8; sl++) rad_wgmma_rs(acc[h], afr[h][sl], bdesc + (uint64_t)(sl * 2 * T), RS || sl > 0);
        }
        rad_wgmma_commit();
    };
    /* U steps as one straight pipeline, drained at the end: ptxas keeps the wgmmas asynchronous
     * only when the groups in flight do not cross a loop edge (otherwise C7514, serialized) */
    auto run_chunk = [&](int s0, auto u_count) __attribute__((always_inline)) {
        constexpr int U = decltype(u_count)::value;
#pragma unroll
        for (int u = 0; u < U; u++) {
            const unsigned char *st = begin_step(s0 + u);
#pragma unroll
            for (int h = 0; h < NH; h++) run_half(st, s0 + u, h, u > 0);
        }
        if (NH == 2) {
            rad_wgmma_wait<1>();
            fold_half(0);
        }
        rad_wgmma_wait<0>();
        fold_half(NH - 1);
    };
    int s = 0;
    for (; s + kWgpChunk<T> <= nsteps; s += kWgpChunk<T>) run_chunk(s, IntConstant<kWgpChunk<T>>());
    for (; s < nsteps; s++) run_chunk(s, IntConstant<1>());
    if (!PIPE) rad_cp_async_wait<0>();

#pragma unroll
    for (int h = 0; h < NH; h++) {
        const int64_t row0 = rbase + wg * (64 * NH) + h * 64 + warp * 16 + g;
#pragma unroll
        for (int r = 0; r < NA; r++) {
            const int hi = (r >> 1) & 1;
            const int64_t row = row0 + 8 * hi;
            const int64_t tok = tok0 + 8 * (r >> 2) + 2 * t + (r & 1);
            if (row < n && tok < m && !((bad >> (2 * h + hi)) & 1u))
                out[tok * n + row] = out_bf16(RS ? sc[h][hi] * acc[h][r] : total[h][RS ? 0 : r], bias, row);
        }
    }
    if (RS) {
        /* the flagged rows, listed in shared memory (the ring is free now), by the exact loop */
        __syncthreads();
        int *list = (int *)smem;
        int *count = list + kWgpRows;
        if (tid == 0) *count = 0;
        __syncthreads();
        if (t == 0) {
#pragma unroll
            for (int b = 0; b < 2 * NH; b++)
                if ((bad >> b) & 1u) list[atomicAdd(count, 1)] = local0 + 64 * (b >> 1) + 8 * (b & 1);
        }
        __syncthreads();
        const int nbad = *count;
        if (nbad > 0) wgp_exact_rows<GROUP, T>(list, nbad, rbase, tok0, m, x, k, packed, scales, bias, n, out);
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
                    for (int e = 0; e < 8; e++) q[e] = word_q(words[i], e);
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

template <int GROUP, int MT, int NT, int PF>
rad_error_t launch_tile(const Args &a)
{
    const int64_t rows_per_block = 16 * MT * kTileWarps;
    const int64_t row_blocks = (a.n + rows_per_block - 1) / rows_per_block;
    const int64_t chunks = (a.m + 8 * NT - 1) / (8 * NT);
    const int64_t blocks = row_blocks * chunks;
    if (blocks > 0x7fffffffLL) return (rad_error_t)RADIANCE_GPU_EINVAL;
    const int smem = TileSmem<NT>::bytes;
    void (*kernel)(const uint16_t *, int64_t, int64_t, const int32_t *, const uint16_t *, const uint16_t *, int64_t,
                   uint16_t *, int64_t) = apply_tile_kernel<GROUP, MT, NT, PF>;
    rad_error_t err = rad_func_set_max_dynamic_smem(kernel, smem);
    if (err != RAD_SUCCESS) return err;
    kernel<<<(unsigned)blocks, kTileWarps * 32, smem, a.stream>>>(
        a.x, a.m, a.k, a.packed, a.scales, a.bias, a.n, a.out, chunks);
    return rad_get_last_error();
}

template <int MT, int NT, int PF>
rad_error_t launch_tile_group(const Args &a)
{
    switch (a.group) {
    case 32: return launch_tile<32, MT, NT, PF>(a);
    case 64: return launch_tile<64, MT, NT, PF>(a);
    case 128: return launch_tile<128, MT, NT, PF>(a);
    default: return launch_tile<256, MT, NT, PF>(a);
    }
}

template <int MT, int NT, int PF>
rad_error_t launch_mma_group(const Args &a);
template <int MT, int NT, int PF>
rad_error_t launch_tile_group(const Args &a);
template <int MT, int NT, int SS, int D, int XMODE = kXClamp>
rad_error_t launch_stream_group(const Args &a);

/* F() for the current device, looked up once per device (F answers >= 0) */
template <int (*F)(void)>
int per_device_cached(void)
{
    static int cache[64];
    int dev = 0;
    if (rad_get_device(&dev) != RAD_SUCCESS || dev < 0 || dev >= 64) return F();
    if (cache[dev] == 0) cache[dev] = F() + 1; /* +1: 0 means "not looked up" */
    return cache[dev] - 1;
}

/* A device attribute of the current device (0 if it cannot be read). */
template <int ATTR>
int device_attr(void)
{
    int dev = 0, v = 0;
    if (rad_get_device(&dev) != RAD_SUCCESS ||
        rad_device_get_attribute(&v, (decltype(RAD_DEV_ATTR_SM_COUNT))ATTR, dev) != RAD_SUCCESS) {
        (void)rad_get_last_error();
        return 0;
    }
    return v;
}

/* Whether this build holds the wgmma kernel (an sm_90a binary) for the current device: the body is
 * compiled only for sm_90a, so an empty stand-in (a plain sm_90 build) uses almost no registers. */
int wgmma_probe(void)
{
    int ok = 0;
#if defined(RAD_CUDA)
    if (rad_device_sm() == 90) {
        cudaFuncAttributes attr;
        if (cudaFuncGetAttributes(&attr, apply_wgmma_pipe_kernel<128, 64, kCopyAsync, false>) == cudaSuccess && attr.numRegs >= 64)
            ok = 1;
        else (void)cudaGetLastError();
    }
#endif
    return ok;
}
bool wgmma_available(void) { return per_device_cached<wgmma_probe>() == 1; }

template <int GROUP, int T, int COPY, bool RS, int NH = 2>
rad_error_t launch_wgmma_pipe_group(const Args &a)
{
    const int64_t row_blocks = (a.n + kWgpRows - 1) / kWgpRows;
    const int64_t chunks = (a.m + T - 1) / T;
    const int64_t blocks = row_blocks * chunks;
    if (blocks > 0x7fffffffLL || a.n > 0x7fffffffLL) return (rad_error_t)RADIANCE_GPU_EINVAL;
    rad_tma_desc_t xmap, wmap;
    memset(&xmap, 0, sizeof xmap);
    memset(&wmap, 0, sizeof wmap);
    /* The driver may refuse a tensor map: then, from 32 tokens, the kernel with fewer of them
     * (checked as the wgtma* and wgmma* variants); with fewer tokens the stream or tiled kernel. */
    const bool x_ok = COPY < kCopyTmaX || rad_tma_encode_2d(&xmap, a.x, 2, (uint64_t)a.m, (uint64_t)a.k, T, 64, 1) == 0;
    const bool w_ok = COPY < kCopyTma || (x_ok && rad_tma_encode_2d(&wmap, a.packed, 4, (uint64_t)a.n, (uint64_t)(a.k / 8),
                                                                    kWgpRows, kStepWords, 0) == 0);
    if (!x_ok || !w_ok) {
        if constexpr (T <= 8) return launch_stream_group<1, 1, 4, 2>(a);
        else if constexpr (T <= 16) return launch_tile_group<2, 2, 2>(a);
        else if (!x_ok) return launch_wgmma_pipe_group<GROUP, T, kCopyAsync, RS>(a);
        else return launch_wgmma_pipe_group<GROUP, T, kCopyTmaX, RS>(a);
    }
    void (*kernel)(const uint16_t *, int64_t, int64_t, const int32_t *, const uint16_t *, const uint16_t *, int64_t,
                   uint16_t *, int64_t, const rad_tma_desc_t, const rad_tma_desc_t) =
        apply_wgmma_pipe_kernel<GROUP, T, COPY, RS, NH>;
    rad_error_t err = rad_func_set_max_dynamic_smem(kernel, WgpCfg<T>::smem);
    if (err != RAD_SUCCESS) return err;
    kernel<<<(unsigned)blocks, 512 / NH, WgpCfg<T>::smem, a.stream>>>(a.x, a.m, a.k, a.packed, a.scales, a.bias,
                                                                        a.n, a.out, chunks, xmap, wmap);
    return rad_get_last_error();
}

/* The pipelined wgmma kernel where it applies (an sm_90a build on an sm_90 device, G >= 128);
 * elsewhere the stream kernel for 8 tokens, the tiled mma.sync kernel with 16 to 64 for more. */
template <int T, int COPY, bool RS = false, int NH = 2>
rad_error_t launch_wgmma_pipe(const Args &a)
{
    if (a.group >= 128 && wgmma_available())
        return a.group == 128 ? launch_wgmma_pipe_group<128, T, COPY, RS, NH>(a)
                              : launch_wgmma_pipe_group<256, T, COPY, RS, NH>(a);
    if (T <= 8) return launch_stream_group<1, 1, 4, 2>(a);
    return launch_tile_group<2, (T < 16 ? 16 : T < 64 ? T : 64) / 8, 2>(a);
}

template <int GROUP, int MT, int NT, int SS, int D, int XMODE = kXClamp>
rad_error_t launch_stream(const Args &a)
{
    const int64_t rows_per_block = 16 * MT * kStreamWarps;
    const int64_t row_blocks = (a.n + rows_per_block - 1) / rows_per_block;
    const int64_t chunks = (a.m + 8 * NT - 1) / (8 * NT);
    const int64_t blocks = row_blocks * chunks;
    if (blocks > 0x7fffffffLL) return (rad_error_t)RADIANCE_GPU_EINVAL;
    const int smem = kStreamWarps * D * StreamSmem<MT, SS>::slot;
    void (*kernel)(const uint16_t *, int64_t, int64_t, const int32_t *, const uint16_t *, const uint16_t *, int64_t,
                   uint16_t *, int64_t) = apply_stream_kernel<GROUP, MT, NT, SS, D, XMODE>;
    rad_error_t err = rad_func_set_max_dynamic_smem(kernel, smem);
    if (err != RAD_SUCCESS) return err;
    kernel<<<(unsigned)blocks, kStreamWarps * 32, smem, a.stream>>>(a.x, a.m, a.k, a.packed, a.scales, a.bias, a.n,
                                                                    a.out, chunks);
    return rad_get_last_error();
}

/* The stream kernel with the activations in shared memory (m <= 8 NT, G >= 128): as many warps per
 * block (8 to 16) as leave room for them beside the rings, one block per SM. Where they do not fit
 * it launches nothing and leaves *launched false, so that the caller takes another kernel. */
template <int GROUP, int MT, int NT, int SS, int D>
rad_error_t launch_stream_xs(const Args &a, bool *launched)
{
    *launched = false;
    const int64_t ring = (int64_t)D * StreamSmem<MT, SS>::slot; /* per warp */
    const int64_t xbytes = (int64_t)NT * 16 * a.k;
    const int optin = per_device_cached<device_attr<(int)RAD_DEV_ATTR_SMEM_OPTIN>>();
    const int sms = per_device_cached<device_attr<(int)RAD_DEV_ATTR_SM_COUNT>>();
    if (a.m > 8 * NT || sms <= 0 || xbytes + 8 * ring > optin) return RAD_SUCCESS;
    int64_t warps = (optin - xbytes) / ring;
    if (warps > kStreamXsMaxWarps) warps = kStreamXsMaxWarps;
    const int64_t units = (a.n + 16 * MT - 1) / (16 * MT);
    int64_t blocks = (units + warps - 1) / warps;
    if (blocks > sms) blocks = sms;
    const int smem = (int)(warps * ring + xbytes);
    void (*kernel)(const uint16_t *, int64_t, int64_t, const int32_t *, const uint16_t *, const uint16_t *, int64_t,
                   uint16_t *) = apply_stream_xs_kernel<GROUP, MT, NT, SS, D>;
    rad_error_t err = rad_func_set_max_dynamic_smem(kernel, smem);
    if (err != RAD_SUCCESS) return err;
    kernel<<<(unsigned)blocks, (unsigned)(warps * 32), smem, a.stream>>>(a.x, a.m, a.k, a.packed, a.scales, a.bias,
                                                                         a.n, a.out);
    *launched = true;
    return rad_get_last_error();
}

/* launch_stream_xs where it fits, else the stream kernel (NT = 1) or the 4-warpgroup wgmma one */
template <int NT, int SS = 4>
rad_error_t launch_stream_xs_or(const Args &a)
{
    bool launched = false;
    rad_error_t err = RAD_SUCCESS;
    if (a.group == 128) err = launch_stream_xs<128, 1, NT, SS, 2>(a, &launched);
    else if (a.group == 256) err = launch_stream_xs<256, 1, NT, SS, 2>(a, &launched);
    if (err != RAD_SUCCESS || launched) return err;
    if (NT == 1) return launch_stream_group<1, 1, 4, 2>(a);
    return launch_wgmma_pipe<16, kCopyTma, false, 1>(a);
}

/* The streaming kernel takes G >= 128; smaller groups fall back to the register-pipelined one. */
template <int MT, int NT, int SS, int D, int XMODE>
rad_error_t launch_stream_group(const Args &a)
{
    switch (a.group) {
    case 128: return launch_stream<128, MT, NT, SS, D, XMODE>(a);
    case 256: return launch_stream<256, MT, NT, SS, D, XMODE>(a);
    default: return launch_mma_group<1, NT, 4>(a);
    }
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

/* Variants, for benchmarks/gpu_kernels.py; 0 picks by m. Only the kernels in use are kept;
 * benchmarks/PERF_LOG.md has the ones measured and dropped. Other numbers answer
 * RADIANCE_GPU_EINVAL. */
enum {
    kAuto = 0,
    kVector = 1,
    kMma1x1 = 2,
    kTile2x2 = 3,
    kTile2x4 = 4,
    kTile2x8 = 5,
    kStream = 6,
    kStreamM2 = 7,
    kWgmma32 = 8,
    kWgmma64 = 9,
    kWgmmaTma32 = 10,
    kWgmmaTma64 = 11,
    kWgmmaRs128 = 12,
    kWgPipe32 = 13,
    kWgPipe64 = 14,
    kWgPipeRs128 = 15,
    kWgPipe16 = 16,
    kWgQuad8 = 17,
    kWgQuad16 = 18,
    kWgQuad32 = 19,
    kStreamSkipX = 20,
    kStreamXs = 21,
    kStreamXs2 = 22,
    kStreamXs2Ss2 = 23,
    kVariants = 24
};

rad_error_t dispatch(const Args &a, int variant)
{
    const bool has_mma = per_device_cached<rad_device_sm>() >= 80;
    if (variant == kAuto) {
        /* picked from the H200 measurements in benchmarks/PERF_LOG.md (2026-11-30); the wgmma
         * variants fall back to the tiled kernel where they do not apply */
        if (!has_mma) variant = kVector;
        /* the stream kernel; lanes of tokens past m clamp their activation loads (m = 1: 180
         * against 188 us) or skip them (m = 4: 200 against 204) */
        else if (a.m <= 2) variant = kStream;
        else if (a.m <= 6) variant = kStreamSkipX;
        /* 7-8 tokens with few steps (262144 x 640: 5) fill the wgmma pipeline too briefly: 59.5
         * against 47.6 us for the stream kernel there */
        else if (a.m <= 8 && a.k < 2048) variant = kStream;
        else if (a.m <= 8) variant = kWgQuad8;
        else if (a.m <= 16) variant = kWgQuad16;
        else if (a.m <= 32) variant = kWgQuad32;
        else if (a.m <= 64) variant = kWgPipe64;
        else variant = kWgPipeRs128;
    }
    if (variant != kVector && !has_mma) return (rad_error_t)RADIANCE_GPU_EINVAL;
    switch (variant) {
    case kVector: return launch_vector(a);
    case kMma1x1: return launch_mma_group<1, 1, 4>(a);
    case kTile2x2: return launch_tile_group<2, 2, 2>(a);
    case kTile2x4: return launch_tile_group<2, 4, 2>(a);
    case kTile2x8: return launch_tile_group<2, 8, 2>(a);
    case kStream: return launch_stream_group<1, 1, 4, 2>(a);
    case kStreamM2: return launch_stream_group<2, 1, 4, 2>(a);
    case kStreamSkipX: return launch_stream_group<1, 1, 4, 2, kXSkip>(a);
    case kStreamXs: return launch_stream_xs_or<1>(a);
    case kStreamXs2: return launch_stream_xs_or<2>(a);
    case kStreamXs2Ss2: return launch_stream_xs_or<2, 2>(a);
    case kWgmma32: return launch_wgmma_pipe<32, kCopyAsync>(a);
    case kWgmma64: return launch_wgmma_pipe<64, kCopyAsync>(a);
    case kWgmmaTma32: return launch_wgmma_pipe<32, kCopyTmaX>(a);
    case kWgmmaTma64: return launch_wgmma_pipe<64, kCopyTmaX>(a);
    case kWgmmaRs128: return launch_wgmma_pipe<128, kCopyTmaX, true>(a);
    case kWgPipe32: return launch_wgmma_pipe<32, kCopyTma>(a);
    case kWgPipe64: return launch_wgmma_pipe<64, kCopyTma>(a);
    case kWgPipeRs128: return launch_wgmma_pipe<128, kCopyTma, true>(a);
    case kWgPipe16: return launch_wgmma_pipe<16, kCopyTma>(a);
    case kWgQuad8: return launch_wgmma_pipe<8, kCopyTma, false, 1>(a);
    case kWgQuad16: return launch_wgmma_pipe<16, kCopyTma, false, 1>(a);
    case kWgQuad32: return launch_wgmma_pipe<32, kCopyTma, false, 1>(a);
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
