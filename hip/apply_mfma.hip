/*
 * apply_mfma.hip - the MFMA path of apply for AMD CDNA (gfx942 MI300, gfx90a MI200): 16x16x16 bf16
 * matrix multiply-accumulates of a 64-lane wave through the rad_mfma layer (mfma.h), which is the
 * builtin there and an exact emulation of the same lane layout on NVIDIA (where the tests run this
 * same source; an emulated wave is two warps).
 *
 * A wave owns kMfmaRowTiles tiles of 16 rows of the head (the A operand: row = lane % 16) and TT
 * tiles of 16 tokens (the B operand: token = lane % 16). Lane group lg = lane / 16 (four per wave)
 * holds K 4 lg .. 4 lg + 3 of each MFMA. Which k a slot holds is free as long as A and B agree, so
 * the four lane groups split each group of G columns into quarters of G / 32 whole packed words
 * (one 16-byte load per lane and row tile at G = 128; 8, 4 bytes at G = 64, 32; two loads at 256),
 * and a word is two MFMAs: its nibble pairs 0-1 (columns 0-3) and 2-3 (columns 4-7), the B side the
 * first and second 8 bytes of one 16-byte load of the activations at the word's 8 columns. Each
 * activation fragment feeds the MFMAs of both row tiles. Decoding: q = nibble - 8 is the nibble
 * with its top bit flipped, read as a signed 4-bit integer (one XOR per word, then a signed
 * bit-field extract and a conversion per weight: exact in bf16). Numerics as in every other path:
 * bf16 activations, exactly dequantized weights, fp32 accumulation per group, scaled into an fp32
 * total, one bf16 rounding at the end (+ bias).
 *
 * Written for CDNA: wave64 blocks of kMfmaWaves waves (one per SIMD of a CU), the accumulators of
 * the MFMA (2 x TT x 4 floats per lane) in the unified VGPR/AGPR file, the next group's words in
 * flight while the current one is computed; the activations come from L1/L2 (16-byte loads, each
 * feeding 2 x kMfmaRowTiles MFMAs) rather than LDS: at 64 tokens that is 2 KiB of activations per
 * 1 KiB of weights a wave reads, which the L1 serves (docs/amd.md, "Activations"). The compiler's
 * registers and occupancy per target: benchmarks/amd_kernels.py.
 *
 * When the planner takes it (apply.hip): on gfx942/gfx90a from kMfmaMinTokens tokens; the budget
 * behind it is docs/amd.md. The self-check (apply_check.hip) compares it with the vector kernel on
 * the first use on each device, as the WMMA path's; RADIANCE_AMD_MFMA=0/1 turns it off / skips it.
 */
#include <stdio.h>
#include <string.h>

#include "apply_common.h"
#include "apply_paths.h"
#include "mfma.h"
#include "runtime.h"

