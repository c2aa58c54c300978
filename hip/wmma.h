/*
 * wmma.h - the rad_wmma_* layer: one 16x16x16 bf16 matrix multiply-accumulate of a 32-lane wave,
 * D = A * B + C in fp32, with the lane and register layout of AMD's WMMA instructions:
 *
 *   rad_wmma<12>  RDNA4 (gfx1200, gfx1201): v_wmma_f32_16x16x16_bf16, A and B 8 bf16 per lane
 *   rad_wmma<11>  RDNA3 (gfx11):            v_wmma_f32_16x16x16_bf16, A and B 16 bf16 per lane
 *
 * Which of the three the current pass has, compat.h says (RAD_WMMA*_BUILTIN, RAD_WMMA_EMULATED);
 * only apply_wmma.hip includes this file. On gfx12 / gfx11 each call is the compiler builtin; on
 * NVIDIA (the sm_90 pass only) an exact emulation of the same layout (warp shuffles and fp32 FMAs,
 * k ascending), so that the WMMA apply kernel (apply_wmma.hip) runs unchanged on an NVIDIA GPU in the tests and
 * tests/test_gpu_wmma.py checks this layout element by element against a plain matrix product.
 * On every other target (gfx90a, gfx942: wave64 MFMA; NVIDIA passes other than sm_90) the layer
 * is absent: `present` is false, a call traps, and the planner never chooses the WMMA path there
 * (wmma_built in apply_paths.h).
 *
 * The layout (lane l of 32, h = l / 16, r = l % 16; element e of a fragment is the low (e even) or
 * high (e odd) half of 32-bit word e / 2; C/D register v is a float):
 *
 *            A[M][K] (16 x 16)         B[K][N] (16 x 16)         C, D[M][N] register v
 *   gfx12    M = r, K = 8h + e, e<8    N = r, K = 8h + e, e<8    M = v + 8h,  N = r
 *   gfx11    M = r, K = e, e<16        N = r, K = e, e<16        M = 2v + h,  N = r
 *
 * On gfx11 both half-waves must hold the same A and B (replicated); the emulation reads K 0-7 from
 * lanes 0-15 and K 8-15 from lanes 16-31, so a kernel that does not replicate gives wrong results
 * in the NVIDIA tests as well.
 *
 * Sources (read, not copied): AMD GPUOpen, "How to accelerate AI applications on RDNA 3 using
 * WMMA" (2023) for gfx11 (A row and B column per lane, 16 K per lane replicated in both half-waves,
 * D row 2v + l/16); AMD's RDNA3 and RDNA4 ISA references, chapter "Wave Matrix Multiply
 * Accumulate", as quoted in public gfx12 code (minimal test kernels that fill A[r][8h + e],
 * B[8h + e][r] and read D[v + 8h][r]); LLVM's clang CodeGen tests of the two builtins for the
 * operand types (v8i16 / v16i16 for bf16, v8f32). The sources disagree on one point: one public
 * gfx12 kernel splits K as 0-3, 8-11 (lanes 0-15) and 4-7, 12-15 (lanes 16-31) instead of 0-7 /
 * 8-15. The apply kernel does not depend on it (A and B go through the same K assignment, and
 * which k a slot holds is free), and the self-check on first use (apply_wmma.hip) would catch a
 * wrong M, N or D assignment on the user's GPU before any result is used.
 */
#ifndef RADIANCE_WMMA_H
#define RADIANCE_WMMA_H

#include <stdint.h>

#include "compat.h"

/* RAD_WMMA12_BUILTIN, RAD_WMMA11_BUILTIN, RAD_WMMA_EMULATED: compat.h */

/* 16 fp32 accumulator lanes' worth: register v of this lane (row per the table above). */
struct rad_wmma_acc {
    float v[8];
};

/* An A or B fragment: WORDS 32-bit words, each two bf16 (element 2j low, 2j + 1 high). */
template <int WORDS>
struct rad_wmma_frag {
    uint32_t v[WORDS];
};

