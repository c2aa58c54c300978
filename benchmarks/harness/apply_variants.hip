/*
 * apply_variants.hip - the benchmark build's apply by variant (gpu_kernels.py; never in the library
 * setup.py builds): radiance_gpu_apply with the kernel chosen by number, the position of its name
 * in variants.def (0: the library's automatic plan). Compiled with the hip/ sources and
 * RADIANCE_KERNEL_VARIANTS, which also instantiates the kernel files' measured alternatives that
 * the planner never picks. A variant plans its kernel by hand and goes through the library's
 * checks and launch (hip/apply_plan.h).
 */
#include <string.h>

#include "apply_paths.h"
#include "apply_plan.h"
#include "dispatch.h"
#include "radiance/radiance_gpu.h"
#include "runtime.h"

namespace radiance {

/* The warp-specialized wgmma kernel's launcher (apply_wgmma_ws.hip, beside this file): the one
 * path the library's launch_plan does not hold. */
rad_error_t launch_wgmma_ws(const ApplyArgs &a, const ApplyPlan &p);

namespace {

enum VariantKind { kVarAuto, kVarVector, kVarMma, kVarTile, kVarStream, kVarStreamWhole, kVarStreamXs, kVarSplitK,
                   kVarWgmma, kVarWs, kVarFold, kVarTokenSplit };

struct Variant {
    VariantKind kind;
    int p0, p1, p2, p3; /* variants.def says what each kind's parameters are */
};

const Variant kVariantTable[] = {
#define RAD_VARIANT(name, kind, p0, p1, p2, p3) {kind, p0, p1, p2, p3},
#include "variants.def"
#undef RAD_VARIANT
};
constexpr int kVariantCount = (int)(sizeof kVariantTable / sizeof kVariantTable[0]);

/* per block of split k with the biased codes (split_k_fine_tail_windows): two floats per token and
 * 128-column step of the block's half of k (apply_stream.hip, biased_sums) */
constexpr int64_t split_k_biased_sums_bytes(int64_t k) { return (int64_t)kSplitKTokenTiles * (k / 256) * 8 * 8; }

/* Split k's 2-step plan p whose halves end in a part super-step (k = 5376 on an H100 / H200, where
 * block 1's half starts at an odd step): the scales' windows in its rings (each super-step's two
 * scales a row as the two aligned 4-byte words around them), the biased codes (their sums' table
 * beside the activations) and one mma chain, where those bytes fit beside p's warps; false (p
 * untouched) elsewhere. The library's from run 82 until run 90 (dispatch.h, kSplitKShift) took
 * its place. H200, docs/PERF_LOG.md twenty-eighth round (runs 81-83), three loops, us at 9 / 16
 * tokens, 262144 x 5376: 226.4-226.6 / 235.1-235.7 against 244.6-244.8 / 252.7-253.1 without them
 * (the windows alone 236.5-236.8 / 245.3-246.0; with the biased codes and two chains 230.0-230.4 /
 * 238.5-239.6). The biased codes' sum: (q + 24) x in fp32, 24 sum x taken off per group. */
template <class Facts>
bool split_k_fine_tail_windows(const Call &c, Facts &f, Dispatch *p)
{
    if (p->k_parts != 2 || !p->tail_super || p->whole_super || p->ring_scales || p->super_step != kSplitKFineSteps ||
        c.group != 128)
        return false;
    const int64_t windows = stream_slot_bytes(1, kSplitKFineSteps, 128, true, true) -
                            stream_slot_bytes(1, kSplitKFineSteps, 128, false);
    const int64_t smem = p->smem + (int64_t)p->warps * p->ring_slots * windows + split_k_biased_sums_bytes(c.k);
    if (smem > f.smem_optin()) return false;
    p->ring_scales = p->biased_codes = p->one_chain = true;
    p->smem = (int)smem;
    return true;
}

/* The wgmma kernel with exactly this copy mode, or false where it cannot run here. */
bool variant_wgmma(const ApplyArgs &a, int tokens, int copy, int halves, ApplyPlan *p)
{
    if (a.group < 128 || !wgmma_built()) return false;
    p->path = ApplyPath::kWgmma;
    p->tokens = tokens;
    p->copy = copy;
    p->halves = halves;
    p->running_scale = tokens == 128;
    if (copy >= kCopyTmaX && rad_tma_encode_2d(&p->xmap, a.x, 2, (uint64_t)a.m, (uint64_t)a.k, tokens, 64, 1) != 0)
        return false;
    if (copy == kCopyTma && rad_tma_encode_2d(&p->wmap, a.packed, 4, (uint64_t)a.n, (uint64_t)(a.k / 8), kWgmmaRows,
                                              kStepWords, 0) != 0)
        return false;
    return true;
}

/* The plan of a variant: 0, RADIANCE_GPU_ENOFIT where the variant cannot run here (no mma.sync,
 * G < 128 for the stream and wgmma kernels, no sm_90a kernel, a tensor map refused). */
int variant_plan(const ApplyArgs &a, const Variant &v, ApplyPlan *p)
{
    memset(p, 0, sizeof *p);
    if (v.kind == kVarAuto) {
        *p = make_plan(a, test_refuse_flags());
        return 0;
    }
    LiveFacts f(a);
    if (v.kind == kVarVector) {
        plan_vector(call_of(a), f, p);
        return 0;
    }
    if (per_device_cached<rad_device_sm>() < 80) return RADIANCE_GPU_ENOFIT;
    const bool big_groups = a.group >= 128;
    bool ok = true;
    switch (v.kind) {
    case kVarMma:
        plan_mma(call_of(a), p);
        if (v.p0 > 0) {
            p->mma_prefetch = v.p0;
            p->mma_min_blocks = v.p1;
        }
        break;
    case kVarTile:
        p->path = ApplyPath::kTile;
        p->row_tiles = 2;
        p->token_tiles = v.p0;
        break;
    case kVarStream:
        p->path = ApplyPath::kStream;
        p->row_tiles = v.p0;
        p->token_tiles = 1;
        p->x_mode = v.p1;
        ok = big_groups;
        break;
    case kVarStreamXs:
        /* p3 1: the scales in the ring (their bytes in the plan's shared memory), whole super-steps only */
        ok = big_groups && plan_stream_shared_x(call_of(a), f, 1, 4, v.p0, v.p1 != 0, v.p3 == 1, p);
        if (v.p2 == 1) { /* whole super-steps */
            p->whole_super = true;
            ok = ok && a.k % 512 == 0;
        }
        if (v.p2 == 2) p->tail_super = true; /* the last super-step tested, any k */
        ok = ok && (v.p3 != 1 || p->whole_super);
        break;
    case kVarStreamWhole:
        p->path = ApplyPath::kStream;
        p->row_tiles = p->token_tiles = 1;
        p->x_mode = v.p0;
        p->whole_super = v.p1 == 0;
        p->tail_super = v.p1 == 1;
        ok = big_groups && (v.p1 == 1 || a.k % 512 == 0);
        if (v.p2 > 0) { /* persistent, p2 blocks per SM, one 8-token chunk */
            p->blocks = (int)(v.p2 * f.sm_count());
            ok = ok && a.m <= 8 && a.k % 512 == 0;
        }
        if (v.p3 == 1) { /* the scales in the ring, one 8-token chunk, whole super-steps */
            p->ring_scales = true;
            ok = ok && a.m <= 8 && p->whole_super;
        }
        break;
    case kVarSplitK:
        ok = big_groups && (v.p2 == kSplitKFineSlots
                                ? plan_stream_split_k(call_of(a), f, 8, v.p1 == 0, p, kSplitKFineSteps, v.p2,
                                                      v.p3 == 1 ? 1 : v.p3 == 2 ? -1 : 0)
                                : plan_stream_split_k(call_of(a), f, 8, v.p1 == 0, p));
        if (ok && p->k_shift != 0) p->one_chain = true; /* the kernel of shifted halves has one chain */
        if (v.p3 == 3) ok = ok && split_k_fine_tail_windows(call_of(a), f, p);
        ok = ok && (v.p2 == 0 || v.p2 == kSplitKFineSlots); /* the rings the build has */
        ok = ok && (v.p2 == 0 || v.p1 != 0 || p->ring_scales); /* 2-step with the scales: where they fit */
        ok = ok && p->smem <= f.smem_optin();
        if (ok && v.p0 > 0 && p->blocks > v.p0) p->blocks = v.p0;
        break;
    case kVarWgmma: ok = variant_wgmma(a, v.p0, v.p1, v.p2, p); break;
    case kVarWs:
        ok = big_groups && wgmma_built() && plan_wgmma_ws(f, WsTile{v.p0, v.p1, v.p2, v.p3 != 0}, 0, p);
        if (ok) *p = plan_of(*p, f);
        break;
    case kVarFold:
        /* p2 = 1: written by TMA (where the output's map is granted, else not applicable); p3 blocks
         * per SM (0: 1) */
        ok = wgmma_built() &&
             plan_wgmma_fold(call_of(a), f, FoldTile{v.p0, v.p1, v.p2 == 1, v.p3 > 0 ? v.p3 : 1}, 0, p) &&
             p->fold_tstore == (v.p2 == 1);
        if (ok) *p = plan_of(*p, f);
        break;
    default: return RADIANCE_GPU_EINVAL;
    }
    return ok ? 0 : RADIANCE_GPU_ENOFIT;
}

} // namespace
} // namespace radiance

