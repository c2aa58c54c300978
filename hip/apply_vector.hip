/*
 * apply_vector.hip - the vector path of apply: one wave per row, fp32 FMAs on the CUDA/vector
 * cores, 4 tokens per pass over the row. Every AMD target's path today, and NVIDIA GPUs before
 * sm_80; any m and any group size.
 */
#include "apply_common.h"
#include "apply_paths.h"

namespace radiance {
namespace {

constexpr int kVecThreads = 256;
constexpr int kVecTokens = 4;

template <int WAVE>
__device__ __forceinline__ void apply_vector_rows(const uint16_t *__restrict__ x, int64_t m, int64_t k,
                                                  const int32_t *__restrict__ packed,
                                                  const uint16_t *__restrict__ scales,
                                                  const uint16_t *__restrict__ bias, int64_t n, int group,
                                                  uint16_t *__restrict__ out)
{
    const int lane = threadIdx.x % WAVE;
    const int waves = blockDim.x / WAVE;
    const int64_t kw = k / 8, ng = k / group, chunks = k / 32;
    for (int64_t row = (int64_t)blockIdx.x * waves + threadIdx.x / WAVE; row < n; row += (int64_t)gridDim.x * waves) {
        const int32_t *wrow = packed + row * kw;
        const uint16_t *srow = scales + row * ng;
        for (int64_t tok0 = 0; tok0 < m; tok0 += kVecTokens) {
            float acc[kVecTokens];
#pragma unroll
            for (int b = 0; b < kVecTokens; b++) acc[b] = 0.0f;
            for (int64_t c = lane; c < chunks; c += WAVE) {
                /* 4 words = 32 columns, always inside one group (G >= 32, aligned) */
                const rad_u32x4 wv = rad_load_stream_16(wrow + 4 * c);
                const uint32_t words[4] = {wv.x, wv.y, wv.z, wv.w};
                const float s = rad_bf16_to_float(srow[(32 * c) / group]);
                float part[kVecTokens];
#pragma unroll
                for (int b = 0; b < kVecTokens; b++) part[b] = 0.0f;
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    float q[8];
#pragma unroll
                    for (int e = 0; e < 8; e++) q[e] = word_q(words[i], e);
#pragma unroll
                    for (int b = 0; b < kVecTokens; b++) {
                        if (tok0 + b >= m) break;
                        const rad_u32x4 xv = rad_load_cached_16(x + (tok0 + b) * k + 32 * c + 8 * i);
                        const uint32_t xs[4] = {xv.x, xv.y, xv.z, xv.w};
#pragma unroll
                        for (int e2 = 0; e2 < 4; e2++) {
                            part[b] += rad_bits_to_float(xs[e2] << 16) * q[2 * e2];
                            part[b] += rad_bits_to_float(xs[e2] & 0xffff0000u) * q[2 * e2 + 1];
                        }
                    }
                }
#pragma unroll
                for (int b = 0; b < kVecTokens; b++) acc[b] += s * part[b];
            }
#pragma unroll
            for (int b = 0; b < kVecTokens; b++)
#pragma unroll
                for (int h = WAVE / 2; h >= 1; h /= 2) acc[b] += rad_shfl_xor(acc[b], h);
            if (lane == 0) {
#pragma unroll
                for (int b = 0; b < kVecTokens; b++)
                    if (tok0 + b < m) out[(tok0 + b) * n + row] = out_bf16(acc[b], bias, row);
            }
        }
    }
}

__global__ void __launch_bounds__(kVecThreads)
apply_vector_kernel(const uint16_t *__restrict__ x, int64_t m, int64_t k, const int32_t *__restrict__ packed,
                    const uint16_t *__restrict__ scales, const uint16_t *__restrict__ bias, int64_t n, int group,
                    uint16_t *__restrict__ out)
{
    apply_vector_rows<RAD_WAVE>(x, m, k, packed, scales, bias, n, group, out);
}

} // namespace

rad_error_t launch_vector(const ApplyArgs &a, const ApplyPlan &)
{
    /* enough blocks to fill any current GPU; each loops over rows */
    const int64_t waves_per_block = kVecThreads / 32;
    int64_t blocks = (a.n + waves_per_block - 1) / waves_per_block;
    if (blocks > 65536) blocks = 65536;
    apply_vector_kernel<<<(unsigned)blocks, kVecThreads, 0, a.stream>>>(a.x, a.m, a.k, a.packed, a.scales, a.bias,
                                                                        a.n, a.group, a.out);
    return rad_get_last_error();
}

} // namespace radiance
