/*
 * compat.h - the only file in hip/ that knows whether it is compiled by hipcc/clang (ROCm) or by
 * nvcc (CUDA). Everything vendor-specific lives here behind rad_* names: runtime calls, the error
 * type, our own bf16 storage type (Debian's HIP 5.2 headers have no hip_bf16.h), warp shuffles,
 * the wave size as a compile-time constant, arithmetic with exactly one rounding per operation
 * (the quantizer must match the CPU bit for bit), and the matrix-core instructions per target.
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
#define RAD_DEV_ATTR_SM_COUNT hipDeviceAttributeMultiprocessorCount
#define RAD_DEV_ATTR_SMEM_OPTIN hipDeviceAttributeSharedMemPerBlockOptin
#define rad_device_get_attribute hipDeviceGetAttribute
#else
typedef cudaStream_t rad_stream_t;
typedef cudaError_t rad_error_t;
#define RAD_SUCCESS cudaSuccess
#define rad_get_last_error cudaGetLastError
#define rad_error_name cudaGetErrorString
#define rad_malloc cudaMalloc
#define rad_free cudaFree
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
#define RAD_DEV_ATTR_SM_COUNT cudaDevAttrMultiProcessorCount
#define RAD_DEV_ATTR_SMEM_OPTIN cudaDevAttrMaxSharedMemoryPerBlockOptin
#define rad_device_get_attribute cudaDeviceGetAttribute
#endif

/* A TMA tensor map (the bulk tensor copy engine of NVIDIA sm_90), passed to kernels by value.
 * rad_tma_encode_2d describes a row-major [rows, cols] matrix of 2-byte (bf16) or 4-byte (int32)
 * elements, rows cols elements apart, read in boxes of box_cols x box_rows, with the 128-byte
 * swizzle that wgmma's shared-memory operands use (swizzle128) or none; boxes past the end read
 * as zeros. It returns 0 on success, -1 where there is no such engine or the driver refuses
 * (callers then take a path without it). */
#if defined(RAD_CUDA) && CUDART_VERSION >= 12000
#include <cudaTypedefs.h>
typedef CUtensorMap rad_tma_desc_t;
#define RAD_GRID_CONSTANT __grid_constant__
static inline int rad_tma_encode_2d(rad_tma_desc_t *desc, const void *base, int elem_bytes, uint64_t rows,
                                    uint64_t cols, uint32_t box_rows, uint32_t box_cols, int swizzle128)
{
    static PFN_cuTensorMapEncodeTiled_v12000 encode = NULL;
    static int looked_up = 0;
    if (!looked_up) {
        void *fn = NULL;
        cudaDriverEntryPointQueryResult status;
#if CUDART_VERSION >= 12050
        const cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault,
                                                               &status);
#else
        const cudaError_t e = cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &fn, cudaEnableDefault, &status);
#endif
        if (e == cudaSuccess && status == cudaDriverEntryPointSuccess)
            encode = (PFN_cuTensorMapEncodeTiled_v12000)fn;
        else
            (void)cudaGetLastError();
        looked_up = 1;
    }
    if (encode == NULL || (elem_bytes != 2 && elem_bytes != 4)) return -1;
    const cuuint64_t dims[2] = {cols, rows};
    const cuuint64_t strides[1] = {cols * (cuuint64_t)elem_bytes};
    const cuuint32_t box[2] = {box_cols, box_rows};
    const cuuint32_t elem_strides[2] = {1, 1};
    const CUresult r = encode(desc, elem_bytes == 2 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_INT32,
                              2, (void *)base, dims, strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                              swizzle128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE,
                              CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    return r == CUDA_SUCCESS ? 0 : -1;
}
#else
typedef struct __attribute__((aligned(64))) {
    uint64_t opaque[16];
} rad_tma_desc_t;
#define RAD_GRID_CONSTANT
static inline int rad_tma_encode_2d(rad_tma_desc_t *, const void *, int, uint64_t, uint64_t, uint32_t, uint32_t, int)
{
    return -1;
}
#endif

/* Multiprocessor count of the current device (1 on failure, so grids stay valid). */
static inline int rad_sm_count(void)
{
    int dev = 0, count = 0;
    if (rad_get_device(&dev) != RAD_SUCCESS) return 1;
    if (rad_device_get_attribute(&count, RAD_DEV_ATTR_SM_COUNT, dev) != RAD_SUCCESS || count < 1) return 1;
    return count;
}

/* Compute capability major.minor * 10 of the current device (NVIDIA), 0 on AMD or on failure. */
static inline int rad_device_sm(void)
{
#if defined(RAD_CUDA)
    int dev = 0, major = 0, minor = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) return 0;
    if (cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) return 0;
    return major * 10 + minor;
#else
    return 0;
#endif
}

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

