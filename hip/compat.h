/*
 * compat.h - the only file in hip/ that knows whether it is compiled by hipcc/clang (ROCm) or by
 * nvcc (CUDA), and it holds nothing else: runtime calls and types behind rad_* names, the error
 * type, bf16/fp16 conversions on 16-bit words (Debian's HIP 5.2 headers have no hip_bf16.h), warp
 * shuffles, the wave size as a compile-time constant, arithmetic with exactly one rounding per
 * operation (the quantizer must match the CPU bit for bit), memory loads with cache hints, and
 * the vendor and target facts other files test (rad_amd, RAD_HAS_CLUSTER_LAUNCH, the WMMA
 * and MFMA layouts). The PTX behind the NVIDIA side is in ptx_common.h; the kernels' own NVIDIA
 * instructions in ptx_sm80.h and ptx_sm90.h, host-side runtime helpers in runtime.h.
 */
#ifndef RADIANCE_COMPAT_H
#define RADIANCE_COMPAT_H

#include <stdint.h>

#if defined(__HIP__) || defined(__HIPCC__)
#define RAD_HIP 1
#include <hip/hip_runtime.h>
#else
#define RAD_CUDA 1
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include "ptx_common.h" /* the PTX behind the NVIDIA side of the helpers below */
#endif

/* ------------------------------------------------------------------------------------------ */
/* Runtime API                                                                                 */
/* ------------------------------------------------------------------------------------------ */
#if defined(RAD_HIP)
typedef hipStream_t rad_stream_t;
typedef hipError_t rad_error_t;
#define RAD_SUCCESS hipSuccess
#define rad_get_last_error hipGetLastError
#define rad_error_name hipGetErrorString
#define rad_malloc hipMalloc
#define rad_free hipFree
#define rad_memset_async hipMemsetAsync
#define rad_memcpy_async hipMemcpyAsync
#define RAD_MEMCPY_D2H hipMemcpyDeviceToHost
#define RAD_MEMCPY_H2D hipMemcpyHostToDevice
#define rad_stream_synchronize hipStreamSynchronize
#define rad_get_device_count hipGetDeviceCount
#define rad_get_device hipGetDevice
#define rad_set_device hipSetDevice
#define RAD_BACKEND_NAME "rocm"
/* hipMallocAsync needs memory-pool support that older ROCm stacks lack: plain malloc there. */
#define rad_malloc_async(ptr, size, stream) hipMalloc(ptr, size)
#define rad_free_async(ptr, stream) hipFree(ptr)
#define rad_func_set_max_dynamic_smem(func, bytes) \
    hipFuncSetAttribute((const void *)(func), hipFuncAttributeMaxDynamicSharedMemorySize, (bytes))
#define rad_occupancy_blocks_per_sm hipOccupancyMaxActiveBlocksPerMultiprocessor
/* a hint: the SM's on-chip memory all given to shared memory (its carveout), for kernels of
 * several large-shared-memory blocks per SM */
#define rad_func_prefer_max_smem(func) \
    hipFuncSetAttribute((const void *)(func), hipFuncAttributePreferredSharedMemoryCarveout, 100)
#define RAD_DEV_ATTR_SM_COUNT hipDeviceAttributeMultiprocessorCount
#define RAD_DEV_ATTR_SMEM_OPTIN hipDeviceAttributeSharedMemPerBlockOptin
#define rad_device_get_attribute hipDeviceGetAttribute
#define rad_memcpy hipMemcpy
#else
typedef cudaStream_t rad_stream_t;
typedef cudaError_t rad_error_t;
#define RAD_SUCCESS cudaSuccess
#define rad_get_last_error cudaGetLastError
#define rad_error_name cudaGetErrorString
#define rad_memset_async cudaMemsetAsync
#define rad_memcpy_async cudaMemcpyAsync
#define RAD_MEMCPY_D2H cudaMemcpyDeviceToHost
#define RAD_MEMCPY_H2D cudaMemcpyHostToDevice
#define rad_stream_synchronize cudaStreamSynchronize
#define rad_get_device_count cudaGetDeviceCount
#define rad_get_device cudaGetDevice
#define rad_set_device cudaSetDevice
#define RAD_BACKEND_NAME "cuda"
#define rad_malloc_async(ptr, size, stream) cudaMallocAsync(ptr, size, stream)
#define rad_free_async(ptr, stream) cudaFreeAsync(ptr, stream)
#define rad_func_set_max_dynamic_smem(func, bytes) \
    cudaFuncSetAttribute((func), cudaFuncAttributeMaxDynamicSharedMemorySize, (bytes))
