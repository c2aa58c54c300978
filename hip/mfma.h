/*
 * mfma.h - the rad_mfma layer: one 16x16x16 bf16 matrix multiply-accumulate of a 64-lane wave,
 * D = A * B + C in fp32, with the lane and register layout of AMD CDNA's MFMA instruction
 * v_mfma_f32_16x16x16_bf16 (gfx942, MI300; named v_mfma_f32_16x16x16bf16_1k on gfx90a, MI200):
 * A and B 4 bf16 per lane (two 32-bit words), C and D 4 fp32 per lane.
 *
 * Beside wmma.h (RDNA's wave32 WMMA), and for the same reason. Which of the two forms the current
 * pass has, compat.h says (RAD_MFMA_BUILTIN, RAD_MFMA_EMULATED); only apply_mfma.hip includes this
 * file. On gfx942 / gfx90a each call is the compiler builtin
 * __builtin_amdgcn_mfma_f32_16x16x16bf16_1k; on NVIDIA (the sm_90 pass only) it is an exact
 * emulation of the same layout, so that the MFMA apply kernel (apply_mfma.hip) runs unchanged on
 * an NVIDIA GPU in the tests and tests/test_gpu_mfma.py checks this layout element by element
 * against a plain matrix product. An NVIDIA warp has 32 lanes, so the emulated wave is two warps
 * (threads 64 w .. 64 w + 63 of the block) that trade their fragments through shared memory
 * between two named barriers of those 64 threads (ptx_common.h). On every other target (RDNA: wave32; NVIDIA passes other than sm_90)
 * the layer is absent: `present` is false, a call traps, and the planner never chooses the MFMA
 * path there (mfma_built in apply_paths.h).
 *
 * The layout (lane l of 64, g = l / 16 its lane group, c = l % 16; element e of a fragment is the
 * low (e even) or high (e odd) half of 32-bit word e / 2; C/D register v is a float):
 *
 *            A[M][K] (16 x 16)       B[K][N] (16 x 16)       C, D[M][N] register v
 *            M = c, K = 4 g + e      N = c, K = 4 g + e      M = 4 g + v,  N = c
 *
 * Every lane takes part in every call (the wave as a whole executes the instruction; the
 * emulation's barriers count all 64 threads), and a wave's lanes must not diverge around it.
 *
 * Sources (read, not copied): AMD's "AMD Instinct MI300 / CDNA3 Instruction Set Architecture"
 * reference guide, section "Matrix Fused-Multiply-Add (MFMA)" (operand and result register counts
 * per lane, wave64 only; the instruction's rate is in docs/amd.md, from AMD's peak figures); AMD's Matrix
 * Instruction Calculator (ROCm/amd_matrix_instruction_calculator, --register-layout for
 * v_mfma_f32_16x16x16bf16_1k: A[i][k] in lane i + 16 (k / 4), item k % 4; B[k][j] in lane
 * j + 16 (k / 4); D[i][j] in lane j + 16 (i / 4), register i % 4); LLVM's AMDGPU tests of the
 * intrinsic (llvm.amdgcn.mfma.f32.16x16x16bf16.1k: <4 x i16> operands, <4 x float> accumulator, for
 * gfx90a and gfx940/gfx942) and clang's builtin tests for the operand types. Public kernels that
 * use the builtin agree on A and B (the B fragment of lane l is column l % 16, rows 4 (l / 16) ..
 * + 3). Where they disagree: some describe the result as column-major ("out: col-major", feeding
 * W^T X^T to get a transposed tile), that is D's row and column swapped against the calculator's
 * D[i][j] = lane j + 16 (i / 4). This header follows the calculator; the apply kernel's self-check
 * on first use (apply_mfma.hip) compares it with the vector kernel on the user's GPU, so a swapped
 * D (or any wrong M, N or K assignment) is caught there before a result is used.
 */
#ifndef RADIANCE_MFMA_H
#define RADIANCE_MFMA_H

#include <stdint.h>

#include "compat.h"

/* RAD_MFMA_BUILTIN, RAD_MFMA_EMULATED: compat.h */

/* The emulation's shared memory holds the fragments of this many waves per block (a block of the
 * MFMA path has at most this many waves of 64 lanes). */
