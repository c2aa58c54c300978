/*
 * apply_wmma.hip - the WMMA path of apply for AMD RDNA4 (gfx12) and RDNA3 (gfx11): 16x16x16 bf16
 * matrix multiply-accumulates through the rad_wmma layer (wmma.h), which is the builtin there and
 * an exact emulation of the same lane layout on NVIDIA (where the tests run this same source).
 *
 * A wave owns 16 rows of the head (the A operand, M = lane % 16) and TT tiles of 16 tokens (the B
 * operand, N = lane % 16). Each lane decodes its own row's words straight into bf16 pairs: element
 * pair j of a packed word (nibble order of docs/FORMAT.md: shifts 4j and 4j + 16) is columns 2j and
 * 2j + 1 of the word's 8, so a word gives 4 fragment words in column order, and the 16 bytes of
 * activations at the same 8 columns are the matching B fragment words. Which k a slot of one WMMA
 * holds is free as long as A and B agree, so on gfx12 (8 k per lane) a lane of half-wave h takes
 * whole words from its own half of a chunk of the group (one 16-byte load of 4 words where G >= 64,
 * 8 bytes of 2 words for G = 32); on gfx11 (16 k per lane, both half-waves the same) every lane
 * takes two consecutive words. Numerics as in every other path: bf16 activations, exactly
 * dequantized weights (q is an integer, exact in bf16), fp32 accumulation per group, scaled into
 * an fp32 total, one bf16 rounding at the end (+ bias).
 *
 * When the planner takes it (apply.hip): on gfx12/gfx11 from kWmmaMinTokens tokens. The budget
 * behind that number (docs/PERF_LOG.md, "AMD WMMA path"): the vector kernel spends about 3 + M
 * lane instructions per weight (decode + one FMA per token), a SIMD32 issues 32 per clock, so
 * (3 + M) / 32 clocks per weight; the R9700's 640 GB/s over 64 CUs x 2 SIMDs x 2.9 GHz leaves
 * about 0.29 SIMD clocks per weight (0.53 bytes each). The vector kernel is compute-bound from
 * M ~ 6. One gfx12 WMMA (16 clocks on a SIMD) plus ~16 decode instructions covers 256 weights for
 * 16 tokens: ~0.13 clocks per weight, so the WMMA path stays bandwidth-bound to 16 tokens and
 * ~7x ahead of the vector kernel's compute at 128. Below 8 tokens both are bandwidth-bound and
 * the vector kernel wastes no half-empty tiles, so the crossover is M = 8.
 *
 * The self-check (wmma_usable, through apply_check.hip): the first time the path would run on a
 * device, the WMMA and the vector kernels compute a small problem of small integers (exact in fp32,
 * so the outputs must be equal bit for bit); on a difference the device keeps the vector kernel
 * and stderr says so once.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apply_common.h"
#include "apply_paths.h"
#include "runtime.h"
#include "wmma.h"

namespace radiance {
namespace {

constexpr int kWmmaWaves = 4; /* waves (of 32 lanes) per block */

/* bf16 pair q(2j), q(2j + 1) of a packed word, shift = 4j: exact, because 2^23 + nibble - (2^23 +
 * 8) is the integer q and an integer of 4 bits is a bf16 with zero low bits. */
[[maybe_unused]] __device__ __forceinline__ uint32_t wmma_q_pair(uint32_t w, int shift)
{
    const float lo = rad_bits_to_float(0x4B000000u | ((w >> shift) & 15u)) - 8388616.0f;
    const float hi = rad_bits_to_float(0x4B000000u | ((w >> (shift + 16)) & 15u)) - 8388616.0f;
    return (rad_float_to_bits(lo) >> 16) | (rad_float_to_bits(hi) & 0xffff0000u);
}

