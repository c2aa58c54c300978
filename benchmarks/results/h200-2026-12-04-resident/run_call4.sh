#!/usr/bin/env bash
# Nsight Compute profiles behind issue 22's unmet cells (2026-12-04, thirteenth session): the
# library's folding tiles where int4 trails bf16 most (262144 x 640 and 49152 x 576 g64 at 384
# tokens, two chunks of 192), the same tile on a big head for comparison (248320 x 5120 at 384),
# run 66's resident kernel (foldres2x128) on 262144 x 640, and the 128-token tile where Humming
# leads (128256 x 4096). The harness build of call 1 (c70e44c's plan and kernels for these calls,
# plus the foldres variants).
#   device: OUT=... bash benchmarks/results/h200-2026-12-04-resident/run_call4.sh  (carry .carry/ab_libs.tar.xz)
cd "$(dirname "$0")/../../.." && tar -xJf .carry/ab_libs.tar.xz || exit 1
# the variant names of that build (run 66's patch, variants.def only: its variants come last)
git apply --include=benchmarks/harness/variants.def benchmarks/results/h200-2026-12-04-resident/run66_resident_kernel.patch || exit 1
LIB=build/A/lib.so KERNELS="fold|resident" bash benchmarks/harness/ncu_profile.sh \
    "384:auto:262144x640,384:foldres2x128:262144x640,384:auto:49152x576:64,384:auto:248320x5120,128:auto:128256x4096"
