/*
 * apply_stream.hip - the stream paths of apply (NVIDIA sm_80+, G >= 128, up to 8 tokens; which
 * tokens take which: hip/apply.hip, make_plan): mma.sync m16n8k16 as in apply_mma.hip,
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
 * shared memory, one block per SM; the planner takes it where they fit (plan_stream_shared_x).
 */
#include "apply_common.h"
#include "apply_paths.h"
#include "ptx_sm80.h"
#include "runtime.h"

namespace radiance {
namespace {

constexpr int kStreamWarps = 4;

template <int ROW_TILES, int SUPER_STEPS>
struct StreamSmem {
    static constexpr int slot = 16 * ROW_TILES * 64 * SUPER_STEPS; /* one ring slot: a super-step of a warp's rows */
};

/* The rows row0 .. row0 + 16 ROW_TILES - 1 (those below n) of a stream warp, for the tokens tok0 ..
 * tok0 + 8 TOKEN_TILES - 1 (those below m), through this warp's ring. X_MODE kXShared: xs is the block's
 * copy of the activations of these tokens (16 k bytes per 8 tokens). */
template <int GROUP, int ROW_TILES, int TOKEN_TILES, int SUPER_STEPS, int RING_SLOTS, int X_MODE>
__device__ __forceinline__ void stream_warp_rows(const uint16_t *__restrict__ x, int64_t m, int64_t k,
                                                 const int32_t *__restrict__ packed,
                                                 const uint16_t *__restrict__ scales,
                                                 const uint16_t *__restrict__ bias, int64_t n,
                                                 uint16_t *__restrict__ out, int64_t row0, int64_t tok0,
                                                 unsigned char *ring, const unsigned char *xs)
{
#if defined(RAD_HAS_MMA_BF16)
    static_assert(GROUP >= 128, "one scale per row and step");
    static_assert(SUPER_STEPS % 2 == 0, "the activation register set of step j SUPER_STEPS + p is p & 1");
    constexpr int kRowsW = 16 * ROW_TILES;
    constexpr int kRowBytes = 64 * SUPER_STEPS;                 /* one visit */
    constexpr int kSlot = StreamSmem<ROW_TILES, SUPER_STEPS>::slot;
    constexpr int kLanesPerRow = 4 * SUPER_STEPS;               /* 16-byte pieces per visit */
    constexpr int kCopies = kRowsW * kLanesPerRow / 32; /* per lane and super-step */
    constexpr bool XS = X_MODE == kXShared;
    const int lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;
    const int64_t kw = k / 8, ng = k / GROUP;
    const int nsteps = (int)(kw / kStepWords);
    const int nsuper = (nsteps + SUPER_STEPS - 1) / SUPER_STEPS;

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
        if (j < nsuper && j * SUPER_STEPS + (cpiece >> 2) < nsteps) {
            const int dst = (j % RING_SLOTS) * kSlot + cdst;
            const unsigned char *src = csrc + (int64_t)j * (SUPER_STEPS * kStepWords * 4);
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
    /* scales of this thread's rows (16 mt + g + 8 hi) for the SUPER_STEPS steps of a super-step, as pairs
     * (row g | row g + 8 << 16), loaded a super-step ahead; rows past the end read row n - 1 */
    const uint16_t *srow[ROW_TILES][2];
#pragma unroll
    for (int mt = 0; mt < ROW_TILES; mt++)
#pragma unroll
        for (int hi = 0; hi < 2; hi++) {
            int64_t row = row0 + 16 * mt + g + 8 * hi;
            row = row < n ? row : n - 1;
            srow[mt][hi] = scales + row * ng;
        }
    uint32_t scur[SUPER_STEPS][ROW_TILES], snext[SUPER_STEPS][ROW_TILES];
    auto load_scales = [&](uint32_t (&dst)[SUPER_STEPS][ROW_TILES], int j) __attribute__((always_inline)) {
#pragma unroll
        for (int p = 0; p < SUPER_STEPS; p++) {
            const int step = j * SUPER_STEPS + p;
            const int grp = GROUP == 256 ? step >> 1 : step;
#pragma unroll
            for (int mt = 0; mt < ROW_TILES; mt++)
                dst[p][mt] = step < nsteps ? (uint32_t)srow[mt][0][grp] | ((uint32_t)srow[mt][1][grp] << 16)
                                                         : 0u;
        }
    };

    /* two mma chains (the low and high k8 of each k16) */
    float total[ROW_TILES][TOKEN_TILES][4], acc[2][ROW_TILES][TOKEN_TILES][4];
#pragma unroll
    for (int mt = 0; mt < ROW_TILES; mt++)
#pragma unroll
        for (int nt = 0; nt < TOKEN_TILES; nt++)
#pragma unroll
            for (int c = 0; c < 4; c++) total[mt][nt][c] = acc[0][mt][nt][c] = acc[1][mt][nt][c] = 0.0f;
    /* activations from global memory: loaded one step ahead into alternating register sets (4
     * words x 16 bytes per token). Whatever lanes of tokens past m hold only reaches that token's
     * column of the mma result, which is never stored. From shared memory: loaded in the step. */
    const uint16_t *xsrc[TOKEN_TILES];
    bool xvalid[TOKEN_TILES];
#pragma unroll
    for (int nt = 0; nt < TOKEN_TILES; nt++) {
        const int64_t tok = tok0 + 8 * nt + g;
        xvalid[nt] = X_MODE == kXClamp || tok < m;
        xsrc[nt] = x + (tok < m ? tok : m - 1) * k + 32 * t;
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
            uint32_t junk; /* defined but arbitrary contents (no instruction) */
            asm("" : "=r"(junk));
            xb[0][nt][i] = rad_u32x4{junk, junk, junk, junk};
            xb[1][nt][i] = rad_u32x4{junk, junk, junk, junk};
            if (!XS && xvalid[nt]) xb[0][nt][i] = rad_load_cached_16(xsrc[nt] + 8 * i);
        }
        xsrc[nt] += kStepWords * 8;
    }

#pragma unroll
    for (int p = 0; p < RING_SLOTS - 1; p++) issue(p);
    load_scales(snext, 0);

    for (int j = 0; j < nsuper; j++) {
        rad_cp_async_wait<RING_SLOTS - 2>(); /* this lane's copies of super-step j have landed */
        __syncwarp();                /* and everyone's; everyone is done with super-step j - 1 */
        issue(j + RING_SLOTS - 1);           /* into the slot of super-step j - 1 */
#pragma unroll
        for (int p = 0; p < SUPER_STEPS; p++)
#pragma unroll
            for (int mt = 0; mt < ROW_TILES; mt++) scur[p][mt] = snext[p][mt];
        if (j + 1 < nsuper) load_scales(snext, j + 1);
        const unsigned char *slot = ring + (j % RING_SLOTS) * kSlot;
#pragma unroll
        for (int p = 0; p < SUPER_STEPS; p++) {
            const int step = j * SUPER_STEPS + p;
            if (step >= nsteps) break;
            rad_u32x4 (&xcur)[TOKEN_TILES][4] = xb[XS ? 0 : p & 1];
            rad_u32x4 (&xnext)[TOKEN_TILES][4] = xb[(p + 1) & 1];
            if (XS) {
#pragma unroll
                for (int nt = 0; nt < TOKEN_TILES; nt++)
#pragma unroll
                    for (int i = 0; i < 4; i++)
                        xcur[nt][i] = rad_load_cached_16(xs_lane[nt] + (4 * step + i) * 512);
            } else if (step + 1 < nsteps) {
#pragma unroll
                for (int nt = 0; nt < TOKEN_TILES; nt++) {
                    if (xvalid[nt]) {
#pragma unroll
                        for (int i = 0; i < 4; i++) xnext[nt][i] = rad_load_cached_16(xsrc[nt] + 8 * i);
                    }
                    xsrc[nt] += kStepWords * 8;
                }
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
                for (int nt = 0; nt < TOKEN_TILES; nt++)
#pragma unroll
                    for (int mt = 0; mt < ROW_TILES; mt++) {
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
                for (int mt = 0; mt < ROW_TILES; mt++) {
                    const float s_lo = rad_bf16_to_float(scur[p][mt] & 0xffffu);
                    const float s_hi = rad_bf16_to_float(scur[p][mt] >> 16);
#pragma unroll
                    for (int nt = 0; nt < TOKEN_TILES; nt++) {
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
    for (int mt = 0; mt < ROW_TILES; mt++)
#pragma unroll
        for (int nt = 0; nt < TOKEN_TILES; nt++)
#pragma unroll
            for (int c = 0; c < 4; c++) {
                const int64_t row = row0 + 16 * mt + g + 8 * (c >> 1);
                const int64_t tok = tok0 + 8 * nt + 2 * t + (c & 1);
                if (row < n && tok < m) out[tok * n + row] = out_bf16(total[mt][nt][c], bias, row);
            }
#endif
}

template <int GROUP, int ROW_TILES, int TOKEN_TILES, int SUPER_STEPS, int RING_SLOTS, int X_MODE = kXClamp>
__global__ void __launch_bounds__(kStreamWarps * 32, ROW_TILES * TOKEN_TILES == 1 ? 4 : 1)
apply_stream_kernel(const uint16_t *__restrict__ x, int64_t m, int64_t k, const int32_t *__restrict__ packed,
                    const uint16_t *__restrict__ scales, const uint16_t *__restrict__ bias, int64_t n,
                    uint16_t *__restrict__ out, int64_t token_chunks)
{
    static_assert(X_MODE != kXShared, "apply_stream_xs_kernel");
    extern __shared__ __align__(16) unsigned char smem[];
    const int warp = threadIdx.x >> 5;
    const int64_t chunk = (int64_t)blockIdx.x % token_chunks;
    const int64_t row_block = (int64_t)blockIdx.x / token_chunks;
    const int64_t row0 = (row_block * kStreamWarps + warp) * (16 * ROW_TILES);
    if (row0 >= n) return; /* whole warp; no block-wide barriers in this kernel */
    unsigned char *ring = smem + warp * (RING_SLOTS * StreamSmem<ROW_TILES, SUPER_STEPS>::slot);
    stream_warp_rows<GROUP, ROW_TILES, TOKEN_TILES, SUPER_STEPS, RING_SLOTS, X_MODE>(
        x, m, k, packed, scales, bias, n, out, row0, chunk * (8 * TOKEN_TILES), ring, nullptr);
}

} // namespace

/* The stream kernel: 1 n-tile, 4-step super-steps, 2 ring slots; 1 m-tile (2 in the benchmark
 * build's streamM2). */
rad_error_t launch_stream(const ApplyArgs &a, const ApplyPlan &p)
{
    constexpr int kTokenTiles = 1, kSuperSteps = 4, kRingSlots = 2;
    if (p.token_tiles != kTokenTiles) return (rad_error_t)RADIANCE_GPU_EINVAL;
    void (*kernel)(const uint16_t *, int64_t, int64_t, const int32_t *, const uint16_t *, const uint16_t *, int64_t,
                   uint16_t *, int64_t) = nullptr;
    const bool g128 = a.group == 128;
    if (a.group != 128 && a.group != 256) return (rad_error_t)RADIANCE_GPU_EINVAL;
    if (p.row_tiles == 1 && p.x_mode == kXClamp)
        kernel = g128 ? apply_stream_kernel<128, 1, kTokenTiles, kSuperSteps, kRingSlots, kXClamp>
                      : apply_stream_kernel<256, 1, kTokenTiles, kSuperSteps, kRingSlots, kXClamp>;
    else if (p.row_tiles == 1 && p.x_mode == kXSkip)
        kernel = g128 ? apply_stream_kernel<128, 1, kTokenTiles, kSuperSteps, kRingSlots, kXSkip>
                      : apply_stream_kernel<256, 1, kTokenTiles, kSuperSteps, kRingSlots, kXSkip>;
#if defined(RADIANCE_KERNEL_VARIANTS)
    else if (p.row_tiles == 2 && p.x_mode == kXClamp)
        kernel = g128 ? apply_stream_kernel<128, 2, kTokenTiles, kSuperSteps, kRingSlots, kXClamp>
                      : apply_stream_kernel<256, 2, kTokenTiles, kSuperSteps, kRingSlots, kXClamp>;
#endif
    if (kernel == nullptr) return (rad_error_t)RADIANCE_GPU_EINVAL;
    const int64_t rows_per_block = 16 * p.row_tiles * kStreamWarps;
    const int64_t row_blocks = (a.n + rows_per_block - 1) / rows_per_block;
    const int64_t chunks = (a.m + 8 * kTokenTiles - 1) / (8 * kTokenTiles);
    const int64_t blocks = row_blocks * chunks;
    if (blocks > 0x7fffffffLL) return (rad_error_t)RADIANCE_GPU_EINVAL;
    const int smem = kStreamWarps * kRingSlots * 16 * p.row_tiles * 64 * kSuperSteps; /* StreamSmem */
    rad_error_t err = rad_func_set_max_dynamic_smem(kernel, smem);
    if (err != RAD_SUCCESS) return err;
    kernel<<<(unsigned)blocks, kStreamWarps * 32, smem, a.stream>>>(a.x, a.m, a.k, a.packed, a.scales, a.bias, a.n,
                                                                    a.out, chunks);
    return rad_get_last_error();
}

namespace {

constexpr int kStreamXsMaxWarps = 16; /* apply_stream_xs_kernel: one block per SM */
constexpr int kStreamXsRingSlots = 2;

/* The stream kernel with the activations in shared memory (path kStreamSharedX), for heads whose
 * activations fit there beside the rings (16 k bytes per 8 tokens; m <= 8 TOKEN_TILES). One block
 * per SM, each warp with its own ring, loops over 16 ROW_TILES-row units of the head (unit = warp +
 * warps in the grid x i). First the block copies x into shared memory, once, in the order the lanes
 * read it: for step s, load i (columns 8 i .. 8 i + 7 of each lane's 32) and lane L = 4 g + t, the
 * 16 bytes of token 8 nt + g at column 128 s + 32 t + 8 i sit at nt * 16 k + ((4 s + i) * 32 + L) *
 * 16. A load of the warp reads at most 512 contiguous bytes: 4 shared-memory wavefronts, where 8
 * tokens' rows in global memory touch 16 L1 lines. Tokens past m are zeros (and not read: see
 * stream_warp_rows). Built with TOKEN_TILES 1, SUPER_STEPS 4 only (docs/PERF_LOG.md, run 26:
 * 203.9 against 234.3 us at 8 tokens; the 16-token instances lost to the wgmma kernel, run 31). */
template <int GROUP, int ROW_TILES, int TOKEN_TILES, int SUPER_STEPS, int RING_SLOTS>
__global__ void __launch_bounds__(kStreamXsMaxWarps * 32, 1)
apply_stream_xs_kernel(const uint16_t *__restrict__ x, int64_t m, int64_t k, const int32_t *__restrict__ packed,
                       const uint16_t *__restrict__ scales, const uint16_t *__restrict__ bias, int64_t n,
                       uint16_t *__restrict__ out)
{
#if defined(RAD_HAS_MMA_BF16)
    extern __shared__ __align__(16) unsigned char smem[];
    const int warps = (int)(blockDim.x >> 5), warp = (int)(threadIdx.x >> 5);
    const int kk = (int)k; /* the copy fits in shared memory, so k is small */
    unsigned char *xs = smem + warps * (RING_SLOTS * StreamSmem<ROW_TILES, SUPER_STEPS>::slot);
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
    const int64_t units = (n + 16 * ROW_TILES - 1) / (16 * ROW_TILES);
    unsigned char *ring = smem + warp * (RING_SLOTS * StreamSmem<ROW_TILES, SUPER_STEPS>::slot);
    for (int64_t u = (int64_t)blockIdx.x * warps + warp; u < units; u += (int64_t)gridDim.x * warps) {
        __syncwarp(); /* every lane is done with the ring (the last unit's reads) before it refills */
        stream_warp_rows<GROUP, ROW_TILES, TOKEN_TILES, SUPER_STEPS, RING_SLOTS, kXShared>(
            x, m, k, packed, scales, bias, n, out, u * (16 * ROW_TILES), 0, ring, xs);
    }
#endif
}

template <int TOKEN_TILES, int SUPER_STEPS>
rad_error_t launch_stream_xs(const ApplyArgs &a, const ApplyPlan &p)
{
    void (*kernel)(const uint16_t *, int64_t, int64_t, const int32_t *, const uint16_t *, const uint16_t *, int64_t,
                   uint16_t *) = nullptr;
    if (a.group == 128) kernel = apply_stream_xs_kernel<128, 1, TOKEN_TILES, SUPER_STEPS, kStreamXsRingSlots>;
    if (a.group == 256) kernel = apply_stream_xs_kernel<256, 1, TOKEN_TILES, SUPER_STEPS, kStreamXsRingSlots>;
    if (kernel == nullptr) return (rad_error_t)RADIANCE_GPU_EINVAL;
    rad_error_t err = rad_func_set_max_dynamic_smem(kernel, p.smem);
    if (err != RAD_SUCCESS) return err;
    kernel<<<(unsigned)p.blocks, (unsigned)(p.warps * 32), p.smem, a.stream>>>(a.x, a.m, a.k, a.packed, a.scales,
                                                                             a.bias, a.n, a.out);
    return rad_get_last_error();
}

} // namespace

bool plan_stream_shared_x(const ApplyArgs &a, int token_tiles, int super_step, int min_warps, bool balance,
                          ApplyPlan *p)
{
    if (a.m > 8 * token_tiles || (a.group != 128 && a.group != 256)) return false;
    const int64_t ring = (int64_t)kStreamXsRingSlots * 16 * 64 * super_step; /* per warp: StreamSmem<1, SS> */
    const int64_t xbytes = (int64_t)token_tiles * 16 * a.k;
    const int64_t optin = per_device_cached<rad_smem_optin>();
    const int64_t sms = per_device_cached<rad_sm_count>();
    if (sms <= 0 || xbytes >= optin) return false;
    int64_t fit = (optin - xbytes) / ring;
    if (fit > kStreamXsMaxWarps) fit = kStreamXsMaxWarps;
    if (fit < min_warps || fit < 1) return false;
    const int64_t units = (a.n + 15) / 16;
    auto blocks_for = [&](int64_t w) { return (units + w - 1) / w < sms ? (units + w - 1) / w : sms; };
    int64_t warps = fit;
    if (balance) {
        /* the fewest warp-slots (rounds x warps in the grid) over the units; ties: more warps */
        int64_t best = -1;
        for (int64_t w = fit; w >= min_warps && w >= 1; w--) {
            const int64_t grid = blocks_for(w) * w, slots = (units + grid - 1) / grid * grid;
            if (best < 0 || slots < best) best = slots, warps = w;
        }
    }
    p->path = ApplyPath::kStreamSharedX;
    p->row_tiles = 1;
    p->token_tiles = token_tiles;
    p->super_step = super_step;
    p->x_mode = kXShared;
    p->warps = (int)warps;
    p->blocks = (int)blocks_for(warps);
    p->smem = (int)(warps * ring + xbytes);
    return true;
}

rad_error_t launch_stream_shared_x(const ApplyArgs &a, const ApplyPlan &p)
{
    if (p.row_tiles != 1 || p.warps < 1 || p.warps > kStreamXsMaxWarps || p.blocks < 1)
        return (rad_error_t)RADIANCE_GPU_EINVAL;
    if (p.token_tiles == 1 && p.super_step == 4) return launch_stream_xs<1, 4>(a, p);
    return (rad_error_t)RADIANCE_GPU_EINVAL;
}

} // namespace radiance