template <int ARCH, int GROUP, int TT>
__global__ void __launch_bounds__(kWmmaWaves * 32)
apply_wmma_kernel(const uint16_t *__restrict__ x, int64_t m, int64_t k, const int32_t *__restrict__ packed,
                  const uint16_t *__restrict__ scales, const uint16_t *__restrict__ bias, int64_t n,
                  uint16_t *__restrict__ out, int64_t token_chunks, int corrupt)
{
    typedef rad_wmma<ARCH> L;
    if constexpr (L::present) {
        /* words per lane load: a chunk of CW words = CW / 2 WMMAs of 16 columns */
        constexpr int CW = GROUP >= 64 ? 8 : 4;
        constexpr int CHUNKS = GROUP / 8 / CW;
        const int lane = threadIdx.x & 31, wave = threadIdx.x >> 5;
        const int r = lane & 15, h = lane >> 4;
        const int64_t chunk = (int64_t)blockIdx.x % token_chunks;
        const int64_t row0 = ((int64_t)blockIdx.x / token_chunks * kWmmaWaves + wave) * 16;
        if (row0 >= n) return; /* whole wave */
        const int64_t tok0 = chunk * 16 * TT;
        const int64_t kw = k / 8, ng = k / GROUP;
        /* rows past n compute garbage from row n - 1 and store nothing */
        const int64_t arow = row0 + r < n ? row0 + r : n - 1;
        const int32_t *wrow = packed + arow * kw;
        const uint16_t *xrow[TT];
        bool xvalid[TT];
#pragma unroll
        for (int t = 0; t < TT; t++) {
            const int64_t tok = tok0 + 16 * t + r;
            xvalid[t] = tok < m;
            xrow[t] = x + (xvalid[t] ? tok : 0) * k;
        }
        /* the D rows of this lane and their scale rows */
        const uint16_t *srow[8];
#pragma unroll
        for (int v = 0; v < 8; v++) {
            const int64_t row = row0 + L::d_row(lane, v);
            srow[v] = scales + (row < n ? row : n - 1) * ng;
        }
        float total[TT][8];
#pragma unroll
        for (int t = 0; t < TT; t++)
#pragma unroll
            for (int v = 0; v < 8; v++) total[t][v] = 0.0f;

        constexpr int kChunkUnroll = ARCH == 11 ? 1 : 2;
        for (int64_t g = 0; g < ng; g++) {
            rad_wmma_acc acc[TT];
#pragma unroll
            for (int t = 0; t < TT; t++)
#pragma unroll
                for (int v = 0; v < 8; v++) acc[t].v[v] = 0.0f;
            /* two chunks at most unrolled (gfx12), one (gfx11, whose fragments are twice as wide):
             * fully unrolled, clang-19 hoisted all four chunks' loads of G = 256 at 4 tiles (gfx1201:
             * 256 VGPRs and 800 bytes of scratch per lane; gfx1100 at two: 480-512 bytes) */
#pragma unroll kChunkUnroll
            for (int c = 0; c < CHUNKS; c++) {
                const int64_t w0 = g * (GROUP / 8) + c * CW;
                if constexpr (ARCH == 12) {
                    /* half-wave h: words w0 + h CW/2 .. + CW/2 - 1, one per WMMA */
                    const int64_t wl = w0 + h * (CW / 2);
                    uint32_t words[CW / 2];
                    if constexpr (CW == 8) {
                        const rad_u32x4 v = rad_load_stream_16(wrow + wl);
                        words[0] = v.x; words[1] = v.y; words[2] = v.z; words[3] = v.w;
                    } else {
                        const uint2 v = rad_load_stream_8(wrow + wl);
                        words[0] = v.x; words[1] = v.y;
                    }
#pragma unroll
                    for (int s = 0; s < CW / 2; s++) {
                        typename L::frag a;
#pragma unroll
                        for (int j = 0; j < 4; j++) a.v[j] = wmma_q_pair(words[s], 4 * j);
#pragma unroll
                        for (int t = 0; t < TT; t++) {
                            rad_u32x4 xv = {0u, 0u, 0u, 0u};
                            if (xvalid[t]) xv = rad_load_cached_16(xrow[t] + 8 * (wl + s));
                            const typename L::frag b = {{xv.x, xv.y, xv.z, xv.w}};
                            L::mma(acc[t], a, b);
                        }
                    }
                } else {
                    /* every lane: words 2s, 2s + 1 of the chunk for WMMA s (K 0-7, 8-15) */
                    uint32_t words[CW];
#pragma unroll
                    for (int q = 0; q < CW / 4; q++) {
                        const rad_u32x4 v = rad_load_stream_16(wrow + w0 + 4 * q);
                        words[4 * q] = v.x; words[4 * q + 1] = v.y; words[4 * q + 2] = v.z; words[4 * q + 3] = v.w;
                    }
#pragma unroll
                    for (int s = 0; s < CW / 2; s++) {
                        typename L::frag a;
#pragma unroll
                        for (int j = 0; j < 4; j++) {
                            a.v[j] = wmma_q_pair(words[2 * s], 4 * j);
                            a.v[4 + j] = wmma_q_pair(words[2 * s + 1], 4 * j);
                        }
#pragma unroll
                        for (int t = 0; t < TT; t++) {
                            rad_u32x4 x0 = {0u, 0u, 0u, 0u}, x1 = {0u, 0u, 0u, 0u};
                            if (xvalid[t]) {
                                x0 = rad_load_cached_16(xrow[t] + 8 * (w0 + 2 * s));
                                x1 = rad_load_cached_16(xrow[t] + 8 * (w0 + 2 * s + 1));
                            }
                            const typename L::frag b = {{x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w}};
                            L::mma(acc[t], a, b);
                        }
                    }
                }
            }
#pragma unroll
            for (int v = 0; v < 8; v++) {
                const float s = rad_bf16_to_float(srow[v][g]);
#pragma unroll
                for (int t = 0; t < TT; t++) total[t][v] += s * acc[t].v[v];
            }
        }
#pragma unroll
        for (int v = 0; v < 8; v++) {
            /* the test flag's wrong kernel: rows swapped in pairs */
            const int64_t row = row0 + L::d_row(lane, corrupt ? v ^ 1 : v);
            if (row >= n) continue;
#pragma unroll
            for (int t = 0; t < TT; t++) {
                const int64_t tok = tok0 + 16 * t + r;
                if (tok < m) out[tok * n + row] = out_bf16(total[t][v], bias, row);
            }
        }
    }
}

