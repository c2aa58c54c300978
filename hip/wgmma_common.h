/*
 * wgmma_common.h - device helpers of the two Hopper wgmma kernels (apply_wgmma_pipe.hip, and
 * benchmarks/harness/apply_wgmma_ws.hip of the benchmark build): the A fragments of a step built from the packed words in shared memory,
 * the running-scale step and its guard, and the exact fallback loop for the rows the guard flags.
 * Each .hip that includes it gets its own (anonymous-namespace) copy, as when both kernels shared
 * one file.
 */
#ifndef RADIANCE_WGMMA_COMMON_H
#define RADIANCE_WGMMA_COMMON_H

#include "apply_common.h"
#include "apply_paths.h"
#include "ptx_sm90.h"

namespace radiance {
namespace {

template <int V>
struct IntConstant {
    static constexpr int value = V;
};

/* Running-scale mode (RUNNING_SCALE): a row's accumulator holds its sum so far divided by the scale of the
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

#if defined(RAD_HAS_WGMMA) /* the wgmma kernels' pieces (their bodies exist only in an sm_90a pass) */
/* The A fragments of one 128-column step for this thread's rows of a 64-row wgmma tile: rows
 * `row` and row + 8 of the step's weight slot st (64 packed bytes a row). Thread t takes nibble pair
 * t of every word: columns 2 t, 2 t + 1 of each 8. */
__device__ __forceinline__ void wg_build_a(const unsigned char *st, int row, int shift, uint32_t (&a)[8][4])
{
#pragma unroll
    for (int q = 0; q < 4; q++)
#pragma unroll
        for (int hi = 0; hi < 2; hi++) {
            const uint4 v = *(const uint4 *)(st + (row + 8 * hi) * 64 + q * 16);
            const uint32_t w4[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int word = 4 * q + i; /* slice word / 2, k-half word % 2 */
                a[word >> 1][2 * (word & 1) + hi] = dequant_pair(w4[i], shift);
            }
        }
}

/* The running scale's step (RUNNING_SCALE below): move a 64-row tile's accumulators to the scale of
 * the group now starting (its bits in snext; the previous group is done), flag the rows whose
 * scale rs_scale_bad rejects (bits bad_shift + hi of bad), and fetch the next group's bits with
 * load_next(hi) when there is one. */
template <int NA, typename LoadNext>
__device__ __forceinline__ void wg_rescale(float (&acc)[NA], float (&sc)[2], float (&runmax)[2], uint32_t (&snext)[2],
                                           unsigned &bad, int bad_shift, bool has_next, LoadNext load_next)
{
    float ratio[2];
#pragma unroll
    for (int hi = 0; hi < 2; hi++) {
        const uint32_t bits = snext[hi];
        const float s_new = rad_bf16_to_float((uint16_t)bits);
        runmax[hi] = fmaxf(runmax[hi], fabsf(s_new));
        if (rs_scale_bad(bits, s_new, runmax[hi])) bad |= 1u << (bad_shift + hi);
        ratio[hi] = rs_ratio(sc[hi], s_new);
        sc[hi] = s_new;
        if (has_next) snext[hi] = load_next(hi);
    }
#pragma unroll
    for (int r = 0; r < NA; r++) {
        acc[r] *= (r & 2) ? ratio[1] : ratio[0];
        /* the multiply ahead of wgmma.fence: after it, ptxas would wait for every wgmma in
         * flight before this tile's */
        rad_order_before(acc[r]);
    }
}
#endif

/* out[tok, row] for the listed rows (local indices into the block's 256) and the block's tokens,
 * in fp32 with the per-group fold: a warp per (row, token), a lane per group. */
template <int GROUP, int TOKENS>
__device__ void wgp_exact_rows(const int *rows, int nrows, int64_t rbase, int64_t tok0, int64_t m, const uint16_t *x,
                               int64_t k, const int32_t *packed, const uint16_t *scales, const uint16_t *bias,
                               int64_t n, uint16_t *out, int nwarps)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t kw = k / 8, ng = k / GROUP;
    for (int p = warp; p < nrows * TOKENS; p += nwarps) {
        const int64_t row = rbase + rows[p / TOKENS];
        const int64_t tok = tok0 + p % TOKENS;
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

} // namespace
} // namespace radiance

#endif /* RADIANCE_WGMMA_COMMON_H */