#if defined(RAD_WMMA_EMULATED)
__device__ __forceinline__ float rad_wmma_lo(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float rad_wmma_hi(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }
__device__ __forceinline__ uint32_t rad_wmma_shfl(uint32_t v, int src) { return __shfl_sync(0xffffffffu, v, src); }
#endif

template <int ARCH>
struct rad_wmma;

template <>
struct rad_wmma<12> {
#if defined(RAD_WMMA12_BUILTIN) || defined(RAD_WMMA_EMULATED)
    static constexpr bool present = true;
#else
    static constexpr bool present = false;
#endif
    static constexpr int kWords = 4; /* 8 bf16 of A or B per lane */
    typedef rad_wmma_frag<kWords> frag;
    /* row M of D's register v in this lane */
    __device__ static __forceinline__ int d_row(int lane, int v) { return v + 8 * (lane >> 4); }
    /* K of element e of this lane's A/B fragment */
    __device__ static __forceinline__ int k_of(int lane, int e) { return 8 * (lane >> 4) + e; }

    __device__ static __forceinline__ void mma(rad_wmma_acc &d, const frag &a, const frag &b)
    {
#if defined(RAD_WMMA12_BUILTIN)
        typedef short v8s __attribute__((ext_vector_type(8)));
        typedef float v8f __attribute__((ext_vector_type(8)));
        v8s va, vb;
        v8f vc;
        __builtin_memcpy(&va, a.v, 16);
        __builtin_memcpy(&vb, b.v, 16);
        __builtin_memcpy(&vc, d.v, 32);
        vc = __builtin_amdgcn_wmma_f32_16x16x16_bf16_w32_gfx12(va, vb, vc);
        __builtin_memcpy(d.v, &vc, 32);
#elif defined(RAD_WMMA_EMULATED)
        const int lane = threadIdx.x & 31;
        const int col = lane & 15, h = lane >> 4;
        /* K = 8 * half + 2j (+1): lanes col + 16 * half hold column col of B, lanes M + 16 * half
         * row M of A */
#pragma unroll
        for (int half = 0; half < 2; half++) {
#pragma unroll
            for (int j = 0; j < kWords; j++) {
                const uint32_t bw = rad_wmma_shfl(b.v[j], col + 16 * half);
#pragma unroll
                for (int v = 0; v < 8; v++) {
                    const uint32_t aw = rad_wmma_shfl(a.v[j], v + 8 * h + 16 * half);
                    d.v[v] = __fmaf_rn(rad_wmma_lo(aw), rad_wmma_lo(bw), d.v[v]);
                    d.v[v] = __fmaf_rn(rad_wmma_hi(aw), rad_wmma_hi(bw), d.v[v]);
                }
            }
        }
#else
        (void)d; (void)a; (void)b;
        rad_trap();
#endif
    }
};

template <>
struct rad_wmma<11> {
#if defined(RAD_WMMA11_BUILTIN) || defined(RAD_WMMA_EMULATED)
    static constexpr bool present = true;
#else
    static constexpr bool present = false;
#endif
    static constexpr int kWords = 8; /* 16 bf16 of A or B per lane, the same in both half-waves */
    typedef rad_wmma_frag<kWords> frag;
    __device__ static __forceinline__ int d_row(int lane, int v) { return 2 * v + (lane >> 4); }
    __device__ static __forceinline__ int k_of(int, int e) { return e; }

    __device__ static __forceinline__ void mma(rad_wmma_acc &d, const frag &a, const frag &b)
    {
#if defined(RAD_WMMA11_BUILTIN)
        typedef short v16s __attribute__((ext_vector_type(16)));
        typedef float v8f __attribute__((ext_vector_type(8)));
        v16s va, vb;
        v8f vc;
        __builtin_memcpy(&va, a.v, 32);
        __builtin_memcpy(&vb, b.v, 32);
        __builtin_memcpy(&vc, d.v, 32);
        vc = __builtin_amdgcn_wmma_f32_16x16x16_bf16_w32(va, vb, vc);
        __builtin_memcpy(d.v, &vc, 32);
#elif defined(RAD_WMMA_EMULATED)
        const int lane = threadIdx.x & 31;
        const int col = lane & 15, h = lane >> 4;
        /* K 0-7 (words 0-3) from the low half-wave, K 8-15 (words 4-7) from the high one */
#pragma unroll
        for (int j = 0; j < kWords; j++) {
            const int half = j / 4;
            const uint32_t bw = rad_wmma_shfl(b.v[j], col + 16 * half);
#pragma unroll
            for (int v = 0; v < 8; v++) {
                const uint32_t aw = rad_wmma_shfl(a.v[j], 2 * v + h + 16 * half);
                d.v[v] = __fmaf_rn(rad_wmma_lo(aw), rad_wmma_lo(bw), d.v[v]);
                d.v[v] = __fmaf_rn(rad_wmma_hi(aw), rad_wmma_hi(bw), d.v[v]);
            }
        }
#else
        (void)d; (void)a; (void)b;
        rad_trap();
#endif
    }
};

#endif /* RADIANCE_WMMA_H */
