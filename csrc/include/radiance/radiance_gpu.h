/*
 * radiance_gpu.h - the narrow C surface of the GPU kernels (hip/), one of the contract headers
 * (csrc/include/radiance/) that the C core and the kernels both include.
 *
 * Plain C: no vendor header is included here, so csrc/ can call the kernels without knowing
 * whether they were built by hipcc or nvcc. Every pointer is a device pointer of the current
 * device, every array is contiguous and row-major, every `stream` is a hipStream_t/cudaStream_t
 * (NULL = the legacy default stream). Functions return 0 on success or the runtime's error code;
 * radiance_gpu_error_string() turns a code into text. Sizes are 64-bit throughout.
 */
#ifndef RADIANCE_GPU_H
#define RADIANCE_GPU_H

#include <stdint.h>

#include "format.h" /* the packed format's constants and enums, beside this file */

#ifdef __cplusplus
extern "C" {
#endif

/* Element types of weights, activations and bias (scales and outputs are always bf16), and the
 * clip searches: the values of enum rad_dtype and enum rad_clip of format.h. */
enum radiance_dtype { RADIANCE_F32 = RAD_F32, RADIANCE_F16 = RAD_F16, RADIANCE_BF16 = RAD_BF16 };
enum radiance_clip {
    RADIANCE_CLIP_RTN = RAD_CLIP_RTN,
    RADIANCE_CLIP_MSE = RAD_CLIP_MSE,
    RADIANCE_CLIP_ACT = RAD_CLIP_ACT, /* radiance_gpu_quantize_rows_act */
};
/* Returned for arguments the kernels cannot take (the C extension checks them first). */
#define RADIANCE_GPU_EINVAL (-1)

/* "cuda" or "rocm": the toolchain these kernels were built with. */
const char *radiance_gpu_backend(void);
const char *radiance_gpu_error_string(int code);
int radiance_gpu_device_count(int *count);
int radiance_gpu_get_device(int *device);
int radiance_gpu_set_device(int device);
/* 1 if `device` has an active primary context, 0 if it has none, -1 where this cannot be told.
 * Makes no context. */
int radiance_gpu_device_has_context(int device);

/*
 * Quantize w [rows, cols] (dtype w_dtype) to packed int32 [rows, cols/8] and bf16 scales
 * [rows, cols/group_size], bit-identical to the CPU path (csrc/). group_size in {32,64,128,256},
 * cols % group_size == 0. Non-finite weights: *first_bad_row receives the smallest row index that
 * holds one (outputs are then unspecified), else -1. Synchronizes `stream` to read that flag.
 */
int radiance_gpu_quantize_rows(const void *w, int w_dtype, int64_t rows, int64_t cols,
                               int group_size, int clip, int32_t *packed, uint16_t *scales,
                               int64_t *first_bad_row, void *stream);

/*
 * The same with clip "act": act_weights is a HOST pointer to the error weights [cols] that
 * rad_cpu_act_weights (csrc/cpu_kernels.h) made from the activation statistics, so that both
 * paths weigh with the same bits; they are copied to the device on `stream`. Bit-identical to
 * the CPU path's clip "act".
 */
int radiance_gpu_quantize_rows_act(const void *w, int w_dtype, int64_t rows, int64_t cols,
                                   int group_size, const float *act_weights, int32_t *packed,
                                   uint16_t *scales, int64_t *first_bad_row, void *stream);

/*
 * out[m, n] = sum_k x[m, k] * q[n, k] * scales[n, k / group_size] (+ bias[n]), fp32 accumulation,
 * bf16 output. x: bf16 [m, k]; packed: int32 [n, k/8]; scales: bf16 [n, k/group_size]; bias: bf16
 * [n] or NULL; out: bf16 [m, n]. x, packed and scales 16-byte aligned (else RADIANCE_GPU_EINVAL,
 * nothing launched); out and bias 2-byte aligned (a 16-byte aligned out lets the folding kernel write
 * by TMA). Asynchronous: no allocation, no synchronization, so it can be captured in a CUDA/HIP
 * graph.
 */
int radiance_gpu_apply(const uint16_t *x, int64_t m, int64_t k, const int32_t *packed,
                       const uint16_t *scales, const uint16_t *bias, int64_t n, int group_size,
                       uint16_t *out, void *stream);

/*
 * Tests only: make the apply planner behave as if the device or the driver refused something, so
 * that a GPU test can run the fallback paths that an H200 never takes (flags below, 0 = normal).
 * Process-wide; returns the previous flags.
 */
#define RADIANCE_GPU_TEST_NO_MMA 1      /* no mma.sync (a GPU before sm_80): the vector kernel */
#define RADIANCE_GPU_TEST_NO_WGMMA 2    /* no sm_90a kernel: the stream, mma and tiled kernels */
#define RADIANCE_GPU_TEST_REFUSE_XMAP 4 /* the activations' tensor map refused */
#define RADIANCE_GPU_TEST_REFUSE_WMAP 8 /* the weights' tensor map refused */
#define RADIANCE_GPU_TEST_NO_SHARED_X 16 /* activations never in shared memory (as if they did not fit) */
#define RADIANCE_GPU_TEST_SHARED_X 32    /* up to 8 tokens: activations in shared memory where they fit */
/* Take the WMMA path (hip/apply_wmma.hip) for every m, with the RDNA4 (gfx12) or RDNA3 (gfx11)
 * fragment layout; on NVIDIA through the emulated rad_wmma layer (hip/wmma.h). The self-check on
 * first use and RADIANCE_AMD_WMMA apply as on AMD. */
#define RADIANCE_GPU_TEST_FORCE_WMMA12 64
#define RADIANCE_GPU_TEST_FORCE_WMMA11 128
/* A deliberately wrong WMMA kernel (rows of the result swapped in pairs): the self-check must
 * catch it and fall back to the vector kernel. */
#define RADIANCE_GPU_TEST_CORRUPT_WMMA 256
/* Take the MFMA path (hip/apply_mfma.hip, AMD CDNA) for every m; on NVIDIA through the emulated
 * rad_mfma layer (hip/mfma.h). The self-check and RADIANCE_AMD_MFMA apply as on AMD. */
#define RADIANCE_GPU_TEST_FORCE_MFMA 512
/* A deliberately wrong MFMA kernel (rows of the result swapped in pairs), for the self-check. */
#define RADIANCE_GPU_TEST_CORRUPT_MFMA 1024
/* The output's tensor map refused (as for an output not 16-byte aligned or n % 8 != 0): the
 * folding kernel writes its tiles from the registers. */
#define RADIANCE_GPU_TEST_REFUSE_OMAP 2048
/* The folding kernel's clusters refused (as where the runtime cannot place one): the units of a
 * last round cut along k run as whole tiles, one block each. */
#define RADIANCE_GPU_TEST_REFUSE_CLUSTERS 4096
/* The device taken to run no cluster of the folding kernel's units larger than two blocks (as a
 * GPU with fewer SMs would): a last round cut along k is lowered to two parts. */
#define RADIANCE_GPU_TEST_CLUSTERS_OF_TWO 8192
/* Setting the flags also forgets every device's WMMA and MFMA self-check results, so that a test
 * sees the first use again (and RADIANCE_AMD_WMMA / RADIANCE_AMD_MFMA are read again). */
int radiance_gpu_test_refuse(int flags);

/*
 * Tests only: one rad_wmma multiply-accumulate (hip/wmma.h) of one 32-lane wave on the current
 * device, D = A * B + C, with HOST arrays in the layer's lane/register order: a and b [32 lanes]
 * [words] bf16 pairs (words = 4 for arch 12, 8 for arch 11), c and d [32 lanes][8] fp32.
 * RADIANCE_GPU_EINVAL where arch is not 11 or 12 or the device lacks that layer. Synchronous.
 */
int radiance_gpu_test_wmma(int arch, const uint32_t *a, const uint32_t *b, const float *c, float *d);

/*
 * Tests only: one rad_mfma multiply-accumulate (hip/mfma.h) of one 64-lane wave, D = A * B + C,
 * with HOST arrays in the layer's lane/register order: a and b [64 lanes][2] bf16 pairs, c and d
 * [64 lanes][4] fp32. RADIANCE_GPU_EINVAL where the device lacks the layer (AMD RDNA). Synchronous.
 */
int radiance_gpu_test_mfma(const uint32_t *a, const uint32_t *b, const float *c, float *d);

#ifdef __cplusplus
}
#endif

#endif /* RADIANCE_GPU_H */