#define rad_occupancy_blocks_per_sm cudaOccupancyMaxActiveBlocksPerMultiprocessor
#define rad_func_prefer_max_smem(func) \
    cudaFuncSetAttribute((func), cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared)
#define RAD_DEV_ATTR_SM_COUNT cudaDevAttrMultiProcessorCount
#define RAD_DEV_ATTR_SMEM_OPTIN cudaDevAttrMaxSharedMemoryPerBlockOptin
#define rad_device_get_attribute cudaDeviceGetAttribute
#define rad_memcpy cudaMemcpy
#define rad_malloc cudaMalloc
#define rad_free cudaFree
#endif

/* Whether work enqueued on `stream` now would be captured into a graph (then nothing may
 * synchronize); also true where the runtime cannot say. */
static inline bool rad_stream_capturing(rad_stream_t stream)
{
#if defined(RAD_HIP)
    hipStreamCaptureStatus st = hipStreamCaptureStatusNone;
    if (hipStreamIsCapturing(stream, &st) != hipSuccess) {
        (void)hipGetLastError();
        return true;
    }
    return st != hipStreamCaptureStatusNone;
#else
    cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(stream, &st) != cudaSuccess) {
        (void)cudaGetLastError();
        return true;
    }
    return st != cudaStreamCaptureStatusNone;
#endif
}

/* A TMA tensor map (the bulk tensor copy engine of NVIDIA sm_90), passed to kernels by value;
 * runtime.h encodes one. Elsewhere an opaque stand-in of the same size, so that kernel signatures
 * are the same for every vendor. */
#if defined(RAD_CUDA) && CUDART_VERSION >= 12000
#include <cudaTypedefs.h>
typedef CUtensorMap rad_tma_desc_t;
#define RAD_GRID_CONSTANT __grid_constant__
#define RAD_HAS_TMA_ENCODE 1
#else
typedef struct __attribute__((aligned(64))) {
    uint64_t opaque[16];
} rad_tma_desc_t;
#define RAD_GRID_CONSTANT
#endif

/* Which vendor, for the choices that differ by vendor outside the device code (launch shapes,
 * launch bounds, host checks); device code tests the RAD_HAS_* features instead. */
#if defined(RAD_HIP)
constexpr bool rad_amd = true;
#else
constexpr bool rad_amd = false;
#endif

/* Thread-block clusters and their launch (runtime.h: rad_launch_clusters): NVIDIA only. */
#if defined(RAD_CUDA)
#define RAD_HAS_CLUSTER_LAUNCH 1
#endif

/* Which rad_wmma layout the current device pass has (wmma.h): the gfx12 or gfx11 builtin, or on
 * NVIDIA (sm_90 pass) the exact emulation; none on every other target. */
#if defined(RAD_HIP) && (defined(__gfx1200__) || defined(__gfx1201__))
#define RAD_WMMA12_BUILTIN 1
#endif
#if defined(RAD_HIP) && (defined(__gfx1100__) || defined(__gfx1101__) || defined(__gfx1102__) || \
                         defined(__gfx1103__) || defined(__gfx1150__) || defined(__gfx1151__) ||   \
                         defined(__gfx1152__) || defined(__gfx1153__))
#define RAD_WMMA11_BUILTIN 1
#endif
/* The NVIDIA emulations (wmma.h, mfma.h) exist only to prove the AMD layouts' kernels on NVIDIA
 * GPUs in the tests; they are compiled in the sm_90 device pass alone (an H100/H200, the GPU the
 * project tests on), which keeps them out of the other architectures' compile time. The host
 * tells whether the running device has them with rad_emulation_built (apply_paths.h). */
