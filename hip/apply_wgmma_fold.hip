/*
 * apply_wgmma_fold.hip - the Hopper path of apply for many tokens (sm_90a): wgmma m64nTk16 with
 * the weights dequantized *with their group scale* into the register A fragments,
 * w = bf16_rne(q * s), and the activations as the shared-memory B operand, fed by a producer
 * warpgroup's TMA copies through a full/empty mbarrier ring (as apply_wgmma_ws_kernel,
 * benchmarks/harness/apply_wgmma_ws.hip).
 *
 * Why (docs/PERF_LOG.md, issue 22): the warp-specialized kernel applies the scale to the fp32
 * accumulators (the running scale), so each warpgroup waits for all its wgmmas at every 128-column
 * step before the next group's products may enter; at 170+ tokens the tensor pipe idled on those
 * drains. Here the scale is inside the operand, nothing touches the accumulators between steps,
 * and a warpgroup keeps one step's wgmmas in flight while it builds the next step's fragments
 * (wgmma.wait_group 1, two fragment sets). Marlin and Machete, the W4A16 kernels vLLM ships,
 * apply group scales the same way. The price is one bf16 rounding of each dequantized weight:
 * docs/FORMAT.md, "Rounding of apply", states it, and tests/test_gpu.py checks it against float64.
 *
 * Because a 16-byte quarter of a row's 128-column step is 32 columns, any group of 32 to 256
 * columns has one scale per quarter: the kernel takes the group as a shift (no per-group
 * instantiation), so groups 32 and 64 run here too. k need only be a multiple of 32 (the TMA
 * tensor maps' row pitch); a last step past k reads zeros from the TMA engine (activations and
 * codes) and, in the tiles of one block per SM, the row's last scale for its quarters past k
 * (elsewhere a zero scale): the activations there are zeros, so the products are too. Where its
 * second half lies wholly past k (k % 128 in 1 .. 64: 576, SmolLM2's hidden size) that half issues
 * no wgmmas.
 *
 * A tile is 64 CWG rows x TOKENS tokens; blocks are persistent (one per SM, or BLOCKS where the
 * planner's fold_tile_two_per_sm finds that the last round of tiles fills better; tiles
 * blockIdx.x, + gridDim.x, ...), and the producer runs on into the next tile's steps while the
 * consumers write a tile out, so heads with few steps per row (k <= 1024) keep the ring full
 * across tiles. Where the last round of tiles would leave half of the blocks or more idle (one
 * block per SM, dispatch.h fold_tail_parts), that round's tiles are cut along k into units that a
 * second launch runs, one block each, a tile's units one cluster (CUT below). The planner
 * (dispatch.h, fold_tile) splits the tokens into equal chunks of at most 256, each rounded up to
 * 16, 32, 48 or a multiple of 32, so no token count wastes more than 31 tokens per chunk.
 *
 * What happens between two tiles idles the tensor pipe (both consumer warpgroups work on the same
 * tile), so it is kept short (docs/PERF_LOG.md, 2026-12-02 third session: about 12000 cycles per
 * tile before, measured with Nsight Compute): the next tile's first scales are requested during
 * the last step, the bias of a thread's two rows is read once per tile, and a tile inside n and m
 * is written with one cvt per token pair and no test per element. Where fold_tile says so, a tile
 * is written through shared memory by the TMA engine instead (TSTORE below), so that the
 * warpgroups go on to the next tile while the copy engine writes this one.
 */
#include "apply_common.h"
#include "apply_paths.h"
#include "apply_plan.h"
#include "ptx_sm90.h"
#include "runtime.h"

