/*
 * radiance_gpu.h - the narrow C surface of the GPU kernels (hip/).
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

#ifdef __cplusplus
extern "C" {
#endif

/* Element types of weights, activations and bias. Scales and outputs are always bf16. */
enum radiance_dtype { RADIANCE_F32 = 0, RADIANCE_F16 = 1, RADIANCE_BF16 = 2 };
/* Clip search: RTN tries ratio 1.0 only; MSE tries 1.0, 0.95, 0.9, 0.85, 0.8; ACT tries MSE's
 * ratios with each column's squared error weighted (radiance_gpu_quantize_rows_act). */
enum radiance_clip { RADIANCE_CLIP_RTN = 0, RADIANCE_CLIP_MSE = 1, RADIANCE_CLIP_ACT = 2 };
/* Returned for arguments the kernels cannot take (the C extension checks them first). */
#define RADIANCE_GPU_EINVAL (-1)

/* "cuda" or "rocm": the toolchain these kernels were built with. */
const char *radiance_gpu_backend(void);
const char *radiance_gpu_error_string(int code);
int radiance_gpu_device_count(int *count);
int radiance_gpu_get_device(int *device);
int radiance_gpu_set_device(int device);

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
 * [n] or NULL; out: bf16 [m, n]. All base pointers 16-byte aligned. Asynchronous: no allocation,
 * no synchronization, so it can be captured in a CUDA/HIP graph.
 */
int radiance_gpu_apply(const uint16_t *x, int64_t m, int64_t k, const int32_t *packed,
                       const uint16_t *scales, const uint16_t *bias, int64_t n, int group_size,
                       uint16_t *out, void *stream);

#ifdef __cplusplus
}
#endif

#endif /* RADIANCE_GPU_H */