#if defined(RAD_CUDA) && defined(__CUDA_ARCH__) && (__CUDA_ARCH__ == 900)
#define RAD_EMULATIONS_BUILT 1
#endif
#if defined(RAD_EMULATIONS_BUILT)
#define RAD_WMMA_EMULATED 1
#endif

/* Which rad_mfma layer the current device pass has (mfma.h): CDNA's bf16 MFMA builtin (gfx90a,
 * gfx940-gfx942), or on NVIDIA (sm_90 pass) the exact emulation of its 64-lane layout; none on RDNA
 * or other NVIDIA passes. */
#if defined(RAD_HIP) && (defined(__gfx90a__) || defined(__gfx940__) || defined(__gfx941__) || defined(__gfx942__))
#define RAD_MFMA_BUILTIN 1
#endif
#if defined(RAD_EMULATIONS_BUILT)
#define RAD_MFMA_EMULATED 1
#endif

/* ------------------------------------------------------------------------------------------ */
/* Wave size: a compile-time constant of the device pass, chosen by target macro.              */
/* Host passes never use it (kernels are written so that the host need not know it).          */
/* ------------------------------------------------------------------------------------------ */
#if defined(RAD_HIP) && (defined(__GFX9__) || defined(__gfx90a__) || defined(__gfx942__) || \
                         defined(__gfx940__) || defined(__gfx941__) || defined(__gfx908__))
#define RAD_WAVE 64
#else
#define RAD_WAVE 32
#endif

/* ------------------------------------------------------------------------------------------ */
/* Shuffles. HIP takes no mask (64-bit lane masks on wave64); CUDA needs the *_sync form.       */
/* Every lane of the wave must take part.                                                      */
/* ------------------------------------------------------------------------------------------ */
#if defined(RAD_HIP)
__device__ __forceinline__ float rad_shfl_xor(float v, int lane_mask) { return __shfl_xor(v, lane_mask); }
#else
__device__ __forceinline__ float rad_shfl_xor(float v, int lane_mask)
{
    return __shfl_xor_sync(0xffffffffu, v, lane_mask);
}
#endif

/* true in every lane if the predicate holds in any lane of the wave (all lanes call it) */
#if defined(RAD_HIP)
__device__ __forceinline__ bool rad_wave_any(bool p) { return __any(p) != 0; }
#else
__device__ __forceinline__ bool rad_wave_any(bool p) { return __any_sync(0xffffffffu, p) != 0; }
#endif

/* Ends the kernel with an error (a device pass's stand-in for a layer it does not have). */
#if defined(RAD_HIP)
__device__ __forceinline__ void rad_trap(void) { __builtin_trap(); }
#else
__device__ __forceinline__ void rad_trap(void) { __trap(); }
#endif

/* ------------------------------------------------------------------------------------------ */
/* bf16 / fp16 storage and conversions (16-bit words; no vendor bf16 type needed).             */
/* ------------------------------------------------------------------------------------------ */
__host__ __device__ __forceinline__ float rad_bits_to_float(uint32_t u)
{
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
    return __uint_as_float(u);
#else
    float f;
    __builtin_memcpy(&f, &u, 4);
    return f;
#endif
}

__host__ __device__ __forceinline__ uint32_t rad_float_to_bits(float f)
{
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
    return __float_as_uint(f);
#else
    uint32_t u;
    __builtin_memcpy(&u, &f, 4);
    return u;
#endif
}

__device__ __forceinline__ float rad_bf16_to_float(uint32_t bits16) { return rad_bits_to_float(bits16 << 16); }

