/*
 * apply_plan.h - the apply entry's planner (apply.hip) as far as code beside it needs it: the
 * decision of dispatch.h asks the current GPU through LiveFacts, and the benchmark build's
 * variant table (benchmarks/harness/apply_variants.hip) plans some kernels by hand with the same
 * pieces and hands every plan to the same launch. Internal to the kernels: not part of the C
 * surface (radiance/radiance_gpu.h).
 */
#ifndef RADIANCE_APPLY_PLAN_H
#define RADIANCE_APPLY_PLAN_H

#include <stdint.h>

#include "apply_paths.h"
#include "dispatch.h"

namespace radiance {

/* The checks of radiance_gpu_apply (radiance_gpu.h): 0 or RADIANCE_GPU_EINVAL. An empty output
 * (m or n zero) needs no pointers. */
int check_args(const uint16_t *x, int64_t m, int64_t k, const int32_t *packed, const uint16_t *scales,
               const uint16_t *bias, int64_t n, int group_size, uint16_t *out);

/* The RADIANCE_GPU_TEST_* flags set by radiance_gpu_test_refuse (0 outside the tests). */
int test_refuse_flags(void);

/* The Facts of dispatch.h for a call `a` on the current device: each answer looked up when the
 * decision asks (the per-device ones once per device), the tensor maps encoded for `a` into xmap
 * and wmap, the output's into omap (zeros where refused). */
class LiveFacts {
public:
    explicit LiveFacts(const ApplyArgs &a);
    int sm();
    int wmma_arch();
    bool wmma_usable(int arch, bool corrupt);
    bool mfma_device();
    bool mfma_usable(bool corrupt);
    bool wgmma_built();
    int64_t smem_optin();
    int64_t sm_count();
    bool cluster_launch();
    int64_t split_k_clusters();
    bool tile_maps(int tokens, int rows);
    bool out_map(int tokens);
    bool pipe_x_map(int tokens);
    bool pipe_w_map();
    rad_tma_desc_t xmap, wmap, omap;

private:
    const ApplyArgs &a_;
};

inline Call call_of(const ApplyArgs &a) { return Call{a.m, a.n, a.k, a.group}; }

/* The plan of a decision and the tensor maps f encoded for it. */
ApplyPlan plan_of(const Dispatch &d, const LiveFacts &f);

/* The automatic choice for a checked call under the test flags `refuse` (docs/DISPATCH.md). */
ApplyPlan make_plan(const ApplyArgs &a, int refuse);

/* Launches the kernel the plan names on a.stream. */
rad_error_t launch_plan(const ApplyArgs &a, const ApplyPlan &p);

/* A checked call planned and launched as radiance_gpu_apply does: in two calls where dispatch.h's
 * fold_split_tokens says so (apply_parts with its answer), else in one. */
rad_error_t apply_checked(const ApplyArgs &a, int refuse);

/* The first `first` tokens of a checked call planned and launched as one call, the rest as another
 * (0, or m or more: the whole call in one). */
rad_error_t apply_parts(const ApplyArgs &a, int64_t first, int refuse);

} // namespace radiance

#endif /* RADIANCE_APPLY_PLAN_H */