namespace radiance {
namespace {

constexpr int kMfmaWaves = 4;    /* waves (of 64 lanes) per block: one per SIMD of a CDNA CU */
constexpr int kMfmaRowTiles = 2; /* 16-row tiles per wave: each activation fragment feeds 2 MFMAs */
static_assert(kMfmaWaves <= RAD_MFMA_MAX_WAVES, "the emulation's shared memory holds this many waves");

/* The four A-fragment words (bf16 pairs q(2j), q(2j + 1), j = 0..3) of a packed word. Pair j sits at
 * shifts 4j and 4j + 16 (docs/FORMAT.md); q = nibble - 8 is (nibble ^ 8) read as a signed 4-bit
 * integer, an integer of magnitude <= 8 is a bf16 with zero low bits. */
[[maybe_unused]] __device__ __forceinline__ void mfma_q_pairs(uint32_t w, uint32_t pairs[4])
{
    const uint32_t s = w ^ 0x88888888u;
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const float lo = (float)((int32_t)(s << (28 - 4 * j)) >> 28);
        const float hi = (float)((int32_t)(s << (12 - 4 * j)) >> 28);
        pairs[j] = rad_mfma_pack_bf16(lo, hi);
    }
}

/* The WPL words of one lane's quarter of a group of one row. */
template <int WPL>
__device__ __forceinline__ void mfma_load_words(const int32_t *p, uint32_t words[WPL])
{
    if constexpr (WPL >= 4) {
#pragma unroll
        for (int q = 0; q < WPL / 4; q++) {
            const rad_u32x4 v = rad_load_stream_16(p + 4 * q);
            words[4 * q] = v.x; words[4 * q + 1] = v.y; words[4 * q + 2] = v.z; words[4 * q + 3] = v.w;
        }
    } else if constexpr (WPL == 2) {
        const uint2 v = rad_load_stream_8(p);
        words[0] = v.x; words[1] = v.y;
    } else {
        words[0] = rad_load_stream_4(p);
    }
}

template <int GROUP, int TT>
__global__ void __launch_bounds__(kMfmaWaves * 64)
apply_mfma_kernel(const uint16_t *__restrict__ x, int64_t m, int64_t k, const int32_t *__restrict__ packed,
                  const uint16_t *__restrict__ scales, const uint16_t *__restrict__ bias, int64_t n,
                  uint16_t *__restrict__ out, int64_t token_chunks, int corrupt)
{
    if constexpr (rad_mfma::present) {
        constexpr int WPL = GROUP / 32; /* words per lane and row tile in a group */
        constexpr int RT = kMfmaRowTiles;
        const int lane = threadIdx.x & 63, wave = threadIdx.x >> 6;
        const int c = lane & 15, lg = lane >> 4;
        const int64_t chunk = (int64_t)blockIdx.x % token_chunks;
        const int64_t row0 = ((int64_t)blockIdx.x / token_chunks * kMfmaWaves + wave) * 16 * RT;
        if (row0 >= n) return; /* whole wave (both warps of an emulated one) */
        const int64_t tok0 = chunk * 16 * TT;
        const int64_t kw = k / 8, ng = k / GROUP;
        /* rows past n compute garbage from row n - 1 and store nothing */
        const int32_t *wrow[RT];
        const uint16_t *srow[RT][4];
#pragma unroll
        for (int rt = 0; rt < RT; rt++) {
            const int64_t arow = row0 + 16 * rt + c;
            wrow[rt] = packed + (arow < n ? arow : n - 1) * kw + lg * WPL;
#pragma unroll
            for (int v = 0; v < 4; v++) {
                const int64_t row = row0 + 16 * rt + rad_mfma::d_row(lane, v);
                srow[rt][v] = scales + (row < n ? row : n - 1) * ng;
            }
        }
        const uint16_t *xrow[TT];
        bool xvalid[TT];
#pragma unroll
        for (int t = 0; t < TT; t++) {
            const int64_t tok = tok0 + 16 * t + c;
            xvalid[t] = tok < m;
            xrow[t] = x + (xvalid[t] ? tok : 0) * k + 8 * lg * WPL;
        }
        float total[RT][TT][4];
#pragma unroll
        for (int rt = 0; rt < RT; rt++)
#pragma unroll
            for (int t = 0; t < TT; t++)
#pragma unroll
                for (int v = 0; v < 4; v++) total[rt][t][v] = 0.0f;

        uint32_t words[RT][WPL];
#pragma unroll
        for (int rt = 0; rt < RT; rt++) mfma_load_words<WPL>(wrow[rt], words[rt]);
        for (int64_t g = 0; g < ng; g++) {
            /* the next group's words in flight (the last group loads itself again: no predicate) */
            const int64_t gn = g + 1 < ng ? g + 1 : g;
            uint32_t next[RT][WPL];
#pragma unroll
            for (int rt = 0; rt < RT; rt++) mfma_load_words<WPL>(wrow[rt] + gn * (GROUP / 8), next[rt]);
            rad_mfma_acc acc[RT][TT];
#pragma unroll
            for (int rt = 0; rt < RT; rt++)
#pragma unroll
                for (int t = 0; t < TT; t++)
#pragma unroll
                    for (int v = 0; v < 4; v++) acc[rt][t].v[v] = 0.0f;
#pragma unroll
            for (int i = 0; i < WPL; i++) {
                uint32_t pairs[RT][4];
#pragma unroll
                for (int rt = 0; rt < RT; rt++) mfma_q_pairs(words[rt][i], pairs[rt]);
#pragma unroll
                for (int t = 0; t < TT; t++) {
                    rad_u32x4 xv = {0u, 0u, 0u, 0u};
                    if (xvalid[t]) xv = rad_load_cached_16(xrow[t] + g * GROUP + 8 * i);
#pragma unroll
                    for (int u = 0; u < 2; u++) {
                        const rad_mfma_frag b = {{u ? xv.z : xv.x, u ? xv.w : xv.y}};
#pragma unroll
                        for (int rt = 0; rt < RT; rt++) {
                            const rad_mfma_frag a = {{pairs[rt][2 * u], pairs[rt][2 * u + 1]}};
                            rad_mfma::mma(acc[rt][t], a, b);
                        }
                    }
                }
            }
#pragma unroll
            for (int rt = 0; rt < RT; rt++)
#pragma unroll
                for (int v = 0; v < 4; v++) {
                    const float s = rad_bf16_to_float(srow[rt][v][g]);
#pragma unroll
                    for (int t = 0; t < TT; t++) total[rt][t][v] += s * acc[rt][t].v[v];
                }
#pragma unroll
            for (int rt = 0; rt < RT; rt++)
#pragma unroll
                for (int i = 0; i < WPL; i++) words[rt][i] = next[rt][i];
        }
#pragma unroll
        for (int rt = 0; rt < RT; rt++)
#pragma unroll
            for (int v = 0; v < 4; v++) {
                /* the test flag's wrong kernel: rows swapped in pairs */
                const int64_t row = row0 + 16 * rt + rad_mfma::d_row(lane, corrupt ? v ^ 1 : v);
                if (row >= n) continue;
#pragma unroll
                for (int t = 0; t < TT; t++) {
                    const int64_t tok = tok0 + 16 * t + c;
                    if (tok < m) out[tok * n + row] = out_bf16(total[rt][t][v], bias, row);
                }
            }
    }
}

template <int GROUP>
rad_error_t launch_group(const ApplyArgs &a, const ApplyPlan &p)
{
    const int tt = p.token_tiles;
    const int64_t token_chunks = (a.m + 16 * tt - 1) / (16 * tt);
    const int64_t rows_per_block = 16 * kMfmaRowTiles * kMfmaWaves;
    const int64_t blocks = (a.n + rows_per_block - 1) / rows_per_block * token_chunks;
    if (blocks > 0x7fffffffLL) return (rad_error_t)RADIANCE_GPU_EINVAL;
    const int corrupt = p.corrupt ? 1 : 0;
#define RAD_MFMA_LAUNCH(TT)                                                                                   \
    apply_mfma_kernel<GROUP, TT><<<(unsigned)blocks, kMfmaWaves * 64, 0, a.stream>>>(                         \
        a.x, a.m, a.k, a.packed, a.scales, a.bias, a.n, a.out, token_chunks, corrupt)
    switch (tt) {
    case 1: RAD_MFMA_LAUNCH(1); break;
    case 2: RAD_MFMA_LAUNCH(2); break;
    case 4: RAD_MFMA_LAUNCH(4); break;
    case 8: RAD_MFMA_LAUNCH(8); break;
    default: return (rad_error_t)RADIANCE_GPU_EINVAL;
    }
#undef RAD_MFMA_LAUNCH
    return rad_get_last_error();
}

} // namespace

