/*
 * apply_stream.hip - the stream paths of apply (NVIDIA sm_80+, G >= 128, up to 8 tokens; which
 * tokens take which: docs/DISPATCH.md): mma.sync m16n8k16 as in apply_mma.hip,
 * with the packed words streamed through a per-warp cp.async ring in shared memory.
 *
 * A warp owns 16 * ROW_TILES rows and 8 * TOKEN_TILES tokens. The packed words travel through a
 * per-warp ring of RING_SLOTS super-steps in shared memory, a super-step being SUPER_STEPS steps
 * (64 SUPER_STEPS bytes of each row), copied by cp.async with 4 SUPER_STEPS lanes per row so that
 * each copy instruction reads 64 SUPER_STEPS contiguous bytes of a row. Reading 64 bytes of 16
 * rows per step holds the H200 to about 3.3 TB/s, 128 bytes to 4.0, 256 bytes and more to the full
 * 4.3-4.4 TB/s (benchmarks/harness/read_probe.cu). In the ring, 16-byte chunk c of row r sits at
 * c ^ 4 (r & 1), so that the 16-byte reads of a step (rows g and g + 1 in one phase) fall on
 * distinct banks. Lanes read what other lanes copied: __syncwarp after the cp.async wait. The
 * activations are read from global memory (through L1) one step ahead.
 *
 * Template parameters:
 *   GROUP        columns per scale (128 or 256: one scale per row and step)
 *   ROW_TILES    16-row m-tiles per warp
 *   TOKEN_TILES  8-token n-tiles per warp
 *   SUPER_STEPS  steps (128 columns each) per ring slot: the bytes of a row per visit / 64
 *   RING_SLOTS   ring slots per warp (copies in flight: RING_SLOTS - 1 super-steps)
 *   X_MODE       what lanes of tokens past m load (StreamX, apply_paths.h)
 *
 * apply_stream_xs_kernel (path kStreamSharedX) runs the same warp body with the activations in
 * shared memory, one block per SM; the planner takes it where they fit (plan_stream_shared_x, dispatch.h).
 * apply_stream_split_k_kernel (plan_stream_split_k) runs it for 9-16 tokens with k split over a
 * cluster of two such blocks. stream_warp_rows' WHOLE (k % 512 == 0: no step tested against k
 * inside a super-step) serves the kernels of 1-8 tokens where k allows it, and the split-k halves;
 * its TAIL (only the last super-step's steps tested) the kernels of 1-8 tokens at any other k:
 * docs/PERF_LOG.md, "9-16 tokens by split k, and the M = 1 diet", its seventh and fifteenth
 * rounds. The kernels that test every step are the benchmark build's only. Both persistent kernels
 * chain each warp's ring from one 16-row unit into the next (stream_warp_rows' UNITS, sixteenth
 * round).
 */
#include "apply_common.h"
#include "apply_paths.h"
#include "ptx_sm80.h"
#include "ptx_sm90.h"
#include "runtime.h"

