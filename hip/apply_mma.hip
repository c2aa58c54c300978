/*
 * apply_mma.hip - the two mma.sync paths of apply (NVIDIA sm_80+, mma m16n8k16 bf16 -> fp32):
 *   apply_mma_kernel   a warp per 16 rows, the packed words in a register pipeline and the
 *                      activations read from L1; few tokens (m <= 8) with G < 128.
 *   apply_tile_kernel  more tokens where the wgmma path does not apply (other GPUs, G < 128, no
 *                      tensor maps): the activations of 512 columns x 8 * TOKEN_TILES tokens staged
 *                      in shared memory once per block (cp.async, double-buffered), shared by 8 warps.
 *
 * The weights are the A operand (16 rows of the head x 16 k), the activations the B operand (16 k
 * x 8 tokens). A thread (group g = lane / 4, column t = lane % 4) owns rows g and g + 8; one packed
 * word of each gives it the A fragments of two mmas straight from the nibbles: (w >> 4j) &
 * 0x000F000F | 0x43004300 is two bf16 values 136 + q (elements 2j, 2j+1 of the word, thanks to the
 * shuffled nibble order), and one bf16x2 fma takes the 136 off exactly (dequant_pair). Which k an
 * mma slot holds is free as long as x is fed in the same order, so thread t feeds x at its own
 * word's columns (one 16-byte load per word). Each group is summed in fp32 accumulators of its own
 * and then scaled into the fp32 total.
 *
 * Template parameters of both kernels:
 *   GROUP        columns per scale (32, 64, 128, 256)
 *   ROW_TILES    16-row m-tiles per warp
 *   TOKEN_TILES  8-token n-tiles per warp (the tokens of a block: 8 * TOKEN_TILES)
 *   PREFETCH     steps of packed words held in registers ahead of the one in use
 * and of apply_mma_kernel:
 *   MIN_BLOCKS   blocks per SM its registers are sized for (__launch_bounds__); a 49152-row head
 *                is 768 blocks, 5.8 per SM of an H200: one wave at 6 per SM, 1.45 at 4
 */
#include "apply_common.h"
#include "apply_paths.h"
#include "ptx_sm80.h"