rad_error_t launch_mfma(const ApplyArgs &a, const ApplyPlan &p)
{
    switch (a.group) {
    case 32: return launch_group<32>(a, p);
    case 64: return launch_group<64>(a, p);
    case 128: return launch_group<128>(a, p);
    case 256: return launch_group<256>(a, p);
    }
    return (rad_error_t)RADIANCE_GPU_EINVAL;
}

namespace {

/* 1 where the kernel has a body for the current device (mfma_built in apply_paths.h): an empty
 * stand-in (an NVIDIA pass other than sm_90) uses a handful of registers, the emulation dozens. */
int mfma_probe(void)
{
    if (rad_amd) return 1;
    return rad_func_num_regs((const void *)apply_mfma_kernel<128, 1>) >= 24;
}

} // namespace

bool mfma_built(void) { return per_device_cached<mfma_probe>() == 1; }

bool mfma_usable(const ApplyArgs &a, bool corrupt)
{
    if (!mfma_built()) return false;
    ApplyPlan p;
    memset(&p, 0, sizeof p);
    p.path = ApplyPath::kMfma;
    p.token_tiles = 1;
    p.corrupt = corrupt;
    return path_usable(a, p, kCheckMfma, "RADIANCE_AMD_MFMA", "MFMA kernel (CDNA layout)", launch_mfma);
}