namespace radiance {
namespace {

template <int V>
struct FoldSet { /* a compile-time index: which part of a step (its fragment set: the part % 2); the last step */
    static constexpr int value = V;
};

/* BLOCKS: blocks per SM (1, or 2 for the tiles of dispatch.h's fold_tile_two_per_sm and the
 * benchmark build's variants, which halves the shared memory and the registers of a block) */
template <int TOKENS, int CWG, int BLOCKS = 1>
struct FoldCfg {
    static constexpr int rows = 64 * CWG;
    static constexpr int wbytes = rows * 64; /* the weights of one step: rows x 16 words */
    static constexpr int stage_bytes = wbytes + TOKENS * 256;
    /* a block's shared memory: its share of the SM's 228 KB less the 1 KB the SM keeps per block
     * (alone 227 KB) */
    static constexpr int smem_budget = 228 * 1024 / BLOCKS - 1024;
    static constexpr int stages_fit = (smem_budget - 1024 - 16 * 8) / stage_bytes;
    static constexpr int stages = stages_fit > 8 ? 8 : stages_fit;
    static constexpr int smem = 1024 + stages * stage_bytes + 16 * stages;
    static constexpr int threads = 128 * (CWG + 1);
    /* registers per thread at launch: what __launch_bounds__(threads, BLOCKS) leaves (the SM has
     * 65536, given out 8 per thread at a time; ptxas takes all of it in a kernel with setmaxnreg) */
    static constexpr int launch_regs = 65536 / (threads * BLOCKS) / 8 * 8;
    /* and after setmaxnreg. The producer's release goes to its block's pool, from which the
     * consumers' increase is served, and an increase the pool cannot serve waits for ever: so a
     * block's registers after both may not exceed its registers at launch. Alone, 2 consumer
     * warpgroups 2 x 232 + 40 = 3 x 168, 3: 3 x 160 + 24 <= 4 x 128; two blocks per SM, 1 consumer
     * warpgroup 208 + 48 = 2 x 128, 2: 2 x 104 + 32 = 3 x 80 (2 x 112 + 32 hung: docs/PERF_LOG.md,
     * twelfth round, run 56) */
    static constexpr int consumer_regs = BLOCKS == 1 ? (CWG == 2 ? 232 : 160) : (CWG == 2 ? 104 : 208);
    static constexpr int producer_regs = BLOCKS == 1 ? (CWG == 2 ? 40 : 24) : (CWG == 2 ? 32 : 48);
    /* The parts a 128-column step is built and queued in, each with its own fragment set while
     * the part before is in flight: 2 (halves of 4 slices, 16 registers a set), or 4 (quarters of 2
     * slices, 8 registers a set) where the accumulators and two sets of 16 would leave fewer than
     * 32 of consumer_regs for the rest: ptxas then serialized every wgmma, waiting for each before
     * the next (C7512 and a spill, the 96-token tile of two blocks per SM at 104 registers) */
    static constexpr int parts = consumer_regs - TOKENS / 2 - 32 < 32 ? 4 : 2;
    /* fold_load_scales with DIRECT: one block per SM (two blocks' tiles spill with it) */
    static constexpr bool direct_scales = BLOCKS == 1;
    static_assert(BLOCKS == 1 || BLOCKS == 2, "one or two blocks per SM");
    static_assert(BLOCKS == 1 || CWG <= 2, "two blocks of 3 consumer warpgroups have too few registers");
    static_assert(stages >= 2, "a ring of at least two slots");
    static_assert(CWG * consumer_regs + producer_regs <= (CWG + 1) * launch_regs,
                  "setmaxnreg: the consumers' increase served from the producer's release");
    /* the TMA-store epilogue needs every warpgroup's box (64 rows x TOKENS bf16) inside one ring
     * slot, and token blocks in pairs (one stmatrix .x4 holds 16 tokens of 16 rows) */
    static constexpr bool tstore_fits = TOKENS % 16 == 0 && CWG * 128 * TOKENS <= stage_bytes;
};

#if defined(RAD_HAS_WGMMA)
/* The scales of one 128-column step for this thread's rows (hi = 0: row, 1: row + 8), one per
 * 32-column quarter q, as bf16 bits. DIRECT (FoldCfg::direct_scales): every load writes its
 * register and nothing reads it before the fragments are built (a copy or a select right after a
 * load waits for it there: Nsight Compute, 2026-12-06, found such a copy the folding kernel's most
 * stalled instruction at 384 tokens, 6.5 % of the warp samples); for groups of 128 and more only
 * sb[hi][0], the step's one scale, which the part that builds the step's first fragments copies to
 * the other quarters; rows past n read row 0's (rows_of) and groups past k the row's last group:
 * their weights and activations read as zeros from the TMA engine, so any finite scale gives the
 * same products. Without DIRECT (the tiles of two blocks per SM, whose registers spill with it):
 * each quarter's scale, the same value four times for groups of 128 and more, and 0 for rows past
 * n and groups past k. */
template <bool DIRECT>
__device__ __forceinline__ void fold_load_scales(const uint16_t *srow0, const uint16_t *srow1, unsigned rows_ok,
                                                 int64_t ng, int group_shift, int step, uint32_t (&sb)[2][4])
{
    if constexpr (DIRECT) {
        if (group_shift >= 7) {
            int64_t grp = ((int64_t)step * 128) >> group_shift;
            grp = grp < ng ? grp : ng - 1;
            sb[0][0] = srow0[grp];
            sb[1][0] = srow1[grp];
            return;
        }
#pragma unroll
        for (int q = 0; q < 4; q++) {
            int64_t grp = ((int64_t)step * 128 + 32 * q) >> group_shift;
            grp = grp < ng ? grp : ng - 1;
            sb[0][q] = srow0[grp];
            sb[1][q] = srow1[grp];
        }
        return;
    }
    if (group_shift >= 7) {
        const int64_t grp = ((int64_t)step * 128) >> group_shift;
        const bool in = grp < ng;
        sb[0][0] = in && (rows_ok & 1u) ? srow0[grp] : 0u;
        sb[1][0] = in && (rows_ok & 2u) ? srow1[grp] : 0u;
#pragma unroll
        for (int q = 1; q < 4; q++) {
            sb[0][q] = sb[0][0];
            sb[1][q] = sb[1][0];
        }
        return;
    }
#pragma unroll
    for (int q = 0; q < 4; q++) {
        const int64_t grp = ((int64_t)step * 128 + 32 * q) >> group_shift;
        const bool in = grp < ng;
        sb[0][q] = in && (rows_ok & 1u) ? srow0[grp] : 0u;
        sb[1][q] = in && (rows_ok & 2u) ? srow1[grp] : 0u;
    }
}

/* The A fragments of part P of one step in PARTS (FoldCfg::parts; of 2, half P: slices 4 P ..
 * 4 P + 3, words 8 P .. 8 P + 7 of each row, quarters 2 P and 2 P + 1; of 4, quarter P: slices
 * 2 P, 2 P + 1) with the scale folded in: as wg_build_a (wgmma_common.h), thread t takes nibble
 * pair t of every word (columns 2 t, 2 t + 1 of each 8), then each pair (q, exact in bf16) times
 * its quarter's scale in one bf16x2 FMA with a -0 addend: bf16_rne(q * s) per weight. */
template <int P, int PARTS>
__device__ __forceinline__ void fold_build_a(const unsigned char *st, int row, int shift, const uint32_t (&sb)[2][4],
                                             uint32_t (&a)[8 / PARTS][4])
{
    constexpr int QP = 4 / PARTS; /* quarters per part */
#pragma unroll
    for (int qq = 0; qq < QP; qq++)
#pragma unroll
        for (int hi = 0; hi < 2; hi++) {
            const int q = QP * P + qq;
            const uint4 v = *(const uint4 *)(st + (row + 8 * hi) * 64 + q * 16);
            const uint32_t w4[4] = {v.x, v.y, v.z, v.w};
            const uint32_t s2 = sb[hi][q] * 0x10001u; /* the scale in both bf16 lanes */
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int word = 4 * qq + i; /* slice 8 P / PARTS + word / 2, k-half word % 2 */
                a[word >> 1][2 * (word & 1) + hi] = rad_fma_bf16x2(dequant_pair(w4[i], shift), s2, 0x80008000u);
            }
        }
}

/* Pins the accumulators to their registers across the code between wgmma groups, so that the
 * compiler moves none of them while a group is in flight (ptxas would then serialize, C7514). */
template <int NA>
__device__ __forceinline__ void fold_pin(float (&acc)[NA])
{
#pragma unroll
    for (int r = 0; r < NA; r++) rad_order_before(acc[r]);
}
#endif

/* Template parameters: TOKENS, the wgmma's n (16 to 256 with an accumulator shape in ptx_sm90.h);
 * CWG, consumer warpgroups of 64 rows. Registers decide the pairs (nvcc 13.0, sm_90a, -Xptxas -v,
 * no spills): 3 consumers (160 registers each) up to 160 tokens, 2 (232) up to 256. TSTORE (omap
 * the output's tensor map; FoldCfg::tstore_fits): after a tile's last wgmmas every consumer meets
 * at a named barrier, then each warpgroup writes its 64 rows x TOKENS tokens, converted to bf16,
 * into the slot of the tile's last step by stmatrix, in the TMA engine's 128-byte swizzle, and one
 * of its threads hands them to a bulk tensor store, which writes only what lies inside n and m;
 * the slot is released once the store has read it (where k <= kFoldLateReleaseMaxK, after the next
 * tile's first wgmmas are queued; dispatch.h). The warpgroup goes on to its next tile without
 * waiting for the global writes. Which tiles take it: fold_tile (dispatch.h), where it pays.
 * (Cluster pairs sharing each activation box by TMA multicast lost: docs/PERF_LOG.md, runs 53 and 86.) */
template <int TOKENS, int CWG, bool TSTORE, int BLOCKS, bool CUT>
__device__ __forceinline__ void fold_body(const uint16_t *__restrict__ x, int64_t m, int64_t k,
                                          const uint16_t *__restrict__ scales, const uint16_t *__restrict__ bias,
                                          int64_t n, uint16_t *__restrict__ out, int group_shift, int64_t token_chunks,
                                          int64_t tiles, const rad_tma_desc_t *xmap, const rad_tma_desc_t *wmap,
                                          const rad_tma_desc_t *omap, int64_t tail0, int tail_parts)
{
#if defined(RAD_HAS_WGMMA)
    using Cfg = FoldCfg<TOKENS, CWG, BLOCKS>;
    static_assert(!TSTORE || Cfg::tstore_fits, "the TMA-store epilogue: every box inside one slot, token blocks in pairs");
    constexpr int S = Cfg::stages;
    constexpr int NA = TOKENS / 2;
    constexpr int kRows = Cfg::rows;
    constexpr int kConsumers = 128 * CWG; /* threads 0 .. 128 CWG - 1; the last warpgroup: the producer */
    extern __shared__ __align__(16) unsigned char smem_raw[];
    unsigned char *smem = smem_raw + ((1024u - ((unsigned)__cvta_generic_to_shared(smem_raw) & 1023u)) & 1023u);
    uint64_t *fullbar = (uint64_t *)(smem + S * Cfg::stage_bytes);
    uint64_t *emptybar = fullbar + S;
    const int tid = threadIdx.x;
    const int64_t ng = k >> group_shift;
    const int nsteps = (int)((k + 127) / 128);
    /* the second half of the last step lies past k (k % 128 in 1 .. 64): its wgmmas are skipped */
    const bool last_half_dead = (int64_t)(nsteps - 1) * 128 + 64 >= k;
    /* CUT: the kernel of the units of a last round cut along k (dispatch.h, fold_tail_parts;
     * launch_fold runs the whole rounds before it in the kernel without CUT, whose `tiles` is then
     * tail0): one block per unit, item tail0 + blockIdx.x of `tiles` (= tail0 + units), item tail0 +
     * u being unit u % tail_parts of tile tail0 + u / tail_parts, its steps [s0, s1); the units of a
     * tile are one cluster of tail_parts blocks, ranked as their parts. Without CUT every item is a
     * whole tile and all of this folds away. */
    struct Unit {
        int64_t tile;
        int s0, s1, part;
    };
    auto unit_of = [&](int64_t i) __attribute__((always_inline)) { /* i >= tail0: fewer units than 2^31 */
        const int u = (int)(i - tail0);
        const int part = u % tail_parts;
        return Unit{tail0 + u / tail_parts, nsteps * part / tail_parts, nsteps * (part + 1) / tail_parts, part};
    };

    if (tid < S) {
        rad_mbarrier_init(fullbar + tid, 1);
        rad_mbarrier_init(emptybar + tid, kConsumers / 32); /* one arrival per consumer warp */
    }
    rad_fence_mbarrier_init();
    __syncthreads();
    /* a slot's release by one consumer warp (lane 0), of `warps` warps */
    auto release = [&](int slot, unsigned warps) __attribute__((always_inline)) {
        if (warps == 1) rad_mbarrier_arrive(emptybar + slot);
        else rad_mbarrier_arrive_count(emptybar + slot, warps);
    };
    /* TSTORE: the slot a warpgroup's tile was written out from, released for its 4 warps once the
     * TMA engine has read it (one thread of the warpgroup) */
    auto release_stored = [&](int slot) __attribute__((always_inline)) {
        rad_bulk_wait_read_all();
        release(slot, 4);
    };

    if (tid >= kConsumers) { /* the producer warpgroup: one thread issues every step's boxes */
        rad_setmaxnreg_dec<Cfg::producer_regs>();
        if (tid == kConsumers) {
            int64_t it = 0; /* steps issued by this block, over all its tiles */
            for (int64_t i = (CUT ? tail0 : 0) + blockIdx.x; i < tiles; i += gridDim.x) {
                int64_t tile = i;
                int s0 = 0, s1 = nsteps;
                if constexpr (CUT) {
                    const Unit u = unit_of(i);
                    tile = u.tile, s0 = u.s0, s1 = u.s1;
                }
                const int rbase = (int)(tile / token_chunks * kRows);
                const int tok0 = (int)(tile % token_chunks * TOKENS);
                for (int s = s0; s < s1; s++, it++) {
                    const int slot = (int)(it % S);
                    if (it >= S) rad_mbarrier_wait(emptybar + slot, (unsigned)(it / S - 1) & 1u);
                    unsigned char *st = smem + slot * Cfg::stage_bytes;
                    uint64_t *bar = fullbar + slot;
                    /* boxes past k or n count their full bytes (the engine writes zeros there) */
                    rad_mbarrier_arrive_expect_tx(bar, Cfg::stage_bytes);
                    rad_tma_load_2d(st, wmap, s * kStepWords, rbase, bar);
                    rad_tma_load_2d(st + Cfg::wbytes, xmap, s * 128, tok0, bar);
                    rad_tma_load_2d(st + Cfg::wbytes + TOKENS * 128, xmap, s * 128 + 64, tok0, bar);
                }
            }
        }
        if constexpr (CUT) { /* the consumers' two cluster barriers below: every thread of the block */
            __syncwarp();
            rad_cluster_sync();
            rad_cluster_sync();
        }
        return;
    }
    rad_setmaxnreg_inc<Cfg::consumer_regs>();

    const int wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31;
    const int g = lane >> 2, t = lane & 3;
    const int shift = 4 * t;
    const int local0 = wg * 64 + warp * 16 + g; /* rows local0 (hi = 0) and local0 + 8 (hi = 1) */
    /* this thread's two rows of a tile: whether each is below n, and where its scales start */
    struct Rows {
        int64_t row0;
        unsigned ok;
        const uint16_t *s0, *s1;
    };
    auto rbase_of = [&](int64_t tile) __attribute__((always_inline)) { return tile / token_chunks * kRows; };
    auto rows_of = [&](int64_t tile) __attribute__((always_inline)) {
        Rows r;
        r.row0 = rbase_of(tile) + local0;
        r.ok = (r.row0 < n ? 1u : 0u) | (r.row0 + 8 < n ? 2u : 0u);
        r.s0 = scales + (r.row0 < n ? r.row0 : 0) * ng;
        r.s1 = scales + (r.row0 + 8 < n ? r.row0 + 8 : 0) * ng;
        return r;
    };
    /* the scales of a tile's first step are requested during the last step of the tile before
     * (the loads' latency then hides behind that step's wgmmas and the epilogue) */
    uint32_t sb[2][4];
    constexpr bool kDirect = Cfg::direct_scales;
    const bool one_scale = group_shift >= 7; /* groups of 128 or more: one scale a step */
    Rows cur = rows_of(CUT ? 0 : blockIdx.x); /* CUT: loaded for the unit below */
    if (!CUT) fold_load_scales<kDirect>(cur.s0, cur.s1, cur.ok, ng, group_shift, 0, sb);
    /* TSTORE: the ring slot the last tile was written out from, until released (-1: none), where
     * that waits for the next tile's first wgmmas (dispatch.h, kFoldLateReleaseMaxK) */
    const bool late_release = k <= kFoldLateReleaseMaxK;
    int stored_slot = -1;
    /* the ring position of the tile's first step: slot base0, phase parity phase0 */
    int base0 = 0;
    unsigned phase0 = 0;
    /* (a unit leaves the ring's position wrong after it: no item follows it in its block) */
    for (int64_t i = (CUT ? tail0 : 0) + blockIdx.x; i < tiles;
         i += gridDim.x, phase0 ^= (unsigned)((base0 + nsteps) / S) & 1u, base0 = (base0 + nsteps) % S) {
        int64_t tile = i;
        int step0 = 0, ns = nsteps, upart = -1; /* a unit's first step, steps, and index in its tile */
        if constexpr (CUT) { /* its rows and first scales */
            const Unit u = unit_of(i);
            tile = u.tile, step0 = u.s0, ns = u.s1 - u.s0, upart = u.part;
            cur = rows_of(tile);
            fold_load_scales<kDirect>(cur.s0, cur.s1, cur.ok, ng, group_shift, step0, sb);
        }
        const int64_t tok0 = tile % token_chunks * TOKENS;
        const int64_t row0 = cur.row0;
        const unsigned rows_ok = cur.ok;
        const uint16_t *srow0 = cur.s0, *srow1 = cur.s1;
        const Rows next = rows_of(tile + gridDim.x < (CUT ? tail0 : tiles) ? tile + gridDim.x : tile);
        /* the bias of the two rows, -0 where there is none (x + -0 = x for every x, -0 included) */
        const float bias0 = bias != NULL && (rows_ok & 1u) ? rad_bf16_to_float(bias[row0]) : -0.0f;
        const float bias1 = bias != NULL && (rows_ok & 2u) ? rad_bf16_to_float(bias[row0 + 8]) : -0.0f;
        float acc[NA];
#pragma unroll
        for (int r = 0; r < NA; r++) acc[r] = 0.0f;
        constexpr int PARTS = Cfg::parts, SP = 8 / PARTS; /* parts of a step, slices per part */
        uint32_t afr[2][SP][4]; /* the fragments of two parts in turn (SP slices each) */

        /* part P of step s (LAST: of the last step): (P = 0) its slot landed; its fragments built
         * (after the last part, the scales of step s + 1 requested into the same registers); SP
         * wgmmas queued; then the group before it waited for, so that one group stays in flight
         * while the next part is built, and (P = 0) the slot of step s - 1, whose last wgmmas that
         * was, released by each warp */
        auto part = [&](int s, auto p, auto last) __attribute__((always_inline)) {
            constexpr int P = decltype(p)::value;
            constexpr bool LAST = decltype(last)::value == 1;
            constexpr bool FINAL = LAST && P == PARTS - 1; /* the tile's last part */
            const int pos = base0 + s;
            const unsigned char *st = smem + (pos % S) * Cfg::stage_bytes;
            if (P == 0) rad_mbarrier_wait(fullbar + pos % S, phase0 ^ ((unsigned)(pos / S) & 1u));
            const bool live = !(LAST && 2 * P >= PARTS && last_half_dead && step0 + ns == nsteps);
            if (kDirect && P == 0 && one_scale) { /* the step's one scale, for every quarter */
#pragma unroll
                for (int q = 1; q < 4; q++) sb[0][q] = sb[0][0], sb[1][q] = sb[1][0];
            }
            if (live) fold_build_a<P, PARTS>(st, local0, shift, sb, afr[P & 1]);
            if (P == PARTS - 1 && s + 1 < ns)
                fold_load_scales<kDirect>(srow0, srow1, rows_ok, ng, group_shift, step0 + s + 1, sb);
            if (FINAL) fold_load_scales<kDirect>(next.s0, next.s1, next.ok, ng, group_shift, 0, sb);
            fold_pin(acc);
            if (live) {
                rad_wgmma_fence();
                const uint64_t bdesc = rad_wgmma_desc_sw128(st + Cfg::wbytes);
#pragma unroll
                for (int j = 0; j < SP; j++) {
                    const int sl = SP * P + j; /* box sl / 4, 32 bytes per slice inside its swizzled rows */
                    rad_wgmma_rs(acc, afr[P & 1][j],
                                 bdesc + (uint64_t)(((sl >> 2) * TOKENS * 128 + (sl & 3) * 32) >> 4), 1);
                }
                rad_wgmma_commit();
            }
            /* TSTORE with late_release: the slot the tile before was written out from, released
             * once the engine has read it, which this tile's first wgmmas now overlap (thread 0 of
             * each warpgroup) */
            if (TSTORE && P == 0 && s == 0 && stored_slot >= 0) {
                if ((tid & 127) == 0) release_stored(stored_slot);
                stored_slot = -1;
            }
            if (FINAL) rad_wgmma_wait<0>();
            else rad_wgmma_wait<1>();
            fold_pin(acc);
            if (P == 0 && s > 0 && lane == 0) release((pos - 1) % S, 1);
        };
        auto step = [&](int s, auto last) __attribute__((always_inline)) {
            part(s, FoldSet<0>(), last);
            part(s, FoldSet<1>(), last);
            if constexpr (PARTS == 4) {
                part(s, FoldSet<2>(), last);
                part(s, FoldSet<3>(), last);
            }
        };
        /* the last part waits for every group: the compiler may copy the accumulators to other
         * registers once the loop is left (seen in the SASS), which must not happen while a group
         * still writes them */
        for (int s = 0; s + 1 < ns; s++) step(s, FoldSet<0>());
        step(ns - 1, FoldSet<1>());
        if ((!TSTORE || CUT) && lane == 0) release((base0 + ns - 1) % S, 1);
        cur = next;

        /* a unit: once every warpgroup's wgmmas have read their boxes, its fp32 sums into its own
         * ring as the tile's tokens x rows (token c at float c kPitch: 4 floats more than the rows,
         * so that no two lanes of a store share a bank); after the cluster's barrier, unit p adds
         * tokens [TOKENS p / parts, TOKENS (p + 1) / parts) of every unit of the tile, 4 rows at a
         * time, in the order of their steps, and writes them; a second barrier keeps each unit's
         * sums until the others have read them */
        if constexpr (CUT) {
            constexpr int kPitch = kRows + 4, kQuads = kRows / 4;
            static_assert(TOKENS * kPitch * 4 <= S * Cfg::stage_bytes, "a unit's fp32 sums fit in its ring");
            float *sums = (float *)smem;
            rad_named_barrier_sync<1, kConsumers>();
#pragma unroll
            for (int r = 0; r < NA; r++) /* acc[4 j + 2 hi + e]: token 8 j + 2 t + e, row local0 + 8 hi */
                sums[(8 * (r >> 2) + 2 * t + (r & 1)) * kPitch + local0 + 8 * ((r >> 1) & 1)] = acc[r];
            rad_cluster_sync();
            const unsigned base = (unsigned)__cvta_generic_to_shared(smem);
            const int c_end = TOKENS * (upart + 1) / tail_parts * kQuads;
            for (int c = TOKENS * upart / tail_parts * kQuads + tid; c < c_end; c += kConsumers) {
                const int tk = c / kQuads, q = c - tk * kQuads;
                const unsigned at = base + 4u * (unsigned)(tk * kPitch + 4 * q);
                float4 sum = rad_cluster_load_f32x4(rad_cluster_map(at, 0));
                for (int v = 1; v < tail_parts; v++) {
                    const float4 o = rad_cluster_load_f32x4(rad_cluster_map(at, (unsigned)v));
                    sum.x += o.x, sum.y += o.y, sum.z += o.z, sum.w += o.w;
                }
                const int64_t tok = tok0 + tk, row = rbase_of(tile) + 4 * q;
                const float v4[4] = {sum.x, sum.y, sum.z, sum.w};
#pragma unroll
                for (int i = 0; i < 4; i++)
                    if (tok < m && row + i < n)
                        out[tok * n + row + i] =
                            rad_float_to_bf16_rne(v4[i] + (bias != NULL ? rad_bf16_to_float(bias[row + i]) : -0.0f));
            }
            rad_cluster_sync();
        }

        if constexpr (TSTORE && !CUT) {
            /* the last step's slot (both warpgroups' last wgmmas read it: they meet first) holds
             * each warpgroup's 64 rows x TOKENS tokens as the output's box: token c of the box at
             * 128 c bytes, its 16-byte chunk of 8 rows q at (q ^ c % 8) x 16 (the 128-byte
             * swizzle; the slot is 1024-byte aligned). stmatrix .trans: lane 8 i + c of an x4 gives
             * the address of token c of matrix i = (token block j + i / 2, rows 8 (i % 2)) */
            const int last_slot = (base0 + nsteps - 1) % S;
            unsigned char *stage = smem + last_slot * Cfg::stage_bytes + wg * (128 * TOKENS);
            rad_named_barrier_sync<1, kConsumers>();
            const unsigned sbase = (unsigned)__cvta_generic_to_shared(stage);
            const int mi = lane >> 3, c = lane & 7, q = 2 * warp + (mi & 1);
#pragma unroll
            for (int j = 0; j < TOKENS / 8; j += 2) {
                const uint32_t r0 = rad_cvt_rn_bf16x2(acc[4 * j + 1] + bias0, acc[4 * j] + bias0);
                const uint32_t r1 = rad_cvt_rn_bf16x2(acc[4 * j + 3] + bias1, acc[4 * j + 2] + bias1);
                const uint32_t r2 = rad_cvt_rn_bf16x2(acc[4 * j + 5] + bias0, acc[4 * j + 4] + bias0);
                const uint32_t r3 = rad_cvt_rn_bf16x2(acc[4 * j + 7] + bias1, acc[4 * j + 6] + bias1);
                const int tok = 8 * (j + (mi >> 1)) + c;
                rad_stmatrix_x4_trans(sbase + (unsigned)(tok * 128 + ((q ^ c) << 4)), r0, r1, r2, r3);
            }
            rad_fence_proxy_async_smem(); /* the stores above, visible to the TMA engine */
            rad_named_barrier_sync_id(2 + wg, 128);
            if ((tid & 127) == 0) {
                rad_tma_store_2d(omap, stage, (int)(rbase_of(tile) + 64 * wg), (int)tok0);
                rad_bulk_commit();
                if (!late_release) release_stored(last_slot);
            }
            if (late_release) stored_slot = last_slot; /* released in the next tile's first half */
            continue;
        }

        /* acc[4 j + 2 hi + e]: row row0 + 8 hi, token tok0 + 8 j + 2 t + e. A tile inside n and
         * m (all but the last row block and token chunk) stores without a test, each pair of
         * tokens converted by one cvt (round to nearest even, as rad_float_to_bf16_rne; a NaN
         * comes out as the canonical quiet NaN); a unit wrote its share above */
        if (CUT) {
        } else if (rbase_of(tile) + kRows <= n && tok0 + TOKENS <= m) {
            uint16_t *p = out + (tok0 + 2 * t) * n + row0;
#pragma unroll
            for (int j = 0; j < TOKENS / 8; j++, p += 8 * n) {
                const uint32_t r0 = rad_cvt_rn_bf16x2(acc[4 * j + 1] + bias0, acc[4 * j] + bias0);
                const uint32_t r1 = rad_cvt_rn_bf16x2(acc[4 * j + 3] + bias1, acc[4 * j + 2] + bias1);
                p[0] = (uint16_t)r0;
                p[n] = (uint16_t)(r0 >> 16);
                p[8] = (uint16_t)r1;
                p[n + 8] = (uint16_t)(r1 >> 16);
            }
        } else {
#pragma unroll
            for (int r = 0; r < NA; r++) {
                const int hi = (r >> 1) & 1;
                const int64_t row = row0 + 8 * hi;
                const int64_t tok = tok0 + 8 * (r >> 2) + 2 * t + (r & 1);
                if (row < n && tok < m) out[tok * n + row] = rad_float_to_bf16_rne(acc[r] + (hi ? bias1 : bias0));
            }
        }
    }
    if (TSTORE && (tid & 127) == 0) rad_bulk_wait_all(); /* the last tile's stores done */
#endif
}

template <int TOKENS, int CWG, bool TSTORE, int BLOCKS, bool CUT>
__global__ void __launch_bounds__(128 * (CWG + 1), BLOCKS)
apply_wgmma_fold_kernel(const uint16_t *__restrict__ x, int64_t m, int64_t k, const uint16_t *__restrict__ scales,
                        const uint16_t *__restrict__ bias, int64_t n, uint16_t *__restrict__ out, int group_shift,
                        int64_t token_chunks, int64_t tiles, const RAD_GRID_CONSTANT rad_tma_desc_t xmap,
                        const RAD_GRID_CONSTANT rad_tma_desc_t wmap, const RAD_GRID_CONSTANT rad_tma_desc_t omap,
                        int64_t tail0, int tail_parts)
{
    fold_body<TOKENS, CWG, TSTORE, BLOCKS, CUT>(x, m, k, scales, bias, n, out, group_shift, token_chunks, tiles, &xmap,
                                                &wmap, &omap, tail0, tail_parts);
}

using FoldKernel = void (*)(const uint16_t *, int64_t, int64_t, const uint16_t *, const uint16_t *, int64_t,
                            uint16_t *, int, int64_t, int64_t, const rad_tma_desc_t, const rad_tma_desc_t,
                            const rad_tma_desc_t, int64_t, int);

/* Which kernels of a tile this build holds: with the TMA store where fold_tile (dispatch.h) may take
 * it (every tile of two blocks per SM); with the stores from the registers where
 * fold_tile_without_tstore may (one block per SM; not 128 and 160 tokens with 2 consumer
 * warpgroups, which fold_tile takes only written by TMA). The benchmark build holds both wherever
 * they fit, for its variants, and more tiles of two blocks per SM (RAD_FOLD_TILES_TWO_PER_SM). */
template <int TOKENS, int CWG, int BLOCKS>
constexpr bool fold_tstore_built()
{
#if defined(RADIANCE_KERNEL_VARIANTS)
    return FoldCfg<TOKENS, CWG, BLOCKS>::tstore_fits;
#else
    return FoldCfg<TOKENS, CWG, BLOCKS>::tstore_fits &&
           (BLOCKS > 1 || fold_tstore_taken(TOKENS, CWG, 32)); /* the smallest k */
#endif
}

template <int TOKENS, int CWG, int BLOCKS>
constexpr bool fold_plain_built()
{
#if defined(RADIANCE_KERNEL_VARIANTS)
    return true;
#else
    return BLOCKS == 1 && CWG == fold_register_store_wgs(TOKENS);
#endif
}

/* The kernel of a tile, written by TMA or not: of whole tiles, or (cut, one block per SM only) of
 * the units of a last round cut along k, launched after the other (launch_fold); NULL where this
 * build does not hold it. The units in a kernel of their own, so that the other's machine code is
 * the same as without them (docs/PERF_LOG.md, runs 75-78: with the units' code in it, or its loop
 * body shared as a lambda, tiles that never cut ran up to 7 % slower or faster, by tile). */
template <int TOKENS, int CWG, int BLOCKS>
FoldKernel fold_kernel(bool tstore, bool cut = false)
{
    if constexpr (BLOCKS == 1) {
        if constexpr (fold_tstore_built<TOKENS, CWG, BLOCKS>())
            if (tstore && cut) return apply_wgmma_fold_kernel<TOKENS, CWG, true, BLOCKS, true>;
        if constexpr (fold_plain_built<TOKENS, CWG, BLOCKS>())
            if (!tstore && cut) return apply_wgmma_fold_kernel<TOKENS, CWG, false, BLOCKS, true>;
    }
    if (cut) return NULL;
    if constexpr (fold_tstore_built<TOKENS, CWG, BLOCKS>())
        if (tstore) return apply_wgmma_fold_kernel<TOKENS, CWG, true, BLOCKS, false>;
    if constexpr (fold_plain_built<TOKENS, CWG, BLOCKS>())
        if (!tstore) return apply_wgmma_fold_kernel<TOKENS, CWG, false, BLOCKS, false>;
    return NULL;
}

/* The blocks per SM a tile of BLOCKS > 1 runs at (its kernel written by TMA or not): the SM's
 * on-chip memory all asked for shared memory (a hint to the driver), then as many as the occupancy
 * query grants, at most BLOCKS and at least 1; 0 where the runtime refuses the attributes or the
 * query. Looked up once per device (per_device_cached), not at every launch. */
template <int TOKENS, int CWG, int BLOCKS, bool TSTORE>
int fold_blocks_per_sm(void)
{
    using Cfg = FoldCfg<TOKENS, CWG, BLOCKS>;
    const FoldKernel kernel = fold_kernel<TOKENS, CWG, BLOCKS>(TSTORE);
    int fit = 0;
    if (kernel == NULL || rad_func_set_max_dynamic_smem(kernel, Cfg::smem) != RAD_SUCCESS ||
        rad_func_prefer_max_smem(kernel) != RAD_SUCCESS ||
        rad_occupancy_blocks_per_sm(&fit, kernel, Cfg::threads, Cfg::smem) != RAD_SUCCESS)
        return 0;
    return fit < 1 ? 1 : fit > BLOCKS ? BLOCKS : fit;
}

/* How many clusters of `parts` blocks of a tile's units' kernel (written by TMA or not) the current
 * device runs at once, 0 where the runtime cannot say; looked up once per device and parts
 * (per_device_cached), after launch_fold has set the kernel's shared memory. */
template <int TOKENS, int CWG, int BLOCKS, bool TSTORE>
int fold_units_at_once(int parts)
{
    using Cfg = FoldCfg<TOKENS, CWG, BLOCKS>;
    const FoldKernel units = fold_kernel<TOKENS, CWG, BLOCKS>(TSTORE, true);
    return units == NULL ? 0 : rad_max_active_clusters((const void *)units, Cfg::threads, Cfg::smem, (unsigned)parts);
}

template <int TOKENS, int CWG, int BLOCKS>
rad_error_t launch_fold(const ApplyArgs &a, const ApplyPlan &p)
{
    using Cfg = FoldCfg<TOKENS, CWG, BLOCKS>;
    const int64_t row_blocks = (a.n + Cfg::rows - 1) / Cfg::rows;
    const int64_t chunks = (a.m + TOKENS - 1) / TOKENS;
    const int64_t tiles = row_blocks * chunks;
    if (tiles > 0x7fffffffLL || a.n > 0x7fffffffLL || a.m > 0x7fffffffLL) return (rad_error_t)RADIANCE_GPU_EINVAL;
    if (fold_kernel<TOKENS, CWG, BLOCKS>(p.fold_tstore) == NULL) return (rad_error_t)RADIANCE_GPU_EINVAL;
    int group_shift = 0;
    while ((1 << group_shift) < a.group) group_shift++;
    /* persistent: BLOCKS blocks per SM (the shared memory allows no more), each looping over tiles;
     * more than one only as fold_blocks_per_sm finds */
    int64_t per_sm = 1;
    if constexpr (BLOCKS > 1) {
        per_sm = p.fold_tstore ? per_device_cached<fold_blocks_per_sm<TOKENS, CWG, BLOCKS, true>>()
                               : per_device_cached<fold_blocks_per_sm<TOKENS, CWG, BLOCKS, false>>();
        if (per_sm == 0) return (rad_error_t)RADIANCE_GPU_EINVAL;
    }
    const int64_t slots = per_sm * per_device_cached<rad_sm_count>();
    const int64_t blocks = slots < tiles ? slots : tiles;
    /* a last round that would leave half of the blocks or more idle, with one block per SM: the
     * whole rounds as one launch, then its tiles cut along k as a second launch of one block per
     * unit (the kernel with CUT), each tile's units one cluster, in fewer parts where the device
     * cannot run all the tiles' clusters at once (H100: 22 clusters of 5 such blocks, 15 of 8);
     * where the runtime refuses the clusters, that launch runs each tile whole (one unit, clusters
     * of one block) */
    int parts = BLOCKS == 1 ? fold_tail_parts(tiles, slots, a.k) : 1;
    const int64_t rest = tiles % slots;
    const FoldKernel units = parts > 1 ? fold_kernel<TOKENS, CWG, BLOCKS>(p.fold_tstore, true) : NULL;
    if (parts > 1 && (units == NULL || rad_func_set_max_dynamic_smem(units, Cfg::smem) != RAD_SUCCESS)) {
        (void)rad_get_last_error();
        parts = 1;
    }
    const int refuse = test_refuse_flags(); /* one reading for both test flags of the cut */
    const bool of_two = (refuse & RADIANCE_GPU_TEST_CLUSTERS_OF_TWO) != 0;
    const auto at_once = [&p, of_two](int q) {
        constexpr int keys = kFoldTailMaxParts + 1;
        if (of_two && q > 2) return 0;
        return p.fold_tstore ? per_device_cached<fold_units_at_once<TOKENS, CWG, BLOCKS, true>, keys>(q)
                             : per_device_cached<fold_units_at_once<TOKENS, CWG, BLOCKS, false>, keys>(q);
    };
    while (parts > 1 && at_once(parts) < rest) parts--;
    const int64_t tail0 = parts > 1 ? tiles - rest : tiles; /* the tiles of the first launch */
    const FoldKernel kernel = fold_kernel<TOKENS, CWG, BLOCKS>(p.fold_tstore);
    rad_error_t err = rad_func_set_max_dynamic_smem(kernel, Cfg::smem);
    if (err == RAD_SUCCESS) {
        kernel<<<(unsigned)blocks, Cfg::threads, Cfg::smem, a.stream>>>(a.x, a.m, a.k, a.scales, a.bias, a.n, a.out,
                                                                        group_shift, chunks, tail0, p.xmap, p.wmap,
                                                                        p.omap, tail0, 1);
        err = rad_get_last_error();
    }
    if (err != RAD_SUCCESS || parts == 1) return err;
    const bool refused = (refuse & RADIANCE_GPU_TEST_REFUSE_CLUSTERS) != 0;
    for (int cluster : {parts, 1}) {
        if (cluster > 1 && refused) continue;
        const uint16_t *x = a.x, *scales = a.scales, *bias = a.bias;
        int64_t m = a.m, k = a.k, n = a.n, units_end = tail0 + rest * cluster, first = tail0;
        uint16_t *out = a.out;
        int shift = group_shift, tail_parts = cluster;
        int64_t token_chunks = chunks;
        rad_tma_desc_t xmap = p.xmap, wmap = p.wmap, omap = p.omap;
        void *args[] = {&x, &m, &k, &scales, &bias, &n, &out, &shift, &token_chunks, &units_end,
                        &xmap, &wmap, &omap, &first, &tail_parts};
        err = rad_launch_clusters((const void *)units, (unsigned)(rest * cluster), Cfg::threads, Cfg::smem,
                                  (unsigned)cluster, a.stream, args);
        if (err == RAD_SUCCESS) break;
        (void)rad_get_last_error();
    }
    return err;
}

} // namespace

