/*
 * apply_check.hip - the self-check on first use of the AMD matrix paths (WMMA: apply_wmma.hip,
 * MFMA: apply_mfma.hip), which no AMD GPU of the project has run: the first time a path would
 * serve a call on a device, it and the vector kernel compute a small problem of small integers
 * (exact in fp32 in any order, so the outputs must be equal bit for bit); on a difference the
 * device keeps the vector kernel for that path and stderr says so once. An environment switch
 * per path (RADIANCE_AMD_WMMA, RADIANCE_AMD_MFMA) turns the path off (0) or skips the check (1).
 */
#include <atomic>
#include <mutex>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apply_paths.h"
#include "apply_plan.h"
#include "dispatch.h"
#include "runtime.h"

namespace radiance {
namespace {

enum CheckState { kUnchecked = 0, kPassed = 1, kOff = 2, kFailed = 3 };
constexpr int kMaxDevices = 64;
std::atomic<int> g_check[kMaxDevices][kCheckedPaths]; /* [device][CheckedPath] */
std::mutex g_check_mutex;

/* A deterministic small problem of small integers: x in -3..3, q in -8..7, scales 1/2, 1, 2; every
 * partial sum is a multiple of 1/2 below 2^15, exact in fp32 in any order, so both kernels give
 * the same fp32 totals and the same bf16 outputs. 19 tokens (two 16-token tiles, the second
 * masked), 40 rows (a partial wave on both paths), 512 columns (every group size). */
constexpr int64_t kCheckM = 19, kCheckN = 40, kCheckK = 512;

struct CheckBuffers {
    uint16_t *x = nullptr, *scales = nullptr, *out_path = nullptr, *out_vector = nullptr;
    int32_t *packed = nullptr;
    ~CheckBuffers()
    {
        (void)rad_free(x); (void)rad_free(scales); (void)rad_free(out_path); (void)rad_free(out_vector);
        (void)rad_free(packed);
    }
};

/* 0 when the path's kernel (plan p, launched by `launcher`) agrees with the vector kernel, 1 when
 * it does not, -1 when the check could not run (an allocation or copy failed; the caller treats
 * that as not passed). */
int run_check(const ApplyArgs &user, const ApplyPlan &p, PathLauncher launcher)
{
    const int group = user.group;
    const int64_t kw = kCheckK / 8, ng = kCheckK / group;
    uint16_t hx[kCheckM * kCheckK], hs[kCheckN * (kCheckK / 32)];
    int32_t hp[kCheckN * (kCheckK / 8)];
    uint32_t state = 0x9E3779B9u;
    auto next = [&]() {
        state = state * 1664525u + 1013904223u;
        return state >> 8;
    };
    for (int64_t i = 0; i < kCheckM * kCheckK; i++) {
        const float v = (float)((int)(next() % 7u) - 3);
        uint32_t bits;
        memcpy(&bits, &v, 4);
        hx[i] = (uint16_t)(bits >> 16);
    }
    for (int64_t i = 0; i < kCheckN * kw; i++) hp[i] = (int32_t)(next() ^ (next() << 8));
    static const uint16_t kScales[3] = {0x3F00u, 0x3F80u, 0x4000u}; /* 0.5, 1, 2 */
    for (int64_t i = 0; i < kCheckN * ng; i++) hs[i] = kScales[next() % 3u];

    CheckBuffers b;
    if (rad_malloc((void **)&b.x, sizeof hx) != RAD_SUCCESS ||
        rad_malloc((void **)&b.packed, kCheckN * kw * 4) != RAD_SUCCESS ||
        rad_malloc((void **)&b.scales, kCheckN * ng * 2) != RAD_SUCCESS ||
        rad_malloc((void **)&b.out_path, kCheckM * kCheckN * 2) != RAD_SUCCESS ||
        rad_malloc((void **)&b.out_vector, kCheckM * kCheckN * 2) != RAD_SUCCESS) {
        (void)rad_get_last_error();
        return -1;
    }
    const rad_stream_t st = user.stream;
    if (rad_memcpy_async(b.x, hx, sizeof hx, RAD_MEMCPY_H2D, st) != RAD_SUCCESS ||
        rad_memcpy_async(b.packed, hp, kCheckN * kw * 4, RAD_MEMCPY_H2D, st) != RAD_SUCCESS ||
        rad_memcpy_async(b.scales, hs, kCheckN * ng * 2, RAD_MEMCPY_H2D, st) != RAD_SUCCESS)
        return -1;
    const ApplyArgs a = {b.x, kCheckM, kCheckK, b.packed, b.scales, NULL, kCheckN, group, b.out_path, st};
    ApplyArgs av = a;
    av.out = b.out_vector;
    /* the vector kernel as the planner would set it up for this problem (its tile, LDS staging) */
    ApplyPlan pv;
    memset(&pv, 0, sizeof pv);
    LiveFacts facts(a);
    plan_vector(Call{kCheckM, kCheckN, kCheckK, group}, facts, &pv);
    if (launcher(a, p) != RAD_SUCCESS || launch_vector(av, pv) != RAD_SUCCESS) return -1;
    uint16_t got[kCheckM * kCheckN], want[kCheckM * kCheckN];
    if (rad_memcpy_async(got, b.out_path, sizeof got, RAD_MEMCPY_D2H, st) != RAD_SUCCESS ||
        rad_memcpy_async(want, b.out_vector, sizeof want, RAD_MEMCPY_D2H, st) != RAD_SUCCESS ||
        rad_stream_synchronize(st) != RAD_SUCCESS)
        return -1;
    return memcmp(got, want, sizeof got) == 0 ? 0 : 1;
}

} // namespace

void forget_path_checks(void)
{
    for (int d = 0; d < kMaxDevices; d++)
        for (int i = 0; i < kCheckedPaths; i++) g_check[d][i].store(kUnchecked);
}

bool path_usable(const ApplyArgs &a, const ApplyPlan &p, CheckedPath which, const char *env_name, const char *label,
                 PathLauncher launcher)
{
    int dev = 0;
    if (rad_get_device(&dev) != RAD_SUCCESS || dev < 0 || dev >= kMaxDevices) return false;
    std::atomic<int> &state = g_check[dev][which];
    const int known = state.load();
    if (known != kUnchecked) return known == kPassed;
    /* read where a device is first seen (and again after radiance_gpu_test_refuse) */
    const char *env = getenv(env_name);
    if (env != NULL && strcmp(env, "0") == 0) {
        state.store(kOff);
        return false;
    }
    if (env != NULL && strcmp(env, "1") == 0) {
        state.store(kPassed);
        return true;
    }
    /* a check synchronizes, which a graph capture forbids: the plan without this path serves the
     * captured call, and the first uncaptured call does the check */
    if (rad_stream_capturing(a.stream)) return false;
    std::lock_guard<std::mutex> lock(g_check_mutex);
    if (state.load() != kUnchecked) return state.load() == kPassed;
    const int res = run_check(a, p, launcher);
    if (res == 0) {
        state.store(kPassed);
        return true;
    }
    char name[256];
    rad_device_name(name, sizeof name);
    fprintf(stderr,
            "radiance: warning: the %s %s on GPU %d (%s); not using it on this GPU, the vector kernel serves "
            "instead (%s=1 skips this check, =0 turns the path off)\n",
            label, res > 0 ? "disagrees with the vector kernel" : "could not be checked", dev, name, env_name);
    state.store(kFailed);
    return false;
}

} // namespace radiance
