/*
 * apply_wgmma_pipe.hip - the Hopper path of apply for 7-32 tokens (sm_90a, G >= 128; 7-8 tokens
 * when k >= 2048) and the fallback of every wgmma plan whose tensor maps the driver refuses: wgmma m64nTk16 with the weights dequantized into register A fragments
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
#include "apply_paths.h"
#include "runtime.h"
#include "wgmma_common.h"

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

/* Template parameters:
 *   GROUP          columns per scale (128 or 256: one scale per row and step)
 *   TOKENS         tokens per block, the wgmma's n: 8, 16, 32, 64 or 128
 *   COPY           how a step's weights and activations reach shared memory (WgmmaCopy,
 *                  apply_paths.h): kCopyTma, both by TMA with a full and an empty mbarrier per ring
 *                  slot and no block barrier (one thread issues, every warp releases the slots it
 *                  has read); kCopyTmaX, the activations by TMA; kCopyAsync, all by 16-byte
 *                  cp.async and a block barrier per step
 *   RUNNING_SCALE  fold each group by the running scale (wgmma_common.h) instead of into an fp32 total
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