namespace radiance {
namespace {

/* one ring slot: a super-step of a warp's rows, and with SRING their scales after the weights (SWIN:
 * in aligned windows of twice the bytes; dispatch.h's stream_slot_bytes, which the planner sizes
 * shared memory by) */
template <int ROW_TILES, int SUPER_STEPS, int GROUP = 128, bool SRING = false, bool SWIN = false>
struct StreamSmem {
    static constexpr int scale_bytes = SRING ? stream_row_scale_bytes(GROUP, SUPER_STEPS, SWIN) : 0; /* a row's */
    static constexpr int weights = 16 * ROW_TILES * 64 * SUPER_STEPS;
    static constexpr int slot = (int)stream_slot_bytes(ROW_TILES, SUPER_STEPS, GROUP, SRING, SWIN);
    static_assert(slot == weights + 16 * ROW_TILES * scale_bytes && slot % 16 == 0, "16-byte copies into each slot");
};

/* The 16 ROW_TILES rows from row0 (those below n) of a stream warp, for the tokens tok0 .. tok0 + 8
 * TOKEN_TILES - 1 (those below m), through this warp's ring; done(row0, total) gets the unit's fp32
 * sums (StoreUnit writes them to the output). UNITS (the persistent kernels): then the units row0 +
 * row_step, row0 + 2 row_step, ... below row_end (<= n) as well, the ring running on from one unit
 * into the next: the first super-step of the next unit is copied, and its scales loaded, while the
 * last of this one is worked on, so a warp never starts a unit with an empty ring
 * (docs/PERF_LOG.md, sixteenth round, run 62); without UNITS row_step and row_end are not read.
 * X_MODE kXShared: xs is the block's copy of the activations of these tokens (16 k bytes per 8
 * tokens). K_PART: only the ksteps 128-column steps from step step0 on, with kXShared xs pointing at
 * their activations (2048 ksteps bytes per 8 tokens: apply_stream_split_k_kernel's copy holds only
 * those columns; the last round of apply_stream_xs_kernel, one 8-token tile, points into its copy
 * of all of k), from global memory (the last wave of apply_stream_kernel) those columns of x; the
 * two halves of k added in done. WHOLE: the caller guarantees k % (128 SUPER_STEPS) == 0 (with
 * K_PART: ksteps % SUPER_STEPS == 0), so no step is tested against k inside a super-step. TAIL
 * (any k): only the last super-step's steps are tested, the others run as WHOLE's (run 60: as fast
 * as WHOLE where both apply). SRING (WHOLE only): each super-step's scales
 * travel in its ring slot, after the weights (StreamSmem), copied by lanes 0 .. 16 ROW_TILES - 1
 * (one row's each) with the weights, instead of loaded into registers from global memory a
 * super-step ahead (dispatch.h, kRingScalesFewTokensMaxK). SRING with TAIL (split k at k / 256
 * odd, apply_variants.hip's split_k_fine_tail_windows: K_PART, 2-step super-steps, groups of 128): the
 * second half starts at an odd step, so each super-step's two scales a row are copied as the two
 * aligned 4-byte words around them (SWIN) and shifted into place when read. UNITS needs the
 * activations in shared memory or WHOLE (those from global memory are loaded a step ahead, into
 * register sets that follow the step's parity: with whole super-steps the last step of a unit
 * loads the next unit's first). */
template <bool B>
struct StepsTested {
    static constexpr bool value = B;
};

template <int GROUP, int ROW_TILES, int TOKEN_TILES, int SUPER_STEPS, int RING_SLOTS, int X_MODE,
          bool K_PART = false, bool WHOLE = false, bool TAIL = false, bool UNITS = false, bool SRING = false,
          bool BIASED = false, bool ONE_CHAIN = false, class Done>
__device__ __forceinline__ void stream_warp_rows(const uint16_t *__restrict__ x, int64_t m, int64_t k,
                                                 const int32_t *__restrict__ packed,
                                                 const uint16_t *__restrict__ scales, int64_t n, int64_t row0,
                                                 int64_t row_step, int64_t row_end, int64_t tok0, unsigned char *ring,
                                                 const unsigned char *xs, int step0, int ksteps, Done &&done)
{
#if defined(RAD_HAS_MMA_BF16)
    static_assert(GROUP >= 128, "one scale per row and step");
    static_assert(SUPER_STEPS % 2 == 0, "the activation register set of step j SUPER_STEPS + p is p & 1");
    constexpr int kRowsW = 16 * ROW_TILES;
    constexpr int kRowBytes = 64 * SUPER_STEPS;                 /* one visit */
    constexpr bool SWIN = SRING && TAIL;
    using Smem = StreamSmem<ROW_TILES, SUPER_STEPS, GROUP, SRING, SWIN>;
    constexpr int kSlot = Smem::slot, kScaleBytes = Smem::scale_bytes;
    static_assert(!SRING || (WHOLE && ((SUPER_STEPS == 4 && (GROUP == 128 || GROUP == 256)) ||
                                       (SUPER_STEPS == 2 && GROUP == 128))) ||
                      (SWIN && K_PART && SUPER_STEPS == 2 && GROUP == 128),
                  "scales in the ring: whole super-steps, a row's 2-4 scales of one aligned to their size, at "
                  "least 4 bytes (with K_PART: step0 % SUPER_STEPS == 0 too); or their windows (SWIN)");
    constexpr int kLanesPerRow = 4 * SUPER_STEPS;               /* 16-byte pieces per visit */
    constexpr int kCopies = kRowsW * kLanesPerRow / 32; /* per lane and super-step */
    constexpr bool XS = X_MODE == kXShared;
    static_assert(!(WHOLE && TAIL), "WHOLE tests no super-step, TAIL the last");
    const int lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;
    const int64_t kw = k / 8, ng = k / GROUP;
    const int nsteps = K_PART ? ksteps : (int)(kw / kStepWords);
    const int nsuper = (nsteps + SUPER_STEPS - 1) / SUPER_STEPS;
    static_assert(!UNITS || XS || WHOLE, "more than one unit: see above");
    static_assert(!BIASED || GROUP == 128, "the biased codes' sums: one group a step");
    /* BIASED (split k at k = 5376 until run 90, now the benchmark build's splitktailwin): the A fragments are q +
     * kBiasedCodeOffset (dequant_a_fragments_biased), and each group's first mma of the low chain
     * starts from -kBiasedCodeOffset times the sum of the group's activations of its token: for
     * step s and the tokens 2 t, 2 t + 1 of n-tile nt, the mma's C operand (those two for rows g
     * and g + 8) at xcorr + ((4 s + t) TOKEN_TILES + nt) 16, a table in shared memory right after
     * the activations (biased_sums) */
    static_assert(!BIASED || XS, "the biased codes' sums: a table beside the activations in shared memory");
    const unsigned char *xcorr = BIASED ? xs + TOKEN_TILES * nsteps * 2048 : nullptr;
    /* ONE_CHAIN (split k's 2-step rings, dispatch.h's decide): the low and high k8 of each
     * k16 into one accumulator, one mma after the other, so that no FADD joins two chains when a
     * group closes (16 warps a block keep the tensor core's latency hidden: docs/PERF_LOG.md,
     * twenty-fifth round) */
    static_assert(!ONE_CHAIN || GROUP == 128, "one chain: the group closes after every step");
    constexpr int kChains = ONE_CHAIN ? 1 : 2;

    /* copies: piece c = lane % kLanesPerRow (step c / 4 of the super-step) of rows
     * crow + kRowStep i, crow = lane / kLanesPerRow (all of the same parity, so one swizzle). A
     * unit whose rows are all inside copies with no per-copy test; past the end, rows read as
     * zeros and are never stored. The copy cursor (unit crow0, super-step cj, ring slot cslot)
     * runs RING_SLOTS - 1 super-steps ahead of the work, into the next unit. */
    constexpr int kRowStep = 32 / kLanesPerRow;
    static_assert(kRowStep % 2 == 0, "a lane's copy rows share one parity, so one swizzle");
    const int cpiece = lane % kLanesPerRow, crow = lane / kLanesPerRow;
    const int64_t cstride = (int64_t)kRowStep * kw * 4; /* bytes between a lane's copies */
    const int cdst = crow * kRowBytes + ((cpiece ^ ((crow & 1) << 2)) << 4);
    const unsigned ring_s = (unsigned)__cvta_generic_to_shared(ring);
    auto copy_rows = [&](int dst, const unsigned char *src, bool all, int left) __attribute__((always_inline)) {
        if (all) {
#pragma unroll
            for (int i = 0; i < kCopies; i++, src += cstride)
                rad_cp_async_16_full(ring_s + dst + i * kRowStep * kRowBytes, src);
        } else {
#pragma unroll
            for (int i = 0; i < kCopies; i++, src += cstride) {
                const bool ok = kRowStep * i < left;
                rad_cp_async_16(ring + dst + i * kRowStep * kRowBytes, ok ? (const void *)src : packed, ok);
            }
        }
    };
    int64_t crow0 = row0;                /* the unit being copied */
    const unsigned char *csrc = nullptr; /* this lane's first piece of the next super-step to copy */
    bool call = false, cvalid = true;    /* all its rows below n; a unit below n */
    int cleft = 0, cj = 0, cslot = 0;    /* copy i: a row if kRowStep i < cleft; super-step, slot */
    /* SRING: lane r < 16 ROW_TILES copies row r's scales of the super-step (zeros past n); SWIN: the
     * window's first scale is even (k / 128 is even: ng rows start 4-byte aligned), sleft scales of
     * the row from it, the super-step's first scale at `sodd` in it (step0's parity) */
    const unsigned char *ssrc = nullptr;
    bool svalid = false;
    int sleft = 0;
    const int sodd = SWIN ? step0 & 1 : 0;
    auto copy_unit = [&](int64_t unit_row0) __attribute__((always_inline)) {
        call = unit_row0 + kRowsW <= n;
        cleft = (int)(call ? kRowsW : n - unit_row0) - crow;
        csrc = (const unsigned char *)(packed + (unit_row0 + crow) * kw + 4 * cpiece +
                                       (K_PART ? step0 * kStepWords : 0));
        if constexpr (SWIN) {
            svalid = lane < kRowsW && unit_row0 + lane < n;
            ssrc = (const unsigned char *)(scales + (svalid ? unit_row0 + lane : 0) * ng + (step0 - sodd));
            sleft = (int)ng - (step0 - sodd);
        } else if constexpr (SRING) {
            svalid = lane < kRowsW && unit_row0 + lane < n;
            ssrc = (const unsigned char *)(scales + (svalid ? unit_row0 + lane : 0) * ng +
                                           (K_PART ? (GROUP == 256 ? step0 >> 1 : step0) : 0));
        }
    };
    copy_unit(row0);
    auto issue = [&]() __attribute__((always_inline)) {
        if (cvalid && (WHOLE || cj * SUPER_STEPS + (cpiece >> 2) < nsteps)) {
            copy_rows(cslot * kSlot + cdst, csrc, call, cleft);
            if constexpr (SRING && !SWIN) {
                if (lane < kRowsW)
                    rad_cp_async_ca<kScaleBytes>(ring_s + cslot * kSlot + Smem::weights + lane * kScaleBytes, ssrc,
                                                 svalid);
            }
        }
        if constexpr (SWIN) { /* every lane of a row, whatever step its weight copies stopped at */
            if (cvalid && lane < kRowsW) {
                const unsigned dst = ring_s + cslot * kSlot + Smem::weights + lane * kScaleBytes;
                rad_cp_async_ca<4>(dst, ssrc, svalid);
                rad_cp_async_ca<4>(dst + 4, ssrc + 4, svalid && sleft > 2); /* none past the row */
            }
        }
        rad_cp_async_commit();
        cslot = cslot + 1 == RING_SLOTS ? 0 : cslot + 1;
        csrc += SUPER_STEPS * kStepWords * 4;
        if constexpr (SWIN) {
            ssrc += 2 * SUPER_STEPS; /* a window moves by the super-step's scales, half its bytes */
            sleft -= SUPER_STEPS;
        } else if constexpr (SRING) {
            ssrc += kScaleBytes;
        }
        if (++cj == nsuper) {
            cj = 0;
            if (UNITS) {
                crow0 += row_step;
                cvalid = crow0 < row_end;
                if (cvalid) copy_unit(crow0);
            } else {
                cvalid = false;
            }
        }
    };
    /* scales of this thread's rows (16 mt + g + 8 hi) for the SUPER_STEPS steps of a super-step, as pairs
     * (row g | row g + 8 << 16), loaded a super-step ahead (from the last super-step of a unit on,
     * those of the next); rows past the end read row n - 1 */
    const uint16_t *srow[ROW_TILES][2];
    auto scale_rows = [&](int64_t unit_row0) __attribute__((always_inline)) {
#pragma unroll
        for (int mt = 0; mt < ROW_TILES; mt++)
#pragma unroll
            for (int hi = 0; hi < 2; hi++) {
                int64_t row = unit_row0 + 16 * mt + g + 8 * hi;
                row = row < n ? row : n - 1;
                srow[mt][hi] = scales + row * ng + (K_PART ? (GROUP == 256 ? step0 >> 1 : step0) : 0);
            }
    };
    scale_rows(row0);
    uint32_t scur[SUPER_STEPS][ROW_TILES], snext[SUPER_STEPS][ROW_TILES];
    auto load_scales = [&](uint32_t (&dst)[SUPER_STEPS][ROW_TILES], int j) __attribute__((always_inline)) {
#pragma unroll
        for (int p = 0; p < SUPER_STEPS; p++) {
            const int step = j * SUPER_STEPS + p;
            const int grp = GROUP == 256 ? step >> 1 : step;
#pragma unroll
            for (int mt = 0; mt < ROW_TILES; mt++)
                dst[p][mt] = WHOLE || step < nsteps ? (uint32_t)srow[mt][0][grp] | ((uint32_t)srow[mt][1][grp] << 16)
                                                    : 0u;
        }
    };

    /* two mma chains (the low and high k8 of each k16; one with ONE_CHAIN) */
    float total[ROW_TILES][TOKEN_TILES][4], acc[kChains][ROW_TILES][TOKEN_TILES][4];
#pragma unroll
    for (int mt = 0; mt < ROW_TILES; mt++)
#pragma unroll
        for (int nt = 0; nt < TOKEN_TILES; nt++)
#pragma unroll
            for (int c = 0; c < 4; c++) total[mt][nt][c] = acc[0][mt][nt][c] = acc[kChains - 1][mt][nt][c] = 0.0f;
    /* activations from global memory: loaded one step ahead into alternating register sets (4
     * words x 16 bytes per token). Whatever lanes of tokens past m hold only reaches that token's
     * column of the mma result, which is never stored. From shared memory: loaded in the step. */
    const uint16_t *xsrc[TOKEN_TILES];
    bool xvalid[TOKEN_TILES];
#pragma unroll
    for (int nt = 0; nt < TOKEN_TILES; nt++) {
        const int64_t tok = tok0 + 8 * nt + g;
        xvalid[nt] = X_MODE == kXClamp || tok < m;
        xsrc[nt] = x + (tok < m ? tok : m - 1) * k + 32 * t + (K_PART && !XS ? (int64_t)step0 * 128 : 0);
    }
    /* kXShared: lanes of tokens past m read token m - 1 (a broadcast: one wavefront per load for
     * 1-2 tokens, two for 3-4, four for 5-8) */
    const unsigned char *xs_lane[TOKEN_TILES];
#pragma unroll
    for (int nt = 0; nt < TOKEN_TILES; nt++) {
        const int64_t last = m - 1 - tok0 - 8 * nt; /* the chunk's last token, if below 8 */
        const int gx = last < 0 ? 0 : last < g ? (int)last : g;
        xs_lane[nt] = XS ? xs + nt * (nsteps * 2048) + 16 * (4 * gx + t) : nullptr;
    }
    rad_u32x4 xb[2][TOKEN_TILES][4];
#pragma unroll
    for (int nt = 0; nt < TOKEN_TILES; nt++) {
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const uint32_t junk = rad_arbitrary_u32(); /* no instruction */
            xb[0][nt][i] = rad_u32x4{junk, junk, junk, junk};
            xb[1][nt][i] = rad_u32x4{junk, junk, junk, junk};
            if (!XS && xvalid[nt]) xb[0][nt][i] = rad_load_cached_16(xsrc[nt] + 8 * i);
        }
        xsrc[nt] += kStepWords * 8;
    }

#pragma unroll
    for (int p = 0; p < RING_SLOTS - 1; p++) issue();
    if (!SRING) load_scales(snext, 0);

