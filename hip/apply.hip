/*
 * apply.hip - radiance_gpu_apply: out[m, n] = sum_k x[m, k] * q[n, k] * s[n, k / G] (+ bias[n]) for
 * the packed int4 format of docs/FORMAT.md, any m. It checks the arguments, plans once (which
 * kernel path, which tile, the tensor maps it needs) and hands the plan to that path's launcher:
 *
 *   AMD gfx12/gfx11, m >= 8, self-checked    WMMA                 apply_wmma.hip
 *   no mma.sync (AMD, NVIDIA before sm_80)   vector               apply_vector.hip
 *   m <= 8, G < 128                          mma, register pipe   apply_mma.hip
 *   m 5-8, G >= 128, x fits in shared memory stream, shared x     apply_stream.hip
 *     beside 16 warps' rings
 *   m <= 4; or m 5-8 with x not fitting and  stream              apply_stream.hip
 *     (m <= 6 or k < 2048), G >= 128
 *   m 7-8 and k >= 2048, G >= 128, sm_90a,   wgmma, 8 tokens      apply_wgmma_pipe.hip
 *     x not fitting
 *   m 9-16, G >= 128, sm_90, the halves of   stream, k split over apply_stream.hip
 *     x fit beside 16 warps' rings           a cluster pair
 *   m 9-32, G >= 128, sm_90a (else)          wgmma, 16-32 tokens  apply_wgmma_pipe.hip
 *   m > 32 (any G), or m 9-32 and G < 128,   wgmma, the scale     apply_wgmma_fold.hip
 *     sm_90a, k % 32 == 0                    folded into the
 *                                            weights, 16-256
 *                                            tokens, persistent
 *   m > 32, G >= 128, sm_90a, where the      wgmma, warp-         apply_wgmma_ws.hip
 *     fold's plan was refused                specialized, 64-256
 *                                            tokens, persistent
 *   m > 8 elsewhere                          tiled mma.sync       apply_mma.hip
 *
 * Where the driver refuses a tensor map the planner takes the wgmma kernel with fewer TMA copies
 * (32 tokens and more) or the stream / tiled kernel (8 and 16 tokens). The measurements behind
 * each threshold: docs/PERF_LOG.md, "How the dispatch decides".
 *
 * Nothing here allocates or synchronizes, so a call can be captured in a CUDA/HIP graph, with one
 * exception: the WMMA path's self-check on its first use on a device (apply_wmma.hip), which is
 * never done while the stream is being captured (that call runs the vector kernel).
 */
#include <atomic>
#include <string.h>

#include "apply_paths.h"
#include "apply_plan.h"
#include "compat.h"
#include "radiance/format.h"
#include "radiance/radiance_gpu.h"
#include "runtime.h"