template <int ARCH, int GROUP>
rad_error_t launch_arch_group(const ApplyArgs &a, const ApplyPlan &p)
{
    const int tt = p.token_tiles;
    const int64_t token_chunks = (a.m + 16 * tt - 1) / (16 * tt);
    const int64_t row_blocks = (a.n + 16 * kWmmaWaves - 1) / (16 * kWmmaWaves);
    const int64_t blocks = row_blocks * token_chunks;
    if (blocks > 0x7fffffffLL) return (rad_error_t)RADIANCE_GPU_EINVAL;
    const int corrupt = p.corrupt ? 1 : 0;
#define RAD_WMMA_LAUNCH(TT)                                                                                    \
    apply_wmma_kernel<ARCH, GROUP, TT><<<(unsigned)blocks, kWmmaWaves * 32, 0, a.stream>>>(                    \
        a.x, a.m, a.k, a.packed, a.scales, a.bias, a.n, a.out, token_chunks, corrupt)
    switch (tt) {
    case 1: RAD_WMMA_LAUNCH(1); break;
    case 2: RAD_WMMA_LAUNCH(2); break;
    case 4: RAD_WMMA_LAUNCH(4); break;
    default: return (rad_error_t)RADIANCE_GPU_EINVAL;
    }
#undef RAD_WMMA_LAUNCH
    return rad_get_last_error();
}

template <int ARCH>
rad_error_t launch_arch(const ApplyArgs &a, const ApplyPlan &p)
{
    switch (a.group) {
    case 32: return launch_arch_group<ARCH, 32>(a, p);
    case 64: return launch_arch_group<ARCH, 64>(a, p);
    case 128: return launch_arch_group<ARCH, 128>(a, p);
    case 256: return launch_arch_group<ARCH, 256>(a, p);
    }
    return (rad_error_t)RADIANCE_GPU_EINVAL;
}

} // namespace

rad_error_t launch_wmma(const ApplyArgs &a, const ApplyPlan &p)
{
    if (p.wmma_arch == 12) return launch_arch<12>(a, p);
    if (p.wmma_arch == 11) return launch_arch<11>(a, p);
    return (rad_error_t)RADIANCE_GPU_EINVAL;
}