int mfma_device(void) { return per_device_cached<rad_mfma_arch>() != 0; }

/* ---------------------------------------------------------------------------------------- */
/* radiance_gpu_test_mfma: one rad_mfma of one wave, for the layout test                      */
/* ---------------------------------------------------------------------------------------- */
namespace {

__global__ void __launch_bounds__(64) mfma_fragment_kernel(const uint32_t *a, const uint32_t *b, const float *c, float *d)
{
    if constexpr (rad_mfma::present) {
        const int lane = threadIdx.x & 63;
        const rad_mfma_frag fa = {{a[2 * lane], a[2 * lane + 1]}}, fb = {{b[2 * lane], b[2 * lane + 1]}};
        rad_mfma_acc acc;
#pragma unroll
        for (int v = 0; v < 4; v++) acc.v[v] = c[4 * lane + v];
        rad_mfma::mma(acc, fa, fb);
#pragma unroll
        for (int v = 0; v < 4; v++) d[4 * lane + v] = acc.v[v];
    }
}

} // namespace
} // namespace radiance

extern "C" int radiance_gpu_test_mfma(const uint32_t *a, const uint32_t *b, const float *c, float *d)
{
    using namespace radiance;
    if (a == NULL || b == NULL || c == NULL || d == NULL) return RADIANCE_GPU_EINVAL;
    if (rad_amd && !mfma_device()) return RADIANCE_GPU_EINVAL; /* no MFMA on this chip (RDNA) */
    if (!mfma_built()) return RADIANCE_GPU_EINVAL; /* an NVIDIA build without sm_90 code for this GPU */
    uint32_t *da = nullptr, *db = nullptr;
    float *dc = nullptr, *dd = nullptr;
    rad_error_t err = rad_malloc((void **)&da, 64 * 2 * 4);
    if (err == RAD_SUCCESS) err = rad_malloc((void **)&db, 64 * 2 * 4);
    if (err == RAD_SUCCESS) err = rad_malloc((void **)&dc, 64 * 4 * 4);
    if (err == RAD_SUCCESS) err = rad_malloc((void **)&dd, 64 * 4 * 4);
    if (err == RAD_SUCCESS) err = rad_memcpy(da, a, 64 * 2 * 4, RAD_MEMCPY_H2D);
    if (err == RAD_SUCCESS) err = rad_memcpy(db, b, 64 * 2 * 4, RAD_MEMCPY_H2D);
    if (err == RAD_SUCCESS) err = rad_memcpy(dc, c, 64 * 4 * 4, RAD_MEMCPY_H2D);
    if (err == RAD_SUCCESS) {
        mfma_fragment_kernel<<<1, 64>>>(da, db, dc, dd);
        err = rad_get_last_error();
    }
    if (err == RAD_SUCCESS) err = rad_memcpy(d, dd, 64 * 4 * 4, RAD_MEMCPY_D2H);
    (void)rad_free(da); (void)rad_free(db); (void)rad_free(dc); (void)rad_free(dd);
    return (int)err;
}
