/*
 * apply_paths.h - what the apply entry (apply.hip) hands to the kernel paths: the checked
 * arguments, the plan (which path, which tile, the tensor maps), and one launcher per path. The
 * planner decides everything once, the launchers launch exactly the kernel the plan names and
 * choose nothing. The paths and when each is taken: docs/PERF_LOG.md, "How the dispatch decides".
 *
 * Builds with RADIANCE_KERNEL_VARIANTS (benchmarks/harness/gpu_kernels.py only, never setup.py)
 * also hold the measured alternatives that the planner never picks, for the kernel harness's
 * variant table (benchmarks/harness/apply_variants.hip, variants.def).
 */
#ifndef RADIANCE_APPLY_PATHS_H
#define RADIANCE_APPLY_PATHS_H

#include <stdint.h>

#include "compat.h"
#include "radiance/radiance_gpu.h"

namespace radiance {

/* radiance_gpu_apply's arguments, checked (apply.hip): pointers aligned, group allowed, k % group
 * == 0, m, n > 0. */
struct ApplyArgs {
    const uint16_t *x; /* bf16 [m, k] */
    int64_t m, k;
    const int32_t *packed; /* [n, k / 8] */
    const uint16_t *scales; /* bf16 [n, k / group] */
    const uint16_t *bias;   /* bf16 [n] or NULL */
    int64_t n;
    int group;
    uint16_t *out; /* bf16 [m, n] */
    rad_stream_t stream;
};

enum class ApplyPath {
    kVector, /* fp32 FMAs, tiles of 1-8 tokens in LDS (AMD, NVIDIA before sm_80): apply_vector.hip */
    kMma,    /* mma.sync, register pipeline, a warp per 16 rows (few tokens, G < 128): apply_mma.hip */
    kTile,   /* mma.sync, activations shared by 8 warps through shared memory: apply_mma.hip */
    kStream, /* mma.sync, weights through a per-warp cp.async ring (few tokens, G >= 128): apply_stream.hip */
    kWgmma,  /* sm_90a warpgroup MMA fed by TMA, 7-32 tokens and the fallbacks (G >= 128): apply_wgmma_pipe.hip */
    kWgmmaWs, /* sm_90a warp-specialized wgmma, more than 32 tokens (G >= 128): apply_wgmma_ws.hip */
    kStreamSharedX, /* kStream with the activations in shared memory, one block per SM: apply_stream.hip */
    kWmma,   /* AMD RDNA3/RDNA4 WMMA through the rad_wmma layer (wmma.h): apply_wmma.hip */
    kWgmmaFold, /* sm_90a wgmma, the group scale folded into the dequantized weights (many tokens, any
                 * group): apply_wgmma_fold.hip */
};

/* kStream: how a warp reads the activations of its tokens. From global memory (through L1), lanes
 * of tokens past m loading token m - 1 (kXClamp: the addresses of a lane of the last token, so no
 * extra traffic and no per-step test; faster for 1-2 tokens) or loading nothing (kXSkip: faster
 * for 3-6 tokens, H200); or from shared memory (kXShared, kStreamSharedX), where the block has put
 * them in the order the lanes read them. */
enum StreamX { kXClamp = 0, kXSkip = 1, kXShared = 2 };

/* kWgmma: how a step's weights and activations reach shared memory. */
enum WgmmaCopy {
    kCopyAsync = 0, /* both by 16-byte cp.async, a block barrier per step */
    kCopyTmaX = 1,  /* activations by TMA (needs xmap), weights by cp.async */
    kCopyTma = 2,   /* both by TMA (needs xmap and wmap), mbarrier ring, no block barrier */
};

/* Shapes the plan and the kernels agree on. */
constexpr int kStepWords = 16; /* one k step of the mma kernels: 16 packed words = 128 columns */
constexpr int kWgmmaRows = 256; /* rows per block of the wgmma kernel */

struct ApplyPlan {
    ApplyPath path;
    /* kMma, kTile, kStream: 16-row m-tiles per warp and 8-token n-tiles per warp;
     * kWmma: 16-token tiles per wave in token_tiles */
    int row_tiles, token_tiles;
    /* kWmma: the fragment layout (12: RDNA4, 11: RDNA3) and the test flag that corrupts the result */
    int wmma_arch;
    bool wmma_corrupt;
    int x_mode; /* kStream: StreamX */
    /* kStream: k % 512 == 0, so the kernel that tests no step against k inside its 4-step
     * super-steps */
    bool whole_super;
    /* kWgmma: tokens per block (8 .. 128), WgmmaCopy, 64-row halves per warpgroup (1: four
     * warpgroups; 2: two, ping-pong), running scale (128 tokens) */
    int tokens, copy, halves;
    bool running_scale;
    /* kWgmmaWs: a producer warpgroup and consumer_wgs consumer warpgroups of 64 rows, a_sets
     * A-fragment sets (2: the next step's built while the current one's wgmmas run), 64-256 tokens
     * (in `tokens`) in steps of 32, both tensor maps (the weights' boxes 64 consumer_wgs rows);
     * `blocks` > 0: persistent, one block per SM looping over tiles. kWgmmaFold: `tokens` and
     * consumer_wgs name its tile (always persistent, both tensor maps) */
    int consumer_wgs, a_sets;
    /* kStreamSharedX: steps per ring slot, warps per block, blocks (at most one per SM), dynamic
     * shared memory bytes (the rings and the activations), all from plan_stream_shared_x */
    int super_step, warps, blocks, smem;
    /* kStreamSharedX: 2 where k is split over a cluster pair of blocks (plan_stream_split_k), else 0 */
    int k_parts;
    /* kWgmma with copy kCopyTmaX (xmap) or kCopyTma (both), kWgmmaWs and kWgmmaFold (both), encoded
     * by the planner */
    rad_tma_desc_t xmap, wmap;
};

/* The launchers: each launches the kernel the plan names on a.stream and returns the launch's
 * error (RADIANCE_GPU_EINVAL for a plan this build holds no kernel for, or a grid too large). */
rad_error_t launch_vector(const ApplyArgs &a, const ApplyPlan &p);
rad_error_t launch_mma(const ApplyArgs &a, const ApplyPlan &p);
rad_error_t launch_tile(const ApplyArgs &a, const ApplyPlan &p);
rad_error_t launch_stream(const ApplyArgs &a, const ApplyPlan &p);
rad_error_t launch_wgmma(const ApplyArgs &a, const ApplyPlan &p);
rad_error_t launch_wgmma_ws(const ApplyArgs &a, const ApplyPlan &p);
rad_error_t launch_wmma(const ApplyArgs &a, const ApplyPlan &p);
rad_error_t launch_stream_shared_x(const ApplyArgs &a, const ApplyPlan &p);
rad_error_t launch_wgmma_fold(const ApplyArgs &a, const ApplyPlan &p);

/* kStreamSharedX for 8 token_tiles tokens at most (m <= 8 token_tiles), super_step steps per ring
 * slot: fills p and returns true where the activations (16 k bytes per 8 tokens) fit in the
 * device's opt-in shared memory per block beside the rings of at least min_warps warps; false
 * (p untouched) where they do not, or for a group the kernel lacks. balance: warps per block chosen
 * so that the 16-row units of the head split evenly over the grid (else as many as fit, to 16). */
bool plan_stream_shared_x(const ApplyArgs &a, int token_tiles, int super_step, int min_warps, bool balance,
                          ApplyPlan *p);

/* kStreamSharedX for 9-16 tokens (m <= 16) with k split over a cluster of two blocks, one per SM
 * (apply_stream.hip, apply_stream_split_k_kernel): fills p and returns true where the GPU has
 * clusters (sm_90), k % (2 group) == 0 (whole steps and groups per half), and all 16 tokens'
 * activations over half of k (16 k bytes) fit in the opt-in shared memory per block beside at least
 * min_warps warps' rings and exchange slots; false (p untouched) elsewhere, and in builds without
 * the kernel (HIP). */
bool plan_stream_split_k(const ApplyArgs &a, int min_warps, ApplyPlan *p);

/* Whether this build holds the wgmma kernel for the current device (an sm_90a binary on an sm_90
 * GPU), looked up once per device. */
bool wgmma_built(void);

/* The WMMA layout of the current device (12: gfx12, 11: gfx11, 0: none; NVIDIA 0), looked up once. */
int wmma_device_arch(void);

/* Whether the WMMA path may run now for a call like `a` with layout `arch` on the current device:
 * RADIANCE_AMD_WMMA (0: never, 1: without the check) and otherwise the self-check on first use
 * (apply_wmma.hip), which launches on a.stream and synchronizes it once; while that stream is being
 * captured and the device is not yet checked, false (the plan without WMMA serves the call: the
 * vector kernel on AMD). */
bool wmma_usable(const ApplyArgs &a, int arch, bool corrupt);

/* Forget every device's self-check result (radiance_gpu_test_refuse). */
void wmma_forget_checks(void);

} // namespace radiance

#endif /* RADIANCE_APPLY_PATHS_H */