/* ------------------------------------------------------------------------------------------ */
/* bf16 / fp16 storage and conversions (16-bit words; no vendor bf16 type needed).             */
/* ------------------------------------------------------------------------------------------ */
typedef uint16_t rad_bf16;

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
__device__ __forceinline__ float rad_rcp_approx(float a)
{
    float r;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(a));
    return r;
}
#endif

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
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
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
    uint2 v;
    asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0,%1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
    return v;
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
    uint32_t v;
    asm volatile("ld.global.nc.L1::no_allocate.u32 %0, [%1];" : "=r"(v) : "l"(p));
    return v;
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

/* ------------------------------------------------------------------------------------------ */
/* Matrix cores. RAD_HAS_MMA_BF16 says whether the current device pass has the one the apply   */
/* kernel uses (NVIDIA sm_80+: mma.sync m16n8k16 bf16 -> fp32).                                 */
/* ------------------------------------------------------------------------------------------ */
#if defined(RAD_CUDA) && defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 800)
#define RAD_HAS_MMA_BF16 1
/* c += A(16x16, row) * B(16x8, col); a: 4 regs of bf16x2, b: 2 regs of bf16x2 (PTX fragment     */
/* layout for m16n8k16).                                                                         */
__device__ __forceinline__ void rad_mma_bf16_m16n8k16(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
/* Asynchronous 16-byte global -> shared copy (L2 only); zero-fills when !valid (no read). */
__device__ __forceinline__ void rad_cp_async_16(void *smem, const void *gmem, bool valid)
{
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(s), "l"(gmem), "r"(valid ? 16 : 0)
                 : "memory");
}
/* The same, always 16 bytes, to a shared-memory address already in the shared window (the value
 * __cvta_generic_to_shared gives): no size operand and no conversion per copy. */
__device__ __forceinline__ void rad_cp_async_16_full(unsigned smem, const void *gmem)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem), "l"(gmem) : "memory");
}
__device__ __forceinline__ void rad_cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void rad_cp_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }
/* (a & 0x000F000F) | c in one LOP3 (with two immediates the compiler emits two instructions). */
__device__ __forceinline__ uint32_t rad_nibble_pair_or(uint32_t a, uint32_t c)
{
    uint32_t d;
    asm("lop3.b32 %0, %1, 0x000F000F, %2, 0xEA;" : "=r"(d) : "r"(a), "r"(c));
    return d;
}
/* d = A * B (the accumulator starts at zero: no registers to clear first). */
__device__ __forceinline__ void rad_mma_bf16_m16n8k16_zero(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%10,%10,%10,%10};"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(0.0f));
}
/* Two bf16 lanes: a * b + c, one rounding each (exact for the small integers it is used on). */
__device__ __forceinline__ uint32_t rad_fma_bf16x2(uint32_t a, uint32_t b, uint32_t c)
{
    uint32_t d;
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}
#endif

/* Hopper warpgroup MMA (sm_90a only), with the A operand in registers and B in shared memory.   */
#if defined(RAD_CUDA) && defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define RAD_HAS_WGMMA 1
__device__ __forceinline__ void rad_wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void rad_wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void rad_wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory"); }
__device__ __forceinline__ void rad_fence_proxy_async_smem() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
/* Shared-memory matrix descriptor, no swizzle: lbo = byte stride between core matrices along K,
 * sbo = byte stride between groups of 8 rows (M/N). */
__device__ __forceinline__ uint64_t rad_wgmma_desc(const void *smem, uint32_t lbo, uint32_t sbo)
{
    const uint32_t addr = (uint32_t)__cvta_generic_to_shared(smem);
    return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)(lbo >> 4) << 16) | ((uint64_t)(sbo >> 4) << 32);
}
/* Descriptor of a K-major operand in the 128-byte swizzle layout (rows of 128 bytes, 8-row groups
 * 1024 bytes apart, the group 1024-byte aligned); smem may point inside a row (k offset). */
__device__ __forceinline__ uint64_t rad_wgmma_desc_sw128(const void *smem)
{
    const uint32_t addr = (uint32_t)__cvta_generic_to_shared(smem);
    return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)1 << 16) | ((uint64_t)(1024 >> 4) << 32) |
           ((uint64_t)1 << 62);
}
/* Shared-memory barriers: init (count arrivals), one arrival announcing `bytes` of bulk copies,
 * a plain arrival, and a wait for the phase of the given parity. */
__device__ __forceinline__ void rad_mbarrier_init(uint64_t *bar, unsigned count)
{
    const unsigned a = (unsigned)__cvta_generic_to_shared(bar);
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(a), "r"(count) : "memory");
}
__device__ __forceinline__ void rad_fence_mbarrier_init() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }
__device__ __forceinline__ void rad_mbarrier_arrive_expect_tx(uint64_t *bar, unsigned bytes)
{
    const unsigned a = (unsigned)__cvta_generic_to_shared(bar);
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(a), "r"(bytes) : "memory");
}
__device__ __forceinline__ void rad_mbarrier_arrive(uint64_t *bar)
{
    const unsigned a = (unsigned)__cvta_generic_to_shared(bar);
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(a) : "memory");
}
__device__ __forceinline__ void rad_mbarrier_wait(uint64_t *bar, unsigned parity)
{
    const unsigned a = (unsigned)__cvta_generic_to_shared(bar);
    asm volatile(
        "{\n.reg .pred done;\n"
        "RAD_WAIT_%=:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra RAD_WAIT_%=;\n}\n" ::"r"(a),
        "r"(parity)
        : "memory");
}
/* Bulk tensor copy of the box at (col, row) of a 2D tensor map into shared memory, completing
 * its bytes on bar. */
