/*
 * apply_wgmma_ws.hip - the warp-specialized wgmma kernel (sm_90a, G >= 128, both tensor maps),
 * the Hopper path of apply for more than 32 tokens until the folding kernel (apply_wgmma_fold.hip,
 * issue 22) replaced it. It lives in the benchmark build alone (gpu_kernels.py compiles it beside
 * hip/ and apply_variants.hip), which times its tiles beside the folding kernel's: the library's
 * planner never takes this path (dispatch.h says why) and setup.py never compiles this file. A
 * producer warpgroup (one thread of it, with its registers given to the others by setmaxnreg)
 * issues every TMA copy; CWG consumer warpgroups of 64 rows each only wait for full slots,
 * dequantize, rescale and queue wgmmas.
 *
 * Why (docs/PERF_LOG.md, "Seventh round"): in apply_wgmma_pipe_kernel (apply_wgmma_pipe.hip)
 * thread 0 of the first warpgroup issues the copies and first waits for the slot's empty barrier,
 * i.e. for the other warpgroup to release it, which ties the warpgroups to each other's pace. Here
 * nobody who issues wgmmas waits for anyone but the copies, so the warpgroups drift apart and take
 * turns on the tensor cores. With 256 tokens each weight is dequantized once (the older kernel's
 * 128-token blocks did it twice).
 *
 * A tile is 64 CWG rows x TOKENS tokens (the wgmma's n: 64 to 256 in steps of 32). The grid may be
 * smaller than the tile count (persistent blocks): a block takes tiles blockIdx.x, + gridDim.x, ...
 * and the producer runs on into the next tile's steps while the consumers finish a tile and write
 * it out, so the ring never drains between tiles. The accumulators keep the running scale of
 * apply_wgmma_pipe_kernel (wgmma_common.h: same arithmetic, same flagged-row fallback). DB: two
 * sets of A fragments, so that a warpgroup builds step s + 1's while step s's wgmmas run, where the
 * registers allow. U steps per straight pipeline, drained at its end (ptxas keeps wgmmas
 * asynchronous only within one).
 */
#include "apply_paths.h"
#include "runtime.h"
#include "wgmma_common.h"

namespace radiance {
namespace {

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
        rad_named_barrier_sync<1, kConsumers>();
        if (t == 0) {
#pragma unroll
            for (int hi = 0; hi < 2; hi++)
                if ((bad >> hi) & 1u) list[atomicAdd(count, 1)] = local0 + 8 * hi;
        }
        rad_named_barrier_sync<1, kConsumers>();
        const int nbad = *count;
        if (nbad > 0)
            wgp_exact_rows<GROUP, TOKENS>(list, nbad, rbase, tok0, m, x, k, packed, scales, bias, n, out,
                                          kConsumers / 32);
        rad_named_barrier_sync<1, kConsumers>(); /* the list is read before the next tile */
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

} // namespace

/* The instantiations the benchmark build holds: (tokens, consumer warpgroups, two A-fragment sets);
 * the first seven were the library's tiles of the seventh round (docs/PERF_LOG.md, run 35). */
#define RAD_WS_TILES(X) \
    X(64, 3, true)      \
    X(96, 2, true)      \
    X(128, 3, false)    \
    X(160, 3, false)    \
    X(192, 2, false)    \
    X(224, 2, false)    \
    X(256, 2, true)     \
    X(64, 2, true)      \
    X(128, 2, true)     \
    X(160, 2, false)    \
    X(256, 2, false)

rad_error_t launch_wgmma_ws(const ApplyArgs &a, const ApplyPlan &p)
{
    const bool db = p.a_sets == 2;
#define RAD_WS_CASE(T, C, D)                                                                                    \
    if (p.tokens == T && p.consumer_wgs == C && db == D && a.group >= 128)                                      \
        return a.group == 128 ? launch_ws<128, T, C, D>(a, p) : launch_ws<256, T, C, D>(a, p);
    RAD_WS_TILES(RAD_WS_CASE)
#undef RAD_WS_CASE
    return (rad_error_t)RADIANCE_GPU_EINVAL;
}

} // namespace radiance