namespace radiance {
namespace {

constexpr int kMmaWarps = 4;

/* Position (0..15) inside the step of the i-th (0..3) word that lane column t holds. For G >= 128
 * it is 4 consecutive words (one 16-byte load); for smaller groups the 4 lane columns must feed
 * one mma from one group, so the words interleave (2 x 8 bytes for G = 64, 4 x 4 bytes for 32). */
template <int GROUP>
__device__ __forceinline__ int step_word(int i, int t)
{
    return GROUP >= 128 ? 4 * t + i : GROUP == 64 ? (i < 2 ? 2 * t + i : 8 + 2 * t + (i - 2)) : 4 * i + t;
}

/* Whether a group ends after the i-th word of a step (G = 256 also needs an odd step). */
template <int GROUP>
__device__ __forceinline__ bool group_ends_after(int i)
{
    return GROUP == 32 ? true : GROUP == 64 ? (i & 1) == 1 : i == 3;
}

template <int GROUP>
struct GroupsPerStep {
    static constexpr int value = GROUP >= 128 ? 1 : 128 / GROUP;
};

/* The packed words and scales of one step for one warp: ROW_TILES m-tiles, rows g and g + 8. */
template <int GROUP, int ROW_TILES>
struct Stage {
    uint32_t words[ROW_TILES][2][4];
    float scale[ROW_TILES][2][GroupsPerStep<GROUP>::value];
};

template <int GROUP, int ROW_TILES>
__device__ __forceinline__ void load_stage(Stage<GROUP, ROW_TILES> &st, const int32_t *__restrict__ packed,
                                           const uint16_t *__restrict__ scales, int64_t row0, int64_t n,
                                           int64_t kw, int64_t ng, int64_t step, int g, int t)
{
    constexpr int GPS = GroupsPerStep<GROUP>::value;
    const int64_t word0 = step * kStepWords;
    const bool full = word0 + kStepWords <= kw; /* only G < 128 can have a partial last step */
#pragma unroll
    for (int mt = 0; mt < ROW_TILES; mt++) {
#pragma unroll
        for (int h = 0; h < 2; h++) {
            int64_t row = row0 + 16 * mt + g + 8 * h;
            row = row < n ? row : n - 1; /* rows past the end compute garbage and store nothing */
            const int32_t *wp = packed + row * kw + word0;
            if (GROUP >= 128) {
                const rad_u32x4 v = rad_load_stream_16(wp + 4 * t);
                st.words[mt][h][0] = v.x; st.words[mt][h][1] = v.y;
                st.words[mt][h][2] = v.z; st.words[mt][h][3] = v.w;
            } else if (full) {
                if (GROUP == 64) {
                    const uint2 a = rad_load_stream_8(wp + 2 * t);
                    const uint2 b = rad_load_stream_8(wp + 8 + 2 * t);
                    st.words[mt][h][0] = a.x; st.words[mt][h][1] = a.y;
                    st.words[mt][h][2] = b.x; st.words[mt][h][3] = b.y;
                } else {
#pragma unroll
                    for (int i = 0; i < 4; i++) st.words[mt][h][i] = rad_load_stream_4(wp + 4 * i + t);
                }
            } else {
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    const int pos = step_word<GROUP>(i, t);
                    /* nibble 8 is q = 0: columns past k add nothing */
                    st.words[mt][h][i] = word0 + pos < kw ? rad_load_stream_4(wp + pos) : 0x88888888u;
                }
            }
            const uint16_t *sp = scales + row * ng;
#pragma unroll
            for (int j = 0; j < GPS; j++) {
                const int64_t grp = GROUP == 256 ? step / 2 : step * GPS + j;
                st.scale[mt][h][j] = grp < ng ? rad_bf16_to_float(sp[grp]) : 0.0f;
            }
        }
    }
}

/* After word i of a step: where a group ends there, its fp32 sums (acc) scaled into the total and
 * cleared for the next group */
template <int GROUP, int ROW_TILES, int TOKEN_TILES>
__device__ __forceinline__ void close_group(const Stage<GROUP, ROW_TILES> &st, int i, int64_t step,
                                            float (&acc)[ROW_TILES][TOKEN_TILES][4],
                                            float (&total)[ROW_TILES][TOKEN_TILES][4])
{
    if (!group_ends_after<GROUP>(i) || (GROUP == 256 && (step & 1) == 0)) return;
    const int j = GROUP >= 128 ? 0 : (GROUP == 64 ? i >> 1 : i);
#pragma unroll
    for (int mt = 0; mt < ROW_TILES; mt++) {
        const float s_lo = st.scale[mt][0][j], s_hi = st.scale[mt][1][j];
#pragma unroll
        for (int nt = 0; nt < TOKEN_TILES; nt++) {
            total[mt][nt][0] += s_lo * acc[mt][nt][0];
            total[mt][nt][1] += s_lo * acc[mt][nt][1];
            total[mt][nt][2] += s_hi * acc[mt][nt][2];
            total[mt][nt][3] += s_hi * acc[mt][nt][3];
#pragma unroll
            for (int c = 0; c < 4; c++) acc[mt][nt][c] = 0.0f;
        }
    }
}

/* A warp's outputs: rows row0 + 16 mt + g (+ 8), tokens tok0 + 8 nt + 2 t (+ 1), those inside the
 * head and m only */
template <int ROW_TILES, int TOKEN_TILES>
__device__ __forceinline__ void store_total(const float (&total)[ROW_TILES][TOKEN_TILES][4], int64_t row0,
                                            int64_t tok0, int64_t m, int64_t n, const uint16_t *__restrict__ bias,
                                            uint16_t *__restrict__ out, int g, int t)
{
#pragma unroll
    for (int mt = 0; mt < ROW_TILES; mt++) {
#pragma unroll
        for (int nt = 0; nt < TOKEN_TILES; nt++) {
#pragma unroll
            for (int c = 0; c < 4; c++) {
                const int64_t row = row0 + 16 * mt + g + 8 * (c >> 1);
                const int64_t tok = tok0 + 8 * nt + 2 * t + (c & 1);
                if (row < n && tok < m) out[tok * n + row] = out_bf16(total[mt][nt][c], bias, row);
            }
        }
    }
}

template <int GROUP, int ROW_TILES, int TOKEN_TILES, int PREFETCH, int MIN_BLOCKS>
__global__ void __launch_bounds__(kMmaWarps * 32, MIN_BLOCKS)
apply_mma_kernel(const uint16_t *__restrict__ x, int64_t m, int64_t k, const int32_t *__restrict__ packed,
                 const uint16_t *__restrict__ scales, const uint16_t *__restrict__ bias, int64_t n,
                 uint16_t *__restrict__ out, int64_t token_chunks)
{
#if defined(RAD_HAS_MMA_BF16)
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    /* chunk index fastest: the blocks that share rows run together and share them through L2 */
    const int64_t chunk = (int64_t)blockIdx.x % token_chunks;
    const int64_t row_block = (int64_t)blockIdx.x / token_chunks;
    const int64_t row0 = (row_block * kMmaWarps + warp) * (16 * ROW_TILES);
    if (row0 >= n) return; /* whole warp: no shuffles or barriers follow */
    const int64_t tok0 = chunk * (8 * TOKEN_TILES);
    const int64_t kw = k / 8, ng = k / GROUP;
    const int64_t nsteps = (kw + kStepWords - 1) / kStepWords;

    float total[ROW_TILES][TOKEN_TILES][4], acc[ROW_TILES][TOKEN_TILES][4];
#pragma unroll
    for (int mt = 0; mt < ROW_TILES; mt++)
#pragma unroll
        for (int nt = 0; nt < TOKEN_TILES; nt++)
#pragma unroll
            for (int c = 0; c < 4; c++) total[mt][nt][c] = acc[mt][nt][c] = 0.0f;

    /* this thread's activation rows (B operand: token = 8 nt + g) */
    const uint16_t *xrow[TOKEN_TILES];
    bool xvalid[TOKEN_TILES];
#pragma unroll
    for (int nt = 0; nt < TOKEN_TILES; nt++) {
        const int64_t tok = tok0 + 8 * nt + g;
        xvalid[nt] = tok < m;
        xrow[nt] = x + (xvalid[nt] ? tok : 0) * k;
    }

    Stage<GROUP, ROW_TILES> stage[PREFETCH];
#pragma unroll
    for (int p = 0; p < PREFETCH; p++)
        if (p < nsteps) load_stage<GROUP, ROW_TILES>(stage[p], packed, scales, row0, n, kw, ng, p, g, t);

    for (int64_t s0 = 0; s0 < nsteps; s0 += PREFETCH) {
#pragma unroll
        for (int p = 0; p < PREFETCH; p++) {
            const int64_t step = s0 + p;
            if (step >= nsteps) break;
            Stage<GROUP, ROW_TILES> &st = stage[p];
            const int64_t col0 = step * (kStepWords * 8);
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int pos = step_word<GROUP>(i, t);
                const bool in_k = GROUP >= 128 || col0 + 8 * pos < k;
                uint32_t a_lo[ROW_TILES][4], a_hi[ROW_TILES][4];
#pragma unroll
                for (int mt = 0; mt < ROW_TILES; mt++) {
                    const uint32_t w0 = st.words[mt][0][i], w1 = st.words[mt][1][i];
                    dequant_a_fragments(w0, w1, a_lo[mt], a_hi[mt]);
                }
#pragma unroll
                for (int nt = 0; nt < TOKEN_TILES; nt++) {
                    rad_u32x4 xv = {0u, 0u, 0u, 0u};
                    if (xvalid[nt] && in_k) xv = rad_load_cached_16(xrow[nt] + col0 + 8 * pos);
#pragma unroll
                    for (int mt = 0; mt < ROW_TILES; mt++) {
                        rad_mma_bf16_m16n8k16(acc[mt][nt], a_lo[mt], xv.x, xv.y);
                        rad_mma_bf16_m16n8k16(acc[mt][nt], a_hi[mt], xv.z, xv.w);
                    }
                }
                close_group<GROUP, ROW_TILES, TOKEN_TILES>(st, i, step, acc, total);
            }
            if (step + PREFETCH < nsteps)
                load_stage<GROUP, ROW_TILES>(st, packed, scales, row0, n, kw, ng, step + PREFETCH, g, t);
        }
    }