/* The tiles fold_tile and fold_tile_two_per_sm (dispatch.h) name: (tokens, consumer warpgroups,
 * blocks per SM). */
#define RAD_FOLD_TILES(X) \
    X(16, 3, 1)           \
    X(32, 3, 1)           \
    X(48, 3, 1)           \
    X(64, 3, 1)           \
    X(96, 3, 1)           \
    X(128, 3, 1)          \
    X(160, 3, 1)          \
    X(128, 2, 1)          \
    X(160, 2, 1)          \
    X(192, 2, 1)          \
    X(224, 2, 1)          \
    X(256, 2, 1)          \
    X(48, 2, 2)           \
    X(64, 2, 2)           \
    X(96, 2, 2)           \
    X(128, 1, 2)

/* The benchmark build's other tiles of two blocks per SM (docs/PERF_LOG.md, thirteenth round: 1
 * consumer warpgroup at 64 and 96 tokens, slower than 2 on every head measured in run 56; 160 and
 * 192 tokens with 1, for more than 256 tokens, lost 0-80 % in run 58 and were deleted) */
#define RAD_FOLD_TILES_TWO_PER_SM(X) \
    X(64, 1, 2)                      \
    X(96, 1, 2)

rad_error_t launch_wgmma_fold(const ApplyArgs &a, const ApplyPlan &p)
{
#define RAD_FOLD_CASE(T, C, B) \
    if (p.tokens == T && p.consumer_wgs == C && p.fold_blocks_per_sm == B) return launch_fold<T, C, B>(a, p);
    RAD_FOLD_TILES(RAD_FOLD_CASE)
#if defined(RADIANCE_KERNEL_VARIANTS)
    RAD_FOLD_TILES_TWO_PER_SM(RAD_FOLD_CASE)
#endif
#undef RAD_FOLD_CASE
    return (rad_error_t)RADIANCE_GPU_EINVAL;
}

} // namespace radiance
