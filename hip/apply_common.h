/*
 * apply_common.h - device helpers that more than one apply kernel path uses: the bf16 output with
 * the bias, one code of a packed word, and the matrix paths' dequantization of a nibble pair and of
 * a packed word into mma.sync A fragments.
 */
#ifndef RADIANCE_APPLY_COMMON_H
#define RADIANCE_APPLY_COMMON_H

#include <stdint.h>

#include "compat.h"
#include "radiance/format.h"
#include "ptx_sm80.h"

namespace radiance {

__device__ __forceinline__ uint16_t out_bf16(float acc, const uint16_t *bias, int64_t row)
{
    if (bias != NULL) acc += rad_bf16_to_float(bias[row]);
    return rad_float_to_bf16_rne(acc);
}

/* q (-8..7) of element e (0..7) of a packed word (nibble order: docs/FORMAT.md) */
__device__ __forceinline__ float word_q(uint32_t w, int e)
{
    constexpr int kShift[8] = RAD_NIBBLE_SHIFTS;
    return (float)((int)((w >> kShift[e]) & 15u) - RAD_NIBBLE_ZERO);
}

/* the biased codes' offset: q + 8 (the code) + 16 (dequant_a_fragments_biased) */
constexpr float kBiasedCodeOffset = 24.0f;

#if defined(RAD_HAS_MMA_BF16)
__device__ __forceinline__ uint32_t dequant_pair(uint32_t w, int shift)
{
    /* one LOP3: (w >> shift) & 0x000F000F | 0x43004300 is two bf16 values 128 + nibble */
    const uint32_t biased = rad_nibble_pair_or(w >> shift, 0x43004300u);
    return rad_fma_bf16x2(biased, 0x3F803F80u /* 1, 1 */, 0xC308C308u /* -136, -136 */);
}

/* The A fragments of the two m16n8k16 mmas of one packed word a thread holds of rows g (w0) and
 * g + 8 (w1): lo takes the word's first four elements, hi its last four (apply_mma.hip's header) */
__device__ __forceinline__ void dequant_a_fragments(uint32_t w0, uint32_t w1, uint32_t (&lo)[4], uint32_t (&hi)[4])
{
    lo[0] = dequant_pair(w0, 0);
    lo[1] = dequant_pair(w1, 0);
    lo[2] = dequant_pair(w0, 4);
    lo[3] = dequant_pair(w1, 4);
    hi[0] = dequant_pair(w0, 8);
    hi[1] = dequant_pair(w1, 8);
    hi[2] = dequant_pair(w0, 12);
    hi[3] = dequant_pair(w1, 12);
}

/* The biased A fragments (split k at k = 5376 until run 90, the benchmark build's splitktailwin): the same elements as
 * dequant_a_fragments' as q + kBiasedCodeOffset, each pair one shift and one LOP3 (no FMA): the
 * nibble moved to mantissa bits 3-6 under an exponent of 16 makes the bf16 value 16 + (q + 8).
 * The kernel starts each group's accumulator at -kBiasedCodeOffset times the sum of the group's
 * activations of that token (stream_warp_rows, BIASED). */
__device__ __forceinline__ void dequant_a_fragments_biased(uint32_t w0, uint32_t w1, uint32_t (&lo)[4],
                                                           uint32_t (&hi)[4])
{
    constexpr uint32_t kMask = 0x00780078u, kSixteen = 0x41804180u; /* bits 3-6; 16.0 in each lane */
    lo[0] = rad_and_or<kMask>(w0 << 3, kSixteen);
    lo[1] = rad_and_or<kMask>(w1 << 3, kSixteen);
    lo[2] = rad_and_or<kMask>(w0 >> 1, kSixteen);
    lo[3] = rad_and_or<kMask>(w1 >> 1, kSixteen);
    hi[0] = rad_and_or<kMask>(w0 >> 5, kSixteen);
    hi[1] = rad_and_or<kMask>(w1 >> 5, kSixteen);
    hi[2] = rad_and_or<kMask>(w0 >> 9, kSixteen);
    hi[3] = rad_and_or<kMask>(w1 >> 9, kSixteen);
}

#endif

} // namespace radiance

#endif /* RADIANCE_APPLY_COMMON_H */