__device__ __forceinline__ void rad_tma_load_2d(void *smem, const rad_tma_desc_t *desc, int col, int row, uint64_t *bar)
{
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    const unsigned b = (unsigned)__cvta_generic_to_shared(bar);
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::"r"(s),
                 "l"(desc), "r"(col), "r"(row), "r"(b)
                 : "memory");
}
/* d (+)= A(64 x 16 bf16, registers) * B(16 x n bf16, shared memory, K-major) for n = 8, 16, 32,
 * 64, 128 tokens, picked by the size of the accumulator array (n / 2 floats per thread); accumulate = 0
 * starts from zero. */
__device__ __forceinline__ void rad_wgmma_rs(float (&d)[4], const uint32_t a[4], uint64_t desc, int accumulate)
{
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %9, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, %8, p, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(accumulate));
}
__device__ __forceinline__ void rad_wgmma_rs(float (&d)[8], const uint32_t a[4], uint64_t desc, int accumulate)
{
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %13, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7}, "
        "{%8, %9, %10, %11}, %12, p, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(accumulate));
}
__device__ __forceinline__ void rad_wgmma_rs(float (&d)[16], const uint32_t a[4], uint64_t desc, int accumulate)
{
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "
        "{%16, %17, %18, %19}, %20, p, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(accumulate));
}
__device__ __forceinline__ void rad_wgmma_rs(float (&d)[32], const uint32_t a[4], uint64_t desc, int accumulate)
{
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
        "{%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(accumulate));
}
__device__ __forceinline__ void rad_wgmma_rs(float (&d)[64], const uint32_t a[4], uint64_t desc, int accumulate)
{
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
        "{%64, %65, %66, %67}, %68, p, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(accumulate));
}
#endif

/* AMD matrix cores, guarded by target. The apply kernel on AMD uses the vector path for now;  */
/* these wrappers compile for their targets and are kept here so a matrix path can use them.   */
#if defined(RAD_HIP) && defined(__HIP_DEVICE_COMPILE__)
#if defined(__gfx1200__) || defined(__gfx1201__)
#define RAD_HAS_WMMA_GFX12 1
typedef __bf16 rad_v8bf16 __attribute__((ext_vector_type(8)));
typedef float rad_v8f32 __attribute__((ext_vector_type(8)));
__device__ __forceinline__ rad_v8f32 rad_wmma_bf16_16x16x16(rad_v8bf16 a, rad_v8bf16 b, rad_v8f32 c)
{
    return __builtin_amdgcn_wmma_f32_16x16x16_bf16_w32_gfx12(a, b, c);
}
#elif defined(__GFX11__)
#define RAD_HAS_WMMA_GFX11 1
typedef short rad_v16i16 __attribute__((ext_vector_type(16)));
typedef float rad_v8f32 __attribute__((ext_vector_type(8)));
__device__ __forceinline__ rad_v8f32 rad_wmma_bf16_16x16x16(rad_v16i16 a, rad_v16i16 b, rad_v8f32 c)
{
    return __builtin_amdgcn_wmma_f32_16x16x16_bf16_w32(a, b, c);
}
#elif defined(__gfx90a__) || defined(__gfx942__)
#define RAD_HAS_MFMA_BF16 1
typedef short rad_v4i16 __attribute__((ext_vector_type(4)));
typedef float rad_v4f32 __attribute__((ext_vector_type(4)));
__device__ __forceinline__ rad_v4f32 rad_mfma_bf16_16x16x16(rad_v4i16 a, rad_v4i16 b, rad_v4f32 c)
{
    return __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(a, b, c, 0, 0, 0);
}
#endif
#endif

/* Lane-wise maximum of two pairs of unsigned 16-bit integers. */
__device__ __forceinline__ uint32_t rad_max_u16x2(uint32_t a, uint32_t b)
{
#if defined(RAD_CUDA) && defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
    uint32_t d;
    asm("max.u16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
#else
    const uint32_t lo = (a & 0xffffu) > (b & 0xffffu) ? (a & 0xffffu) : (b & 0xffffu);
    const uint32_t hi = (a >> 16) > (b >> 16) ? (a >> 16) : (b >> 16);
    return lo | (hi << 16);
#endif
}

/* Unsigned 64-bit atomic minimum (the quantizer's non-finite flag). */
__device__ __forceinline__ void rad_atomic_min_u64(unsigned long long *p, unsigned long long v)
{
    atomicMin(p, v);
}

#endif /* RADIANCE_COMPAT_H */