    /* super-step j of the unit at unit_row0, in ring slot uslot; TESTED: its steps tested against
     * nsteps (never with WHOLE; with TAIL the last) */
    int uslot = 0;
    auto super_step = [&](int64_t unit_row0, int j, auto tested) __attribute__((always_inline)) {
        constexpr bool TESTED = decltype(tested)::value;
        rad_cp_async_wait<RING_SLOTS - 2>(); /* this lane's copies of super-step j have landed */
        __syncwarp();                /* and everyone's; everyone is done with super-step j - 1 */
        issue();                     /* into the slot of super-step j - 1 */
        if constexpr (!SRING) {
#pragma unroll
            for (int p = 0; p < SUPER_STEPS; p++)
#pragma unroll
                for (int mt = 0; mt < ROW_TILES; mt++) scur[p][mt] = snext[p][mt];
            if (j + 1 < nsuper) {
                load_scales(snext, j + 1);
            } else if (UNITS && unit_row0 + row_step < row_end) {
                scale_rows(unit_row0 + row_step);
                load_scales(snext, 0);
            }
        }
        const unsigned char *slot = ring + uslot * kSlot;
        uslot = uslot + 1 == RING_SLOTS ? 0 : uslot + 1;
        if constexpr (SRING) { /* this super-step's scales of rows 16 mt + g and + 8, from the slot */
#pragma unroll
            for (int mt = 0; mt < ROW_TILES; mt++) {
                const unsigned char *sc = slot + Smem::weights + (16 * mt + g) * kScaleBytes;
                if constexpr (SWIN) { /* the window's two words, shifted by a scale where it starts odd */
                    const uint2 l2 = *(const uint2 *)sc, h2 = *(const uint2 *)(sc + 8 * kScaleBytes);
                    const uint32_t lo = rad_funnel_shift_r(l2.x, l2.y, 16 * sodd);
                    const uint32_t hi = rad_funnel_shift_r(h2.x, h2.y, 16 * sodd);
                    scur[0][mt] = (lo & 0xffffu) | (hi << 16);
                    scur[1][mt] = (lo >> 16) | (hi & 0xffff0000u);
                } else if constexpr (SUPER_STEPS == 2) { /* 2 scales a row (groups of 128) */
                    const uint32_t lo = *(const uint32_t *)sc, hi = *(const uint32_t *)(sc + 8 * kScaleBytes);
                    scur[0][mt] = (lo & 0xffffu) | (hi << 16);
                    scur[1][mt] = (lo >> 16) | (hi & 0xffff0000u);
                } else if constexpr (GROUP == 128) { /* 4 scales a row: steps 0-1 in .x, 2-3 in .y */
                    const uint2 lo = *(const uint2 *)sc, hi = *(const uint2 *)(sc + 8 * kScaleBytes);
                    scur[0][mt] = (lo.x & 0xffffu) | (hi.x << 16);
                    scur[1][mt] = (lo.x >> 16) | (hi.x & 0xffff0000u);
                    scur[2][mt] = (lo.y & 0xffffu) | (hi.y << 16);
                    scur[3][mt] = (lo.y >> 16) | (hi.y & 0xffff0000u);
                } else { /* 2 scales a row: steps 0-1, then 2-3 */
                    const uint32_t lo = *(const uint32_t *)sc, hi = *(const uint32_t *)(sc + 8 * kScaleBytes);
                    scur[0][mt] = scur[1][mt] = (lo & 0xffffu) | (hi << 16);
                    scur[2][mt] = scur[3][mt] = (lo >> 16) | (hi & 0xffff0000u);
                }
            }
        }
#pragma unroll
        for (int p = 0; p < SUPER_STEPS; p++) {
            const int step = j * SUPER_STEPS + p;
            if (TESTED && step >= nsteps) break;
            rad_u32x4 (&xcur)[TOKEN_TILES][4] = xb[XS ? 0 : p & 1];
            rad_u32x4 (&xnext)[TOKEN_TILES][4] = xb[(p + 1) & 1];
            if (XS) {
#pragma unroll
                for (int nt = 0; nt < TOKEN_TILES; nt++)
#pragma unroll
                    for (int i = 0; i < 4; i++)
                        xcur[nt][i] = rad_load_cached_16(xs_lane[nt] + (4 * step + i) * 512);
            } else if (!TESTED || step + 1 < nsteps) {
                /* WHOLE: the last step of a unit loads the first step's columns, for the next unit
                 * (UNITS; unused after the last), or its own again: a load that is always issued
                 * needs no copies of the registers it would otherwise leave untouched */
                const bool past = WHOLE && p + 1 == SUPER_STEPS && j + 1 == nsuper;
                const int64_t back = UNITS ? (int64_t)nsteps * (kStepWords * 8) : kStepWords * 8;
#pragma unroll
                for (int nt = 0; nt < TOKEN_TILES; nt++) {
                    const uint16_t *src = past ? xsrc[nt] - back : xsrc[nt];
                    if (xvalid[nt]) {
#pragma unroll
                        for (int i = 0; i < 4; i++) xnext[nt][i] = rad_load_cached_16(src + 8 * i);
                    }
                    xsrc[nt] = UNITS ? src + kStepWords * 8 : xsrc[nt] + kStepWords * 8;
                }
            }
            float4 corr[TOKEN_TILES];
            if constexpr (BIASED) {
#pragma unroll
                for (int nt = 0; nt < TOKEN_TILES; nt++)
                    corr[nt] = *(const float4 *)(xcorr + ((4 * step + t) * TOKEN_TILES + nt) * 16);
            }
            uint32_t wv[2 * ROW_TILES][4];
#pragma unroll
            for (int r = 0; r < 2 * ROW_TILES; r++) {
                const int row = 16 * (r >> 1) + g + 8 * (r & 1);
                const uint4 v = *(const uint4 *)(slot + row * kRowBytes + (((4 * p + t) ^ ((g & 1) << 2)) << 4));
                wv[r][0] = v.x; wv[r][1] = v.y; wv[r][2] = v.z; wv[r][3] = v.w;
            }
#pragma unroll
            for (int i = 0; i < 4; i++) {
                uint32_t a_lo[ROW_TILES][4], a_hi[ROW_TILES][4];
#pragma unroll
                for (int mt = 0; mt < ROW_TILES; mt++) {
                    const uint32_t w0 = wv[2 * mt][i], w1 = wv[2 * mt + 1][i];
                    if constexpr (BIASED)
                        dequant_a_fragments_biased(w0, w1, a_lo[mt], a_hi[mt]);
                    else
                        dequant_a_fragments(w0, w1, a_lo[mt], a_hi[mt]);
                }
#pragma unroll
                for (int nt = 0; nt < TOKEN_TILES; nt++)
#pragma unroll
                    for (int mt = 0; mt < ROW_TILES; mt++) {
                        if (GROUP == 128 && i == 0) { /* first of its chain in this group */
                            if constexpr (BIASED)
                                rad_mma_bf16_m16n8k16_from(acc[0][mt][nt], a_lo[mt], xcur[nt][i].x, xcur[nt][i].y,
                                                           corr[nt]);
                            else
                                rad_mma_bf16_m16n8k16_zero(acc[0][mt][nt], a_lo[mt], xcur[nt][i].x, xcur[nt][i].y);
                            if constexpr (ONE_CHAIN)
                                rad_mma_bf16_m16n8k16(acc[0][mt][nt], a_hi[mt], xcur[nt][i].z, xcur[nt][i].w);
                            else
                                rad_mma_bf16_m16n8k16_zero(acc[1][mt][nt], a_hi[mt], xcur[nt][i].z, xcur[nt][i].w);
                        } else {
                            rad_mma_bf16_m16n8k16(acc[0][mt][nt], a_lo[mt], xcur[nt][i].x, xcur[nt][i].y);
                            rad_mma_bf16_m16n8k16(acc[kChains - 1][mt][nt], a_hi[mt], xcur[nt][i].z, xcur[nt][i].w);
                        }
                    }
            }
            if (GROUP == 128 || (step & 1) == 1) {
#pragma unroll
                for (int mt = 0; mt < ROW_TILES; mt++) {
                    const float s_lo = rad_bf16_to_float(scur[p][mt] & 0xffffu);
                    const float s_hi = rad_bf16_to_float(scur[p][mt] >> 16);
#pragma unroll
                    for (int nt = 0; nt < TOKEN_TILES; nt++) {
#pragma unroll
                        for (int c = 0; c < 4; c++) {
                            const float sum =
                                ONE_CHAIN ? acc[0][mt][nt][c] : acc[0][mt][nt][c] + acc[kChains - 1][mt][nt][c];
                            total[mt][nt][c] += (c < 2 ? s_lo : s_hi) * sum;
                            if (GROUP != 128) acc[0][mt][nt][c] = acc[kChains - 1][mt][nt][c] = 0.0f;
                        }
                    }
                }
            }
        }
    };
    for (int64_t unit_row0 = row0;;) {
        if constexpr (TAIL) {
            int j = 0;
            for (; j + 1 < nsuper; j++) super_step(unit_row0, j, StepsTested<false>{});
            super_step(unit_row0, j, StepsTested<true>{});
        } else {
            for (int j = 0; j < nsuper; j++) super_step(unit_row0, j, StepsTested<!WHOLE>{});
        }
        done(unit_row0, total);
        if constexpr (UNITS) {
            unit_row0 += row_step;
            if (unit_row0 < row_end) {
#pragma unroll
                for (int mt = 0; mt < ROW_TILES; mt++)
#pragma unroll
                    for (int nt = 0; nt < TOKEN_TILES; nt++)
#pragma unroll
                        for (int c = 0; c < 4; c++) total[mt][nt][c] = 0.0f;
                continue;
            }
        }
        break;
    }
    rad_cp_async_wait<0>();
#endif
}

/* stream_warp_rows' done for the kernels that write the output: a unit's sums as bf16 (bias added),
 * rows below n and tokens below m only */
template <int ROW_TILES, int TOKEN_TILES>
struct StoreUnit {
    int64_t m, n, tok0;
    const uint16_t *bias;
    uint16_t *out;
    __device__ __forceinline__ void operator()(int64_t row0, const float (&total)[ROW_TILES][TOKEN_TILES][4]) const
    {
        const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
        for (int mt = 0; mt < ROW_TILES; mt++)
#pragma unroll
            for (int nt = 0; nt < TOKEN_TILES; nt++)
#pragma unroll
                for (int c = 0; c < 4; c++) {
                    const int64_t row = row0 + 16 * mt + g + 8 * (c >> 1);
                    const int64_t tok = tok0 + 8 * nt + 2 * t + (c & 1);
                    if (row < n && tok < m) out[tok * n + row] = out_bf16(total[mt][nt][c], bias, row);
                }
    }
};

/* stream_warp_rows' done for a unit split in k over two warps of a block (apply_stream_xs_kernel's
 * last round): the warp of half 1 leaves its fp32 sums in `exchange` (its own ring, which it has
 * done reading: 512 ROW_TILES TOKEN_TILES bytes), the pair meets at named barrier `barrier`, and
 * the warp of half 0 adds them to its own (in that order, so the output does not depend on timing)
 * and writes the unit. */
template <int ROW_TILES, int TOKEN_TILES>
struct PairMeet {
    int64_t m, n;
    const uint16_t *bias;
    uint16_t *out;
    float *exchange;
    int half, barrier;
    __device__ __forceinline__ void operator()(int64_t row0, const float (&total)[ROW_TILES][TOKEN_TILES][4]) const
    {
#if defined(RAD_HAS_MMA_BF16)
        constexpr int kSums = ROW_TILES * TOKEN_TILES * 4; /* a lane's, in total's order */
        const int lane = threadIdx.x & 31;
        const float *mine = &total[0][0][0];
        if (half == 1) {
            __syncwarp(); /* every lane of this warp is done reading its ring */
#pragma unroll
            for (int i = 0; i < kSums; i++) exchange[i * 32 + lane] = mine[i];
        }
        rad_ptx_bar_sync(barrier, 64);
        if (half == 0) {
            float sum[ROW_TILES][TOKEN_TILES][4];
#pragma unroll
            for (int i = 0; i < kSums; i++) (&sum[0][0][0])[i] = mine[i] + exchange[i * 32 + lane];
            StoreUnit<ROW_TILES, TOKEN_TILES>{m, n, 0, bias, out}(row0, sum);
        }
#endif
    }
};

/* One entry of stream_warp_rows' BIASED table: -kBiasedCodeOffset times the sum of one token's 128
 * activations of a step, piece(i, t) giving the 16 bytes of its columns 32 t + 8 i .. + 7 (a uint4).
 * The sum runs in a fixed order, each piece's 8 values pairwise, then the 16 pieces pairwise, so
 * that its bits do not depend on the block's shape. */
template <class Piece>
__device__ __forceinline__ float biased_step_sum(Piece piece)
{
    float part[16];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int t = 0; t < 4; t++) {
            const uint4 v = piece(i, t);
            const uint32_t w[4] = {v.x, v.y, v.z, v.w};
            float h[4];
#pragma unroll
            for (int j = 0; j < 4; j++) h[j] = rad_bf16_to_float(w[j] & 0xffffu) + rad_bf16_to_float(w[j] >> 16);
            part[4 * i + t] = (h[0] + h[1]) + (h[2] + h[3]);
        }
    float quarter[4];
#pragma unroll
    for (int j = 0; j < 4; j++) quarter[j] = (part[4 * j] + part[4 * j + 1]) + (part[4 * j + 2] + part[4 * j + 3]);
    return -kBiasedCodeOffset * ((quarter[0] + quarter[1]) + (quarter[2] + quarter[3]));
}