/* Round to nearest even; NaN stays NaN (quiet). */
__device__ __forceinline__ uint16_t rad_float_to_bf16_rne(float f)
{
    uint32_t u = rad_float_to_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

__device__ __forceinline__ float rad_half_to_float(uint16_t h)
{
#if defined(RAD_HIP)
    return (float)__builtin_bit_cast(_Float16, h);
#else
    return __half2float(__ushort_as_half(h));
#endif
}

/* Byte b (0..3, a constant) of v, where that byte is below 128, as a float plus
 * RAD_BYTE_FLOAT_BIAS, in one instruction: AMD's v_cvt_f32_ubyte<b>; on NVIDIA, whose integer
 * conversion runs at a quarter of the FMA rate, a byte permute into the mantissa of 128.0. */
#if defined(RAD_HIP)
#define RAD_BYTE_FLOAT_BIAS 0
__device__ __forceinline__ float rad_byte_to_float(uint32_t v, int b)
{
    /* hide what the compiler knows of v's bits, or it folds a mask into a v_bfe_u32 before a
     * v_cvt_f32_ubyte0: two instructions */
    __asm__("" : "+v"(v));
    return (float)((v >> (8 * b)) & 0xffu);
}
#else
#define RAD_BYTE_FLOAT_BIAS 128
__device__ __forceinline__ float rad_byte_to_float(uint32_t v, int b)
{
    return __uint_as_float(__byte_perm(v, 0x43000000u, 0x7044u | ((uint32_t)b << 8)));
}
#endif

/* ------------------------------------------------------------------------------------------ */
/* fp32 arithmetic with exactly one IEEE round-to-nearest-even per operation: the compiler may */
/* not contract a*b+c into an FMA (nvcc: the __f*_rn intrinsics; clang: contract(off)).        */
/* ------------------------------------------------------------------------------------------ */
#if defined(RAD_HIP)
__device__ __forceinline__ float rad_add_rn(float a, float b)
{
#pragma clang fp contract(off)
    return a + b;
}
__device__ __forceinline__ float rad_sub_rn(float a, float b)
{
#pragma clang fp contract(off)
    return a - b;
}
__device__ __forceinline__ float rad_mul_rn(float a, float b)
{
#pragma clang fp contract(off)
    return a * b;
}
/* HIP's fp32 division is correctly rounded unless -ffast-math or
 * -fno-hip-fp32-correctly-rounded-divide-sqrt is given; the build never passes those. */
__device__ __forceinline__ float rad_div_rn(float a, float b)
{
#pragma clang fp contract(off)
    return a / b;
}
__device__ __forceinline__ float rad_fma_rn(float a, float b, float c) { return __builtin_fmaf(a, b, c); }
__device__ __forceinline__ float rad_rcp_approx(float a) { return __builtin_amdgcn_rcpf(a); }
#else
__device__ __forceinline__ float rad_add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ float rad_sub_rn(float a, float b) { return __fsub_rn(a, b); }
__device__ __forceinline__ float rad_mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ float rad_div_rn(float a, float b) { return __fdiv_rn(a, b); }
__device__ __forceinline__ float rad_fma_rn(float a, float b, float c) { return __fmaf_rn(a, b, c); }
/* 1 / a to about 1 ulp (the hardware estimate; normal a only) */
__device__ __forceinline__ float rad_rcp_approx(float a) { return rad_ptx_rcp_approx(a); }
#endif

/* RN(a * b + c) clamped to [0, 1] (one instruction on NVIDIA, the clamp bit of v_fma_f32 on AMD). */
__device__ __forceinline__ float rad_fma_sat(float a, float b, float c)
{
#if defined(RAD_CUDA) && defined(__CUDA_ARCH__)
    return rad_ptx_fma_rn_sat(a, b, c);
#else
    return fminf(fmaxf(rad_fma_rn(a, b, c), 0.0f), 1.0f);
#endif
}

/* ------------------------------------------------------------------------------------------ */
/* Memory access helpers.                                                                      */
/* ------------------------------------------------------------------------------------------ */
struct rad_u32x4 {
    uint32_t x, y, z, w;
};

/* A 16-byte load of data read exactly once (weights): do not keep it in L1, so the small,     */
/* re-read activations stay there.                                                             */
__device__ __forceinline__ rad_u32x4 rad_load_stream_16(const void *p)
{
    rad_u32x4 v;
#if defined(RAD_CUDA) && defined(__CUDA_ARCH__)
    const uint4 t = rad_ptx_ld_nc_na_v4(p);
    v.x = t.x; v.y = t.y; v.z = t.z; v.w = t.w;
#elif defined(RAD_HIP)
    typedef uint32_t u32x4_native __attribute__((ext_vector_type(4)));
    const u32x4_native t = __builtin_nontemporal_load((const u32x4_native *)p);
    v.x = t.x; v.y = t.y; v.z = t.z; v.w = t.w;
#else
    const uint4 t = *(const uint4 *)p;
    v.x = t.x; v.y = t.y; v.z = t.z; v.w = t.w;
#endif
    return v;
}

__device__ __forceinline__ uint2 rad_load_stream_8(const void *p)
{
#if defined(RAD_CUDA) && defined(__CUDA_ARCH__)
    return rad_ptx_ld_nc_na_v2(p);
#elif defined(RAD_HIP)
    typedef uint32_t u32x2_native __attribute__((ext_vector_type(2)));
    const u32x2_native t = __builtin_nontemporal_load((const u32x2_native *)p);
    return make_uint2(t.x, t.y);
#else
    return *(const uint2 *)p;
#endif
}

__device__ __forceinline__ uint32_t rad_load_stream_4(const void *p)
{
#if defined(RAD_CUDA) && defined(__CUDA_ARCH__)
    return rad_ptx_ld_nc_na_u32(p);
#elif defined(RAD_HIP)
    return __builtin_nontemporal_load((const uint32_t *)p);
#else
    return *(const uint32_t *)p;
#endif
}

/* A 16-byte load of data re-read by many warps (activations): cached everywhere. */
__device__ __forceinline__ rad_u32x4 rad_load_cached_16(const void *p)
{
    const uint4 t = *(const uint4 *)p;
    rad_u32x4 v;
    v.x = t.x; v.y = t.y; v.z = t.z; v.w = t.w;
    return v;
}

/* rad_load_cached_16 issued where it is written: the compiler may not sink it past a barrier that
 * follows (ptxas moves ld.global.nc, which __restrict__ const data gets, below a bar.sync, so a
 * load meant to travel while the block waits there is issued after it). */
__device__ __forceinline__ rad_u32x4 rad_load_cached_16_now(const void *p)
{
#if defined(RAD_CUDA) && defined(__CUDA_ARCH__)
    const uint4 t = rad_ptx_ld_v4_ordered(p);
    rad_u32x4 v;
    v.x = t.x; v.y = t.y; v.z = t.z; v.w = t.w;
    return v;
#else
    return rad_load_cached_16(p);
#endif
}

/* Lane-wise maximum of two pairs of unsigned 16-bit integers. */
__device__ __forceinline__ uint32_t rad_max_u16x2(uint32_t a, uint32_t b)
{
#if defined(RAD_CUDA) && defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
    return rad_ptx_max_u16x2(a, b);
#else
    const uint32_t lo = (a & 0xffffu) > (b & 0xffffu) ? (a & 0xffffu) : (b & 0xffffu);
    const uint32_t hi = (a >> 16) > (b >> 16) ? (a >> 16) : (b >> 16);
    return lo | (hi << 16);
#endif
}

/* Per 16-bit lane: min(a + b mod 2^16, c). */
__device__ __forceinline__ uint32_t rad_add_min_u16x2(uint32_t a, uint32_t b, uint32_t c)
{
#if defined(RAD_CUDA) && defined(__CUDA_ARCH__)
    return __viaddmin_u16x2(a, b, c);
#else
    const uint32_t lo = (a + b) & 0xffffu, hi = ((a >> 16) + (b >> 16)) & 0xffffu;
    const uint32_t clo = c & 0xffffu, chi = c >> 16;
    return (lo < clo ? lo : clo) | ((hi < chi ? hi : chi) << 16);
#endif
}

/* Unsigned 64-bit atomic minimum (the quantizer's non-finite flag). */
__device__ __forceinline__ void rad_atomic_min_u64(unsigned long long *p, unsigned long long v)
{
    atomicMin(p, v);
}

#endif /* RADIANCE_COMPAT_H */