namespace radiance {
namespace {

std::atomic<int> g_test_refuse{0}; /* radiance_gpu_test_refuse */

/* The wgmma kernel for `tokens` tokens per block with the tensor maps it needs, encoded into p.
 * Where the driver refuses one: from 32 tokens the kernel with fewer TMA copies; below that false
 * (four warpgroups copy by TMA only, and the cp.async activation layout covers 16 tokens). */
bool plan_wgmma(const ApplyArgs &a, int tokens, int refuse, ApplyPlan *p)
{
    p->path = ApplyPath::kWgmma;
    p->tokens = tokens;
    p->running_scale = tokens == 128;
    p->halves = tokens <= 32 ? 1 : 2;
    p->copy = kCopyTma;
    const bool x_ok = !(refuse & RADIANCE_GPU_TEST_REFUSE_XMAP) &&
                      rad_tma_encode_2d(&p->xmap, a.x, 2, (uint64_t)a.m, (uint64_t)a.k, tokens, 64, 1) == 0;
    const bool w_ok = x_ok && !(refuse & RADIANCE_GPU_TEST_REFUSE_WMAP) &&
                      rad_tma_encode_2d(&p->wmap, a.packed, 4, (uint64_t)a.n, (uint64_t)(a.k / 8), kWgmmaRows,
                                        kStepWords, 0) == 0;
    if (x_ok && w_ok) return true;
    memset(&p->wmap, 0, sizeof p->wmap);
    if (!x_ok) memset(&p->xmap, 0, sizeof p->xmap);
    if (tokens < 32) return false;
    p->halves = 2;
    p->copy = x_ok ? kCopyTmaX : kCopyAsync;
    return true;
}

/* The library's tile for m > 32 tokens: the smallest token count in 32s that holds m (256 beyond,
 * in chunks), with the consumer warpgroups (3 where their accumulators fit in 160 registers, up
 * to 160 tokens), A-fragment sets and persistence that timed best for that count on the H200
 * (248320 x 5120, docs/PERF_LOG.md seventh round, run 35; differences of 1-4 % between the
 * persistent and per-tile grids are within run-to-run noise there). The library build holds
 * exactly these tiles (RAD_WS_LIBRARY in apply_wgmma_ws.hip). */
WsTile ws_tile(int64_t m)
{
    const int tokens = m >= 256 ? 256 : (int)(m <= 64 ? 64 : (m + 31) / 32 * 32);
    switch (tokens) {
    case 64: return {64, 3, 2, true};    /* 378.5 us */
    case 96: return {96, 2, 2, true};    /* 546.3 */
    case 128: return {128, 3, 1, true};  /* 624.3 */
    case 160: return {160, 3, 1, false}; /* 728.8 */
    case 192: return {192, 2, 1, true};  /* 939.4 */
    case 224: return {224, 2, 1, false}; /* 1037.2 */
    default: return {256, 2, 2, false};  /* 1098.4 */
    }
}

} // namespace

bool plan_wgmma_ws(const ApplyArgs &a, WsTile w, int refuse, ApplyPlan *p)
{
    if ((refuse & (RADIANCE_GPU_TEST_REFUSE_XMAP | RADIANCE_GPU_TEST_REFUSE_WMAP)) ||
        rad_tma_encode_2d(&p->xmap, a.x, 2, (uint64_t)a.m, (uint64_t)a.k, w.tokens, 64, 1) != 0 ||
        rad_tma_encode_2d(&p->wmap, a.packed, 4, (uint64_t)a.n, (uint64_t)(a.k / 8), 64 * w.consumer_wgs, kStepWords,
                          0) != 0) {
        memset(&p->xmap, 0, sizeof p->xmap);
        memset(&p->wmap, 0, sizeof p->wmap);
        return false;
    }
    p->path = ApplyPath::kWgmmaWs;
    p->tokens = w.tokens;
    p->consumer_wgs = w.consumer_wgs;
    p->a_sets = w.a_sets;
    p->blocks = w.persistent ? 1 : 0;
    return true;
}

/* The library's tile of the folded-scale kernel for m tokens: the tokens split into equal chunks
 * of at most 256 (the largest wgmma n), each rounded up to 16 up to 32 tokens and to 32 beyond, so
 * that no token count wastes more than 31 tokens per chunk (384 tokens: two chunks of 192, not two
 * of 256); 3 consumer warpgroups (192 rows: less activation traffic per row) where their
 * accumulators fit, up to 160 tokens, else 2. */
FoldTile fold_tile(int64_t m)
{
    const int64_t chunks = (m + 255) / 256;
    const int64_t per = (m + chunks - 1) / chunks;
    const int tokens = per <= 16 ? 16 : per <= 32 ? 32 : (int)((per + 31) / 32 * 32);
    return {tokens, tokens <= 160 ? 3 : 2};
}

bool plan_wgmma_fold(const ApplyArgs &a, FoldTile w, int refuse, ApplyPlan *p)
{
    if (a.k % 32 != 0 || (refuse & (RADIANCE_GPU_TEST_REFUSE_XMAP | RADIANCE_GPU_TEST_REFUSE_WMAP)) ||
        rad_tma_encode_2d(&p->xmap, a.x, 2, (uint64_t)a.m, (uint64_t)a.k, w.tokens, 64, 1) != 0 ||
        rad_tma_encode_2d(&p->wmap, a.packed, 4, (uint64_t)a.n, (uint64_t)(a.k / 8), 64 * w.consumer_wgs, kStepWords,
                          0) != 0) {
        memset(&p->xmap, 0, sizeof p->xmap);
        memset(&p->wmap, 0, sizeof p->wmap);
        return false;
    }
    p->path = ApplyPath::kWgmmaFold;
    p->tokens = w.tokens;
    p->consumer_wgs = w.consumer_wgs;
    return true;
}

namespace {

/* Shared-activation stream kernel (kStreamSharedX): from this many tokens, where one warp load of
 * the activations from global memory touches more than 8 L1 lines (2 per token: a lane reads 16
 * bytes at column 32 t + 8 i of its token, so the 4 lanes of a token span 256 bytes), while the
 * block's shared copy costs at most 4 wavefronts a load. At 4 tokens (8 lines) the two kernels
 * tie, at 8 (16 lines) the shared copy wins: H200, 248320 x 5120, docs/PERF_LOG.md run 26. */
constexpr int kSharedXMinTokens = 5;
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

/* The WMMA plan where it applies: the device's layout (or the test flags' on any GPU), m large
 * enough (any m under the test flags) and the self-check passed or skipped. */
bool plan_wmma(const ApplyArgs &a, int refuse, ApplyPlan *p)
{
    const int forced = refuse & RADIANCE_GPU_TEST_FORCE_WMMA12   ? 12
                       : refuse & RADIANCE_GPU_TEST_FORCE_WMMA11 ? 11
                                                                 : 0;
    const int arch = forced ? forced : wmma_device_arch();
    if (arch == 0 || (!forced && a.m < kWmmaMinTokens)) return false;
    const bool corrupt = (refuse & RADIANCE_GPU_TEST_CORRUPT_WMMA) != 0;
    if (!wmma_usable(a, arch, corrupt)) return false;
    p->path = ApplyPath::kWmma;
    p->wmma_arch = arch;
    p->wmma_corrupt = corrupt;
    p->token_tiles = a.m <= 16 ? 1 : a.m <= 32 ? 2 : 4;
    return true;
}

} // namespace

ApplyPlan make_plan(const ApplyArgs &a, int refuse)
{
    ApplyPlan p;
    memset(&p, 0, sizeof p);
    if (plan_wmma(a, refuse, &p)) return p;
    const bool has_mma = !(refuse & RADIANCE_GPU_TEST_NO_MMA) && per_device_cached<rad_device_sm>() >= 80;
    if (!has_mma) {
        p.path = ApplyPath::kVector;
        return p;
    }
    /* the stream and wgmma kernels take one scale per row and 128-column step */
    const bool big_groups = a.group >= 128;
    auto wgmma = [&]() { return big_groups && !(refuse & RADIANCE_GPU_TEST_NO_WGMMA) && wgmma_built(); };
    if (a.m <= 8) {
        const bool shared_x = (refuse & RADIANCE_GPU_TEST_SHARED_X) ||
                              (a.m >= kSharedXMinTokens && !(refuse & RADIANCE_GPU_TEST_NO_SHARED_X));
        if (big_groups && shared_x && plan_stream_shared_x(a, 1, 4, kSharedXMinWarps, false, &p)) return p;
        if (a.m > 6 && a.k / 128 >= kWgmma8MinSteps && wgmma() && plan_wgmma(a, 8, refuse, &p)) return p;
        p.row_tiles = p.token_tiles = 1;
        if (!big_groups) {
            p.path = ApplyPath::kMma;
            return p;
        }
        /* lanes of tokens past m clamp their activation loads (m = 1: 180 against 188 us) or
         * skip them (m = 4: 200 against 204): H200, 248320 x 5120, docs/PERF_LOG.md item 24 */
        p.path = ApplyPath::kStream;
        p.x_mode = a.m <= 2 || a.m > 6 ? kXClamp : kXSkip;
        /* 1-2 tokens, whole 4-step super-steps: no step tested against k (m = 1: 172.8 against
         * 182.1 us, H200, docs/PERF_LOG.md seventh round) */
        p.whole_super = a.m <= 2 && a.k % 512 == 0;
        return p;
    }
    /* 9-16 tokens: k split over a cluster pair of blocks, all 16 tokens' activations of each half in
     * shared memory beside 16 warps' rings, where that fits (k <= 5296 on an H200): 241.6 / 249.7
     * against the wgmma kernel's 248.7 / 266.1 us at 12 / 16 tokens (docs/PERF_LOG.md seventh round) */
    if (a.m <= 16 && big_groups && !(refuse & RADIANCE_GPU_TEST_NO_SHARED_X) &&
        plan_stream_split_k(a, kSharedXMinWarps, &p))
        return p;
    /* more than 32 tokens (9-32 for groups under 128, which the kernels below serve only by
     * mma.sync): the group scale folded into the dequantized weights, so no warpgroup drains its
     * wgmmas between groups (issue 22, docs/PERF_LOG.md); else, where a tensor map is refused,
     * the warp-specialized kernel with the running scale, then the older wgmma kernels */
    const bool fold_ok = !(refuse & RADIANCE_GPU_TEST_NO_WGMMA) && wgmma_built();
    if ((a.m > 32 || !big_groups) && fold_ok && plan_wgmma_fold(a, fold_tile(a.m), refuse, &p)) return p;
    if (a.m > 32 && wgmma() && plan_wgmma_ws(a, ws_tile(a.m), refuse, &p)) return p;
    const int tokens = a.m <= 16 ? 16 : a.m <= 32 ? 32 : a.m <= 64 ? 64 : 128;
    if (wgmma() && plan_wgmma(a, tokens, refuse, &p)) return p;
    p.path = ApplyPath::kTile;
    p.row_tiles = 2;
    p.token_tiles = (tokens < 64 ? tokens : 64) / 8;
    return p;
}

rad_error_t launch_plan(const ApplyArgs &a, const ApplyPlan &p)
{
    switch (p.path) {
    case ApplyPath::kVector: return launch_vector(a, p);
    case ApplyPath::kMma: return launch_mma(a, p);
    case ApplyPath::kTile: return launch_tile(a, p);
    case ApplyPath::kStream: return launch_stream(a, p);
    case ApplyPath::kWgmma: return launch_wgmma(a, p);
    case ApplyPath::kWgmmaWs: return launch_wgmma_ws(a, p);
    case ApplyPath::kWmma: return launch_wmma(a, p);
    case ApplyPath::kStreamSharedX: return launch_stream_shared_x(a, p);
    case ApplyPath::kWgmmaFold: return launch_wgmma_fold(a, p);
    }
    return (rad_error_t)RADIANCE_GPU_EINVAL;
}

int check_args(const uint16_t *x, int64_t m, int64_t k, const int32_t *packed, const uint16_t *scales,
               const uint16_t *bias, int64_t n, int group_size, uint16_t *out)
{
    if (m < 0 || n < 0 || k <= 0) return RADIANCE_GPU_EINVAL;
    if (!RAD_GROUP_OK(group_size) || k % group_size != 0) return RADIANCE_GPU_EINVAL;
    if (m == 0 || n == 0) return 0;
    if (x == NULL || packed == NULL || scales == NULL || out == NULL) return RADIANCE_GPU_EINVAL;
    if (((uintptr_t)x & 15u) != 0 || ((uintptr_t)packed & 15u) != 0) return RADIANCE_GPU_EINVAL;
    if (((uintptr_t)scales & 1u) != 0 || ((uintptr_t)out & 1u) != 0 || ((uintptr_t)bias & 1u) != 0)
        return RADIANCE_GPU_EINVAL;
    return 0;
}

int test_refuse_flags(void) { return g_test_refuse.load(std::memory_order_relaxed); }

} // namespace radiance

extern "C" int radiance_gpu_apply(const uint16_t *x, int64_t m, int64_t k, const int32_t *packed,
                                  const uint16_t *scales, const uint16_t *bias, int64_t n, int group_size,
                                  uint16_t *out, void *stream)
{
    using namespace radiance;
    const int bad = check_args(x, m, k, packed, scales, bias, n, group_size, out);
    if (bad != 0 || m == 0 || n == 0) return bad;
    const ApplyArgs a = {x, m, k, packed, scales, bias, n, group_size, out, (rad_stream_t)stream};
    return (int)launch_plan(a, make_plan(a, test_refuse_flags()));
}

extern "C" int radiance_gpu_test_refuse(int flags)
{
    radiance::wmma_forget_checks();
    return radiance::g_test_refuse.exchange(flags);
}
