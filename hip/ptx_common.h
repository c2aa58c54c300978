/*
 * ptx_common.h - NVIDIA instructions of every target the library builds for, behind compat.h's
 * portable names (compat.h includes this file on CUDA; nothing else does): loads with cache
 * hints, the reciprocal estimate, the saturating FMA, and (sm_90) max.u16x2. compat.h calls them
 * in device passes only, as it did when it held them; mfma.h's NVIDIA emulation calls the named
 * barrier (rad_ptx_bar_sync).
 */
#ifndef RADIANCE_PTX_COMMON_H
#define RADIANCE_PTX_COMMON_H

#include <stdint.h>

/* 16, 8 and 4 bytes read through the non-coherent path without allocating in L1 */
__device__ __forceinline__ uint4 rad_ptx_ld_nc_na_v4(const void *p)
{
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}
__device__ __forceinline__ uint2 rad_ptx_ld_nc_na_v2(const void *p)
{
    uint2 v;
    asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0,%1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
    return v;
}
__device__ __forceinline__ uint32_t rad_ptx_ld_nc_na_u32(const void *p)
{
    uint32_t v;
    asm volatile("ld.global.nc.L1::no_allocate.u32 %0, [%1];" : "=r"(v) : "l"(p));
    return v;
}
/* a plain 16-byte global load that the compiler may not move past a barrier (the memory clobber) */
__device__ __forceinline__ uint4 rad_ptx_ld_v4_ordered(const void *p)
{
    uint4 v;
    asm volatile("ld.global.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p) : "memory");
    return v;
}
/* 1 / a to about 1 ulp (the hardware estimate; normal a only) */
__device__ __forceinline__ float rad_ptx_rcp_approx(float a)
{
    float r;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(a));
    return r;
}
/* RN(a * b + c) clamped to [0, 1] in one instruction */
__device__ __forceinline__ float rad_ptx_fma_rn_sat(float a, float b, float c)
{
    float r;
    asm("fma.rn.sat.f32 %0, %1, %2, %3;" : "=f"(r) : "f"(a), "f"(b), "f"(c));
    return r;
}
/* Barrier `id` (1-15; 0 is __syncthreads') of `threads` threads, whole warps: the emulated 64-lane
 * MFMA wave of mfma.h, two warps that wait for each other and for no other warp of the block */
__device__ __forceinline__ void rad_ptx_bar_sync(int id, int threads)
{
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
__device__ __forceinline__ uint32_t rad_ptx_max_u16x2(uint32_t a, uint32_t b)
{
    uint32_t d;
    asm("max.u16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}
#endif

#endif /* RADIANCE_PTX_COMMON_H */