/* Stores c, the entry of step s and token 8 nt + g, where stream_warp_rows' BIASED reads it in a
 * table of `tiles` 8-token tiles: float indices ((4 s + g / 2) tiles + nt) 4 + g % 2 and that + 2 (a
 * lane's 16 bytes are the C operand of its mma, the accumulator's rows g and g + 8, as they are). */
__device__ __forceinline__ void biased_table_put(float *table, int tiles, int s, int nt, int g, float c)
{
    float *at = table + ((4 * s + (g >> 1)) * tiles + nt) * 4 + (g & 1);
    at[0] = at[2] = c;
}

template <int GROUP, int ROW_TILES, int TOKEN_TILES, int SUPER_STEPS, int RING_SLOTS, int X_MODE = kXClamp,
          bool WHOLE = false, bool TAIL = false, bool SRING = false, bool PAIRS = false>
__global__ void __launch_bounds__(kStreamWarps * 32, ROW_TILES * TOKEN_TILES == 1 ? kStreamBlocksPerSm : 1)
apply_stream_kernel(const uint16_t *__restrict__ x, int64_t m, int64_t k, const int32_t *__restrict__ packed,
                    const uint16_t *__restrict__ scales, const uint16_t *__restrict__ bias, int64_t n,
                    uint16_t *__restrict__ out, int64_t token_chunks, int64_t pair_block0)
{
    static_assert(X_MODE != kXShared, "apply_stream_xs_kernel");
    extern __shared__ __align__(16) unsigned char smem[];
    const int warp = threadIdx.x >> 5;
    constexpr int kRing = RING_SLOTS * StreamSmem<ROW_TILES, SUPER_STEPS, GROUP, SRING>::slot;
    unsigned char *ring = smem + warp * kRing;
    if constexpr (PAIRS) {
        /* the last wave (dispatch.h, stream_pair_block0; one token chunk): warps 2 q and 2 q + 1 take
         * unit kStreamWarps pair_block0 + kStreamPairsPerBlock (block - pair_block0) + q over one half
         * of k each and meet (PairMeet, named barrier 1 + q; the odd warp's ring, done with, holds its
         * sums). An instance of its own, so that the kernels without it keep their code (run 67: the
         * branch alone cost 1-2 %) */
        static_assert(WHOLE && ROW_TILES == 1 && TOKEN_TILES == 1 && X_MODE == kXSkip,
                      "the library's kernel of whole super-steps, tokens past m skipped");
        if ((int64_t)blockIdx.x >= pair_block0) {
            const int64_t unit =
                kStreamWarps * pair_block0 + kStreamPairsPerBlock * ((int64_t)blockIdx.x - pair_block0) + (warp >> 1);
            const int64_t row0 = unit * 16;
            if (row0 >= n) return; /* both warps of the pair */
            const int half = warp & 1, ksteps = (int)(k >> 8); /* steps per half: k / 128 / 2 */
            const int step0 = half * ksteps;
            stream_warp_rows<GROUP, 1, 1, SUPER_STEPS, RING_SLOTS, X_MODE, true, true, false, false, SRING>(
                x, m, k, packed, scales, n, row0, n, n, 0, ring, nullptr, step0, ksteps,
                PairMeet<1, 1>{m, n, bias, out, (float *)(smem + (warp | 1) * kRing), half, 1 + (warp >> 1)});
            return;
        }
    }
    const int64_t chunk = (int64_t)blockIdx.x % token_chunks;
    const int64_t row_block = (int64_t)blockIdx.x / token_chunks;
    const int64_t row0 = (row_block * kStreamWarps + warp) * (16 * ROW_TILES);
    if (row0 >= n) return; /* whole warp; no block-wide barriers in this kernel */
    const int64_t tok0 = chunk * (8 * TOKEN_TILES);
    stream_warp_rows<GROUP, ROW_TILES, TOKEN_TILES, SUPER_STEPS, RING_SLOTS, X_MODE, false, WHOLE, TAIL, false, SRING>(
        x, m, k, packed, scales, n, row0, n, n, tok0, ring, nullptr, 0, 0,
        StoreUnit<ROW_TILES, TOKEN_TILES>{m, n, tok0, bias, out});
}

#if defined(RADIANCE_KERNEL_VARIANTS)
/* The library's stream kernel of 1-8 tokens with whole super-steps and the loads of tokens past m
 * skipped, persistent (streamskipwholep, run 62): `blocks` blocks of 4 warps, each warp taking the
 * 16-row units warp + 4 blocks i, its ring chained from one unit into the next. */