    store_total<ROW_TILES, TOKEN_TILES>(total, row0, tok0, m, n, bias, out, g, t);
#endif
}
/* ------------------------------------------------------------------------------------------ */
/* Matrix path, tiled: for more tokens. The activations of a chunk of 4 steps (512 columns) for  */
/* all 8 * TOKEN_TILES tokens of the block are copied to shared memory once (cp.async, double-buffered)  */
/* and shared by the block's warps, so each warp reads them from there instead of every warp     */
/* pulling the whole activation matrix through L1/L2. Each warp still owns 16 * ROW_TILES rows and     */
/* dequantizes its weights straight from registers into A fragments, as above.                  */
/* ------------------------------------------------------------------------------------------ */
constexpr int kTileWarps = 8;
constexpr int kChunkSteps = 4;
/* per token in shared memory: kChunkSteps steps of 16 x 16-byte slots, then 64 bytes of padding
 * so that tokens g and g + 1 fall 16 banks apart (conflict-free 16-byte reads) */
constexpr int kTokenBytes = kChunkSteps * 256 + 64;

template <int TOKEN_TILES>
struct TileSmem {
    static constexpr int bytes = 2 * 8 * TOKEN_TILES * kTokenBytes;
};

/* Slot (i * 4 + t) in shared memory of the word at step position pos (inverse of step_word). */
template <int GROUP>
__device__ __forceinline__ int slot_of_pos(int pos)
{
    int i, t;
    if (GROUP >= 128) {
        i = pos & 3; t = pos >> 2;
    } else if (GROUP == 64) {
        t = (pos & 7) >> 1; i = (pos & 1) + (pos >= 8 ? 2 : 0);
    } else {
        i = pos >> 2; t = pos & 3;
    }
    return i * 4 + t;
}

