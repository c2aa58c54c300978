/*
 * apply_wgmma.hip - the Hopper path of apply (sm_90a, G >= 128, more than 8 tokens; also 7-8
 * tokens when k >= 2048): wgmma m64nTk16 with the weights dequantized into register A fragments
 * and the activations as the shared-memory B operand, fed by the TMA engine through a full/empty
 * mbarrier ring.
 *
 * A block owns 256 rows and TOKENS tokens. With 2 warpgroups (HALVES = 2) each warpgroup owns two
 * halves of 64 rows and alternates between them, so that one half's 8 wgmmas (m64nTk16, A = the
 * dequantized weights in registers, B = the activations in shared memory) run on the tensor cores
 * while the other half's finished group is scaled (into an fp32 total, or by the running scale of
 * RUNNING_SCALE below) and its next A fragments are built: wgmma.wait_group 1 gives exact per-group
 * scaling without stalling the tensor cores. One step (128 columns) of weights and activations per
 * slot of an S-stage ring shared by the block; 256 rows per block keep the activation traffic
 * through L2 no larger than the weight traffic.
 *
 * Copies (COPY): kCopyTma, the one dispatched, has one thread issue a step's three TMA boxes (the
 * weights, 256 rows x 64 bytes, no swizzle; the activations, two 64-column x TOKENS-token boxes in
 * the 128-byte swizzle layout) on the slot's full mbarrier, after the slot's empty mbarrier says
 * all 8 warps are done with its previous step; no block barrier. Where the driver refuses a tensor
 * map, kCopyTmaX (activations by TMA, weights by 16-byte cp.async from every thread, a block
 * barrier per step) or kCopyAsync (both by cp.async, the activations in the no-swizzle layout).
 * Per-thread cp.async of the weights cost 40-60 us and of the activations 50-170 us on the
 * 248320 x 5120 head (benchmarks/harness/wgmma_probe.cu, docs/PERF_LOG.md). The k-slots follow
 * the natural column order, so the activations are a plain K-major copy, and thread t takes nibble
 * pair t of every word ((w >> 4t) & 0x000F000F is columns 2t, 2t + 1): the 4 threads of a quad
 * read the same words and each dequantizes a quarter of them.
 */
#include "apply_common.h"
#include "apply_paths.h"
#include "ptx_sm90.h"
#include "runtime.h"

