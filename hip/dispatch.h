/*
 * dispatch.h - which kernel apply runs for a call: the planner's whole decision (make_plan in
 * apply.hip calls decide below and does nothing else but encode the tensor maps it asks for), the
 * kernel paths, and the shapes the plan and the kernels agree on.
 *
 * Plain C++17 with no vendor header, so that a host program built by any C++ compiler runs the
 * same decision: tests/test_dispatch_doc.py compiles tests/dispatch_table.cpp against this file
 * and checks that docs/DISPATCH.md shows exactly the table it prints. The device is asked through
 * a Facts object (the library's asks the GPU and the driver, lazily and in the order below, at the
 * points where the old planner did; the table's is a fixed description of a GPU):
 *
 *   int sm()                         compute capability x 10 (NVIDIA), 0 on AMD
 *   int wmma_arch()                  the device's WMMA layout: 12 (gfx12), 11 (gfx11), 0
 *   bool wmma_usable(arch, corrupt)  RADIANCE_AMD_WMMA and the self-check on first use
 *   bool mfma_device()               the device has CDNA's MFMA layout (gfx90a, gfx942)
 *   bool mfma_usable(corrupt)        RADIANCE_AMD_MFMA and the self-check on first use
 *   bool wgmma_built()               this build holds the sm_90a kernels and the GPU is an sm_90
 *   int64_t smem_optin()             opt-in shared memory per block, bytes
 *   int64_t sm_count()               multiprocessors
 *   bool cluster_launch()            the build has thread-block clusters (NVIDIA)
 *   int64_t split_k_clusters()       split-k cluster pairs the device runs at once
 *   bool tile_maps(tokens, rows)     the two tensor maps of the folding (and warp-specialized)
 *                                    kernel were granted: the activations in boxes of tokens x 64
 *                                    columns, the weights in boxes of rows x one step
 *   bool out_map(tokens)             the output's tensor map (boxes of tokens x 64 rows) was
 *                                    granted: the driver asks for a 16-byte aligned output whose
 *                                    rows are a multiple of 16 bytes (n % 8 == 0)
 *   bool pipe_x_map(tokens)          the pipe kernel's activation map was granted
 *   bool pipe_w_map()                its weight map was granted (asked only after the first)
 *
 * The measurements behind each threshold are in docs/PERF_LOG.md (history); docs/DISPATCH.md is
 * the table of what runs when.
 */
#ifndef RADIANCE_DISPATCH_H
#define RADIANCE_DISPATCH_H

#include <stdint.h>

#include "radiance/radiance_gpu.h" /* RADIANCE_GPU_TEST_* */