template <int GROUP, int TOKEN_TILES>
__device__ __forceinline__ void load_x_chunk(unsigned char *buf, const uint16_t *__restrict__ x, int64_t m,
                                             int64_t k, int64_t tok0, int64_t chunk)
{
#if defined(RAD_HAS_MMA_BF16)
    constexpr int kPieces = 8 * TOKEN_TILES * kChunkSteps * 16;
    const int64_t kw = k / 8;
    for (int piece = threadIdx.x; piece < kPieces; piece += kTileWarps * 32) {
        const int tok = piece / (kChunkSteps * 16);
        const int rem = piece % (kChunkSteps * 16);
        const int st = rem >> 4, pos = rem & 15;
        const int64_t word = (chunk * kChunkSteps + st) * kStepWords + pos;
        const bool valid = tok0 + tok < m && word < kw;
        const uint16_t *src = valid ? x + (tok0 + tok) * k + word * 8 : x;
        rad_cp_async_16(buf + tok * kTokenBytes + st * 256 + slot_of_pos<GROUP>(pos) * 16, src, valid);
    }
#endif
}

template <int GROUP, int ROW_TILES, int TOKEN_TILES, int PREFETCH>
__global__ void __launch_bounds__(kTileWarps * 32, 1)
apply_tile_kernel(const uint16_t *__restrict__ x, int64_t m, int64_t k, const int32_t *__restrict__ packed,
                  const uint16_t *__restrict__ scales, const uint16_t *__restrict__ bias, int64_t n,
                  uint16_t *__restrict__ out, int64_t token_chunks)
{
#if defined(RAD_HAS_MMA_BF16)
    static_assert(kChunkSteps % PREFETCH == 0, "stage index must be a compile-time constant");
    extern __shared__ __align__(16) unsigned char smem[];
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int64_t chunk_tok = (int64_t)blockIdx.x % token_chunks;
    const int64_t row_block = (int64_t)blockIdx.x / token_chunks;
    /* warps past the last row still take part in the copies and barriers */
    const int64_t row0 = (row_block * kTileWarps + warp) * (16 * ROW_TILES);
    const int64_t tok0 = chunk_tok * (8 * TOKEN_TILES);
    const int64_t kw = k / 8, ng = k / GROUP;
    const int64_t nsteps = (kw + kStepWords - 1) / kStepWords;
    const int64_t nchunks = (nsteps + kChunkSteps - 1) / kChunkSteps;
    constexpr int kBufBytes = 8 * TOKEN_TILES * kTokenBytes;

    float total[ROW_TILES][TOKEN_TILES][4], acc[ROW_TILES][TOKEN_TILES][4];
#pragma unroll
    for (int mt = 0; mt < ROW_TILES; mt++)
#pragma unroll
        for (int nt = 0; nt < TOKEN_TILES; nt++)
#pragma unroll
            for (int c = 0; c < 4; c++) total[mt][nt][c] = acc[mt][nt][c] = 0.0f;

    load_x_chunk<GROUP, TOKEN_TILES>(smem, x, m, k, tok0, 0);
    rad_cp_async_commit();

    Stage<GROUP, ROW_TILES> stage[PREFETCH];
#pragma unroll
    for (int p = 0; p < PREFETCH; p++)
        if (p < nsteps) load_stage<GROUP, ROW_TILES>(stage[p], packed, scales, row0, n, kw, ng, p, g, t);

    for (int64_t c = 0; c < nchunks; c++) {
        const unsigned char *buf = smem + (c & 1) * kBufBytes;
        __syncthreads(); /* everyone is done with the buffer the next copy overwrites */
        if (c + 1 < nchunks) {
            load_x_chunk<GROUP, TOKEN_TILES>(smem + ((c + 1) & 1) * kBufBytes, x, m, k, tok0, c + 1);
            rad_cp_async_commit();
            rad_cp_async_wait<1>();
        } else {
            rad_cp_async_wait<0>();
        }
        __syncthreads(); /* chunk c is in shared memory for all */
#pragma unroll
        for (int st = 0; st < kChunkSteps; st++) {
            const int64_t step = c * kChunkSteps + st;
            if (step >= nsteps) break;
            Stage<GROUP, ROW_TILES> &sg = stage[st % PREFETCH];
#pragma unroll
            for (int i = 0; i < 4; i++) {
                uint32_t a_lo[ROW_TILES][4], a_hi[ROW_TILES][4];
#pragma unroll
                for (int mt = 0; mt < ROW_TILES; mt++) {
                    const uint32_t w0 = sg.words[mt][0][i], w1 = sg.words[mt][1][i];
                    dequant_a_fragments(w0, w1, a_lo[mt], a_hi[mt]);
                }
#pragma unroll
                for (int nt = 0; nt < TOKEN_TILES; nt++) {
                    const uint4 xv = *(const uint4 *)(buf + (8 * nt + g) * kTokenBytes + st * 256 + (i * 4 + t) * 16);
#pragma unroll
                    for (int mt = 0; mt < ROW_TILES; mt++) {
                        rad_mma_bf16_m16n8k16(acc[mt][nt], a_lo[mt], xv.x, xv.y);
                        rad_mma_bf16_m16n8k16(acc[mt][nt], a_hi[mt], xv.z, xv.w);
                    }
                }
                close_group<GROUP, ROW_TILES, TOKEN_TILES>(sg, i, step, acc, total);
            }
            if (step + PREFETCH < nsteps)
                load_stage<GROUP, ROW_TILES>(sg, packed, scales, row0, n, kw, ng, step + PREFETCH, g, t);
        }
    }

    store_total<ROW_TILES, TOKEN_TILES>(total, row0, tok0, m, n, bias, out, g, t);
#endif
}

} // namespace

