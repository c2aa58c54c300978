/*
 * ptx_sm80.h - NVIDIA instructions of sm_80 and later that the apply kernels use: mma.sync
 * m16n8k16 bf16 -> fp32, cp.async, the LOP3 / bf16x2 FMA of the nibble dequantization, a funnel
 * shift, and the quantizer's float -> bf16x2 conversion (RAD_HAS_CVT_BF16X2). RAD_HAS_MMA_BF16
 * says whether the current device pass has them; elsewhere (host passes, AMD, older NVIDIA GPUs)
 * nothing is defined and the kernels that need them compile to empty bodies.
 */
#ifndef RADIANCE_PTX_SM80_H
#define RADIANCE_PTX_SM80_H

#include "compat.h"

#if defined(RAD_CUDA) && defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 800)
#define RAD_HAS_MMA_BF16 1
#define RAD_HAS_CVT_BF16X2 1
/* bf16(hi) in the upper half, bf16(lo) in the lower, each rounded to nearest, ties to even */
__device__ __forceinline__ uint32_t rad_cvt_rn_bf16x2(float hi, float lo)
{
    uint32_t r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
/* a register with defined but arbitrary contents, at no instruction */
__device__ __forceinline__ uint32_t rad_arbitrary_u32()
{
    uint32_t r;
    asm("" : "=r"(r));
    return r;
}
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
/* Asynchronous BYTES-byte (4, 8 or 16) global -> shared copy through L1, to an address in the
 * shared window; zero-fills when !valid (no read). */
template <int BYTES>
__device__ __forceinline__ void rad_cp_async_ca(unsigned smem, const void *gmem, bool valid)
{
    static_assert(BYTES == 4 || BYTES == 8 || BYTES == 16, "cp.async.ca copies 4, 8 or 16 bytes");
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;" ::"r"(smem), "l"(gmem), "n"(BYTES),
                 "r"(valid ? BYTES : 0)
                 : "memory");
}
__device__ __forceinline__ void rad_cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void rad_cp_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }
/* (a & MASK) | c in one LOP3, MASK an immediate (with two immediates the compiler emits two
 * instructions). */
template <uint32_t MASK>
__device__ __forceinline__ uint32_t rad_and_or(uint32_t a, uint32_t c)
{
    uint32_t d;
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(d) : "r"(a), "n"(MASK), "r"(c));
    return d;
}
/* (a & 0x000F000F) | c: a nibble of each half */
__device__ __forceinline__ uint32_t rad_nibble_pair_or(uint32_t a, uint32_t c) { return rad_and_or<0x000F000Fu>(a, c); }
/* d = A * B (the accumulator starts at zero: no registers to clear first). */
__device__ __forceinline__ void rad_mma_bf16_m16n8k16_zero(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%10,%10,%10,%10};"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(0.0f));
}
/* d = A * B + C (C in the accumulator's fragment layout, registers of its own). */
__device__ __forceinline__ void rad_mma_bf16_m16n8k16_from(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1,
                                                           float4 c)
{
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%10,%11,%12,%13};"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(c.x), "f"(c.y), "f"(c.z), "f"(c.w));
}
/* The low 32 bits of (hi:lo) >> shift, shift 0 .. 31 (one SHF). */
__device__ __forceinline__ uint32_t rad_funnel_shift_r(uint32_t lo, uint32_t hi, int shift)
{
    uint32_t d;
    asm("shf.r.wrap.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(lo), "r"(hi), "r"(shift));
    return d;
}
/* Two bf16 lanes: a * b + c, one rounding each (exact for the small integers it is used on). */
__device__ __forceinline__ uint32_t rad_fma_bf16x2(uint32_t a, uint32_t b, uint32_t c)
{
    uint32_t d;
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}
#endif

#endif /* RADIANCE_PTX_SM80_H */
