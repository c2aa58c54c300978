/*
 * format.h - the packed int4 format, defined once for the C core (csrc/) and the GPU kernels
 * (hip/): a contract header (csrc/include/radiance/), the one folder both sides include. docs/FORMAT.md is the document; this header is its constants. Plain C (C11 and C++17,
 * host and device code): macros and enums only, so that device code can use every value as a
 * compile-time constant.
 */
#ifndef RADIANCE_FORMAT_H
#define RADIANCE_FORMAT_H

/* Element types of weights, activations and bias (scales and outputs are always bf16). The
 * values cross the C surface of the kernels (radiance_gpu.h, beside this file). */
enum rad_dtype { RAD_F32 = 0, RAD_F16 = 1, RAD_BF16 = 2 };

/* Clip search: RTN tries the first ratio only, MSE all of them (RAD_CLIP_RATIOS), ACT all of them
 * with each column's squared error weighted by activation statistics. */
enum rad_clip { RAD_CLIP_RTN = 0, RAD_CLIP_MSE = 1, RAD_CLIP_ACT = 2 };

/* Group sizes: one bf16 scale per RAD_GROUP_OK(g) consecutive input columns of a row. */
#define RAD_MIN_GROUP 32
#define RAD_MAX_GROUP 256
#define RAD_GROUP_OK(g) ((g) == 32 || (g) == 64 || (g) == 128 || (g) == 256)

/* Candidate clip ratios, in the order they are tried (on a tie the earlier one wins). A group's
 * scale for ratio r is bf16_rne(max(amax * (float)(r / 7.0), RAD_MIN_SCALE)): r / 7 is divided in
 * double and rounded once to float. */
#define RAD_CLIP_RATIOS 5
#define RAD_CLIP_RATIO(i) ((i) == 0 ? 1.0 : (i) == 1 ? 0.95 : (i) == 2 ? 0.9 : (i) == 3 ? 0.85 : 0.8)
#define RAD_CLIP_COEFFICIENT(i) ((float)(RAD_CLIP_RATIO(i) / 7.0))
#define RAD_MIN_SCALE 1e-8f

/* Codes: q in -8..7, stored as the nibble q + 8 (8 is zero). */
#define RAD_Q_MIN (-8)
#define RAD_Q_MAX 7
#define RAD_NIBBLE_ZERO 8

/* Packing: an int32 word holds 8 consecutive columns 8j .. 8j + 7; element e sits at bit
 * RAD_NIBBLE_SHIFT(e), i.e. nibble order 0, 2, 4, 6, 1, 3, 5, 7 (even elements in the low half,
 * odd ones in the high half, so that (w >> 4i) & 0x000F000F is elements 2i and 2i + 1). */
#define RAD_WORD_ELEMS 8
#define RAD_NIBBLE_SHIFT(e) (16 * ((e) & 1) + 4 * ((e) >> 1))
#define RAD_NIBBLE_SHIFTS {0, 16, 4, 20, 8, 24, 12, 28}

#endif /* RADIANCE_FORMAT_H */