/* The register-pipelined kernel: 1 m-tile, 1 n-tile, PREFETCH steps ahead with registers for
 * MIN_BLOCKS blocks per SM; the planner takes it for G < 128 (G >= 128 takes the stream kernel),
 * the benchmark build for every G. */
template <int PREFETCH, int MIN_BLOCKS>
rad_error_t launch_mma_kernel(const ApplyArgs &a)
{
    constexpr int kRowTiles = 1, kTokenTiles = 1;
    const int64_t rows_per_block = 16 * kRowTiles * kMmaWarps;
    const int64_t row_blocks = (a.n + rows_per_block - 1) / rows_per_block;
    const int64_t chunks = (a.m + 8 * kTokenTiles - 1) / (8 * kTokenTiles);
    const int64_t blocks = row_blocks * chunks;
    if (blocks > 0x7fffffffLL) return (rad_error_t)RADIANCE_GPU_EINVAL;
    void (*kernel)(const uint16_t *, int64_t, int64_t, const int32_t *, const uint16_t *, const uint16_t *, int64_t,
                   uint16_t *, int64_t);
    switch (a.group) {
    case 32: kernel = apply_mma_kernel<32, kRowTiles, kTokenTiles, PREFETCH, MIN_BLOCKS>; break;
    case 64: kernel = apply_mma_kernel<64, kRowTiles, kTokenTiles, PREFETCH, MIN_BLOCKS>; break;
#if defined(RADIANCE_KERNEL_VARIANTS)
    case 128: kernel = apply_mma_kernel<128, kRowTiles, kTokenTiles, PREFETCH, MIN_BLOCKS>; break;
    case 256: kernel = apply_mma_kernel<256, kRowTiles, kTokenTiles, PREFETCH, MIN_BLOCKS>; break;
#endif
    default: return (rad_error_t)RADIANCE_GPU_EINVAL;
    }
    kernel<<<(unsigned)blocks, kMmaWarps * 32, 0, a.stream>>>(a.x, a.m, a.k, a.packed, a.scales, a.bias, a.n, a.out,
                                                              chunks);
    return rad_get_last_error();
}