/* radiance_gpu_apply with the kernel chosen by number (0: the automatic plan). */
extern "C" int radiance_gpu_apply_variant(int variant, const uint16_t *x, int64_t m, int64_t k,
                                          const int32_t *packed, const uint16_t *scales, const uint16_t *bias,
                                          int64_t n, int group_size, uint16_t *out, void *stream)
{
    using namespace radiance;
    if (variant < 0 || variant >= kVariantCount) return RADIANCE_GPU_EINVAL;
    const int bad = check_args(x, m, k, packed, scales, bias, n, group_size, out);
    if (bad != 0 || m == 0 || n == 0) return bad;
    const ApplyArgs a = {x, m, k, packed, scales, bias, n, group_size, out, (rad_stream_t)stream};
    /* the library's whole entry (its token split included), or a split forced at p0 tokens */
    if (kVariantTable[variant].kind == kVarAuto) return (int)apply_checked(a, test_refuse_flags());
    if (kVariantTable[variant].kind == kVarTokenSplit) {
        const int64_t chunk = kVariantTable[variant].p0;
        return (int)apply_parts(a, m % chunk != 0 ? m / chunk * chunk : 0, test_refuse_flags());
    }
    ApplyPlan p;
    const int err = variant_plan(a, kVariantTable[variant], &p);
    if (err != 0) return err;
    return (int)(p.path == ApplyPath::kWgmmaWs ? launch_wgmma_ws(a, p) : launch_plan(a, p));
}
