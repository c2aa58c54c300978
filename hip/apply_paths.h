/*
 * apply_paths.h - what the apply entry (apply.hip) hands to the kernel paths: the checked
 * arguments, the plan (which path, which tile, the tensor maps), and one launcher per path. The
 * planner decides everything once (dispatch.h), the launchers launch exactly the kernel the plan
 * names and choose nothing. The paths and when each is taken: docs/DISPATCH.md.
 *
 * Builds with RADIANCE_KERNEL_VARIANTS (benchmarks/harness/gpu_kernels.py only, never setup.py)
 * also hold the measured alternatives that the planner never picks, for the kernel harness's
 * variant table (benchmarks/harness/apply_variants.hip, variants.def).
 */
#ifndef RADIANCE_APPLY_PATHS_H
#define RADIANCE_APPLY_PATHS_H

#include <stdint.h>

#include "compat.h"
#include "dispatch.h"
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

/* The plan: the planner's decision (Dispatch, dispatch.h) and the tensor maps it asked for, kWgmma
 * with copy kCopyTmaX (xmap) or kCopyTma (both), kWgmmaFold and kWgmmaWs (both) and with
 * fold_tstore the output's (omap), encoded by the planner. */
struct ApplyPlan : Dispatch {
    rad_tma_desc_t xmap, wmap, omap;
};

/* The launchers: each launches the kernel the plan names on a.stream and returns the launch's
 * error (RADIANCE_GPU_EINVAL for a plan this build holds no kernel for, or a grid too large). */
rad_error_t launch_vector(const ApplyArgs &a, const ApplyPlan &p);
rad_error_t launch_mma(const ApplyArgs &a, const ApplyPlan &p);
rad_error_t launch_tile(const ApplyArgs &a, const ApplyPlan &p);
rad_error_t launch_stream(const ApplyArgs &a, const ApplyPlan &p);
rad_error_t launch_wgmma(const ApplyArgs &a, const ApplyPlan &p);
rad_error_t launch_wmma(const ApplyArgs &a, const ApplyPlan &p);
rad_error_t launch_mfma(const ApplyArgs &a, const ApplyPlan &p);
rad_error_t launch_stream_shared_x(const ApplyArgs &a, const ApplyPlan &p);
rad_error_t launch_wgmma_fold(const ApplyArgs &a, const ApplyPlan &p);

/* Cluster pairs of apply_stream_split_k_kernel that the current device runs at once, looked up
 * once per device (0 where it cannot say, and in builds without clusters). */
int64_t split_k_clusters(void);

/* Whether this build holds the wgmma kernel for the current device (an sm_90a binary on an sm_90
 * GPU), looked up once per device. */
bool wgmma_built(void);

/* The WMMA layout of the current device (12: gfx12, 11: gfx11, 0: none; NVIDIA 0), looked up once. */
int wmma_device_arch(void);

/* Whether the WMMA path may run now for a call like `a` with layout `arch` on the current device:
 * RADIANCE_AMD_WMMA (0: never, 1: without the check) and otherwise the self-check on first use
 * (path_usable), which launches on a.stream and synchronizes it once; while that stream is being
 * captured and the device is not yet checked, false (the plan without WMMA serves the call: the
 * vector kernel on AMD). */
bool wmma_usable(const ApplyArgs &a, int arch, bool corrupt);

/* Whether the current device has the MFMA layout (gfx942, gfx90a; NVIDIA 0), looked up once. */
int mfma_device(void);

/* Whether this build holds the WMMA (MFMA) path's kernels for the current device, looked up once:
 * always on AMD (wmma_device_arch and mfma_device say which chip has which builtin); on NVIDIA,
 * whose exact emulations of the AMD layouts serve the tests alone, only where the build's sm_90
 * code runs (compat.h: RAD_EMULATIONS_BUILT), which the kernel's register count tells. Where false,
 * the path is never taken and the layer tests' entry points answer RADIANCE_GPU_EINVAL. */
bool wmma_built(void);
bool mfma_built(void);

/* The same for the MFMA path (apply_mfma.hip), with RADIANCE_AMD_MFMA. */
bool mfma_usable(const ApplyArgs &a, bool corrupt);

/* The matrix paths that are self-checked, one result per device each (apply_check.hip). */
enum CheckedPath { kCheckWmma12 = 0, kCheckWmma11 = 1, kCheckMfma = 2, kCheckedPaths = 3 };
typedef rad_error_t (*PathLauncher)(const ApplyArgs &, const ApplyPlan &);

/* Whether plan p (a matrix path, set up for any m) may serve calls on the current device: the
 * environment switch env_name (0: never, 1: without the check), else the check on first use,
 * launcher(p) against the vector kernel on a small exact problem on a.stream (one synchronize);
 * false without checking while a.stream is being captured. A failed check warns once on stderr,
 * naming `label`, the GPU and the switch. */
bool path_usable(const ApplyArgs &a, const ApplyPlan &p, CheckedPath which, const char *env_name, const char *label,
                 PathLauncher launcher);

/* Forget every device's self-check results (radiance_gpu_test_refuse). */
void forget_path_checks(void);

} // namespace radiance

#endif /* RADIANCE_APPLY_PATHS_H */