/* The two shapes of the pipe that decide picks (plan_mma, dispatch.h); nothing else launches. */
rad_error_t launch_mma(const ApplyArgs &a, const ApplyPlan &p)
{
    if (p.row_tiles != 1 || p.token_tiles != 1) return (rad_error_t)RADIANCE_GPU_EINVAL;
    if (p.mma_prefetch == 3 && p.mma_min_blocks == 6) return launch_mma_kernel<3, 6>(a);
    if (p.mma_prefetch == 2 && p.mma_min_blocks == 8) return launch_mma_kernel<2, 8>(a);
    return (rad_error_t)RADIANCE_GPU_EINVAL;
}

namespace {

template <int GROUP, int ROW_TILES, int TOKEN_TILES, int PREFETCH>
rad_error_t launch_tile_kernel(const ApplyArgs &a)
{
    const int64_t rows_per_block = 16 * ROW_TILES * kTileWarps;
    const int64_t row_blocks = (a.n + rows_per_block - 1) / rows_per_block;
    const int64_t chunks = (a.m + 8 * TOKEN_TILES - 1) / (8 * TOKEN_TILES);
    const int64_t blocks = row_blocks * chunks;
    if (blocks > 0x7fffffffLL) return (rad_error_t)RADIANCE_GPU_EINVAL;
    const int smem = TileSmem<TOKEN_TILES>::bytes;
    void (*kernel)(const uint16_t *, int64_t, int64_t, const int32_t *, const uint16_t *, const uint16_t *, int64_t,
                   uint16_t *, int64_t) = apply_tile_kernel<GROUP, ROW_TILES, TOKEN_TILES, PREFETCH>;
    rad_error_t err = rad_func_set_max_dynamic_smem(kernel, smem);
    if (err != RAD_SUCCESS) return err;
    kernel<<<(unsigned)blocks, kTileWarps * 32, smem, a.stream>>>(a.x, a.m, a.k, a.packed, a.scales, a.bias, a.n,
                                                                  a.out, chunks);
    return rad_get_last_error();
}

template <int TOKEN_TILES>
rad_error_t launch_tile_group(const ApplyArgs &a)
{
    constexpr int kRowTiles = 2, kPrefetch = 2;
    switch (a.group) {
    case 32: return launch_tile_kernel<32, kRowTiles, TOKEN_TILES, kPrefetch>(a);
    case 64: return launch_tile_kernel<64, kRowTiles, TOKEN_TILES, kPrefetch>(a);
    case 128: return launch_tile_kernel<128, kRowTiles, TOKEN_TILES, kPrefetch>(a);
    default: return launch_tile_kernel<256, kRowTiles, TOKEN_TILES, kPrefetch>(a);
    }
}

} // namespace

/* The tiled kernel: 2 m-tiles per warp, 2 steps ahead, 16, 32 or 64 tokens per block. */
rad_error_t launch_tile(const ApplyArgs &a, const ApplyPlan &p)
{
    if (p.row_tiles != 2) return (rad_error_t)RADIANCE_GPU_EINVAL;
    switch (p.token_tiles) {
    case 2: return launch_tile_group<2>(a);
    case 4: return launch_tile_group<4>(a);
    case 8: return launch_tile_group<8>(a);
    default: return (rad_error_t)RADIANCE_GPU_EINVAL;
    }
}

} // namespace radiance
