/*
 * apply_plan.h - the apply entry's planner (apply.hip) as far as code beside it needs it: the
 * benchmark build's variant table (benchmarks/harness/apply_variants.hip) plans some kernels by
 * hand and hands every plan to the same launch. Internal to the kernels: not part of the C
 * surface (radiance/radiance_gpu.h).
 */
#ifndef RADIANCE_APPLY_PLAN_H
#define RADIANCE_APPLY_PLAN_H

#include <stdint.h>

#include "apply_paths.h"

namespace radiance {

/* The checks of radiance_gpu_apply (radiance_gpu.h): 0 or RADIANCE_GPU_EINVAL. An empty output
 * (m or n zero) needs no pointers. */
int check_args(const uint16_t *x, int64_t m, int64_t k, const int32_t *packed, const uint16_t *scales,
               const uint16_t *bias, int64_t n, int group_size, uint16_t *out);

/* The RADIANCE_GPU_TEST_* flags set by radiance_gpu_test_refuse (0 outside the tests). */
int test_refuse_flags(void);

/* The automatic choice for a checked call under the test flags `refuse` (docs/DISPATCH.md). */
ApplyPlan make_plan(const ApplyArgs &a, int refuse);

/* Launches the kernel the plan names on a.stream. */
rad_error_t launch_plan(const ApplyArgs &a, const ApplyPlan &p);

/* A tile of the warp-specialized wgmma kernel (apply_wgmma_ws.hip): tokens (64 to 256 in steps of
 * 32), consumer warpgroups of 64 rows, A-fragment sets, persistent blocks or one per tile. */
struct WsTile {
    int tokens, consumer_wgs, a_sets;
    bool persistent;
};

/* The warp-specialized kernel with tile `w` and its two tensor maps, encoded into p. False where
 * the driver refuses a map (the caller then takes plan_wgmma, whose fallbacks copy without TMA). */
bool plan_wgmma_ws(const ApplyArgs &a, WsTile w, int refuse, ApplyPlan *p);

/* A tile of the folded-scale wgmma kernel (apply_wgmma_fold.hip): tokens (16, 32, then 64 to 256
 * in steps of 32) and consumer warpgroups of 64 rows (3 up to 160 tokens, 2 from 192: the pairs
 * RAD_FOLD_TILES instantiates). */
struct FoldTile {
    int tokens, consumer_wgs;
};

/* The library's fold tile for m tokens (apply.hip). */
FoldTile fold_tile(int64_t m);

/* The folded-scale kernel with tile `w` and its two tensor maps (the activations' boxes 64 columns
 * x tokens in the 128-byte swizzle, the weights' 64 consumer_wgs rows x one step), encoded into p.
 * False where k is not a multiple of 32 (the weights' row pitch must be 16 bytes) or the driver
 * refuses a map; any group size. */
bool plan_wgmma_fold(const ApplyArgs &a, FoldTile w, int refuse, ApplyPlan *p);

} // namespace radiance

#endif /* RADIANCE_APPLY_PLAN_H */