template <int GROUP>
__global__ void __launch_bounds__(kStreamWarps * 32, 4)
apply_stream_persistent_kernel(const uint16_t *__restrict__ x, int64_t m, int64_t k, const int32_t *__restrict__ packed,
                               const uint16_t *__restrict__ scales, const uint16_t *__restrict__ bias, int64_t n,
                               uint16_t *__restrict__ out)
{
    extern __shared__ __align__(16) unsigned char smem[];
    const int warp = threadIdx.x >> 5;
    const int64_t row0 = ((int64_t)blockIdx.x * kStreamWarps + warp) * 16;
    if (row0 >= n) return;
    unsigned char *ring = smem + warp * (2 * StreamSmem<1, 4>::slot);
    stream_warp_rows<GROUP, 1, 1, 4, 2, kXSkip, false, true, false, true>(
        x, m, k, packed, scales, n, row0, (int64_t)gridDim.x * kStreamWarps * 16, n, 0, ring, nullptr, 0, 0,
        StoreUnit<1, 1>{m, n, 0, bias, out});
}

rad_error_t launch_stream_persistent(const ApplyArgs &a, const ApplyPlan &p)
{
    if (p.row_tiles != 1 || p.token_tiles != 1 || p.x_mode != kXSkip || !p.whole_super || p.ring_scales ||
        a.k % 512 != 0 || a.m > 8 || (a.group != 128 && a.group != 256))
        return (rad_error_t)RADIANCE_GPU_EINVAL;
    auto kernel = a.group == 128 ? apply_stream_persistent_kernel<128> : apply_stream_persistent_kernel<256>;
    const int smem = kStreamWarps * 2 * StreamSmem<1, 4>::slot;
    const int64_t row_blocks = (a.n + 16 * kStreamWarps - 1) / (16 * kStreamWarps);
    const int64_t blocks = p.blocks < row_blocks ? p.blocks : row_blocks;
    rad_error_t err = rad_func_set_max_dynamic_smem(kernel, smem);
    if (err != RAD_SUCCESS) return err;
    kernel<<<(unsigned)blocks, kStreamWarps * 32, smem, a.stream>>>(a.x, a.m, a.k, a.packed, a.scales, a.bias, a.n,
                                                                    a.out);
    return rad_get_last_error();
}
#endif

} // namespace

/* The stream kernel: 1 n-tile, 4-step super-steps, 2 ring slots; 1 m-tile (2 in the benchmark
 * build's streamM2). */
rad_error_t launch_stream(const ApplyArgs &a, const ApplyPlan &p)
{
    constexpr int kTokenTiles = 1, kSuperSteps = 4, kRingSlots = 2;
#if defined(RADIANCE_KERNEL_VARIANTS)
    if (p.blocks > 0) return launch_stream_persistent(a, p);
#endif
    if (p.token_tiles != kTokenTiles) return (rad_error_t)RADIANCE_GPU_EINVAL;
    void (*kernel)(const uint16_t *, int64_t, int64_t, const int32_t *, const uint16_t *, const uint16_t *, int64_t,
                   uint16_t *, int64_t, int64_t) = nullptr;
    const bool g128 = a.group == 128;
    if (a.group != 128 && a.group != 256) return (rad_error_t)RADIANCE_GPU_EINVAL;
    const int smem =
        kStreamWarps * kRingSlots * (int)stream_slot_bytes(p.row_tiles, kSuperSteps, a.group, p.ring_scales);
    /* the library's: loads skipped past m, whole super-steps (k % 512 == 0; with the scales in the
     * ring or not) or all but the last */
    const bool whole = p.whole_super && a.k % (128 * kSuperSteps) == 0;
    const bool pairs = p.pair_block0 > 0;
    if (p.row_tiles == 1 && p.x_mode == kXSkip && whole && p.ring_scales && pairs)
        kernel = g128 ? apply_stream_kernel<128, 1, kTokenTiles, kSuperSteps, kRingSlots, kXSkip, true, false, true, true>
                      : apply_stream_kernel<256, 1, kTokenTiles, kSuperSteps, kRingSlots, kXSkip, true, false, true, true>;
    else if (p.row_tiles == 1 && p.x_mode == kXSkip && whole && p.ring_scales)
        kernel = g128 ? apply_stream_kernel<128, 1, kTokenTiles, kSuperSteps, kRingSlots, kXSkip, true, false, true>
                      : apply_stream_kernel<256, 1, kTokenTiles, kSuperSteps, kRingSlots, kXSkip, true, false, true>;
    else if (p.ring_scales)
        kernel = nullptr; /* the scales in the ring need whole super-steps */
    else if (p.row_tiles == 1 && p.x_mode == kXSkip && whole && pairs)
        kernel = g128 ? apply_stream_kernel<128, 1, kTokenTiles, kSuperSteps, kRingSlots, kXSkip, true, false, false, true>
                      : apply_stream_kernel<256, 1, kTokenTiles, kSuperSteps, kRingSlots, kXSkip, true, false, false, true>;
    else if (p.row_tiles == 1 && p.x_mode == kXSkip && whole)
        kernel = g128 ? apply_stream_kernel<128, 1, kTokenTiles, kSuperSteps, kRingSlots, kXSkip, true>
                      : apply_stream_kernel<256, 1, kTokenTiles, kSuperSteps, kRingSlots, kXSkip, true>;
    else if (pairs)
        kernel = nullptr; /* pairs only in the kernels above */
    else if (p.row_tiles == 1 && p.x_mode == kXSkip && p.tail_super && !p.whole_super)
        kernel = g128 ? apply_stream_kernel<128, 1, kTokenTiles, kSuperSteps, kRingSlots, kXSkip, false, true>
                      : apply_stream_kernel<256, 1, kTokenTiles, kSuperSteps, kRingSlots, kXSkip, false, true>;
#if defined(RADIANCE_KERNEL_VARIANTS)
    /* the library's kernels before run 60: loads clamped to the last token (streamwhole at 1-2
     * tokens from run 37), or every step tested (stream, streamskipx), and 32 rows per warp (streamM2) */
    else if (p.row_tiles == 1 && p.x_mode == kXClamp && p.whole_super && a.k % (128 * kSuperSteps) == 0)
        kernel = g128 ? apply_stream_kernel<128, 1, kTokenTiles, kSuperSteps, kRingSlots, kXClamp, true>
                      : apply_stream_kernel<256, 1, kTokenTiles, kSuperSteps, kRingSlots, kXClamp, true>;
    else if (p.whole_super || p.tail_super)
        kernel = nullptr; /* no such kernel */
    else if (p.row_tiles == 1 && p.x_mode == kXClamp)
        kernel = g128 ? apply_stream_kernel<128, 1, kTokenTiles, kSuperSteps, kRingSlots, kXClamp>
                      : apply_stream_kernel<256, 1, kTokenTiles, kSuperSteps, kRingSlots, kXClamp>;
    else if (p.row_tiles == 1 && p.x_mode == kXSkip)
        kernel = g128 ? apply_stream_kernel<128, 1, kTokenTiles, kSuperSteps, kRingSlots, kXSkip>
                      : apply_stream_kernel<256, 1, kTokenTiles, kSuperSteps, kRingSlots, kXSkip>;
    else if (p.row_tiles == 2 && p.x_mode == kXClamp)
        kernel = g128 ? apply_stream_kernel<128, 2, kTokenTiles, kSuperSteps, kRingSlots, kXClamp>
                      : apply_stream_kernel<256, 2, kTokenTiles, kSuperSteps, kRingSlots, kXClamp>;
#endif
    if (kernel == nullptr) return (rad_error_t)RADIANCE_GPU_EINVAL;
    const int64_t rows_per_block = 16 * p.row_tiles * kStreamWarps;
    const int64_t row_blocks = (a.n + rows_per_block - 1) / rows_per_block;
    const int64_t chunks = (a.m + 8 * kTokenTiles - 1) / (8 * kTokenTiles);
    /* the last wave in pairs of warps: a unit per warp before pair_block0, one per pair from there */
    const int64_t pair0 = p.pair_block0, units = (a.n + 15) / 16;
    if (pair0 > 0 && (chunks != 1 || a.k % 1024 != 0 || kStreamWarps * pair0 >= units))
        return (rad_error_t)RADIANCE_GPU_EINVAL;
    const int64_t paired = units - kStreamWarps * pair0; /* the last wave's units, kStreamPairsPerBlock a block */
    const int64_t blocks =
        pair0 > 0 ? pair0 + (paired + kStreamPairsPerBlock - 1) / kStreamPairsPerBlock : row_blocks * chunks;
    if (blocks > 0x7fffffffLL) return (rad_error_t)RADIANCE_GPU_EINVAL;
    rad_error_t err = rad_func_set_max_dynamic_smem(kernel, smem);
    if (err != RAD_SUCCESS) return err;
    kernel<<<(unsigned)blocks, kStreamWarps * 32, smem, a.stream>>>(a.x, a.m, a.k, a.packed, a.scales, a.bias, a.n,
                                                                    a.out, chunks, pair0);
    return rad_get_last_error();
}

