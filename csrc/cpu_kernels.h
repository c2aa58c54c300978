/*
 * cpu_kernels.h - the int4 lm_head format on the CPU, in plain C11.
 *
 * This is the bit-exact reference of the format in docs/FORMAT.md and the offline path. No Python
 * here: callers pass raw, contiguous, row-major buffers and 64-bit sizes, and have already checked
 * shapes and values that the Python layer can name in an error message.
 */
#ifndef RADIANCE_CPU_KERNELS_H
#define RADIANCE_CPU_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "radiance/format.h" /* enum rad_dtype, enum rad_clip, group sizes */

/* Threads the CPU kernels use: RADIANCE_NUM_THREADS if set, else the CPUs this process may use. */
int rad_cpu_threads(void);

/* Index of the first row of w [rows, cols] holding a NaN or infinity, or -1. */
int64_t rad_cpu_first_nonfinite_row(const void *w, int dtype, int64_t rows, int64_t cols);

/* Index of the first entry of activation_sq [count] that is negative, NaN or infinite, or -1. */
int64_t rad_cpu_first_bad_activation_sq(const float *activation_sq, int64_t count);

/*
 * The error weights of clip "act" (docs/FORMAT.md): each group of group_size channels of
 * activation_sq [cols] (finite, >= 0) divided by its largest entry, correctly rounded in fp32
 * (entries of 0 give +0); a group whose largest entry is 0 gets weight 1 throughout. A group of
 * equal entries thus weighs every error by exactly 1.0, which makes "act" choose as "mse" does.
 */
void rad_cpu_act_weights(const float *activation_sq, int64_t cols, int group_size,
                         float *weights);

/*
 * Quantize w [rows, cols] into packed [rows, cols/8] and bf16 scales [rows, cols/group_size].
 * Requires a finite w (see rad_cpu_first_nonfinite_row), cols % group_size == 0 and
 * group_size in {32, 64, 128, 256}. act_weights [cols] (from rad_cpu_act_weights) is read for
 * clip == RAD_CLIP_ACT only and may be NULL otherwise. Returns 0, or -1 when a worker thread
 * could not start.
 */
int rad_cpu_quantize_rows(const void *w, int dtype, int64_t rows, int64_t cols, int group_size,
                          int clip, const float *act_weights, int32_t *packed, uint16_t *scales);

/* nibbles [rows, cols] (each 0..15) -> words [rows, cols/8]; cols % 8 == 0. */
void rad_cpu_pack_shuffle(const uint8_t *nibbles, int64_t rows, int64_t cols, int32_t *words);
/* Index of the first nibble above 15, or -1. */
int64_t rad_cpu_first_bad_nibble(const uint8_t *nibbles, int64_t count);
/* words [rows, cols/8] -> nibbles [rows, cols]. */
void rad_cpu_unpack_shuffle(const int32_t *words, int64_t rows, int64_t cols, uint8_t *nibbles);

/* w_hat [rows, cols] = (nibble - 8) * scale, in float32. */
void rad_cpu_dequantize(const int32_t *packed, const uint16_t *scales, int64_t rows, int64_t cols,
                        int group_size, float *w_hat);

/*
 * out [m, n] (bf16) = x [m, k] . dequantized packed [n, k]^T (+ bias [n]), fp32 accumulation.
 * x and bias have their own dtypes; bias may be NULL. Returns 0, or -1 when out of memory.
 */
int rad_cpu_apply(const void *x, int x_dtype, int64_t m, int64_t k, const int32_t *packed,
                  const uint16_t *scales, const void *bias, int bias_dtype, int64_t n,
                  int group_size, uint16_t *out);

#endif /* RADIANCE_CPU_KERNELS_H */