#define RAD_MFMA_MAX_WAVES 8

/* C/D: register v of this lane (row and column per the table above). */
struct rad_mfma_acc {
    float v[4];
};

/* An A or B fragment: two 32-bit words, each two bf16 (element 2j low, 2j + 1 high). */
struct rad_mfma_frag {
    uint32_t v[2];
};

/* The bf16 pair (lo's high half, hi's high half): two fp32 values that are exact in bf16, packed into
 * one word of a fragment. One v_perm_b32 on AMD (the compiler's shift and v_and_or_b32 are two). */
__device__ __forceinline__ uint32_t rad_mfma_pack_bf16(float lo, float hi)
{
#if defined(RAD_MFMA_BUILTIN)
    /* bytes 2, 3 of lo, then bytes 2, 3 of hi (selectors 0-3: the second operand, 4-7: the first) */
    return __builtin_amdgcn_perm(__float_as_uint(hi), __float_as_uint(lo), 0x07060302u);
#elif defined(RAD_MFMA_EMULATED)
    return __byte_perm(__float_as_uint(lo), __float_as_uint(hi), 0x7632);
#else
    return (rad_float_to_bits(lo) >> 16) | (rad_float_to_bits(hi) & 0xffff0000u);
#endif
}

struct rad_mfma {
#if defined(RAD_MFMA_BUILTIN) || defined(RAD_MFMA_EMULATED)
    static constexpr bool present = true;
#else
    static constexpr bool present = false;
#endif
    /* row M of D's register v in this lane */
    __device__ static __forceinline__ int d_row(int lane, int v) { return 4 * (lane >> 4) + v; }
    /* K of element e of this lane's A/B fragment */
    __device__ static __forceinline__ int k_of(int lane, int e) { return 4 * (lane >> 4) + e; }

    __device__ static __forceinline__ void mma(rad_mfma_acc &d, const rad_mfma_frag &a, const rad_mfma_frag &b)
    {
#if defined(RAD_MFMA_BUILTIN)
        typedef short v4s __attribute__((ext_vector_type(4)));
        typedef float v4f __attribute__((ext_vector_type(4)));
        d = __builtin_bit_cast(rad_mfma_acc, __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(
                                                 __builtin_bit_cast(v4s, a), __builtin_bit_cast(v4s, b),
                                                 __builtin_bit_cast(v4f, d), 0, 0, 0));
#elif defined(RAD_MFMA_EMULATED)
        /* a 64-lane wave = two warps; fragments go through shared memory, one slot per wave */
        __shared__ uint32_t frag_a[RAD_MFMA_MAX_WAVES][64][2], frag_b[RAD_MFMA_MAX_WAVES][64][2];
        const int lane = threadIdx.x & 63, wave = threadIdx.x >> 6;
        /* barrier 1 + wave of the wave's 64 threads: the previous call's reads are done */
        rad_ptx_bar_sync(1 + wave, 64);
        frag_a[wave][lane][0] = a.v[0];
        frag_a[wave][lane][1] = a.v[1];
        frag_b[wave][lane][0] = b.v[0];
        frag_b[wave][lane][1] = b.v[1];
        rad_ptx_bar_sync(1 + wave, 64);
        const int col = lane & 15;
#pragma unroll
        for (int v = 0; v < 4; v++) {
            const int row = d_row(lane, v);
            float acc = d.v[v];
            /* K ascending: lane group kg holds K 4 kg .. 4 kg + 3 as words (K, K + 1), (K + 2, K + 3) */
#pragma unroll
            for (int kg = 0; kg < 4; kg++) {
#pragma unroll
                for (int j = 0; j < 2; j++) {
                    const uint32_t aw = frag_a[wave][row + 16 * kg][j], bw = frag_b[wave][col + 16 * kg][j];
                    acc = __fmaf_rn(__uint_as_float(aw << 16), __uint_as_float(bw << 16), acc);
                    acc = __fmaf_rn(__uint_as_float(aw & 0xffff0000u), __uint_as_float(bw & 0xffff0000u), acc);
                }
            }
            d.v[v] = acc;
        }
#else
        (void)d; (void)a; (void)b;
        rad_trap();
#endif
    }
};

#endif /* RADIANCE_MFMA_H */