namespace {


/* The stream kernel with the activations in shared memory (path kStreamSharedX), for heads whose
 * activations fit there beside the rings (16 k bytes per 8 tokens; m <= 8 TOKEN_TILES). One block
 * per SM, each warp with its own ring, walks 16 ROW_TILES-row units of the head (unit = warp +
 * warps in the grid x i, its ring chained from one into the next). With whole super-steps, where
 * k % 1024 == 0 and the units leave a last round at most half full behind at least one full one
 * (151936 x 5120 at 16 warps on 132 SMs: 4 rounds and 1048 units of 2112), the warps of that last
 * round take its units in pairs (the warps 2 q and 2 q + 1 of a block), each over one half of k,
 * and meet as the split-k kernel's halves do, within the block (PairMeet): the round takes about
 * half as long, every warp busy. First the block copies x into shared memory, once, in the order the lanes
 * read it: for step s, load i (columns 8 i .. 8 i + 7 of each lane's 32) and lane L = 4 g + t, the
 * 16 bytes of token 8 nt + g at column 128 s + 32 t + 8 i sit at nt * 16 k + ((4 s + i) * 32 + L) *
 * 16. A load of the warp reads at most 512 contiguous bytes: 4 shared-memory wavefronts, where 8
 * tokens' rows in global memory touch 16 L1 lines. Tokens past m are zeros (and not read: see
 * stream_warp_rows). Built with TOKEN_TILES 1, SUPER_STEPS 4 only (docs/PERF_LOG.md, run 26:
 * 203.9 against 234.3 us at 8 tokens; the 16-token instances lost to the wgmma kernel, run 31;
 * 2-step super-steps in 3-4 slots lost 6-25 % in run 79 and were deleted),
 * ROW_TILES 1 (2, at 8 warps, lost 8-10 % in run 59 and was deleted). */
template <int GROUP, int ROW_TILES, int TOKEN_TILES, int SUPER_STEPS, int RING_SLOTS, bool WHOLE = false,
          bool TAIL = false, bool SRING = false>
__global__ void __launch_bounds__(kStreamXsMaxWarps * 32, 1)
apply_stream_xs_kernel(const uint16_t *__restrict__ x, int64_t m, int64_t k, const int32_t *__restrict__ packed,
                       const uint16_t *__restrict__ scales, const uint16_t *__restrict__ bias, int64_t n,
                       uint16_t *__restrict__ out)
{
#if defined(RAD_HAS_MMA_BF16)
    extern __shared__ __align__(16) unsigned char smem[];
    const int warps = (int)(blockDim.x >> 5), warp = (int)(threadIdx.x >> 5);
    const int kk = (int)k; /* the copy fits in shared memory, so k is small */
    constexpr int kSlot = StreamSmem<ROW_TILES, SUPER_STEPS, GROUP, SRING>::slot;
    unsigned char *xs = smem + warps * (RING_SLOTS * kSlot);
    for (int q = (int)threadIdx.x; q < TOKEN_TILES * kk; q += (int)blockDim.x) { /* 16-byte pieces, k per 8 tokens */
        const int nt = q / kk, r = q % kk; /* r = (4 s + i) * 32 + L */
        const int lane = r & 31, i = (r >> 5) & 3, s = r >> 7;
        const int64_t tok = 8 * nt + (lane >> 2);
        const bool ok = tok < m;
        rad_cp_async_16(xs + 16 * q, ok ? (const void *)(x + tok * k + (128 * s + 32 * (lane & 3) + 8 * i)) : x, ok);
    }
    rad_cp_async_commit();
    rad_cp_async_wait<0>();
    __syncthreads();
    unsigned char *ring = smem + warp * (RING_SLOTS * kSlot);
    constexpr int64_t kRowsW = 16 * ROW_TILES;
    const int64_t grid_warps = (int64_t)gridDim.x * warps, gw = (int64_t)blockIdx.x * warps + warp;
    const int64_t units = (n + kRowsW - 1) / kRowsW, rounds = units / grid_warps, left = units - rounds * grid_warps;
    /* the last round split in k over pairs of warps (see above) */
    const bool split = WHOLE && TOKEN_TILES == 1 && rounds > 0 && left > 0 && 2 * left <= grid_warps &&
                       warps % 2 == 0 && k % (2 * 128 * SUPER_STEPS) == 0;
    const int64_t row_end = split ? rounds * grid_warps * kRowsW : n, row0 = gw * kRowsW;
    if (row0 < row_end)
        stream_warp_rows<GROUP, ROW_TILES, TOKEN_TILES, SUPER_STEPS, RING_SLOTS, kXShared, false, WHOLE, TAIL, true,
                         SRING>(
            x, m, k, packed, scales, n, row0, grid_warps * kRowsW, row_end, 0, ring, xs, 0, 0,
            StoreUnit<ROW_TILES, TOKEN_TILES>{m, n, 0, bias, out});
    if constexpr (WHOLE && TOKEN_TILES == 1) {
        if (split && (gw >> 1) < left) {
            const int half = (int)(gw & 1), ksteps = (int)(k >> 8); /* steps per half: k / 128 / 2 */
            const int step0 = half * ksteps;
            float *exchange = (float *)(smem + (warp | 1) * (RING_SLOTS * kSlot)); /* the odd warp's ring */
            stream_warp_rows<GROUP, ROW_TILES, TOKEN_TILES, SUPER_STEPS, RING_SLOTS, kXShared, true, WHOLE, false, false,
                             SRING>(
                x, m, k, packed, scales, n, (rounds * grid_warps + (gw >> 1)) * kRowsW, 0, n, 0, ring,
                xs + (int64_t)step0 * 2048, step0, ksteps,
                PairMeet<ROW_TILES, TOKEN_TILES>{m, n, bias, out, exchange, half, 1 + (warp >> 1)});
        }
    }
#endif
}

template <int TOKEN_TILES, int SUPER_STEPS>
rad_error_t launch_stream_xs(const ApplyArgs &a, const ApplyPlan &p)
{
    void (*kernel)(const uint16_t *, int64_t, int64_t, const int32_t *, const uint16_t *, const uint16_t *, int64_t,
                   uint16_t *) = nullptr;
    const bool g128 = a.group == 128;
    if (a.group != 128 && a.group != 256) return (rad_error_t)RADIANCE_GPU_EINVAL;
    /* the library's: whole super-steps (k % 512 == 0) with their scales in the ring, or all but the
     * last (the benchmark build: whole ones without the scales in the ring too, streamxswhole) */
    const bool whole = p.whole_super && a.k % (128 * SUPER_STEPS) == 0;
    if (p.ring_scales) {
        if (p.row_tiles == 1 && whole)
            kernel = g128 ? apply_stream_xs_kernel<128, 1, TOKEN_TILES, SUPER_STEPS, kStreamXsRingSlots, true, false, true>
                          : apply_stream_xs_kernel<256, 1, TOKEN_TILES, SUPER_STEPS, kStreamXsRingSlots, true, false, true>;
    }
#if defined(RADIANCE_KERNEL_VARIANTS)
    else if (p.row_tiles == 1 && whole)
        kernel = g128 ? apply_stream_xs_kernel<128, 1, TOKEN_TILES, SUPER_STEPS, kStreamXsRingSlots, true>
                      : apply_stream_xs_kernel<256, 1, TOKEN_TILES, SUPER_STEPS, kStreamXsRingSlots, true>;
#endif
    else if (p.row_tiles == 1 && p.tail_super && !p.whole_super)
        kernel = g128 ? apply_stream_xs_kernel<128, 1, TOKEN_TILES, SUPER_STEPS, kStreamXsRingSlots, false, true>
                      : apply_stream_xs_kernel<256, 1, TOKEN_TILES, SUPER_STEPS, kStreamXsRingSlots, false, true>;
#if defined(RADIANCE_KERNEL_VARIANTS)
    /* every step tested against k (streamxs; the library's before run 60) */
    else if (p.row_tiles == 1 && !p.whole_super && !p.tail_super)
        kernel = g128 ? apply_stream_xs_kernel<128, 1, TOKEN_TILES, SUPER_STEPS, kStreamXsRingSlots>
                      : apply_stream_xs_kernel<256, 1, TOKEN_TILES, SUPER_STEPS, kStreamXsRingSlots>;
#endif
    if (kernel == nullptr) return (rad_error_t)RADIANCE_GPU_EINVAL;
    rad_error_t err = rad_func_set_max_dynamic_smem(kernel, p.smem);
    if (err != RAD_SUCCESS) return err;
    kernel<<<(unsigned)p.blocks, (unsigned)(p.warps * 32), p.smem, a.stream>>>(a.x, a.m, a.k, a.packed, a.scales,
                                                                             a.bias, a.n, a.out);
    return rad_get_last_error();
}


/* 9-16 tokens, k split over a cluster of two blocks (path kStreamSharedX with k_parts 2; the plan
 * for 9-16 tokens where it fits: docs/PERF_LOG.md, "9-16 tokens by split k" and seventh round). 16 tokens' activations
 * over all of k (32 k bytes, 160 KiB at k = 5120) leave room for 8 warps' rings per SM; over half
 * of k they take 80 KiB, and 16 warps with 256-byte visits fit beside them as in
 * apply_stream_xs_kernel. So block r of the pair copies all 16 tokens (two 8-token tiles, the
 * layout of apply_stream_xs_kernel over its columns only) of columns [r k / 2, (r + 1) k / 2) and
 * runs the same 16-row units as the other block, over its half of each row. The halves' fp32 sums
 * of a unit meet once: each lane of block 1 stores its 8 sums into block 0's shared memory (a
 * 1 KiB slot per warp) by st.async, which completes the bytes on that warp's `full` barrier
 * there (lane 0 of block 0 announces them, one arrival per unit); block 0 waits, adds (its
 * half + block 1's, always in that order, so the output does not depend on timing), arrives on
 * block 1's `empty` barrier of the warp (the slot may be refilled) and writes the bf16 output.
 * Units go to clusters as to blocks in apply_stream_xs_kernel: both blocks of a pair walk the same
 * units, so each warp's partner is the warp of the same index. Both blocks stay until the other has
 * done its last access to their shared memory (the closing cluster barrier). Needs k % (2 GROUP) ==
 * 0: each half holds whole steps and whole groups (plan_stream_split_k). SUPER steps a ring slot in
 * SLOTS slots: 4 in 2, or 2 in 3 (dispatch.h, kSplitKFineSteps): with the scales in the ring at k =
 * 1024-6144 (run 80), and where 16 warps' rings of 4 steps do not fit beside the activations (k =
 * 5376; 2 in 4 lost 2-5 % in run 79 and was deleted); WHOLE: whole super-steps in each half, TAIL:
 * all but the last (stream_warp_rows), neither: every step tested; SRING: the scales in the ring. */
#if defined(RAD_HAS_CLUSTER_LAUNCH)

/* The table of stream_warp_rows' BIASED codes for the block's copy of the activations of TILES
 * 8-token tiles over `steps` 128-column steps (apply_stream_xs_kernel's layout), after the copy:
 * for step s and token 8 nt + g biased_step_sum. Tokens past m (zeros in the copy) get 0. Needs the
 * copy complete; a barrier after. */
template <int TILES>
__device__ __forceinline__ void biased_sums(unsigned char *xs, int steps)
{
    float *table = (float *)(xs + TILES * steps * 2048);
    for (int e = (int)threadIdx.x; e < TILES * steps * 8; e += (int)blockDim.x) {
        const int g = e & 7, nt = (e >> 3) % TILES, s = (e >> 3) / TILES;
        const unsigned char *tile = xs + nt * (steps * 2048);
        const float c = biased_step_sum([&](int i, int t) __attribute__((always_inline)) {
            return *(const uint4 *)(tile + 16 * ((4 * s + i) * 32 + 4 * g + t));
        });
        biased_table_put(table, TILES, s, nt, g, c);
    }
}

/* The split-k kernels' body (apply_stream_split_k_kernel). BIASED: stream_warp_rows' biased codes,
 * ONE_CHAIN: one mma chain, SRING with TAIL: the scales' windows in the ring. */
template <int GROUP, bool WHOLE, bool SRING, int SUPER, int SLOTS, bool TAIL, bool BIASED, bool ONE_CHAIN, int SHIFT>
__device__ __forceinline__ void split_k_body(const uint16_t *__restrict__ x, int64_t m, int64_t k,
                                             const int32_t *__restrict__ packed, const uint16_t *__restrict__ scales,
                                             const uint16_t *__restrict__ bias, int64_t n, uint16_t *__restrict__ out)
{
#if defined(RAD_HAS_MMA_BF16) && defined(RAD_HAS_CLUSTER)
    constexpr int kSuper = SUPER, kSlots = SLOTS, kTiles = kSplitKTokenTiles;
    extern __shared__ __align__(16) unsigned char smem[];
    const int warps = (int)(blockDim.x >> 5), warp = (int)(threadIdx.x >> 5), lane = (int)(threadIdx.x & 31);
    const unsigned rank = rad_cluster_ctarank();
    /* steps per half: k / 128 / 2, block 0's SHIFT more and block 1's SHIFT fewer (dispatch.h,
     * plan_stream_split_k); the exchange slots after the larger half's activations in both blocks */
    static_assert(SHIFT * SHIFT <= 1 && (SHIFT == 0 || (WHOLE && !TAIL && !BIASED)), "whole halves, one step apart");
    const int half = (int)(k >> 8);
    const int ksteps = SHIFT == 0 ? half : rank == 0 ? half + SHIFT : half - SHIFT;
    const int step0 = SHIFT == 0 ? (int)rank * ksteps : rank == 0 ? 0 : half + SHIFT;
    const int pieces = ksteps * 128; /* 16-byte pieces per 8-token tile of this half */
    constexpr int kSlot = StreamSmem<1, kSuper, GROUP, SRING, SRING && TAIL>::slot;
    unsigned char *xs = smem + warps * (kSlots * kSlot);
    /* BIASED: the table of biased_sums after the activations (split_k_biased_sums_bytes) */
    unsigned char *slots = xs + (SHIFT == 0 ? kTiles * pieces * 16 : kTiles * (half + 1) * 2048) +
                           (BIASED ? kTiles * ksteps * 64 : 0);
    unsigned char *bars = slots + warps * kSplitKSlot;
    for (int q = (int)threadIdx.x; q < kTiles * pieces; q += (int)blockDim.x) {
        const int nt = q / pieces, r = q % pieces; /* r = (4 s + i) * 32 + L, s counted from step0 */
        const int l = r & 31, i = (r >> 5) & 3, s = r >> 7;
        const int64_t tok = 8 * nt + (l >> 2);
        const bool ok = tok < m;
        const int64_t col = 128 * (int64_t)(step0 + s) + 32 * (l & 3) + 8 * i;
        rad_cp_async_16(xs + 16 * q, ok ? (const void *)(x + tok * k + col) : x, ok);
    }
    rad_cp_async_commit();
    const unsigned bars_s = (unsigned)__cvta_generic_to_shared(bars);
    if ((int)threadIdx.x < warps) {
        rad_cluster_mbarrier_init(bars_s + kSplitKBars * threadIdx.x, 1);      /* full: lane 0 + block 1's bytes */
        rad_cluster_mbarrier_init(bars_s + kSplitKBars * threadIdx.x + 8, 32); /* empty: block 0's 32 lanes */
        rad_cluster_fence_mbarrier_init();
    }
    rad_cp_async_wait<0>();
    if constexpr (BIASED) {
        __syncthreads(); /* every thread's copies landed */
        biased_sums<kTiles>(xs, ksteps);
    }
    rad_cluster_sync(); /* the copy complete, the barriers of both blocks initialized */
    const unsigned full = bars_s + kSplitKBars * warp, empty = full + 8;
    const unsigned my_slot = (unsigned)__cvta_generic_to_shared(slots + warp * kSplitKSlot + lane * 32);
    const unsigned peer_slot = rad_cluster_map(my_slot, 0), peer_full = rad_cluster_map(full, 0);
    const unsigned peer_empty = rad_cluster_map(empty, 1);
    const int g = lane >> 2, t = lane & 3;
    unsigned char *ring = smem + warp * (kSlots * kSlot);
    const int64_t cluster = (int64_t)(blockIdx.x >> 1), clusters = (int64_t)(gridDim.x >> 1);
    unsigned it = 0;
    /* a unit's halves meet: block 1 sends its sums, block 0 adds them to its own and writes */
    auto meet = [&](int64_t row0, const float (&total)[1][kTiles][4]) __attribute__((always_inline)) {
        float part[kTiles * 4];
#pragma unroll
        for (int nt = 0; nt < kTiles; nt++)
#pragma unroll
            for (int c = 0; c < 4; c++) part[nt * 4 + c] = total[0][nt][c];
        if (rank == 1) {
            if (it > 0) rad_cluster_mbarrier_wait(empty, (it - 1) & 1); /* block 0 has read the last unit's */
            rad_cluster_store_async_16(peer_slot, part[0], part[1], part[2], part[3], peer_full);
            rad_cluster_store_async_16(peer_slot + 16, part[4], part[5], part[6], part[7], peer_full);
        } else {
            /* the phase ends when lane 0 has arrived and all 1 KiB of block 1's st.async has landed
             * (in either order: the byte count may run ahead of the announcement) */
            if (lane == 0) rad_cluster_mbarrier_arrive_expect_tx(full, kSplitKSlot);
            rad_cluster_mbarrier_wait(full, it & 1);
            const float4 lo = *(const float4 *)(slots + warp * kSplitKSlot + lane * 32);
            const float4 hi = *(const float4 *)(slots + warp * kSplitKSlot + lane * 32 + 16);
            /* the slot goes back only once both reads have returned: the arrival count depends on
             * every word read, masked by m >> 32 (0: m <= 16) */
            const unsigned read_bits = __float_as_uint(lo.x) ^ __float_as_uint(lo.y) ^ __float_as_uint(lo.z) ^
                                       __float_as_uint(lo.w) ^ __float_as_uint(hi.x) ^ __float_as_uint(hi.y) ^
                                       __float_as_uint(hi.z) ^ __float_as_uint(hi.w);
            rad_cluster_mbarrier_arrive_remote(peer_empty, read_bits & (unsigned)((uint64_t)m >> 32));
            const float other[kTiles * 4] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#pragma unroll
            for (int nt = 0; nt < kTiles; nt++)
#pragma unroll
                for (int c = 0; c < 4; c++) {
                    const int64_t row = row0 + g + 8 * (c >> 1);
                    const int64_t tok = 8 * nt + 2 * t + (c & 1);
                    if (row < n && tok < m) out[tok * n + row] = out_bf16(part[nt * 4 + c] + other[nt * 4 + c], bias, row);
                }
        }
        it++;
    };
    const int64_t row0 = (cluster * warps + warp) * 16;
    if (row0 < n)
        stream_warp_rows<GROUP, 1, kTiles, kSuper, kSlots, kXShared, true, WHOLE, TAIL, true, SRING, BIASED, ONE_CHAIN>(
            x, m, k, packed, scales, n, row0, clusters * warps * 16, n, 0, ring, xs, step0, ksteps, meet);
    rad_cluster_sync(); /* the other block's last arrival on this block's barriers has landed */
#else
    rad_trap(); /* a pass without clusters: split_k_max_clusters() keeps the planner away */
#endif
}

template <int GROUP, bool WHOLE, bool SRING = false, int SUPER = 4, int SLOTS = kStreamXsRingSlots, bool TAIL = false,
          bool BIASED = false, bool ONE_CHAIN = false, int SHIFT = 0>
__global__ void __launch_bounds__(kStreamXsMaxWarps * 32, 1)
apply_stream_split_k_kernel(const uint16_t *__restrict__ x, int64_t m, int64_t k, const int32_t *__restrict__ packed,
                            const uint16_t *__restrict__ scales, const uint16_t *__restrict__ bias, int64_t n,
                            uint16_t *__restrict__ out)
{
    split_k_body<GROUP, WHOLE, SRING, SUPER, SLOTS, TAIL, BIASED, ONE_CHAIN, SHIFT>(x, m, k, packed, scales, bias, n,
                                                                                   out);
}

/* a split-k kernel instance's launch signature */
using SplitKKernel = void (*)(const uint16_t *, int64_t, int64_t, const int32_t *, const uint16_t *, const uint16_t *,
                              int64_t, uint16_t *);

/* Clusters of two blocks of apply_stream_split_k_kernel that the device runs at once (one block
 * per SM; an SM left over in a GPC with an odd count stays idle), 0 where it cannot say. Looked up
 * with the kernel at the opt-in shared memory: any size the planner allows (over half of it)
 * leaves one block per SM. */
int split_k_max_clusters(void)
{
    const int optin = rad_smem_optin();
    SplitKKernel kernel = apply_stream_split_k_kernel<128, false>;
    /* code from a pass before sm_90 (an sm_80 build run on an H200 through its compute_80 PTX) is
     * the empty stand-in above, whatever the GPU can do */
    if (rad_func_ptx_version((const void *)kernel) < 90) return 0;
    if (optin <= 0 || rad_func_set_max_dynamic_smem(kernel, optin) != RAD_SUCCESS) {
        (void)rad_get_last_error();
        return 0;
    }
    return rad_max_active_clusters((const void *)kernel, kStreamXsMaxWarps * 32, (size_t)optin, 2);
}

#if defined(RADIANCE_KERNEL_VARIANTS)
/* The benchmark build's other split-k rings of 2-step super-steps in 3 slots (run 79): whole in
 * each half without the scales, or for groups of 256 (streamsplitk2s3), the last super-step of
 * each half tested where k % 512 != 0 (the library's at k = 5376 from run 79 to run 81); whole with
 * the scales in the ring and two mma chains (streamsplitk2s3sr: the library's at k = 1024-6144
 * from run 80 to run 83); halves of k / 256 steps ending in a single step with the scales' windows,
 * the biased codes and one chain (splitktailwin: the library's at k = 5376 from run 82 to run 90);
 * whole halves one step apart with block 0's the longer (splitkshift0). nullptr for any other
 * plan. */
SplitKKernel split_k_variant_kernel(const ApplyArgs &a, const ApplyPlan &p, int slots)
{
    constexpr int kFine = kSplitKFineSteps, kFineSlots = kSplitKFineSlots;
    if (p.super_step != kFine || slots != kFineSlots || p.whole_super == p.tail_super) return nullptr;
    if (a.group == 128 && p.tail_super && p.ring_scales && p.biased_codes && p.one_chain)
        return apply_stream_split_k_kernel<128, false, true, kFine, kFineSlots, true, true, true>;
    if (a.group == 128 && p.whole_super && p.ring_scales && !p.biased_codes && p.one_chain && p.k_shift == 1)
        return apply_stream_split_k_kernel<128, true, true, kFine, kFineSlots, false, false, true, 1>;
    if (p.biased_codes || p.one_chain || (a.group != 128 && a.group != 256)) return nullptr;
    const bool g128 = a.group == 128, whole = p.whole_super;
    if (p.ring_scales) return g128 && whole ? apply_stream_split_k_kernel<128, true, true, kFine, kFineSlots> : nullptr;
    return g128 ? (whole ? apply_stream_split_k_kernel<128, true, false, kFine, kFineSlots>
                         : apply_stream_split_k_kernel<128, false, false, kFine, kFineSlots, true>)
                : (whole ? apply_stream_split_k_kernel<256, true, false, kFine, kFineSlots>
                         : apply_stream_split_k_kernel<256, false, false, kFine, kFineSlots, true>);
}
#endif

rad_error_t launch_stream_split_k(const ApplyArgs &a, const ApplyPlan &p)
{
    constexpr int kFine = kSplitKFineSteps, kFineSlots = kSplitKFineSlots;
    SplitKKernel kernel = nullptr;
    const int super_step = p.super_step, slots = p.ring_slots > 0 ? p.ring_slots : kStreamXsRingSlots;
    if (super_step == 4 && slots == kStreamXsRingSlots && !p.tail_super && !p.biased_codes && !p.one_chain) {
        /* whole super-steps in each half with their scales in the ring or not, or every step tested */
        if (a.group == 128)
            kernel = p.ring_scales   ? apply_stream_split_k_kernel<128, true, true>
                     : p.whole_super ? apply_stream_split_k_kernel<128, true>
                                     : apply_stream_split_k_kernel<128, false>;
        if (a.group == 256)
            kernel = p.ring_scales   ? apply_stream_split_k_kernel<256, true, true>
                     : p.whole_super ? apply_stream_split_k_kernel<256, true>
                                     : apply_stream_split_k_kernel<256, false>;
    } else if (super_step == kFine && slots == kFineSlots && a.group == 128 && p.whole_super && p.ring_scales &&
               p.one_chain && !p.biased_codes) {
        /* 2-step super-steps in 3 ring slots, whole in each half with the scales in the ring, one mma
         * chain (run 83): halves of k / 256 steps (k = 1024-6144, k % 512 == 0), or, where k / 256 is
         * odd (k = 5376), block 1's a step longer, its rows read from 128-byte boundaries (run 90;
         * dispatch.h, kSplitKShift) */
        if (p.k_shift == 0)
            kernel = apply_stream_split_k_kernel<128, true, true, kFine, kFineSlots, false, false, true>;
        else if (p.k_shift == kSplitKShift)
            kernel =
                apply_stream_split_k_kernel<128, true, true, kFine, kFineSlots, false, false, true, kSplitKShift>;
    }
#if defined(RADIANCE_KERNEL_VARIANTS)
    if (kernel == nullptr) kernel = split_k_variant_kernel(a, p, slots);
#endif
    /* the scales in the ring: with whole super-steps, or in windows with the last tested (2-step) */
    const bool ring_ok = p.whole_super || (p.tail_super && super_step == kSplitKFineSteps);
    /* whole super-steps in both halves, k / 256 + p.k_shift steps and k / 256 - p.k_shift */
    const int64_t half = a.k / 256;
    const bool whole_ok = (half + p.k_shift) % super_step == 0 && (half - p.k_shift) % super_step == 0;
    if (kernel == nullptr || p.blocks < 2 || p.blocks % 2 != 0 || a.k % (2 * a.group) != 0 ||
        (p.whole_super && !whole_ok) || (p.k_shift != 0 && !p.whole_super) || (p.ring_scales && !ring_ok))
        return (rad_error_t)RADIANCE_GPU_EINVAL;
    rad_error_t err = rad_func_set_max_dynamic_smem(kernel, p.smem);
    if (err != RAD_SUCCESS) return err;
    void *args[] = {(void *)&a.x, (void *)&a.m, (void *)&a.k, (void *)&a.packed, (void *)&a.scales,
                    (void *)&a.bias, (void *)&a.n, (void *)&a.out};
    return rad_launch_clusters((const void *)kernel, (unsigned)p.blocks, (unsigned)(p.warps * 32), (size_t)p.smem, 2,
                               a.stream, args);
}
#endif /* RAD_HAS_CLUSTER_LAUNCH */

} // namespace

int64_t split_k_clusters(void)
{
#if defined(RAD_HAS_CLUSTER_LAUNCH)
    return per_device_cached<split_k_max_clusters>();
#else
    return 0;
#endif
}

rad_error_t launch_stream_shared_x(const ApplyArgs &a, const ApplyPlan &p)
{
    if (p.row_tiles != 1 || p.warps < 1 || p.warps > kStreamXsMaxWarps || p.blocks < 1)
        return (rad_error_t)RADIANCE_GPU_EINVAL;
    if (p.k_parts == 2) {
#if defined(RAD_HAS_CLUSTER_LAUNCH)
        if (p.token_tiles == kSplitKTokenTiles) return launch_stream_split_k(a, p);
#endif
        return (rad_error_t)RADIANCE_GPU_EINVAL;
    }
    const int slots = p.ring_slots > 0 ? p.ring_slots : kStreamXsRingSlots;
    if (p.token_tiles == 1 && p.super_step == 4 && slots == kStreamXsRingSlots) return launch_stream_xs<1, 4>(a, p);
    return (rad_error_t)RADIANCE_GPU_EINVAL;
}

} // namespace radiance