namespace radiance {
namespace {

constexpr int kWgpRows = kWgmmaRows;
constexpr int kWgpWBytes = kWgpRows * 64; /* the weights of one step: 256 rows x 16 words */

template <int TOKENS>
struct WgpCfg {
    static constexpr int stages = TOKENS == 128 ? 4 : 6;
    static constexpr int xbytes = TOKENS * 256; /* 128 columns x TOKENS tokens x 2 bytes */
    static constexpr int stage_bytes = kWgpWBytes + xbytes;
    static constexpr int smem = 1024 + stages * stage_bytes + 16 * stages; /* + alignment, barriers */
};

/* steps per straight pipeline (see the kernel): more overlap, more registers (TOKENS = 64 spills at 4) */
template <int TOKENS>
constexpr int kWgpChunk = TOKENS <= 32 ? 4 : 2;

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
        /* keeps the multiply ahead of wgmma.fence (volatile asm is not reordered): after it,
         * ptxas would wait for every wgmma in flight before this tile's */
        asm volatile("" : "+f"(acc[r]));
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

/* Template parameters:
 *   GROUP          columns per scale (128 or 256: one scale per row and step)
 *   TOKENS         tokens per block, the wgmma's n: 8, 16, 32, 64 or 128
 *   COPY           how a step's weights and activations reach shared memory (WgmmaCopy,
 *                  apply_paths.h): kCopyTma, both by TMA with a full and an empty mbarrier per ring
 *                  slot and no block barrier (one thread issues, every warp releases the slots it
 *                  has read); kCopyTmaX, the activations by TMA; kCopyAsync, all by 16-byte
 *                  cp.async and a block barrier per step
 *   RUNNING_SCALE  fold each group by the running scale (above) instead of into an fp32 total
 *   HALVES         64-row halves per warpgroup: 2 (ping-pong, 2 warpgroups) or 1 (4 warpgroups,
 *                  each waiting for its own group before the fold: 16 warps to hide latency,
 *                  <= 128 registers, TMA copies only). 256 rows per block either way. */
template <int GROUP, int TOKENS, int COPY, bool RUNNING_SCALE, int HALVES = 2>
__global__ void __launch_bounds__(512 / HALVES, 1)
apply_wgmma_pipe_kernel(const uint16_t *__restrict__ x, int64_t m, int64_t k, const int32_t *__restrict__ packed,
                        const uint16_t *__restrict__ scales, const uint16_t *__restrict__ bias, int64_t n,
                        uint16_t *__restrict__ out, int64_t token_chunks, const RAD_GRID_CONSTANT rad_tma_desc_t xmap,
                        const RAD_GRID_CONSTANT rad_tma_desc_t wmap)
{
#if defined(RAD_HAS_WGMMA)
    constexpr bool TMA = COPY >= kCopyTmaX, PIPE = COPY == kCopyTma;
    static_assert(GROUP >= 128, "one scale per row and step");
    static_assert(RUNNING_SCALE || TOKENS <= 64, "the fold keeps a total per accumulator: 64 tokens at most");
    static_assert(HALVES == 2 || (HALVES == 1 && COPY == kCopyTma), "4 warpgroups take their copies from TMA only");
    static_assert(COPY != kCopyAsync || TOKENS >= 16, "the cp.async activation layout covers 16 tokens");
    using Cfg = WgpCfg<TOKENS>;
    constexpr int S = Cfg::stages;
    constexpr int NA = TOKENS / 2; /* accumulator floats per thread for one 64-row half */
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
    const int64_t tok0 = chunk_tok * TOKENS;
    const int64_t kw = k / 8, ng = k / GROUP;
    const int nsteps = (int)(kw / kStepWords);
    const int xtokens = (int)(m - tok0 < TOKENS ? m - tok0 : TOKENS);
    const int shift = 4 * t;

    /* copies of one step by this thread: 4 x 16 bytes of weights (rows tid / 4 + 64 j, bytes
     * 16 (tid % 4) of the row's 64) and TOKENS / 16 x 16 bytes of activations (word tid % 16 of tokens
     * tid / 16 + 16 j), the latter placed as the K-major no-swizzle B operand: core matrices of
     * 8 tokens x 8 columns (128 bytes), the two of a k16 slice 128 bytes apart, 8-token groups
     * 256 bytes apart, slices 32 TOKENS bytes apart. Rows and tokens past the end read nothing: zeros,
     * never stored. One base pointer each and validity bits keep registers for the accumulators. */
    const int32_t *wsrc = packed + (rbase + (tid >> 2)) * kw + 4 * (tid & 3);
    const int64_t wstride = 64 * kw;
    unsigned wok = 0;
#pragma unroll
    for (int j = 0; j < 4; j++) wok |= (rbase + (tid >> 2) + 64 * j < n ? 1u : 0u) << j;
    const int wdst = (tid >> 2) * 64 + (tid & 3) * 16;
    constexpr int XJ = TOKENS / 16;
    const int xw = tid & 15, xt = tid >> 4;
    const uint16_t *xsrc = x + (tok0 + xt) * k + 8 * xw;
    const int64_t xstride = 16 * k;
    const int xdst = kWgpWBytes + (xw >> 1) * (32 * TOKENS) + (xt >> 3) * 256 + (xw & 1) * 128 + (xt & 7) * 16;
    auto issue = [&](int step) __attribute__((always_inline)) {
        if (PIPE) {
            if (tid == 0 && step < nsteps) {
                /* the slot's previous step (step - S) released by every warp */
                if (step >= S) rad_mbarrier_wait(ebar + step % S, (unsigned)(step / S - 1) & 1u);
                unsigned char *st = smem + (step % S) * Cfg::stage_bytes;
                uint64_t *bar = xbar + step % S;
                rad_mbarrier_arrive_expect_tx(bar, kWgpWBytes + TOKENS * 256);
                rad_tma_load_2d(st, &wmap, step * kStepWords, (int)rbase, bar);
                rad_tma_load_2d(st + kWgpWBytes, &xmap, step * 128, (int)tok0, bar);
                rad_tma_load_2d(st + kWgpWBytes + TOKENS * 128, &xmap, step * 128 + 64, (int)tok0, bar);
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
                /* the activations as two boxes of 64 columns x TOKENS tokens (tokens past m: zeros) */
                if (tid == 0) {
                    uint64_t *bar = xbar + step % S;
                    rad_mbarrier_arrive_expect_tx(bar, TOKENS * 256);
                    rad_tma_load_2d(st + kWgpWBytes, &xmap, step * 128, (int)tok0, bar);
                    rad_tma_load_2d(st + kWgpWBytes + TOKENS * 128, &xmap, step * 128 + 64, (int)tok0, bar);
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
    const int local0 = wg * (64 * HALVES) + warp * 16 + g;
    const uint16_t *srow = scales + (rbase + local0) * ng;
    unsigned sok = 0;
#pragma unroll
    for (int h = 0; h < HALVES; h++)
#pragma unroll
        for (int hi = 0; hi < 2; hi++) sok |= (rbase + local0 + 64 * h + 8 * hi < n ? 1u : 0u) << (2 * h + hi);

    float total[HALVES][RUNNING_SCALE ? 1 : NA], acc[HALVES][NA];
#pragma unroll
    for (int h = 0; h < HALVES; h++) {
#pragma unroll
        for (int r = 0; r < NA; r++) acc[h][r] = 0.0f;
#pragma unroll
        for (int r = 0; r < (RUNNING_SCALE ? 1 : NA); r++) total[h][r] = 0.0f;
    }
    uint32_t afr[HALVES][8][4];
    float sc[HALVES][2]; /* fold: scales of the group in flight per half (rows lo, hi); RUNNING_SCALE: the reference */
    /* RUNNING_SCALE: the next step's scale bits (loaded a step ahead), each row's largest |scale| so far, and
     * the rows (bit 2 h + hi) that need the exact loop */
    uint32_t snext[HALVES][2];
    float runmax[HALVES][2];
    unsigned bad = 0;
    auto load_scale_bits = [&](int s, int h, int hi) __attribute__((always_inline)) {
        const int grp = GROUP == 256 ? s >> 1 : s;
        return (sok >> (2 * h + hi)) & 1u ? (uint32_t)srow[(64 * h + 8 * hi) * ng + grp] : 0x3f80u; /* 1.0 */
    };
    if (RUNNING_SCALE) {
#pragma unroll
        for (int h = 0; h < HALVES; h++)
#pragma unroll
            for (int hi = 0; hi < 2; hi++) {
                snext[h][hi] = load_scale_bits(0, h, hi);
                sc[h][hi] = rad_bf16_to_float((uint16_t)snext[h][hi]);
                runmax[h][hi] = 0.0f;
            }
    }

    if (TMA) {
        if (tid < S) rad_mbarrier_init(xbar + tid, 1);
        if (PIPE && tid < S) rad_mbarrier_init(ebar + tid, 16 / HALVES); /* one arrival per warp */
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
        if (!RUNNING_SCALE) {
#pragma unroll
            for (int r = 0; r < NA; r++) total[h][r] += ((r & 2) ? sc[h][1] : sc[h][0]) * acc[h][r];
        }
    };
    /* RUNNING_SCALE: move half h's accumulators to the scale of step s (its previous group is done) */
    auto rescale_half = [&](int s, int h) __attribute__((always_inline)) {
        wg_rescale(acc[h], sc[h], runmax[h], snext[h], bad, 2 * h, s + 1 < nsteps,
                   [&](int hi) { return load_scale_bits(s + 1, h, hi); });
    };
    /* half h of step s: scale the half's previous group in (once it is done), build the A
     * fragments from the packed words in shared memory, and queue 8 wgmmas */
    auto run_half = [&](const unsigned char *st, int s, int h, bool wait_prev) __attribute__((always_inline)) {
        if (wait_prev) { /* all but the most recent group: this half's previous one */
            if (HALVES == 2) rad_wgmma_wait<1>();
            else rad_wgmma_wait<0>();
        }
        /* PIPE: this warpgroup's wgmmas of step s - 1 are done (or drained at the end of a
         * chunk), and so are this warp's reads of its weights: release the slot */
        if (PIPE && h == HALVES - 1 && s > 0 && lane == 0) rad_mbarrier_arrive(ebar + (s - 1) % S);
        if (RUNNING_SCALE) {
            rescale_half(s, h);
        } else {
            if (wait_prev) fold_half(h);
#pragma unroll
            for (int hi = 0; hi < 2; hi++) {
                const int grp = GROUP == 256 ? s >> 1 : s;
                sc[h][hi] = (sok >> (2 * h + hi)) & 1u ? rad_bf16_to_float(srow[(64 * h + 8 * hi) * ng + grp]) : 0.0f;
            }
        }
        wg_build_a(st, local0 + 64 * h, shift, afr[h]);
        rad_wgmma_fence();
        /* the fold starts each group from zero; RUNNING_SCALE accumulates from the zeros set above */
        if (TMA) { /* slice sl: box sl / 4, 32 bytes per slice inside its swizzled rows */
            const uint64_t bdesc = rad_wgmma_desc_sw128(st + kWgpWBytes);
#pragma unroll
            for (int sl = 0; sl < 8; sl++)
                rad_wgmma_rs(acc[h], afr[h][sl], bdesc + (uint64_t)(((sl >> 2) * TOKENS * 128 + (sl & 3) * 32) >> 4),
                             RUNNING_SCALE || sl > 0);
        } else {
            const uint64_t bdesc = rad_wgmma_desc(st + kWgpWBytes, 128, 256);
#pragma unroll
            for (int sl = 0; sl < 8; sl++)
                rad_wgmma_rs(acc[h], afr[h][sl], bdesc + (uint64_t)(sl * 2 * TOKENS), RUNNING_SCALE || sl > 0);
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
            for (int h = 0; h < HALVES; h++) run_half(st, s0 + u, h, u > 0);
        }
        if (HALVES == 2) {
            rad_wgmma_wait<1>();
            fold_half(0);
        }
        rad_wgmma_wait<0>();
        fold_half(HALVES - 1);
    };
    int s = 0;
    for (; s + kWgpChunk<TOKENS> <= nsteps; s += kWgpChunk<TOKENS>) run_chunk(s, IntConstant<kWgpChunk<TOKENS>>());
    for (; s < nsteps; s++) run_chunk(s, IntConstant<1>());
    if (!PIPE) rad_cp_async_wait<0>();

#pragma unroll
    for (int h = 0; h < HALVES; h++) {
        const int64_t row0 = rbase + wg * (64 * HALVES) + h * 64 + warp * 16 + g;
#pragma unroll
        for (int r = 0; r < NA; r++) {
            const int hi = (r >> 1) & 1;
            const int64_t row = row0 + 8 * hi;
            const int64_t tok = tok0 + 8 * (r >> 2) + 2 * t + (r & 1);
            if (row < n && tok < m && !((bad >> (2 * h + hi)) & 1u))
                out[tok * n + row] =
                    out_bf16(RUNNING_SCALE ? sc[h][hi] * acc[h][r] : total[h][RUNNING_SCALE ? 0 : r], bias, row);
        }
    }
    if (RUNNING_SCALE) {
        /* the flagged rows, listed in shared memory (the ring is free now), by the exact loop */
        __syncthreads();
        int *list = (int *)smem;
        int *count = list + kWgpRows;
        if (tid == 0) *count = 0;
        __syncthreads();
        if (t == 0) {
#pragma unroll
            for (int b = 0; b < 2 * HALVES; b++)
                if ((bad >> b) & 1u) list[atomicAdd(count, 1)] = local0 + 64 * (b >> 1) + 8 * (b & 1);
        }
        __syncthreads();
        const int nbad = *count;
        if (nbad > 0) wgp_exact_rows<GROUP, TOKENS>(list, nbad, rbase, tok0, m, x, k, packed, scales, bias, n, out,
                                                    (int)(blockDim.x / 32));
    }
#endif
}

/* ---------------------------------------------------------------------------------------------
 * The warp-specialized kernel (more than 32 tokens): a producer warpgroup (one thread of it, with
 * its registers given to the others by setmaxnreg) issues every TMA copy; CWG consumer
 * warpgroups of 64 rows each only wait for full slots, dequantize, rescale and queue wgmmas.
 *
 * Why (docs/PERF_LOG.md, "Seventh round"): in apply_wgmma_pipe_kernel thread 0 of the first
 * warpgroup issues the copies and first waits for the slot's empty barrier, i.e. for the other
 * warpgroup to release it, which ties the warpgroups to each other's pace. Here nobody who issues
 * wgmmas waits for anyone but the copies, so the warpgroups drift apart and take turns on the
 * tensor cores. With 256 tokens each weight is dequantized once (the older kernel's 128-token
 * blocks did it twice).
 *
 * A tile is 64 CWG rows x TOKENS tokens (the wgmma's n: 64 to 256 in steps of 32). The grid may be
 * smaller than the tile count (persistent blocks): a block takes tiles blockIdx.x, + gridDim.x, ...
 * and the producer runs on into the next tile's steps while the consumers finish a tile and write
 * it out, so the ring never drains between tiles. The accumulators keep the running scale of
 * apply_wgmma_pipe_kernel (same arithmetic, same flagged-row fallback). DB: two sets of A
 * fragments, so that a warpgroup builds step s + 1's while step s's wgmmas run, where the
 * registers allow. U steps per straight pipeline, drained at its end (ptxas keeps wgmmas
 * asynchronous only within one).
 * ------------------------------------------------------------------------------------------- */
template <int TOKENS, int CWG>
struct WsCfg {
    static constexpr int rows = 64 * CWG;
    static constexpr int wbytes = rows * 64; /* the weights of one step: rows x 16 words */
    static constexpr int stage_bytes = wbytes + TOKENS * 256;
    static constexpr int extra = 16 + 4 * rows; /* the flagged-row list and its count */
    static constexpr int stages_fit = (227 * 1024 - 1024 - extra - 16 * 8) / stage_bytes;
    static constexpr int stages = stages_fit > 8 ? 8 : stages_fit;
    static constexpr int smem = 1024 + stages * stage_bytes + 16 * stages + extra;
    static constexpr int threads = 128 * (CWG + 1);
    /* registers per thread after setmaxnreg, which ptxas also compiles each side for (the SM has
     * 65536; launch_bounds alone would give every thread 168 or 128): 2 consumer warpgroups
     * 2 x 128 x 232 + 128 x 40 = 64512; 3: 3 x 128 x 160 + 128 x 24 = 64512 */
    static constexpr int consumer_regs = CWG == 2 ? 232 : 160;
    static constexpr int producer_regs = CWG == 2 ? 40 : 24;
    /* two A-fragment sets (DB) fit beside the accumulators (TOKENS / 2) and about 40 others */
    static constexpr bool db_fits = TOKENS / 2 + 64 + 40 <= consumer_regs;
};

template <int GROUP, int TOKENS, int CWG, bool DB>
__global__ void __launch_bounds__(128 * (CWG + 1), 1)
apply_wgmma_ws_kernel(const uint16_t *__restrict__ x, int64_t m, int64_t k, const int32_t *__restrict__ packed,
                      const uint16_t *__restrict__ scales, const uint16_t *__restrict__ bias, int64_t n,
                      uint16_t *__restrict__ out, int64_t token_chunks, int64_t tiles,
                      const RAD_GRID_CONSTANT rad_tma_desc_t xmap, const RAD_GRID_CONSTANT rad_tma_desc_t wmap)
{
#if defined(RAD_HAS_WGMMA)
    static_assert(GROUP >= 128, "one scale per row and step");
    using Cfg = WsCfg<TOKENS, CWG>;
    static_assert(!DB || Cfg::db_fits, "two A-fragment sets do not fit");
    constexpr int S = Cfg::stages;
    constexpr int NA = TOKENS / 2;
    constexpr int kRows = Cfg::rows;
    constexpr int kConsumers = 128 * CWG; /* threads 0 .. 128 CWG - 1; the last warpgroup: the producer */
    extern __shared__ __align__(16) unsigned char smem_raw[];
    unsigned char *smem = smem_raw + ((1024u - ((unsigned)__cvta_generic_to_shared(smem_raw) & 1023u)) & 1023u);
    uint64_t *fullbar = (uint64_t *)(smem + S * Cfg::stage_bytes);
    uint64_t *emptybar = fullbar + S;
    int *list = (int *)(emptybar + S); /* flagged rows of the current tile, then their count */
    int *count = list + kRows;
    const int tid = threadIdx.x;
    const int64_t kw = k / 8, ng = k / GROUP;
    const int nsteps = (int)(kw / kStepWords);

    if (tid < S) {
        rad_mbarrier_init(fullbar + tid, 1);
        rad_mbarrier_init(emptybar + tid, kConsumers / 32); /* one arrival per consumer warp */
    }
    rad_fence_mbarrier_init();
    __syncthreads();

    if (tid >= kConsumers) { /* the producer warpgroup: one thread issues every step's boxes */
        rad_setmaxnreg_dec<Cfg::producer_regs>();
        if (tid == kConsumers) {
            int64_t it = 0; /* steps issued by this block, over all its tiles */
            for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
                const int rbase = (int)(tile / token_chunks * kRows);
                const int tok0 = (int)(tile % token_chunks * TOKENS);
                for (int s = 0; s < nsteps; s++, it++) {
                    const int slot = (int)(it % S);
                    if (it >= S) rad_mbarrier_wait(emptybar + slot, (unsigned)(it / S - 1) & 1u);
                    unsigned char *st = smem + slot * Cfg::stage_bytes;
                    uint64_t *bar = fullbar + slot;
                    rad_mbarrier_arrive_expect_tx(bar, Cfg::stage_bytes);
                    rad_tma_load_2d(st, &wmap, s * kStepWords, rbase, bar);
                    rad_tma_load_2d(st + Cfg::wbytes, &xmap, s * 128, tok0, bar);
                    rad_tma_load_2d(st + Cfg::wbytes + TOKENS * 128, &xmap, s * 128 + 64, tok0, bar);
                }
            }
        }
        return;
    }
    rad_setmaxnreg_inc<Cfg::consumer_regs>();

    const int wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31;
    const int g = lane >> 2, t = lane & 3;
    const int shift = 4 * t;
    const int local0 = wg * 64 + warp * 16 + g; /* rows local0 (hi = 0) and local0 + 8 (hi = 1) */
    /* the ring position of the tile's first step: slot base0, phase parity phase0 (the block's
     * steps before this tile, modulo S and 2 S, kept in 32 bits) */
    int base0 = 0;
    unsigned phase0 = 0;
    for (int64_t tile = blockIdx.x; tile < tiles;
         tile += gridDim.x, phase0 ^= (unsigned)((base0 + nsteps) / S) & 1u, base0 = (base0 + nsteps) % S) {
        const int64_t rbase = tile / token_chunks * kRows;
        const int64_t tok0 = tile % token_chunks * TOKENS;
        const uint16_t *srow = scales + (rbase + local0) * ng;
        unsigned sok = 0;
#pragma unroll
        for (int hi = 0; hi < 2; hi++) sok |= (rbase + local0 + 8 * hi < n ? 1u : 0u) << hi;
        auto load_scale_bits = [&](int s, int hi) __attribute__((always_inline)) {
            const int grp = GROUP == 256 ? s >> 1 : s;
            return (sok >> hi) & 1u ? (uint32_t)srow[(8 * hi) * ng + grp] : 0x3f80u; /* 1.0 */
        };
        float acc[NA];
#pragma unroll
        for (int r = 0; r < NA; r++) acc[r] = 0.0f;
        uint32_t afr[DB ? 2 : 1][8][4];
        float sc[2], runmax[2];
        uint32_t snext[2];
        unsigned bad = 0;
#pragma unroll
        for (int hi = 0; hi < 2; hi++) {
            snext[hi] = load_scale_bits(0, hi);
            sc[hi] = rad_bf16_to_float((uint16_t)snext[hi]);
            runmax[hi] = 0.0f;
        }
        auto slot = [&](int s) __attribute__((always_inline)) {
            return (const unsigned char *)(smem + ((base0 + s) % S) * Cfg::stage_bytes);
        };
        auto wait_full = [&](int s) __attribute__((always_inline)) {
            rad_mbarrier_wait(fullbar + (base0 + s) % S, phase0 ^ ((unsigned)((base0 + s) / S) & 1u));
        };
        auto release = [&](int s) __attribute__((always_inline)) {
            if (lane == 0) rad_mbarrier_arrive(emptybar + (base0 + s) % S);
        };
        auto build = [&](const unsigned char *st, uint32_t (&a)[8][4]) __attribute__((always_inline)) {
            wg_build_a(st, local0, shift, a);
        };
        /* the accumulators to the scale of step s (their previous group is done) */
        auto rescale = [&](int s) __attribute__((always_inline)) {
            wg_rescale(acc, sc, runmax, snext, bad, 0, s + 1 < nsteps,
                       [&](int hi) { return load_scale_bits(s + 1, hi); });
        };
        auto mma = [&](const unsigned char *st, const uint32_t (&a)[8][4]) __attribute__((always_inline)) {
            rad_wgmma_fence();
            const uint64_t bdesc = rad_wgmma_desc_sw128(st + Cfg::wbytes);
#pragma unroll
            for (int sl = 0; sl < 8; sl++)
                rad_wgmma_rs(acc, a[sl], bdesc + (uint64_t)(((sl >> 2) * TOKENS * 128 + (sl & 3) * 32) >> 4), 1);
            rad_wgmma_commit();
        };
        auto run_chunk = [&](int s0, auto u_count) __attribute__((always_inline)) {
            constexpr int U = decltype(u_count)::value;
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int s = s0 + u;
                const unsigned char *st = slot(s);
                wait_full(s);
                if (DB) build(st, afr[DB ? (u & 1) : 0]);
                if (u > 0) {
                    rad_wgmma_wait<0>();
                    release(s - 1);
                }
                rescale(s);
                if (!DB) build(st, afr[0]);
                mma(st, afr[DB ? (u & 1) : 0]);
            }
            rad_wgmma_wait<0>();
            release(s0 + U - 1);
        };
        constexpr int U = DB ? 4 : 1;
        int s = 0;
        for (; s + U <= nsteps; s += U) run_chunk(s, IntConstant<U>());
        for (; s < nsteps; s++) run_chunk(s, IntConstant<1>());

        const int64_t row0 = rbase + local0;
#pragma unroll
        for (int r = 0; r < NA; r++) {
            const int hi = (r >> 1) & 1;
            const int64_t row = row0 + 8 * hi;
            const int64_t tok = tok0 + 8 * (r >> 2) + 2 * t + (r & 1);
            if (row < n && tok < m && !((bad >> hi) & 1u)) out[tok * n + row] = out_bf16(sc[hi] * acc[r], bias, row);
        }
        /* the flagged rows (never from quantize_rows) by the exact loop; the consumers meet on
         * named barrier 1 (the producer warpgroup is elsewhere) */
        if (tid == 0) *count = 0;
        asm volatile("bar.sync 1, %0;" ::"n"(kConsumers) : "memory");
        if (t == 0) {
#pragma unroll
            for (int hi = 0; hi < 2; hi++)
                if ((bad >> hi) & 1u) list[atomicAdd(count, 1)] = local0 + 8 * hi;
        }
        asm volatile("bar.sync 1, %0;" ::"n"(kConsumers) : "memory");
        const int nbad = *count;
        if (nbad > 0)
            wgp_exact_rows<GROUP, TOKENS>(list, nbad, rbase, tok0, m, x, k, packed, scales, bias, n, out,
                                          kConsumers / 32);
        asm volatile("bar.sync 1, %0;" ::"n"(kConsumers) : "memory"); /* the list is read before the next tile */
    }
#endif
}

template <int GROUP, int TOKENS, int CWG, bool DB>
rad_error_t launch_ws(const ApplyArgs &a, const ApplyPlan &p)
{
    using Cfg = WsCfg<TOKENS, CWG>;
    const int64_t row_blocks = (a.n + Cfg::rows - 1) / Cfg::rows;
    const int64_t chunks = (a.m + TOKENS - 1) / TOKENS;
    const int64_t tiles = row_blocks * chunks;
    if (tiles > 0x7fffffffLL || a.n > 0x7fffffffLL || a.m > 0x7fffffffLL) return (rad_error_t)RADIANCE_GPU_EINVAL;
    void (*kernel)(const uint16_t *, int64_t, int64_t, const int32_t *, const uint16_t *, const uint16_t *, int64_t,
                   uint16_t *, int64_t, int64_t, const rad_tma_desc_t, const rad_tma_desc_t) =
        apply_wgmma_ws_kernel<GROUP, TOKENS, CWG, DB>;
    rad_error_t err = rad_func_set_max_dynamic_smem(kernel, Cfg::smem);
    if (err != RAD_SUCCESS) return err;
    /* persistent: one block per SM (the shared memory allows no more), each looping over tiles */
    const int64_t sms = per_device_cached<rad_sm_count>();
    const int64_t blocks = p.blocks > 0 && sms < tiles ? sms : tiles;
    kernel<<<(unsigned)blocks, Cfg::threads, Cfg::smem, a.stream>>>(a.x, a.m, a.k, a.packed, a.scales, a.bias, a.n,
                                                                    a.out, chunks, tiles, p.xmap, p.wmap);
    return rad_get_last_error();
}

/* The instantiations a plan can name: (tokens, consumer warpgroups, two A-fragment sets). The
 * library holds those make_plan takes (ws_tile in apply.hip); the benchmark build the measured
 * others. */
#define RAD_WS_LIBRARY(X) \
    X(64, 3, true)        \
    X(96, 2, true)        \
    X(128, 3, false)      \
    X(160, 3, false)      \
    X(192, 2, false)      \
    X(224, 2, false)      \
    X(256, 2, true)
#define RAD_WS_VARIANTS(X) \
    X(64, 2, true)         \
    X(128, 2, true)        \
    X(160, 2, false)       \
    X(256, 2, false)

rad_error_t launch_ws_plan(const ApplyArgs &a, const ApplyPlan &p)
{
    const bool db = p.a_sets == 2;
#define RAD_WS_CASE(T, C, D)                                                                                    \
    if (p.tokens == T && p.consumer_wgs == C && db == D && a.group >= 128)                                      \
        return a.group == 128 ? launch_ws<128, T, C, D>(a, p) : launch_ws<256, T, C, D>(a, p);
    RAD_WS_LIBRARY(RAD_WS_CASE)
#if defined(RADIANCE_KERNEL_VARIANTS)
    RAD_WS_VARIANTS(RAD_WS_CASE)
#endif
#undef RAD_WS_CASE
    return (rad_error_t)RADIANCE_GPU_EINVAL;
}

template <int GROUP, int TOKENS, int COPY, bool RUNNING_SCALE, int HALVES>
rad_error_t launch(const ApplyArgs &a, const ApplyPlan &p)
{
    const int64_t row_blocks = (a.n + kWgpRows - 1) / kWgpRows;
    const int64_t chunks = (a.m + TOKENS - 1) / TOKENS;
    const int64_t blocks = row_blocks * chunks;
    if (blocks > 0x7fffffffLL || a.n > 0x7fffffffLL) return (rad_error_t)RADIANCE_GPU_EINVAL;
    void (*kernel)(const uint16_t *, int64_t, int64_t, const int32_t *, const uint16_t *, const uint16_t *, int64_t,
                   uint16_t *, int64_t, const rad_tma_desc_t, const rad_tma_desc_t) =
        apply_wgmma_pipe_kernel<GROUP, TOKENS, COPY, RUNNING_SCALE, HALVES>;
    rad_error_t err = rad_func_set_max_dynamic_smem(kernel, WgpCfg<TOKENS>::smem);
    if (err != RAD_SUCCESS) return err;
    kernel<<<(unsigned)blocks, 512 / HALVES, WgpCfg<TOKENS>::smem, a.stream>>>(
        a.x, a.m, a.k, a.packed, a.scales, a.bias, a.n, a.out, chunks, p.xmap, p.wmap);
    return rad_get_last_error();
}

template <int TOKENS, int COPY, bool RUNNING_SCALE, int HALVES>
rad_error_t launch_group(const ApplyArgs &a, const ApplyPlan &p)
{
    switch (a.group) {
    case 128: return launch<128, TOKENS, COPY, RUNNING_SCALE, HALVES>(a, p);
    case 256: return launch<256, TOKENS, COPY, RUNNING_SCALE, HALVES>(a, p);
    default: return (rad_error_t)RADIANCE_GPU_EINVAL;
    }
}

/* Whether the wgmma kernel of this build was compiled for the current device: the body exists
 * only in an sm_90a pass, so an empty stand-in (a plain sm_90 build) uses almost no registers. */
int wgmma_probe(void)
{
    if (rad_device_sm() != 90) return 0;
    return rad_func_num_regs((const void *)apply_wgmma_pipe_kernel<128, 64, kCopyAsync, false>) >= 64;
}

} // namespace

bool wgmma_built(void) { return per_device_cached<wgmma_probe>() == 1; }

/* The instantiations the planner (apply.hip) can name: 4 warpgroups with TMA copies up to 32
 * tokens, 2 from 64 and wherever a tensor map was refused; the running scale at 128 tokens. */
rad_error_t launch_wgmma(const ApplyArgs &a, const ApplyPlan &p)
{
    if (p.warp_specialized) return p.copy == kCopyTma ? launch_ws_plan(a, p) : (rad_error_t)RADIANCE_GPU_EINVAL;
    const bool four = p.halves == 1;
    if (p.running_scale) {
        if (p.tokens != 128 || four) return (rad_error_t)RADIANCE_GPU_EINVAL;
        switch (p.copy) {
        case kCopyTma: return launch_group<128, kCopyTma, true, 2>(a, p);
        case kCopyTmaX: return launch_group<128, kCopyTmaX, true, 2>(a, p);
        default: return launch_group<128, kCopyAsync, true, 2>(a, p);
        }
    }
    if (p.copy == kCopyTma) {
        if (four && p.tokens == 8) return launch_group<8, kCopyTma, false, 1>(a, p);
        if (four && p.tokens == 16) return launch_group<16, kCopyTma, false, 1>(a, p);
        if (four && p.tokens == 32) return launch_group<32, kCopyTma, false, 1>(a, p);
        if (!four && p.tokens == 64) return launch_group<64, kCopyTma, false, 2>(a, p);
#if defined(RADIANCE_KERNEL_VARIANTS)
        if (!four && p.tokens == 16) return launch_group<16, kCopyTma, false, 2>(a, p);
        if (!four && p.tokens == 32) return launch_group<32, kCopyTma, false, 2>(a, p);
#endif
        return (rad_error_t)RADIANCE_GPU_EINVAL;
    }
    if (four) return (rad_error_t)RADIANCE_GPU_EINVAL;
    const bool tma_x = p.copy == kCopyTmaX;
    switch (p.tokens) {
    case 32: return tma_x ? launch_group<32, kCopyTmaX, false, 2>(a, p) : launch_group<32, kCopyAsync, false, 2>(a, p);
    case 64: return tma_x ? launch_group<64, kCopyTmaX, false, 2>(a, p) : launch_group<64, kCopyAsync, false, 2>(a, p);
    default: return (rad_error_t)RADIANCE_GPU_EINVAL;
    }
}

} // namespace radiance