namespace {

/* 1 where the kernel has a body for the current device (wmma_built in apply_paths.h): an empty
 * stand-in (an NVIDIA pass other than sm_90) uses a handful of registers, the emulation dozens. */
int wmma_probe(void)
{
    if (rad_amd) return 1;
    return rad_func_num_regs((const void *)apply_wmma_kernel<12, 128, 1>) >= 24;
}

} // namespace

bool wmma_built(void) { return per_device_cached<wmma_probe>() == 1; }

bool wmma_usable(const ApplyArgs &a, int arch, bool corrupt)
{
    if (!wmma_built()) return false;
    ApplyPlan p;
    memset(&p, 0, sizeof p);
    p.path = ApplyPath::kWmma;
    p.token_tiles = 1;
    p.wmma_arch = arch;
    p.corrupt = corrupt;
    char label[48];
    snprintf(label, sizeof label, "WMMA kernel (gfx%d layout)", arch);
    return path_usable(a, p, arch == 11 ? kCheckWmma11 : kCheckWmma12, "RADIANCE_AMD_WMMA", label, launch_wmma);
}

int wmma_device_arch(void) { return per_device_cached<rad_wmma_arch>(); }

/* ---------------------------------------------------------------------------------------- */
/* radiance_gpu_test_wmma: one rad_wmma of one wave, for the layout test                      */
/* ---------------------------------------------------------------------------------------- */
namespace {

template <int ARCH>
__global__ void __launch_bounds__(32) wmma_fragment_kernel(const uint32_t *a, const uint32_t *b, const float *c, float *d)
{
    typedef rad_wmma<ARCH> L;
    if constexpr (L::present) {
        const int lane = threadIdx.x & 31;
        typename L::frag fa, fb;
        rad_wmma_acc acc;
#pragma unroll
        for (int j = 0; j < L::kWords; j++) {
            fa.v[j] = a[lane * L::kWords + j];
            fb.v[j] = b[lane * L::kWords + j];
        }
#pragma unroll
        for (int v = 0; v < 8; v++) acc.v[v] = c[lane * 8 + v];
        L::mma(acc, fa, fb);
#pragma unroll
        for (int v = 0; v < 8; v++) d[lane * 8 + v] = acc.v[v];
    }
}

} // namespace
} // namespace radiance

extern "C" int radiance_gpu_test_wmma(int arch, const uint32_t *a, const uint32_t *b, const float *c, float *d)
{
    using namespace radiance;
    if ((arch != 11 && arch != 12) || a == NULL || b == NULL || c == NULL || d == NULL) return RADIANCE_GPU_EINVAL;
    if (rad_amd && wmma_device_arch() != arch) return RADIANCE_GPU_EINVAL; /* the builtin of another chip */
    if (!wmma_built()) return RADIANCE_GPU_EINVAL; /* an NVIDIA build without sm_90 code for this GPU */
    const int words = arch == 12 ? 4 : 8;
    uint32_t *da = nullptr, *db = nullptr;
    float *dc = nullptr, *dd = nullptr;
    rad_error_t err = rad_malloc((void **)&da, 32 * words * 4);
    if (err == RAD_SUCCESS) err = rad_malloc((void **)&db, 32 * words * 4);
    if (err == RAD_SUCCESS) err = rad_malloc((void **)&dc, 32 * 8 * 4);
    if (err == RAD_SUCCESS) err = rad_malloc((void **)&dd, 32 * 8 * 4);
    if (err == RAD_SUCCESS) err = rad_memcpy(da, a, 32 * words * 4, RAD_MEMCPY_H2D);
    if (err == RAD_SUCCESS) err = rad_memcpy(db, b, 32 * words * 4, RAD_MEMCPY_H2D);
    if (err == RAD_SUCCESS) err = rad_memcpy(dc, c, 32 * 8 * 4, RAD_MEMCPY_H2D);
    if (err == RAD_SUCCESS) {
        if (arch == 12) wmma_fragment_kernel<12><<<1, 32>>>(da, db, dc, dd);
        else wmma_fragment_kernel<11><<<1, 32>>>(da, db, dc, dd);
        err = rad_get_last_error();
    }
    if (err == RAD_SUCCESS) err = rad_memcpy(d, dd, 32 * 8 * 4, RAD_MEMCPY_D2H);
    (void)rad_free(da); (void)rad_free(db); (void)rad_free(dc); (void)rad_free(dd);
    return (int)err;
}