namespace radiance {

enum class ApplyPath {
    kVector, /* fp32 FMAs, tiles of 1-8 tokens in LDS (AMD, NVIDIA before sm_80): apply_vector.hip */
    kMma,    /* mma.sync, register pipeline, a warp per 16 rows (few tokens, G < 128): apply_mma.hip */
    kTile,   /* mma.sync, activations shared by 8 warps through shared memory: apply_mma.hip */
    kStream, /* mma.sync, weights through a per-warp cp.async ring (few tokens, G >= 128): apply_stream.hip */
    kWgmma,  /* sm_90a warpgroup MMA fed by TMA, 7-32 tokens and the fallbacks (G >= 128): apply_wgmma_pipe.hip */
    kWgmmaWs, /* sm_90a warp-specialized wgmma (G >= 128), in the benchmark build only:
               * benchmarks/harness/apply_wgmma_ws.hip (decide never takes it: the folding kernel
               * needs the same tensor maps) */
    kStreamSharedX, /* kStream with the activations in shared memory, one block per SM: apply_stream.hip */
    kWmma,   /* AMD RDNA3/RDNA4 WMMA through the rad_wmma layer (wmma.h): apply_wmma.hip */
    kMfma,   /* AMD CDNA (gfx942, gfx90a) MFMA through the rad_mfma layer (mfma.h): apply_mfma.hip */
    kWgmmaFold, /* sm_90a wgmma, the group scale folded into the dequantized weights (more than 32
                 * tokens; 17-32 for k <= 1024; 9-32 for G < 128): apply_wgmma_fold.hip */
};

/* kStream: how a warp reads the activations of its tokens. From global memory (through L1), lanes
 * of tokens past m loading token m - 1 (kXClamp: the addresses of a lane of the last token, so no
 * extra traffic and no per-step test; faster for 1-2 tokens where every step is tested against k:
 * the benchmark build's only) or loading nothing (kXSkip: faster for 3-6 tokens there, and at every
 * count with whole or tail super-steps, H200); or from shared memory (kXShared, kStreamSharedX),
 * where the block has put them in the order the lanes read them. */
enum StreamX { kXClamp = 0, kXSkip = 1, kXShared = 2 };

/* kWgmma: how a step's weights and activations reach shared memory. */
enum WgmmaCopy {
    kCopyAsync = 0, /* both by 16-byte cp.async, a block barrier per step */
    kCopyTmaX = 1,  /* activations by TMA (needs xmap), weights by cp.async */
    kCopyTma = 2,   /* both by TMA (needs xmap and wmap), mbarrier ring, no block barrier */
};

/* Shapes the plan and the kernels agree on. */
constexpr int kStepWords = 16;  /* one k step of the mma kernels: 16 packed words = 128 columns */
constexpr int kWgmmaRows = 256; /* rows per block of the wgmma pipe kernel */
constexpr int kStreamXsMaxWarps = 16; /* apply_stream_xs_kernel, apply_stream_split_k_kernel: one block per SM */
constexpr int kStreamXsRingSlots = 2; /* ring slots per warp of those two kernels */
/* a row's scales of one super-step (SS steps) where they travel in the ring with its weights
 * (Dispatch.ring_scales): one bf16 a step for groups of 128, one every two steps for 256. window:
 * twice that, the 4-byte-aligned words around them (split k's halves of an odd number of 2-step
 * super-steps' steps, the second starting at an odd step: the benchmark build's
 * split_k_fine_tail_windows) */
constexpr int stream_row_scale_bytes(int group, int super_steps, bool window = false)
{
    return (window ? 4 : 2) * (group == 128 ? super_steps : super_steps / 2);
}
/* one ring slot of a stream warp: a super-step (SS steps of 64 bytes) of its 16 ROW_TILES rows,
 * and their scales where the ring carries them */
constexpr int64_t stream_slot_bytes(int row_tiles, int super_steps, int group = 128, bool ring_scales = false,
                                    bool window = false)
{
    return 16 * row_tiles *
           (64 * super_steps + (ring_scales ? stream_row_scale_bytes(group, super_steps, window) : 0));
}
constexpr int kSplitKTokenTiles = 2;
/* split k's rings where 4-step slots leave room for too few warps (decide): 2-step super-steps
 * (128-byte visits) in 3 slots, 2 super-steps copied ahead, to k = kSplitKFineMaxK. H200, one loop
 * per table, twice (docs/PERF_LOG.md, twenty-second round, run 79), us at 9 / 12 / 16 tokens
 * against the wgmma pipe kernel taken before: 262144 x 5376 244.9 / 247.3 / 250.8 against 259.7 /
 * 259.9 / 260.4, 151936 x 5376 145.9 / 147.1 / 149.8 against 163.7 / 164.3 / 164.5; but 262144 x
 * 5632 268.0 / 270.8 / 274.2 against 268.3 / 269.5 / 269.0 and 129280 x 7168 174.7 / 176.8 /
 * 179.6 against 170.7 / 170.8 / 171.0. Where 4-step slots fit 16 warps they stay ahead (248320 x
 * 5120 218.7 / 220.5 / 222.6 against 222.5 / 224.3 / 227.9 in 2-step ones; 151936 x 1024 37.3 /
 * 39.0 / 39.5 against 42.2 / 43.4 / 44.1), and 2-step super-steps in 4 slots (the bytes of 4-step
 * ones, 3 copied ahead) lose everywhere, as they do at 1-8 tokens (128-byte visits: the H200 reads
 * 4.0 instead of 4.3 TB/s, apply_stream.hip's header) */
constexpr int kSplitKFineSteps = 2;
constexpr int kSplitKFineSlots = 3;
constexpr int64_t kSplitKFineMaxK = 5376;
/* split k in the same 2-step slots with each super-step's two scales a row in the ring (groups of
 * 128, whole super-steps in each half: k % 512 == 0), from k = kSplitKFineScalesMinK to
 * kSplitKFineScalesMaxK where 16 warps of those fit (on an H200 to k = 6656): the
 * scales no longer wait on global memory, two super-steps are in flight, at k = 5120-6144, where
 * 4-step slots with the scales fit fewer than 16 warps, 16 fit, and at k % 1024 != 0 (3584, 4608)
 * no step is tested, as 4-step super-steps would be there. H200, docs/PERF_LOG.md
 * twenty-fourth round, run 80, two loops, us at 9 / 16 tokens against the plan before (4-step
 * slots, the scales in them at k <= 4096; the wgmma pipe kernel at 6144): 151936 x 1024 36.6 /
 * 39.0 against 37.7 / 39.7, 128256 x 2048 53.6 / 55.0 against 53.6 / 55.1, 151936 x 3072 82.1 /
 * 85.3 against 83.8 / 87.7, 151936 x 3584 93.2 / 95.9 against 108.5 / 111.9, 128256 x 4096 93.3 /
 * 96.4 against 96.9 / 100.7, 151936 x 4608 114.6 / 118.4 against 133.6 / 137.4, 248320 x 5120
 * 199.3 / 206.7 against 218.5 / 224.8, 151936 x 6144 148.0 / 153.6 against 181.3 / 182.4.
 * Nsight Compute, 248320 x 5120 at 16 tokens: the long-scoreboard stall falls from 2.09 to 0.20
 * per issued instruction, issue active 54 -> 63 % */
constexpr int64_t kSplitKFineScalesMinK = 1024;
constexpr int64_t kSplitKFineScalesMaxK = 6144;
/* split k where k / 256 is odd (k = 5376 on an H100 / H200): block 0's half k / 256 + kSplitKShift
 * steps and block 1's k / 256 - kSplitKShift (-1: block 1's a step longer, since block 0 also adds
 * and writes each unit), both of whole 2-step super-steps, block 1's rows read from 128-byte
 * boundaries. With halves of k / 256 steps each, block 1's 128-byte visits straddle two lines
 * (twice the L1 tag lookups), and block 0 waited about 14 % of its time for block 1's sums
 * (Nsight Compute, 16 tokens, 262144 x 5376, H100).
 * H100, docs/PERF_LOG.md thirty-first round (run 90), two timing loops, us at 9 / 12 / 16 tokens:
 * 262144 x 5376 267.6-268.0 / 272.8 / 275.9-276.2 against 291.2-291.5 / 292.6-292.7 / 299.7-300.7
 * with halves of 21 steps (the benchmark build's splitktailwin), block 0's the longer 279.9-280.2 /
 * 282.2-282.8 / 286.6-287.7; 151936 x 5376 157.7-158.1 / 160.3-160.5 / 163.4-163.8 against
 * 168.8-169.2 / 171.6-172.1 / 174.6-174.8 */
constexpr int kSplitKShift = -1;
constexpr int kSplitKSlot = 32 * kSplitKTokenTiles * 4 * 4; /* per warp: a lane's fp32 sums, 2 tiles x 4 */
constexpr int kSplitKBars = 2 * 8;                          /* per warp: full and empty mbarriers */
constexpr int kVectorChunkFloats = 36;   /* LDS floats per 32-column chunk of the vector kernel (4 of pad) */
constexpr int kVectorStageFloats = 8192; /* tokens x columns of a vector stage where all of k does not fit */
constexpr int kVectorMaxTokens = 8;

/* Shared-activation stream kernel (kStreamSharedX): from this many tokens, where one warp load of
 * the activations from global memory touches more than 10 L1 lines (2 per token: a lane reads 16
 * bytes at column 32 t + 8 i of its token, so the 4 lanes of a token span 256 bytes), while the
 * block's shared copy costs at most 4 wavefronts a load. With every step tested against k the two
 * kernels tied at 4 tokens and the shared copy won at 8 (H200, 248320 x 5120, docs/PERF_LOG.md
 * run 26: from 5 then); with whole super-steps the loads skipped past m lead at 5 (248320 x 5120
 * 177.8 against 182.9 us; 128256 x 4096 82.7 against 81.4, within 2 %), the shared copy from 6
 * (185.5 against 188.9; 128256 x 4096 80.4 against 89.2): fifteenth round, run 58. With tail
 * super-steps (run 60) the shared copy leads at 6 on 262144 x 640 (36.4 against 36.9 us) and
 * trails on 262144 x 5376 (218.0 against 209.4), and leads at 8 on both. */
constexpr int kSharedXMinTokens = 6;
/* The scales in the ring: each super-step's 16 rows' scales copied by cp.async beside its weights,
 * as far ahead, instead of loaded from global memory a super-step ahead (docs/PERF_LOG.md sixteenth
 * round, run 63, two timing loops, H200). Needs whole super-steps (k % 512 == 0: a row's scales of
 * one then 4- or 8-byte aligned). The shared-activation kernel gains 1-7 % at 6-8 tokens on every
 * such head (248320 x 5120 at 6 / 8 tokens 178.0 / 180.5 us against the tail kernel's 181.0 /
 * 182.7, which led the whole one without them; 151936 x 1024 30.2 / 31.5 against 32.5 / 33.9), and
 * from 5 tokens where k <= kRingScalesFewTokensMaxK leads the one-unit kernel (128256 x 2048 42.6
 * against 46.1, 128256 x 4096 77.7 against 81.4; on 151936 x 5120 116.1 against 114.4). In the
 * one-unit kernel of 1-4 tokens they gain 1-4 % there (128256 x 4096 72.7 / 77.5 against 74.0 /
 * 78.2 at 1 / 4 tokens, 151936 x 1024 27.6 / 29.5 against 28.2 / 30.8) and lose 2-5 % at 4-5
 * tokens on 248320 x 5120 (174.6 against 170.6 at 4). */
constexpr int64_t kRingScalesFewTokensMaxK = 4096;
constexpr int64_t kSharedXRingMinTokens = 5;
/* Warps per block of kStreamSharedX, at least: 16 (one 4-step super-step each in flight) keep as
 * many weight bytes in flight per SM as the stream kernel's 4 blocks of 4 warps, the configuration
 * measured in run 26; where the activations leave room for fewer rings, the stream kernel. */
constexpr int kSharedXMinWarps = 16;
/* The wgmma kernel for 7-8 tokens wants enough 128-column steps per row to keep its 6-stage TMA
 * ring full past the fill: at 5 steps (262144 x 640, H200) it took 59.5 against the stream
 * kernel's 47.6 us (round three, run 6); from 16 steps (k >= 2048) it led. */
constexpr int64_t kWgmma8MinSteps = 16;
/* Tokens from which the WMMA path beats the vector kernel (the budget: apply_wmma.hip's header). */
constexpr int64_t kWmmaMinTokens = 8;
/* Tokens from which the MFMA path beats the vector kernel on gfx942 / gfx90a (the budget:
 * docs/amd.md; the vector kernel's tile of 4 tokens is compute-bound there, MFMA at the memory floor). */
constexpr int64_t kMfmaMinTokens = 3;

/* The call's shape. */
struct Call {
    int64_t m, n, k;
    int group;
};

/* The plan without its tensor maps (ApplyPlan, apply_paths.h, adds them). */
struct Dispatch {
    ApplyPath path;
    /* kMma, kTile, kStream: 16-row m-tiles per warp and 8-token n-tiles per warp;
     * kWmma, kMfma: 16-token tiles per wave in token_tiles */
    int row_tiles, token_tiles;
    /* kMma: steps of packed words held ahead in registers, and the blocks per SM the compiler
     * sizes the registers for (plan_mma: 3 and 6, or 2 and 8) */
    int mma_prefetch, mma_min_blocks;
    /* kWmma: the fragment layout (12: RDNA4, 11: RDNA3) */
    int wmma_arch;
    /* kWmma, kMfma: the test flag's deliberately wrong kernel (result rows swapped in pairs) */
    bool corrupt;
    int x_mode; /* kStream: StreamX */
    /* kStream and kStreamSharedX with k_parts 1: k % 512 == 0; with k_parts 2: k % 1024 == 0
     * (whole super-steps in each half). Either way the kernel that tests no step against k inside
     * its 4-step super-steps */
    bool whole_super;
    /* kStream and kStreamSharedX with k_parts 1, any k: the kernel that tests only its last
     * super-step's steps against k (neither flag: every step tested, the benchmark build's only) */
    bool tail_super;
    /* kVector: tokens per tile (1, 2, 4, 8) in `tokens`; the activations staged in chunks of
     * stage_cols columns (vector_staged) or all of k resident in LDS (stage_cols = k), smem bytes
     * of it: plan_vector */
    bool vector_staged;
    int stage_cols;
    /* kWgmma: tokens per block (8 .. 128), WgmmaCopy, 64-row halves per warpgroup (1: four
     * warpgroups; 2: two, ping-pong), running scale (128 tokens) */
    int tokens, copy, halves;
    bool running_scale;
    /* kWgmmaWs: a producer warpgroup and consumer_wgs consumer warpgroups of 64 rows, a_sets
     * A-fragment sets (2: the next step's built while the current one's wgmmas run), 64-256 tokens
     * (in `tokens`) in steps of 32, both tensor maps (the weights' boxes 64 consumer_wgs rows);
     * `blocks` > 0: persistent, one block per SM looping over tiles. kWgmmaFold: `tokens` and
     * consumer_wgs name its tile (always persistent, both tensor maps); fold_tstore: the tile
     * written out through the TMA engine (the output's tensor map too; plan_wgmma_fold);
     * fold_blocks_per_sm: 1, or 2 for the tiles of fold_tile_two_per_sm */
    int consumer_wgs, a_sets;
    bool fold_tstore;
    int fold_blocks_per_sm;
    /* kStreamSharedX: steps per ring slot, warps per block, blocks (at most one per SM), dynamic
     * shared memory bytes (the rings and the activations), all from plan_stream_shared_x; smem
     * also kVector's */
    int super_step, warps, blocks, smem;
    /* kStreamSharedX: 2 where k is split over a cluster pair of blocks (plan_stream_split_k), else 0;
     * k_shift: the 128-column steps block 0's half has beyond k / 256 (block 1's that many fewer:
     * -1, 0 or 1; plan_stream_split_k's `shift`) */
    int k_parts, k_shift;
    /* kStreamSharedX: ring slots per warp (0: kStreamXsRingSlots; split k at k = kSplitKFineMaxK:
     * kSplitKFineSlots) */
    int ring_slots;
    /* kStream, kStreamSharedX (whole super-steps only): each super-step's scales copied into the
     * ring with its weights (kRingScalesFewTokensMaxK) */
    bool ring_scales;
    /* kStream with whole super-steps: the blocks from this one on take the last wave's units in
     * pairs of warps over halves of k (stream_pair_block0); 0: none */
    int64_t pair_block0;
    /* kStreamSharedX with k_parts 2, groups of 128, 2-step super-steps: biased_codes, the A
     * fragments biased (apply_common.h, dequant_a_fragments_biased; the benchmark build's, halves
     * ending in a part super-step: apply_variants.hip, split_k_fine_tail_windows);
     * one_chain, the kernel with one mma chain (there, and where the halves are whole: decide) */
    bool biased_codes, one_chain;
};

/* kVector: the smallest tile of tokens that holds m (1, 2, 4 or 8: the FMAs of tokens past m are
 * wasted work), all of k resident in LDS where it fits in the device's opt-in shared memory, else
 * staged in chunks of kVectorStageFloats / tokens columns. */
template <class Facts>
void plan_vector(const Call &c, Facts &f, Dispatch *p)
{
    const int tokens = c.m == 1 ? 1 : c.m == 2 ? 2 : c.m <= 4 ? 4 : kVectorMaxTokens;
    p->path = ApplyPath::kVector;
    p->tokens = tokens;
    const int64_t resident_bytes = (int64_t)tokens * (c.k / 32) * kVectorChunkFloats * (int64_t)sizeof(float);
    p->vector_staged = resident_bytes > f.smem_optin();
    if (!p->vector_staged) {
        p->stage_cols = (int)c.k;
        p->smem = (int)resident_bytes;
    } else {
        p->stage_cols = c.k < kVectorStageFloats / tokens ? (int)c.k : kVectorStageFloats / tokens;
        p->smem = (int)((int64_t)tokens * (p->stage_cols / 32) * kVectorChunkFloats * (int64_t)sizeof(float));
    }
}

/* kStreamSharedX for 8 token_tiles tokens at most (m <= 8 token_tiles), super_step steps per ring
 * slot: fills p and returns true where the activations (16 k bytes per 8 tokens) fit in the
 * device's opt-in shared memory per block beside the rings of at least min_warps warps; false
 * (p untouched) where they do not, or for a group the kernel lacks. balance: warps per block chosen
 * so that the 16-row units of the head split evenly over the grid (else as many as fit, to 16).
 * ring_scales: the rings carry the scales too (their bytes counted; whole super-steps only, which
 * the caller sets). */
template <class Facts>
bool plan_stream_shared_x(const Call &c, Facts &f, int token_tiles, int super_step, int min_warps, bool balance,
                          bool ring_scales, Dispatch *p)
{
    if (c.m > 8 * token_tiles || (c.group != 128 && c.group != 256)) return false;
    /* per warp */
    const int64_t ring = (int64_t)kStreamXsRingSlots * stream_slot_bytes(1, super_step, c.group, ring_scales);
    const int64_t xbytes = (int64_t)token_tiles * 16 * c.k;
    const int64_t optin = f.smem_optin();
    const int64_t sms = f.sm_count();
    if (sms <= 0 || xbytes >= optin) return false;
    int64_t fit = (optin - xbytes) / ring;
    if (fit > kStreamXsMaxWarps) fit = kStreamXsMaxWarps;
    if (fit < min_warps || fit < 1) return false;
    const int64_t units = (c.n + 15) / 16;
    auto blocks_for = [&](int64_t w) { return (units + w - 1) / w < sms ? (units + w - 1) / w : sms; };
    int64_t warps = fit;
    if (balance) {
        /* the fewest warp-slots (rounds x warps in the grid) over the units; ties: more warps */
        int64_t best = -1;
        for (int64_t w = fit; w >= min_warps && w >= 1; w--) {
            const int64_t grid = blocks_for(w) * w, slots = (units + grid - 1) / grid * grid;
            if (best < 0 || slots < best) best = slots, warps = w;
        }
    }
    p->path = ApplyPath::kStreamSharedX;
    p->row_tiles = 1;
    p->token_tiles = token_tiles;
    p->super_step = super_step;
    p->x_mode = kXShared;
    p->warps = (int)warps;
    p->blocks = (int)blocks_for(warps);
    p->smem = (int)(warps * ring + xbytes);
    p->ring_slots = kStreamXsRingSlots;
    p->ring_scales = ring_scales;
    return true;
}

/* kStreamSharedX for 9-16 tokens (m <= 16) with k split over a cluster of two blocks, one per SM
 * (apply_stream.hip, apply_stream_split_k_kernel): fills p and returns true where the GPU has
 * clusters (sm_90), k % (2 group) == 0 (whole steps and groups per half), and all 16 tokens'
 * activations over half of k (16 k bytes) fit in the opt-in shared memory per block beside at least
 * min_warps warps' rings and exchange slots; false (p untouched) elsewhere, and in builds without
 * the kernel (HIP). ring_scales: the rings carry the scales too where the halves' super-steps are
 * whole and their bytes still leave room for min_warps warps (else the plan without them; 2-step
 * super-steps: groups of 128 only). super_step steps a ring slot in ring_slots slots: 4 in 2 (the library's but
 * at k = 5376), or 2 in 3 (kSplitKFineSteps, kSplitKFineSlots; the halves then whole or all but the last). */
template <class Facts>
bool plan_stream_split_k(const Call &c, Facts &f, int min_warps, bool ring_scales, Dispatch *p, int super_step = 4,
                        int ring_slots = kStreamXsRingSlots, int shift = 0)
{
    if (!f.cluster_launch()) return false;
    if (c.m > 8 * kSplitKTokenTiles || (c.group != 128 && c.group != 256) || c.k % (2 * c.group) != 0) return false;
    if (f.sm() < 90) return false; /* clusters */
    /* shift (+-1): halves of k / 256 + shift and k / 256 - shift steps, where k / 256 is odd: whole
     * 2-step super-steps in each (groups of 128), block 1's starting on a 128-byte boundary of every
     * row (k % 256 == 0: so does every row) */
    if (shift != 0 && (shift * shift != 1 || super_step != kSplitKFineSteps || c.group != 128 ||
                       (c.k / 256) % 2 != 1))
        return false;
    /* whole super-steps in each half (4-step ones: k % 1024 == 0, as on most heads this is for): no
     * step tested */
    const bool whole = shift != 0 || c.k % (2 * 128 * super_step) == 0;
    /* 16 tokens x the larger half of k, bf16 */
    const int64_t xbytes = (int64_t)kSplitKTokenTiles * 16 * (c.k / 2 + 128 * (shift != 0));
    const int64_t optin = f.smem_optin();
    if (xbytes >= optin) return false;
    auto per_warp = [&](bool ring) {
        return (int64_t)ring_slots * stream_slot_bytes(1, super_step, c.group, ring) + kSplitKSlot + kSplitKBars;
    };
    auto warps_fitting = [&](bool ring) {
        const int64_t w = (optin - xbytes) / per_warp(ring);
        return w > kStreamXsMaxWarps ? (int64_t)kStreamXsMaxWarps : w;
    };
    ring_scales = ring_scales && whole && (super_step == 4 || c.group == 128); /* 2-step: 4 bytes a row */
    int64_t warps = warps_fitting(ring_scales);
    if (ring_scales && warps < min_warps) {
        ring_scales = false;
        warps = warps_fitting(false);
    }
    if (warps < min_warps || warps < 1) return false;
    const int64_t max_clusters = f.split_k_clusters();
    if (max_clusters < 1) return false;
    const int64_t units = (c.n + 15) / 16;
    int64_t clusters = (units + warps - 1) / warps;
    if (clusters > max_clusters) clusters = max_clusters;
    p->path = ApplyPath::kStreamSharedX;
    p->row_tiles = 1;
    p->token_tiles = kSplitKTokenTiles;
    p->super_step = super_step;
    p->ring_slots = ring_slots;
    p->x_mode = kXShared;
    p->k_parts = 2;
    p->k_shift = shift;
    p->whole_super = whole;
    /* 2-step super-steps: where they are not whole in each half, all but the last (the 4-step ones
     * test every step there, as before run 79) */
    p->tail_super = !whole && super_step != 4;
    p->ring_scales = ring_scales;
    p->warps = (int)warps;
    p->blocks = (int)(2 * clusters);
    p->smem = (int)(warps * per_warp(ring_scales) + xbytes);
    return true;
}

/* The wgmma pipe kernel for `tokens` tokens per block with the tensor maps it needs. Where the
 * driver refuses one: from 32 tokens the kernel with fewer TMA copies; below that false (four
 * warpgroups copy by TMA only, and the cp.async activation layout covers 16 tokens). */
template <class Facts>
bool plan_wgmma(Facts &f, int tokens, int refuse, Dispatch *p)
{
    p->path = ApplyPath::kWgmma;
    p->tokens = tokens;
    p->running_scale = tokens == 128;
    p->halves = tokens <= 32 ? 1 : 2;
    p->copy = kCopyTma;
    const bool x_ok = !(refuse & RADIANCE_GPU_TEST_REFUSE_XMAP) && f.pipe_x_map(tokens);
    const bool w_ok = x_ok && !(refuse & RADIANCE_GPU_TEST_REFUSE_WMAP) && f.pipe_w_map();
    if (x_ok && w_ok) return true;
    if (tokens < 32) return false;
    p->halves = 2;
    p->copy = x_ok ? kCopyTmaX : kCopyAsync;
    return true;
}

/* A tile of the warp-specialized wgmma kernel (benchmarks/harness/apply_wgmma_ws.hip): tokens (64 to
 * 256 in steps of 32), consumer warpgroups of 64 rows, A-fragment sets, persistent blocks or one
 * per tile. The planner took it for more than 32 tokens with G >= 128 until the folding kernel
 * (issue 22); the benchmark build keeps it to time beside that one (ws<...> in variants.def). */
struct WsTile {
    int tokens, consumer_wgs, a_sets;
    bool persistent;
};

/* The warp-specialized kernel with tile `w`, where both its tensor maps are granted (else false,
 * p untouched). */
template <class Facts>
bool plan_wgmma_ws(Facts &f, WsTile w, int refuse, Dispatch *p)
{
    if ((refuse & (RADIANCE_GPU_TEST_REFUSE_XMAP | RADIANCE_GPU_TEST_REFUSE_WMAP)) ||
        !f.tile_maps(w.tokens, 64 * w.consumer_wgs))
        return false;
    p->path = ApplyPath::kWgmmaWs;
    p->tokens = w.tokens;
    p->consumer_wgs = w.consumer_wgs;
    p->a_sets = w.a_sets;
    p->blocks = w.persistent ? 1 : 0;
    return true;
}

/* A tile of the folding wgmma kernel (apply_wgmma_fold.hip): tokens (16, 32, 48, then 64 to 256
 * in steps of 32), consumer warpgroups of 64 rows (the pairs RAD_FOLD_TILES instantiates), whether
 * the tile is written out through the TMA engine (its TMA-store epilogue: a warpgroup hands its
 * finished tile to the copy engine and starts the next one, instead of 2-byte stores from its
 * registers; the output's tensor map needed), and the blocks per SM (1, or 2: fold_tile_two_per_sm). */
struct FoldTile {
    int tokens, consumer_wgs;
    bool tstore;
    int blocks_per_sm = 1;
};

/* Hidden sizes up to these many columns give a tile few 128-column steps, so that what happens
 * between two tiles weighs: up to 16 steps, 97-160 tokens per chunk take 2 consumer warpgroups,
 * whose boxes fit in a ring slot (3 warpgroups' do not), written by TMA; up to 8, every tile from
 * 32 tokens is written by TMA. */
constexpr int64_t kFoldTwoWgMaxK = 2048;
constexpr int64_t kFoldTstoreMaxK = 1024;
/* 17-32 tokens with groups of 128 or more: the folding kernel's 32-token tile (written by TMA, as
 * every tile from 32 tokens at k <= kFoldTstoreMaxK) where k is at most this, else the wgmma pipe
 * kernel. H200, docs/PERF_LOG.md sixteenth round, run 61, two timing loops: 262144 x 640 at 20 / 24
 * / 32 tokens 58.6 / 59.4 / 59.7 us against the pipe kernel's 63.7 / 63.9 / 65.6, 151936 x 1024
 * 46.3 / 46.3 / 47.0 against 50.7 / 49.8 / 51.9; at k = 2048 and beyond the pipe kernel leads
 * (128256 x 2048 66.3 against 76.4 at 20 tokens, 248320 x 5120 266.2 against 279.3). Its 16-token
 * tile serves 9-16 tokens where k is at most this and split k does not apply (decide). */
constexpr int64_t kFoldFewTokensMaxK = 1024;

/* The library's fold tile for m tokens and k columns: the tokens split into equal chunks of at
 * most 256 (the largest wgmma n), each rounded up to 16 up to 32 tokens, to 48 up to 48 and to 32
 * beyond, so that no token count wastes more than 31 tokens per chunk (384 tokens as two chunks of
 * 192: 1441 us against the warp-specialized kernel's 1991 with two of 256, 248320 x 5120, H200,
 * docs/PERF_LOG.md eighth round, run 43; 48 tokens: 310.5 against 341.3 us as a chunk of 64 in
 * one timing loop, ninth round).
 * 3 consumer warpgroups (192 rows: less activation traffic per row) where their accumulators fit
 * without spilling, up to 160 tokens, else 2 (nvcc 13.0, sm_90a, run 43).
 * Written by TMA (H200, docs/PERF_LOG.md tenth round, runs 49-51, each in one timing loop against
 * the stores from the registers):
 * - every 2-warpgroup tile: 262144 x 640 at 2048 tokens 1137 against 1390 us, 49152 x 576 g64 at
 *   256 31.4 against 42.5, 248320 x 5120 at 2048 7889 against 8177;
 * - 128 and 160 tokens with 2 warpgroups where k <= kFoldTwoWgMaxK: 128256 x 2048 at 160 135.7
 *   against 155.2 us, 151936 x 1024 86.5 against 96.7; not at k = 5120, where the consumers'
 *   meeting before the store and the slot held until it is read cost more than the stores save
 *   (248320 x 5120 at 128: 565 against 517 us);
 * - 32-96 tokens where k <= kFoldTstoreMaxK: 49152 x 576 at 96 19.0 against 22.8 us, at 24 14.3
 *   against 15.7, 151936 x 1024 at 96 67.1 against 71.1 (at k = 2048 within 2 % either way, at
 *   k = 5120 96 tokens 481 against 440 us);
 * - the 48-token tile at every k: 248320 x 5120 at 36 tokens 305.0 against 313.2 us, 151936 x 5120
 *   186.1 against 191.5, 262144 x 5376 369.5 against 377.2 (docs/PERF_LOG.md fifteenth round, run
 *   58: ahead in each of three loops by 0.7-3.4 %). */
constexpr int fold_register_store_wgs(int tokens) { return tokens <= 160 ? 3 : 2; }

/* A tile written by TMA is staged in the ring slot of its last step, which its warpgroup releases
 * once the engine has read it. Up to this k (few steps a tile) thread 0 of each warpgroup waits for
 * that after the next tile's first wgmmas are queued, so that the warpgroup's next wgmmas do not
 * wait for the engine's read; beyond it, right after the store, so that the slot returns to the
 * ring sooner (apply_wgmma_fold.hip). H200, docs/PERF_LOG.md eighteenth round, run 68, A (release
 * at once) against B (after the next tile's first wgmmas), two timing loops: 262144 x 640 at 384 /
 * 1024 / 2048 tokens 230.0 / 551.2 / 1120.5 us against 211.9 / 504.8 / 1004.3 (8-10 %), 49152 x
 * 576 g64 7-8 % at 48-2048 (a head that fits in L2, which the harness then favoured B on: PERF_LOG,
 * nineteenth round), 151936 x 1024 2-6 %; at k = 4096-5376 within 2 % from 192 tokens but
 * 2-5 % slower at 48 (248320 x 5120 330.6 against 340.7) and 3.5 % at 128 on 128256 x 4096 (two
 * blocks per SM, 3 slots each). */
constexpr int64_t kFoldLateReleaseMaxK = 1024;

/* The folding kernel's last round of tiles cut along k (apply_wgmma_fold.hip, launch_fold; one
 * block per SM only): a persistent launch of `slots` blocks runs `tiles` tiles in rounds; where the
 * last round would leave at least half of the blocks idle, the whole rounds run as one launch and
 * each tile of the last round as `parts` units over consecutive ranges of its 128-column steps, one
 * block each, in a second launch; a tile's units are one cluster, which adds their fp32 sums in the
 * order of the ranges through distributed shared memory, each unit a share of the tile's tokens,
 * and writes them. The answer: parts (2 to kFoldTailMaxParts, each range at least
 * kFoldTailMinSteps steps, tiles of kFoldTailMinTileSteps steps or more), or 1 (no cut: one round
 * or fewer, a full last round, or too few steps). H200, docs/PERF_LOG.md twenty-first round, run
 * 78 (four parts at most, the sums added by the last unit through global memory), against main in
 * one timing loop: 128256 x 4096 at 160 tokens 266.6 against 275.4 us (668 tiles of 192 rows, 8 in
 * the last round, cut in four), 262144 x 5376 at 112-160 1 % faster (46 tiles in the last round,
 * two parts), at 40-48 the same; with fold_fill_one_block below, 128256 x 4096 at 112 / 128 226.7
 * / 228.8 against 255.9 / 230.2 (the 64-row tile of two blocks per SM). The same cut in one kernel
 * with the uncut launch slowed tiles that never cut by up to 7 % (runs 75-77: the code of the unit
 * changed theirs). The units as clusters of up to 8 (the portable cluster size), ranges of 4 steps
 * or more: docs/PERF_LOG.md thirty-sixth round, run 99, H100, against four units of 8 steps or
 * more whose last one added the sums from global memory, in one timing loop: 128256 x 4096 at
 * 100-128 tokens 0.957-0.961 of its time (8 tiles in eight parts, was four), at 384-512 0.984-0.985
 * (24 tiles in five), 262144 x 5376 at 128-384 0.991-0.992. */
constexpr int kFoldTailMaxParts = 8;
constexpr int kFoldTailMinSteps = 4;
constexpr int kFoldTailMinTileSteps = 16;
constexpr int fold_tail_parts(int64_t tiles, int64_t slots, int64_t k)
{
    if (slots < 2 || tiles <= slots || tiles % slots == 0) return 1;
    const int64_t steps = (k + 127) / 128;
    if (steps < kFoldTailMinTileSteps) return 1;
    int64_t parts = slots / (tiles % slots);
    if (parts > kFoldTailMaxParts) parts = kFoldTailMaxParts;
    if (parts > steps / kFoldTailMinSteps) parts = steps / kFoldTailMinSteps;
    return parts < 2 ? 1 : (int)parts;
}

constexpr bool fold_tstore_taken(int tokens, int consumer_wgs, int64_t k)
{
    return consumer_wgs == 2 || tokens == 48 || (k <= kFoldTstoreMaxK && tokens >= 32);
}

inline FoldTile fold_tile(int64_t m, int64_t k)
{
    const int64_t chunks = (m + 255) / 256;
    const int64_t per = (m + chunks - 1) / chunks;
    const int tokens = per <= 16 ? 16 : per <= 32 ? 32 : per <= 48 ? 48 : (int)((per + 31) / 32 * 32);
    const int consumer_wgs = tokens >= 128 && k <= kFoldTwoWgMaxK ? 2 : fold_register_store_wgs(tokens);
    return {tokens, consumer_wgs, fold_tstore_taken(tokens, consumer_wgs, k)};
}

/* The tile where the output's tensor map is refused: the stores from the registers, one block per
 * SM, with the warpgroups fold_register_store_wgs gives such a tile (the library holds its tiles of
 * two blocks per SM only written by TMA) */
inline FoldTile fold_tile_without_tstore(FoldTile w) { return {w.tokens, fold_register_store_wgs(w.tokens), false, 1}; }

/* The folding kernel's tiles of one token chunk over n rows: one per 64 rows a consumer warpgroup */
constexpr int64_t fold_tiles(int64_t n, int consumer_wgs) { return (n + 64 * consumer_wgs - 1) / (64 * consumer_wgs); }

/* The rounds in which `slots` persistent blocks run `tiles` tiles */
constexpr int64_t fold_rounds(int64_t tiles, int64_t slots) { return (tiles + slots - 1) / slots; }

/* The share of the persistent blocks' slots the last round of tiles fills, over all rounds:
 * `tiles` tiles dealt to `slots` blocks (1 where they divide evenly) */
inline double fold_fill(int64_t tiles, int64_t slots)
{
    const int64_t rounds = fold_rounds(tiles, slots);
    return rounds > 0 ? (double)tiles / (double)(rounds * slots) : 1.0;
}

/* 129-160 tokens a chunk where k > kFoldTwoWgMaxK (fold_tile's 3 consumer warpgroups, 192-row
 * tiles): 2 consumer warpgroups written by TMA (128-row tiles) where their tiles fill the last round
 * over the SMs (fold_fill, one block per SM, uncut) this much better, else fold_tile's. H100,
 * docs/PERF_LOG.md thirty-second round (run 95), one timing loop, 2 warpgroups' time over 3's at
 * 136-160 tokens (fill of 3 / 2): 32000 x 4096 (0.63 / 0.95) 0.73-0.74, 65536 x 4096 (0.86 / 0.97)
 * 0.91-0.92, 128256 x 4096 (0.84 / 0.95) 0.94-0.95, 128256 x 5120 and 131072 x 5120 (0.84-0.86 /
 * 0.95-0.97) 0.97-0.98, 102400 x 5120 (0.81 / 0.87) 0.99, 163840 x 5120 (0.92 / 0.97) 0.98; not
 * taken: 256000 x 3584 (0.92 / 0.95) 0.99, 262144 x 5376 (0.94 / 0.97) 1.03, 248320 x 5120 (0.98 /
 * 0.98) 1.02-1.03, 151936 x 5120 (1.00 / 1.00) 1.02-1.03. The cut of 3 warpgroups' last round
 * (fold_tail_parts) did not make up for its fill: 128256 x 4096 cut its 8 tiles in four. The
 * 128-token tile (97-128 tokens) likewise, but only where 3 warpgroups' tiles take at most
 * kFold128TwoWgMaxRounds rounds (run 96, calls 9 and 11, at 100-128 tokens: 32000 x 4096 0.78,
 * 32768 x 4096 0.78-0.80, 32000 x 5120 0.82-0.85, 65536 x 4096 0.87-0.98, 65536 x 5120 0.98-0.99,
 * 1.27-2.6 rounds; 49152 x 4096, fills equal, 1.02-1.04): with more rounds the fill no longer
 * tells (128256 x 4096 0.98-1.00, 128256 / 131072 / 102400 / 163840 x 5120 and 256000 x 3584
 * 1.01-1.04, 4-10 rounds). */
constexpr double kFoldTwoWgMinGain = 1.04;
constexpr int64_t kFold128TwoWgMaxRounds = 3;

inline FoldTile fold_tile_rows(const Call &c, FoldTile w, int64_t sms)
{
    if ((w.tokens != 128 && w.tokens != 160) || w.consumer_wgs != 3 || sms < 1) return w;
    const int64_t chunks = (c.m + 255) / 256, tiles3 = fold_tiles(c.n, 3) * chunks;
    if (w.tokens == 128 && fold_rounds(tiles3, sms) > kFold128TwoWgMaxRounds) return w;
    const double fill3 = fold_fill(tiles3, sms), fill2 = fold_fill(fold_tiles(c.n, 2) * chunks, sms);
    return fill2 >= kFoldTwoWgMinGain * fill3 ? FoldTile{w.tokens, 2, true} : w;
}

/* 17-32 tokens with groups of 128 or more where k > kFoldFewTokensMaxK: the folding kernel's
 * 32-token tile (fold_tile: 3 consumer warpgroups, 192-row tiles) instead of the wgmma pipe kernel
 * where its tiles fill their last round over the SMs (fold_fill, one block per SM) to at least this.
 * H100, docs/PERF_LOG.md thirty-second round (calls 7 and 13), one timing loop, the folding tile's
 * time over the pipe kernel's at 20 / 24 / 32 tokens: the Qwen heads, 792 tiles in 6 whole rounds
 * of 132 SMs: 152064 x 3584 0.953 / 0.953 / 0.935, 151936 x 4096 0.942 / 0.942 / 0.930, 152064 x
 * 5120 0.964 / 0.963 / 0.952, 151936 x 5120 0.967 / 0.967 / 0.950, 151936 x 2560 0.943 / 0.938 /
 * 0.925; fill 0.98-0.99 about equal (248320 x 5120 0.99-1.00, 100000 x 4096 0.99-1.01); fill
 * 0.84-0.94 9-17 % slower (262144 x 5376, 128256 x 4096, 128256 x 2048). On an H200 (thirty-third
 * round, call 1), the same loop: 151936 x 5120 0.964 / 0.969 / 0.962, 151936 x 4096 0.955 / 0.958 /
 * 0.949, 152064 x 3584 0.961 / 0.964 / 0.952, 151936 x 2560 0.945 / 0.945 / 0.930; 248320 x 5120
 * 0.99-1.01, 100000 x 4096 1.03-1.04, 262144 x 5376 1.09-1.11, 128256 x 4096 1.12-1.13 (all four
 * below the fill, so left to the pipe kernel). */
constexpr double kFold32MinFill = 0.99;

inline bool fold_32_fills_rounds(const Call &c, int64_t sms)
{
    return c.m > 16 && c.m <= 32 && sms > 0 && fold_fill(fold_tiles(c.n, 3), sms) >= kFold32MinFill;
}

/* The same for a launch of one block per SM, whose last round fold_tail_parts may cut along k:
 * that round then counts 1 / parts of one. fold_tile_two_per_sm counts it for the tile of 128
 * tokens only: at 33-96 tokens two blocks per SM of 128-row tiles beat one block's tiles of 192
 * rows, cut, by 3-19 % where this fill would take one block (run 78, before run 89 sped up the
 * tiles of one block: 128256 x 4096 at 40-96 tokens, 128256 x 2048 at 40-48, 262144 x 5376 at 64). */
inline double fold_fill_one_block(int64_t tiles, int64_t slots, int64_t k)
{
    const int parts = fold_tail_parts(tiles, slots, k);
    if (parts == 1) return fold_fill(tiles, slots);
    return (double)tiles / (((double)(tiles / slots) + 1.0 / parts) * (double)slots);
}

/* Two blocks per SM, each with smaller tiles: 33-48, 49-64 and 65-96 tokens as tiles of 48 / 64 /
 * 96 tokens and 2 consumer warpgroups (128 rows), 112-128 as 128 tokens and 1 warpgroup (64 rows;
 * not at 97-111 tokens, kFoldTwoPerSm128MinTokens below),
 * all written by TMA. Twice the slots and tiles of 1.5 or 2 times fewer rows change how full the
 * last round of tiles is (fold_fill), and one block's epilogue and first steps overlap the other's
 * wgmmas. Taken where the fill rises by kFoldTwoPerSmMinGain or more, or, for k <= kFoldTstoreMaxK
 * (few steps per tile, where the overlap weighs), where it falls by no more than 1 % (the tiles of
 * 64 and 96 tokens: more widely since run 69, below). H200,
 * docs/PERF_LOG.md thirteenth round, run 56, in one timing loop against the one-block tile at
 * 48-128 tokens (fill of one block / two blocks; two blocks' time against one's, us):
 * - 128256 x 4096 (0.84 / 0.95): 64 tokens 153 against 174, 96 198 / 208, 128 235 / 239;
 * - 262144 x 640 (0.94 / 0.97; at 128 tokens 0.97 / 0.97): 64 59.2 / 71.8, 96 75.1 / 81.7, 128
 *   93.1 / 100.4;
 * - 151936 x 1024 and 49152 x 576 at 128 tokens (fills equal): 76.4 / 78.9 and 21.0 / 22.0 (the
 *   latter within the spread of two timings of one plan, 21.1 and 22.8);
 * - not taken: 262144 x 5376 (0.94 / 0.97: 64 tokens 400 / 421, but 96 552 / 519 and 128 653 /
 *   572), 248320 x 5120 (0.98 / 0.92: 5-15 % slower), 151936 x 5120 (1.00 / 0.90: 9-18 %), 151936
 *   x 1024 at 48-96 (1.00 / 0.90: 54.0 / 57.0 at 64, 68.3 / 67.0 at 96), 49152 x 576 at 48-96
 *   (0.97 / 0.73: 10-18 % slower); 1 consumer warpgroup at 64 and 96 tokens: slower than 2 on every
 *   head but 49152 x 576, where both lose.
 * Run 57, the tile of 48 tokens at 40 and 48 (one timing loop, against the library's 48-token tile):
 * taken on 128256 x 4096 (137.6 / 156.6 us at 40), 128256 x 2048 (71.3 / 86.4) and 262144 x 640
 * (54.7 / 63.7); not taken on 151936 x 1024 (49.7 / 49.8), 49152 x 576 (16.9 / 14.6-16.2),
 * 248320 x 5120 (324.5 / 313.0), 151936 x 5120 (204.6 / 191.0) and 262144 x 5376 (357.1 / 377.2:
 * the one gain the rule leaves, as at 64 tokens). */
constexpr double kFoldTwoPerSmMinGain = 1.08, kFoldTwoPerSmMaxLossSmallK = 0.99;
/* The tiles of 64 and 96 tokens are taken more widely: wherever the fill does not fall, and for k <=
 * kFoldTstoreMaxK where it falls by no more than 15 %. Run 69 (docs/PERF_LOG.md, nineteenth round;
 * the 96-token tile's steps in four parts since, without which ptxas serialized its wgmmas), two
 * timing loops, one block against two at 49-64 / 65-96 tokens (us): 262144 x 5376 (fill 0.94 /
 * 0.97) 421-427 / 402-411 and 496-522 / 488-514; 151936 x 1024 (1.00 / 0.90) 56.4-56.8 / 54.0-54.1
 * and 64.7-65.0 / 63.6-63.9; still not taken: 248320 x 5120 (0.98 / 0.92: 3-7 % slower), 151936 x
 * 5120 (1.00 / 0.90: 4-8 %), 49152 x 576 (0.97 / 0.73: 12-16 %). The tiles of 48 and 128 tokens
 * keep the rule above (262144 x 5376 at 40 tokens 357.1 / 377.2, at 128 653 / 572 us, runs 57 and
 * 56; at 40-48 again in run 71, 378-380 / 370-374, but 151936 x 1024 49.5-50.0 / 51.3-51.5).
 * Run 89 then sped up the tiles of one block per SM (their scales straight into the fragments'
 * registers), not those of two, and run 94 (docs/PERF_LOG.md, thirty-second round; H100, one
 * timing loop, one block's time over two's) moved both thresholds. From k = kFoldLongStepsMinK
 * (28 steps a tile and more) two blocks need a fill 5 % better: 262144 x 5376 (fill 0.94 / 0.97)
 * at 64 / 80 / 96 tokens 0.974-0.976 / 0.964-0.965 / 0.953, 262144 x 3840 0.980 / 0.984-0.987 /
 * 0.970-0.974, 256000 x 3584 and 163840 x 5120 0.99-1.00; below it the fill's rise alone still
 * decides (262144 x 2560 1.02-1.04, 256000 x 2304 1.05-1.07 with one block). At k <=
 * kFoldTstoreMaxK two blocks may fill 5 % worse, no longer 15 %: 151936 x 1024 (1.00 / 0.90) at 96
 * 0.964-0.967, 152064 x 896 0.962-0.969 (at 64 tokens both within 1 %). Still two where the fill
 * rises by 12 % (128256 x 4096, 128256 x 2048, 131072 x 768 at 64-96: two 3-17 % ahead) and on
 * 262144 x 640 (0.94 / 0.97, k <= kFoldTstoreMaxK: two 1-3 % ahead). */
constexpr double kFoldTwoPerSmMinGain64To96 = 1.0, kFoldTwoPerSmMinGain64To96LongK = 1.05;
constexpr double kFoldTwoPerSmMaxLossSmallK64To96 = 0.95;
constexpr int64_t kFoldLongStepsMinK = 3584;
/* The tile of 128 tokens and 1 consumer warpgroup (64 rows) slows down where its token box runs
 * far past m: its activations (TOKENS x 128 columns a step, 8 times its weights' bytes) come
 * through the TMA engine, which fills the rows past m with zeros, and each 64-row tile loads them
 * again. Runs 70-71 (docs/PERF_LOG.md, nineteenth round), two timing loops each, us at 97 / 104 /
 * 112 / 128 tokens, this tile against the one-block tile of 128 tokens and 2 consumer warpgroups
 * written by TMA: 128256 x 4096 353 / 292 / 239 / 238 against 224 / 225 / 228 / 235; 262144 x 640
 * 120 / 105.5 / 89 / 88.5 against 91.5 / 91.2 / 92 / 93.1 (bf16 101-107); 151936 x 1024 102 / 92 /
 * 75.3 / 74.5 against 74 / 73.5 / 75.2 / 77 (bf16 91-95); 49152 x 576 24.4 / 19.8 / 20.8 / 19.5
 * against 20.6 / 21.3 / 21.2 / 21.2. So it is taken only from this many tokens: the library before
 * and after (run 71), 97 / 104 / 111 tokens: 128256 x 4096 353 / 292 / 245 -> 228 / 230 / 233 us
 * (one block, 3 consumer warpgroups there, k > kFoldTwoWgMaxK), 151936 x 1024 93 / 92 / 90 -> 75 /
 * 76 / 76; but 262144 x 640 at 111 89.3 -> 93.1 and 49152 x 576 at 104 20.2 -> 21.2. */
constexpr int64_t kFoldTwoPerSm128MinTokens = 112;
/* After run 89 sped up the tiles of one block per SM, the tile of 128 tokens and 1 consumer
 * warpgroup wins where the fills are equal and k <= kFoldTstoreMaxK (the rule above) only where one
 * block's tiles take few rounds, so that each block's first steps and epilogue weigh and two blocks
 * overlap them: at most this many rounds of one block's tiles. Run 94 (docs/PERF_LOG.md,
 * thirty-second round; H100, one timing loop, us at 112 / 128 tokens, one block's tile of 2
 * consumer warpgroups written by TMA against this one): 151936 x 1024 (9 rounds) 71.7 / 72.1
 * against 82.4 / 72.9, 262144 x 640 (16) 84.1 / 85.4 against 94.5 / 90.5, 131072 x 768 (8) 52.4 /
 * 52.8 against 58.5 / 54.3; but 49152 x 576 g64 (3 rounds) 22.3 / 22.3 against 20.9 / 21.1. */
constexpr int64_t kFoldTwoPerSm128MaxRounds = 4;

/* For one chunk of fold_tile's tile `one` (48-128 tokens), the tile of two blocks per SM where the
 * rule above takes it, else `one`. Where the output's map is refused, plan_wgmma_fold turns a tile
 * of two blocks into fold_tile_without_tstore's tile of one block per SM. */
inline FoldTile fold_tile_two_per_sm(const Call &c, FoldTile one, int64_t sms)
{
    if (c.m > 128 || one.tokens < 48 || sms < 1 || (one.tokens == 128 && c.m < kFoldTwoPerSm128MinTokens)) return one;
    const FoldTile two = one.tokens == 128 ? FoldTile{128, 1, true, 2} : FoldTile{one.tokens, 2, true, 2};
    /* one chunk: a tile per 64 x consumer_wgs rows; at 128 tokens one block's last round cut */
    const auto fill = [&](const FoldTile &w) {
        const int64_t tiles = fold_tiles(c.n, w.consumer_wgs);
        if (w.blocks_per_sm == 2) return fold_fill(tiles, sms * 2);
        return w.tokens == 128 ? fold_fill_one_block(tiles, sms, c.k) : fold_fill(tiles, sms);
    };
    const double fill_one = fill(one), fill_two = fill(two);
    const bool mid = one.tokens == 64 || one.tokens == 96;
    const double mid_gain = c.k >= kFoldLongStepsMinK ? kFoldTwoPerSmMinGain64To96LongK : kFoldTwoPerSmMinGain64To96;
    const bool rises = fill_two >= (mid ? mid_gain : kFoldTwoPerSmMinGain) * fill_one;
    const bool few_rounds = fold_rounds(fold_tiles(c.n, one.consumer_wgs), sms) <= kFoldTwoPerSm128MaxRounds;
    const bool holds_small_k =
        c.k <= kFoldTstoreMaxK && (one.tokens != 128 || few_rounds) &&
        fill_two >= (mid ? kFoldTwoPerSmMaxLossSmallK64To96 : kFoldTwoPerSmMaxLossSmallK) * fill_one;
    return rises || holds_small_k ? two : one;
}

/* The folding kernel with tile `w`, where k is a multiple of 32 (the weights' map needs a row
 * pitch of 16 bytes) and both its tensor maps are granted; any group size. A tile written by TMA
 * needs the output's map too (n % 8 == 0, a 16-byte aligned output): where it is refused, the tile
 * of fold_tile_without_tstore. Else false, p untouched. */
template <class Facts>
bool plan_wgmma_fold(const Call &c, Facts &f, FoldTile w, int refuse, Dispatch *p)
{
    if (c.k % 32 != 0 || (refuse & (RADIANCE_GPU_TEST_REFUSE_XMAP | RADIANCE_GPU_TEST_REFUSE_WMAP)))
        return false;
    if (w.tstore && ((refuse & RADIANCE_GPU_TEST_REFUSE_OMAP) || !f.out_map(w.tokens))) w = fold_tile_without_tstore(w);
    if (!f.tile_maps(w.tokens, 64 * w.consumer_wgs)) return false;
    p->path = ApplyPath::kWgmmaFold;
    p->tokens = w.tokens;
    p->consumer_wgs = w.consumer_wgs;
    p->fold_tstore = w.tstore;
    p->fold_blocks_per_sm = w.blocks_per_sm;
    return true;
}

/* The WMMA plan where it applies: the device's layout (or the test flags' on any GPU), m large
 * enough (any m under the test flags) and the self-check passed or skipped. */
template <class Facts>
bool plan_wmma(const Call &c, Facts &f, int refuse, Dispatch *p)
{
    const int forced = refuse & RADIANCE_GPU_TEST_FORCE_WMMA12   ? 12
                       : refuse & RADIANCE_GPU_TEST_FORCE_WMMA11 ? 11
                                                                 : 0;
    const int arch = forced ? forced : f.wmma_arch();
    if (arch == 0 || (!forced && c.m < kWmmaMinTokens)) return false;
    const bool corrupt = (refuse & RADIANCE_GPU_TEST_CORRUPT_WMMA) != 0;
    if (!f.wmma_usable(arch, corrupt)) return false;
    p->path = ApplyPath::kWmma;
    p->wmma_arch = arch;
    p->corrupt = corrupt;
    p->token_tiles = c.m <= 16 ? 1 : c.m <= 32 ? 2 : 4;
    return true;
}

/* The MFMA plan where it applies: a CDNA device (or the test flag on any GPU), m large enough (any m
 * under the test flag) and the self-check passed or skipped. 16, 32, 64 or 128 tokens per wave: the
 * fewest 16-token tiles that hold m, 8 beyond (where the decode, shared by 128 tokens, falls below
 * the MFMAs' own time on gfx942: docs/amd.md). */
template <class Facts>
bool plan_mfma(const Call &c, Facts &f, int refuse, Dispatch *p)
{
    const bool forced = (refuse & RADIANCE_GPU_TEST_FORCE_MFMA) != 0;
    if (!forced && (c.m < kMfmaMinTokens || !f.mfma_device())) return false;
    const bool corrupt = (refuse & RADIANCE_GPU_TEST_CORRUPT_MFMA) != 0;
    if (!f.mfma_usable(corrupt)) return false;
    p->path = ApplyPath::kMfma;
    p->corrupt = corrupt;
    p->token_tiles = c.m <= 16 ? 1 : c.m <= 32 ? 2 : c.m <= 64 ? 4 : 8;
    return true;
}

/* The register pipe for few tokens with G < 128 (apply_mma_kernel), its registers sized for 6
 * blocks per SM, 3 steps ahead: 49152 x 576 group 64 (SmolLM2) at 1 / 8 tokens 13.5 / 13.4 us
 * against 16.4 / 16.7 with the registers unbounded (126: 4 blocks per SM) and 4 steps ahead, group
 * 32 15.5 / 16.2 against 17.9 / 17.9, 151936 x 1024 group 64 39.9 / 41.5 against 47.9 / 49.6,
 * 128256 x 2048 group 64 65.4 / 68.8 against 74.3 / 80.4 (8 blocks: 69.7 / 70.5). For more
 * columns, 8 blocks and 2 steps ahead: group 64 from k = 4096 and 4 tokens (128256 x 4096 at 4 / 8
 * tokens 135.9 / 140.2 us against 140.4 / 151.6 with 6 blocks and 145.7 / 150.1 unbounded), group
 * 32 from k = 2048 (128256 x 2048 at 1 / 8 tokens 100.6 / 114.3 against 118.5 / 129.3 and 114.4 /
 * 123.0; 128256 x 4096 193.2 / 223.4 against 228.5 / 252.6 and 216.9 / 260.4). H200,
 * docs/PERF_LOG.md run 55. */
inline void plan_mma(const Call &c, Dispatch *p)
{
    const bool deep = c.group == 32 ? c.k >= 2048 : c.k >= 4096 && c.m >= 4;
    p->path = ApplyPath::kMma;
    p->row_tiles = p->token_tiles = 1;
    p->mma_prefetch = deep ? 2 : 3;
    p->mma_min_blocks = deep ? 8 : 6;
}

/* The one-unit stream kernel (1-4 tokens, more where the activations do not fit in shared memory;
 * apply_stream_kernel) runs kStreamBlocksPerSm blocks of kStreamWarps warps per SM (its launch
 * bounds), a 16-row unit per warp, so waves of kStreamWarps x kStreamBlocksPerSm x SMs units. Where
 * the units leave a last wave at most half full behind at least one full wave, k % 1024 == 0 (whole
 * super-steps in each half of k) and k >= kStreamPairMinK, the blocks of that wave take two units
 * each, warps 2 q and 2 q + 1 one half of k of the same unit, meeting in the block as the
 * shared-activation kernel's last round does (docs/PERF_LOG.md, seventeenth round, run 65): the
 * wave's blocks are as many as before, each done in about half the time. On an H200 (132 SMs, waves
 * of 2112 units) 151936 x 5120 and 151936 x 1024 run 4 waves and 1048 units, 248320 x 5120 7 and
 * 736: 1-5 tokens 1.2-1.9 % faster on 151936 x 5120 (one token 103.4 / 103.3 against 101.9 / 101.8
 * us in two timing loops), 0.2-1.1 % on 248320 x 5120, but 0.3-3 % slower on 151936 x 1024, whose
 * halves of 4 steps are too short for a pair's meeting (docs/PERF_LOG.md, eighteenth round, run 67).
 * The first block of that wave (all before it take kStreamWarps units each), or 0 where it does not
 * apply. */
constexpr int kStreamWarps = 4; /* apply_stream_kernel's warps per block */
constexpr int kStreamPairsPerBlock = kStreamWarps / 2; /* in the last wave in halves of k */
static_assert(kStreamWarps % 2 == 0, "the last wave in halves of k takes the warps in pairs");
constexpr int kStreamBlocksPerSm = 4;
constexpr int64_t kStreamPairMinK = 4096;

inline int64_t stream_pair_block0(int64_t n, int64_t k, int64_t sms)
{
    const int64_t units = (n + 15) / 16, wave = kStreamWarps * kStreamBlocksPerSm * sms;
    if (k % 1024 != 0 || k < kStreamPairMinK || sms < 1) return 0;
    const int64_t waves = units / wave, left = units - waves * wave;
    return waves > 0 && left > 0 && 2 * left <= wave ? waves * wave / kStreamWarps : 0;
}

/* More than 256 tokens on the folding kernel: fold_tile's equal chunks of m in one launch, or, where
 * those chunks hold tokens past m (each rounded up to 32) and the rest of m over whole chunks of 256
 * would waste fewer, two calls: the whole chunks of 256 below m, then the rest, each planned as a
 * call of its own (apply.hip, apply_checked), so that the rest takes the tile of its own count.
 * Where k >= kFoldSplitMinK and the rest is kFoldSplitMinRest tokens or more. H200,
 * docs/PERF_LOG.md twentieth round, run 72, two timing loops (equal chunks / two calls, us):
 * 248320 x 5120 at 352 / 416 / 480 / 640 tokens (2 x 192 / 2 x 224 / 2 x 256 / 3 x 224 against
 * 256 + 96 / 256 + 160 / 256 + 224 / 512 + 128) 1446 / 1643 / 1860 / 2466 against 1425 / 1562 /
 * 1768 / 2402, 262144 x 5376 1634 / 1818 / 2075 / 2868 against 1584 / 1741 / 1976 / 2861, 151936
 * x 5120 801 / 954 / 1090 / 1573 against 789 / 910 / 1012 / 1536; not where the chunks are whole
 * (384 tokens: 1431 against 1468 on 248320 x 5120), nor with a rest of 32 (288 and 544 tokens: up to
 * 3 % slower), nor at k <= 4096 (128256 x 4096 at 416 / 640: 626 / 975 against 641 / 1023; the
 * heads of k <= 1024 up to 12 % slower at most counts). The first call's tokens, or 0: one launch. */
constexpr int64_t kFoldSplitMinK = 5120;
constexpr int64_t kFoldSplitMinRest = 96;

/* The tokens past m that fold_tile's chunks for m tokens hold. */
inline int64_t fold_padding(int64_t m, int64_t k)
{
    return (m + 255) / 256 * fold_tile(m, k).tokens - m;
}

template <class Facts>
int64_t fold_split_tokens(const Call &c, Facts &f, int refuse)
{
    const int64_t rest = c.m % 256;
    if (c.m <= 256 || c.k < kFoldSplitMinK || rest < kFoldSplitMinRest || (refuse & RADIANCE_GPU_TEST_NO_WGMMA) ||
        !f.wgmma_built())
        return 0;
    return fold_padding(rest, c.k) < fold_padding(c.m, c.k) ? c.m - rest : 0;
}

/* The automatic choice for a call under the test flags `refuse` (RADIANCE_GPU_TEST_*, 0 outside
 * the tests). */
template <class Facts>
Dispatch decide(const Call &c, Facts &f, int refuse)
{
    Dispatch p = {};
    if (plan_wmma(c, f, refuse, &p) || plan_mfma(c, f, refuse, &p)) return p;
    const bool has_mma = !(refuse & RADIANCE_GPU_TEST_NO_MMA) && f.sm() >= 80;
    if (!has_mma) {
        plan_vector(c, f, &p);
        return p;
    }
    /* the stream and wgmma kernels take one scale per row and 128-column step */
    const bool big_groups = c.group >= 128;
    auto wgmma = [&]() { return big_groups && !(refuse & RADIANCE_GPU_TEST_NO_WGMMA) && f.wgmma_built(); };
    if (c.m <= 8) {
        /* The stream kernels run whole 4-step super-steps, no step tested against k, where
         * k % 512 == 0 (m = 1: 172.8 against 182.1 us, docs/PERF_LOG.md seventh round; 3-8 tokens
         * 5-11 % on the heads of k = 5120, fifteenth round, run 58), and elsewhere all but the last
         * super-step so (tail_super: 262144 x 5376 181.4 / 188.6 / 220.9 us at 1 / 4 / 8 tokens
         * against 200.1 / 221.6 / 227.5 with every step tested; run 60, where a tail kernel is as
         * fast as a whole one on the heads where both apply). Whole super-steps carry their scales
         * in the ring: in the shared-activation kernel wherever they fit beside the activations
         * (k <= 6080 on an H200; from 5 tokens where k <= kRingScalesFewTokensMaxK; where they do
         * not, its tail kernel), in the one-unit kernel where k <= kRingScalesFewTokensMaxK. */
        const bool whole = c.k % 512 == 0;
        const bool few_k = whole && c.k <= kRingScalesFewTokensMaxK;
        const bool shared_x = (refuse & RADIANCE_GPU_TEST_SHARED_X) ||
                              ((c.m >= kSharedXMinTokens || (few_k && c.m >= kSharedXRingMinTokens)) &&
                               !(refuse & RADIANCE_GPU_TEST_NO_SHARED_X));
        if (big_groups && shared_x) {
            const bool ring = whole && plan_stream_shared_x(c, f, 1, 4, kSharedXMinWarps, false, true, &p);
            if (ring || plan_stream_shared_x(c, f, 1, 4, kSharedXMinWarps, false, false, &p)) {
                p.whole_super = ring;
                p.tail_super = !ring;
                return p;
            }
        }
        if (c.m > 6 && c.k / 128 >= kWgmma8MinSteps && wgmma() && plan_wgmma(f, 8, refuse, &p)) return p;
        if (!big_groups) {
            plan_mma(c, &p);
            return p;
        }
        /* lanes of tokens past m skip their activation loads: with whole or tail super-steps
         * faster than loading the last token's again at every count (m = 1: 158.9 against 161.5
         * us, m = 2 165.6 against 169.8, 248320 x 5120, runs 58-59; docs/PERF_LOG.md item 24 has
         * the kernels that tested every step, where clamping led at 1-2 tokens) */
        p.path = ApplyPath::kStream;
        p.row_tiles = p.token_tiles = 1;
        p.x_mode = kXSkip;
        p.whole_super = whole;
        p.tail_super = !whole;
        p.ring_scales = few_k;
        p.pair_block0 = whole ? stream_pair_block0(c.n, c.k, f.sm_count()) : 0;
        return p;
    }
    /* 9-16 tokens: k split over a cluster pair of blocks, all 16 tokens' activations of each half in
     * shared memory beside 16 warps' rings, where that fits (k <= 5296 on an H200): 241.6 / 249.7
     * against the wgmma kernel's 248.7 / 266.1 us at 12 / 16 tokens (docs/PERF_LOG.md seventh
     * round); the halves' scales in the rings where their super-steps are whole and that fits too
     * (k <= 4096 on an H200, groups of 128; run 64) */
    const bool split_k = c.m <= 16 && big_groups && !(refuse & RADIANCE_GPU_TEST_NO_SHARED_X);
    /* halves of whole 2-step super-steps (k % 512 == 0) */
    const bool fine_whole = c.k % (2 * 128 * kSplitKFineSteps) == 0;
    /* split k's 2-step super-steps in 3 slots that carry the scales, whole in halves of k / 256 +-
     * shift steps, where 16 warps of those fit (kSplitKFineSteps; false, q untouched, elsewhere), with
     * one mma chain (run 83; H200, three loops, us at 9 / 16 tokens: 248320 x 5120 197.8-198.0 /
     * 205.1-205.4 against 203.6-204.1 / 210.3-210.7 with two, 151936 x 5120 123.8-124.1 /
     * 128.4-128.6 against 127.4 / 131.7-132.1, 128256 x 4096 90.1-90.3 / 93.9-94.2 against
     * 92.7-92.9 / 96.4-96.8, 151936 x 6144 144.8-145.3 / 150.9-151.4 against 149.0-149.2 /
     * 155.4-155.5) */
    auto fine_ring = [&](int shift, Dispatch *q) {
        Dispatch r = {};
        if (!plan_stream_split_k(c, f, kSharedXMinWarps, true, &r, kSplitKFineSteps, kSplitKFineSlots, shift) ||
            !r.ring_scales)
            return false;
        r.one_chain = true;
        *q = r;
        return true;
    };
    /* from k = kSplitKFineScalesMinK to kSplitKFineScalesMaxK with whole super-steps, groups of 128
     * (run 80) */
    if (split_k && c.group == 128 && c.k >= kSplitKFineScalesMinK && c.k <= kSplitKFineScalesMaxK && fine_whole &&
        fine_ring(0, &p))
        return p;
    if (split_k && plan_stream_split_k(c, f, kSharedXMinWarps, true, &p)) return p;
    /* where 16 warps' rings of 4-step slots do not fit beside the halves' activations (k > 5296 on
     * an H200) but k <= kSplitKFineMaxK and k / 256 is odd (k = 5376 on an H100 / H200), 2-step
     * super-steps in 3 slots (3/4 of the ring's bytes, as many in flight: kSplitKFineSteps), whole
     * in halves one step apart (kSplitKShift) with their scales in the ring, one mma chain; where
     * that does not fit, the wgmma pipe below. The halves of 21 steps, the last super-step of each
     * a single step, with the scales' windows and the biased codes (split_k_fine_tail_windows: the
     * library's from runs 81-83 to run 90) are the benchmark build's (splitktailwin) */
    const bool fine_k = c.group == 128 && c.k <= kSplitKFineMaxK && !fine_whole;
    if (split_k && fine_k && fine_ring(kSplitKShift, &p)) return p;
    /* more than 32 tokens (17-32 for k <= kFoldFewTokensMaxK; 9-32 for groups under 128, which the
     * kernels below serve only by mma.sync): the group scale folded into the dequantized weights,
     * so no warpgroup drains its wgmmas between groups (docs/PERF_LOG.md eighth round, run 43,
     * 248320 x 5120, H200: 916.8 / 1441 / 3895 / 8181 us at 256 / 384 / 1024 / 2048 tokens against
     * the warp-specialized kernel's 940 / 1991 / 4257 / 8320 in issue 22's table; group 64,
     * 49152 x 576: 15.9 / 19.6 us at 16 / 64 tokens against the tiled mma.sync kernel's 38 / 59,
     * now ahead of bf16's 19.8 / 22.8). Where its maps are refused, the warp-specialized kernel is no
     * fallback: it asks for the same two maps (boxes differing only in size, which no refusal
     * depends on: the driver checks the addresses, strides and swizzle, the same for both), and
     * k % 32 == 0 always holds (a group is 32-256 columns and divides k). So the older wgmma
     * kernels or mma.sync follow. */
    const bool fold_ok = !(refuse & RADIANCE_GPU_TEST_NO_WGMMA) && f.wgmma_built();
    /* 9-16 tokens where k <= kFoldFewTokensMaxK cannot be split in whole groups (k % (2 group) != 0,
     * k = 640): the folding kernel's 16-token tile, not the wgmma pipe (run 91, H100, one timing loop,
     * us at 9 / 12 / 16 tokens: 262144 x 640 59.1 / 58.9 / 56.7 against 66.7 / 66.4 / 66.9; where
     * split k applies it is not clearly faster: 151936 x 1024 49.0 / 49.4 / 47.8 against 48.0 /
     * 48.9 / 49.9, 131072 x 768 40.4 / 40.8 / 39.2 against 40.0 / 40.6 / 41.2) */
    const bool fold_unsplit = c.m > 8 && c.k <= kFoldFewTokensMaxK && c.k % (2 * c.group) != 0;
    const bool fold_32 = fold_32_fills_rounds(c, f.sm_count());
    if ((c.m > 32 || !big_groups || (c.m > 16 && c.k <= kFoldFewTokensMaxK) || fold_unsplit || fold_32) && fold_ok) {
        const FoldTile w = fold_tile_rows(c, fold_tile(c.m, c.k), f.sm_count());
        if (plan_wgmma_fold(c, f, fold_tile_two_per_sm(c, w, f.sm_count()), refuse, &p)) return p;
    }
    const int tokens = c.m <= 16 ? 16 : c.m <= 32 ? 32 : c.m <= 64 ? 64 : 128;
    if (wgmma() && plan_wgmma(f, tokens, refuse, &p)) return p;
    p.path = ApplyPath::kTile;
    p.row_tiles = 2;
    p.token_tiles = (tokens < 64 ? tokens : 64) / 8;
    return p;
}

} // namespace radiance

#endif /* RADIANCE_DISPATCH_H */
