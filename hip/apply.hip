/*
 * apply.hip - radiance_gpu_apply: out[m, n] = sum_k x[m, k] * q[n, k] * s[n, k / G] (+ bias[n]) for
 * the packed int4 format of docs/FORMAT.md, any m. It checks the arguments, plans once (which
 * kernel path, which tile, the tensor maps it needs) and hands the plan to that path's launcher;
 * where dispatch.h's fold_split_tokens cuts a call of many tokens in two, it does so for each part.
 * What runs when (per vendor, token count, head shape, group size, and the fallbacks): the table
 * of docs/DISPATCH.md, which tests/test_dispatch_doc.py checks against the decision itself
 * (decide, dispatch.h); this file only asks the device what the decision needs (LiveFacts).
 *
 * Nothing here allocates or synchronizes, so a call can be captured in a CUDA/HIP graph, with one
 * exception: the WMMA and MFMA paths' self-check on their first use on a device (apply_check.hip),
 * which is never done while the stream is being captured (that call runs the vector kernel).
 */
#include <atomic>
#include <string.h>

#include "apply_paths.h"
#include "apply_plan.h"
#include "compat.h"
#include "dispatch.h"
#include "radiance/format.h"
#include "radiance/radiance_gpu.h"
#include "runtime.h"

namespace radiance {
namespace {

std::atomic<int> g_test_refuse{0}; /* radiance_gpu_test_refuse */

} // namespace

LiveFacts::LiveFacts(const ApplyArgs &a) : a_(a)
{
    memset(&xmap, 0, sizeof xmap);
    memset(&wmap, 0, sizeof wmap);
    memset(&omap, 0, sizeof omap);
}

int LiveFacts::sm() { return per_device_cached<rad_device_sm>(); }
int LiveFacts::wmma_arch() { return wmma_device_arch(); }
bool LiveFacts::wmma_usable(int arch, bool corrupt) { return radiance::wmma_usable(a_, arch, corrupt); }
bool LiveFacts::mfma_device() { return radiance::mfma_device() != 0; }
bool LiveFacts::mfma_usable(bool corrupt) { return radiance::mfma_usable(a_, corrupt); }
bool LiveFacts::wgmma_built() { return radiance::wgmma_built(); }
int64_t LiveFacts::smem_optin() { return per_device_cached<rad_smem_optin>(); }
int64_t LiveFacts::sm_count() { return per_device_cached<rad_sm_count>(); }
int64_t LiveFacts::split_k_clusters() { return radiance::split_k_clusters(); }

bool LiveFacts::cluster_launch()
{
#if defined(RAD_HAS_CLUSTER_LAUNCH)
    return true;
#else
    return false;
#endif
}

/* the activations in boxes of 64 columns x tokens in the 128-byte swizzle, the weights in boxes of
 * one step x rows; on a refusal both zeros */
bool LiveFacts::tile_maps(int tokens, int rows)
{
    if (rad_tma_encode_2d(&xmap, a_.x, 2, (uint64_t)a_.m, (uint64_t)a_.k, (uint32_t)tokens, 64, 1) != 0 ||
        rad_tma_encode_2d(&wmap, a_.packed, 4, (uint64_t)a_.n, (uint64_t)(a_.k / 8), (uint32_t)rows, kStepWords,
                          0) != 0) {
        memset(&xmap, 0, sizeof xmap);
        memset(&wmap, 0, sizeof wmap);
        return false;
    }
    return true;
}

/* the output in boxes of 64 rows x tokens in the 128-byte swizzle (the TMA-store epilogue of the
 * folding kernel). The driver refuses an output not 16-byte aligned or with n % 8 != 0 (a row
 * pitch not a multiple of 16 bytes): refused here without asking it, as a refused call shows as an
 * API error under compute-sanitizer */
bool LiveFacts::out_map(int tokens)
{
    if (((uintptr_t)a_.out & 15u) == 0 && a_.n % 8 == 0 &&
        rad_tma_encode_2d(&omap, a_.out, 2, (uint64_t)a_.m, (uint64_t)a_.n, (uint32_t)tokens, 64, 1) == 0)
        return true;
    memset(&omap, 0, sizeof omap);
    return false;
}

bool LiveFacts::pipe_x_map(int tokens)
{
    if (rad_tma_encode_2d(&xmap, a_.x, 2, (uint64_t)a_.m, (uint64_t)a_.k, (uint32_t)tokens, 64, 1) == 0) return true;
    memset(&xmap, 0, sizeof xmap);
    return false;
}

bool LiveFacts::pipe_w_map()
{
    if (rad_tma_encode_2d(&wmap, a_.packed, 4, (uint64_t)a_.n, (uint64_t)(a_.k / 8), kWgmmaRows, kStepWords, 0) == 0)
        return true;
    memset(&wmap, 0, sizeof wmap);
    return false;
}

ApplyPlan plan_of(const Dispatch &d, const LiveFacts &f)
{
    ApplyPlan p;
    memset(&p, 0, sizeof p);
    static_cast<Dispatch &>(p) = d;
    p.xmap = f.xmap;
    p.wmap = f.wmap;
    p.omap = f.omap;
    return p;
}

/* The decision is dispatch.h's; here only the device it asks. */
ApplyPlan make_plan(const ApplyArgs &a, int refuse)
{
    LiveFacts f(a);
    const Dispatch d = decide(call_of(a), f, refuse);
    return plan_of(d, f);
}

rad_error_t launch_plan(const ApplyArgs &a, const ApplyPlan &p)
{
    switch (p.path) {
    case ApplyPath::kVector: return launch_vector(a, p);
    case ApplyPath::kMma: return launch_mma(a, p);
    case ApplyPath::kTile: return launch_tile(a, p);
    case ApplyPath::kStream: return launch_stream(a, p);
    case ApplyPath::kWgmma: return launch_wgmma(a, p);
    case ApplyPath::kWgmmaWs: break; /* the benchmark build's (benchmarks/harness/apply_wgmma_ws.hip) */
    case ApplyPath::kWmma: return launch_wmma(a, p);
    case ApplyPath::kMfma: return launch_mfma(a, p);
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
    /* the stream kernels copy a row's scales 4 or 8 bytes at a time (the ring's scales): off the
     * contract's 16-byte alignment they would fault the context, so they are refused as x and
     * packed are; the output and the bias need only their element's alignment */
    if (((uintptr_t)x & 15u) != 0 || ((uintptr_t)packed & 15u) != 0 || ((uintptr_t)scales & 15u) != 0)
        return RADIANCE_GPU_EINVAL;
    if (((uintptr_t)out & 1u) != 0 || ((uintptr_t)bias & 1u) != 0) return RADIANCE_GPU_EINVAL;
    return 0;
}

int test_refuse_flags(void) { return g_test_refuse.load(std::memory_order_relaxed); }

/* the second part's x and out: row `first` of each, 16-byte aligned where the call's are (k is a
 * multiple of the group, 32 or more; first is a multiple of 256 in the library, of a variant's
 * chunk in the benchmark build) */
rad_error_t apply_parts(const ApplyArgs &a, int64_t first, int refuse)
{
    if (first <= 0 || first >= a.m) return launch_plan(a, make_plan(a, refuse));
    ApplyArgs head = a, rest = a;
    head.m = first;
    rest.x = a.x + first * a.k;
    rest.m = a.m - first;
    rest.out = a.out + first * a.n;
    const rad_error_t err = launch_plan(head, make_plan(head, refuse));
    return err != RAD_SUCCESS ? err : launch_plan(rest, make_plan(rest, refuse));
}

rad_error_t apply_checked(const ApplyArgs &a, int refuse)
{
    LiveFacts f(a);
    return apply_parts(a, fold_split_tokens(call_of(a), f, refuse), refuse);
}

} // namespace radiance

extern "C" int radiance_gpu_apply(const uint16_t *x, int64_t m, int64_t k, const int32_t *packed,
                                  const uint16_t *scales, const uint16_t *bias, int64_t n, int group_size,
                                  uint16_t *out, void *stream)
{
    using namespace radiance;
    const int bad = check_args(x, m, k, packed, scales, bias, n, group_size, out);
    if (bad != 0 || m == 0 || n == 0) return bad;
    const ApplyArgs a = {x, m, k, packed, scales, bias, n, group_size, out, (rad_stream_t)stream};
    return (int)apply_checked(a, test_refuse_flags());
}

extern "C" int radiance_gpu_test_refuse(int flags)
{
    radiance::forget_path_checks();
    return radiance::g_test_refuse.exchange(flags);
}
