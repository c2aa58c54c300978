#!/usr/bin/env bash
# Runs 81-83, prepared in the twentieth session (2026-12-05, no device lent), not yet run
# (docs/PERF_LOG.md, twenty-fifth round; variants.def):
#   run 81: split k at 9-16 tokens with the biased codes (streamsplitk2s3srb: the library's ring at
#     k = 1024-6144 with them; streamsplitk2s3b: the library's at k = 5376). The A fragments are
#     q + 24 by a shift and a LOP3 a pair, no bf16x2 FMA;
#   run 82: at k = 5376 (halves of 21 steps) the scales in the ring all the same, as the aligned
#     words around them (streamsplitk2s3srw; srwb: with the biased codes too);
#   run 83: one mma chain instead of two, no FADD to join them (streamsplitk2s3sr1: the library's
#     ring so; srb1, srwb1: with the biased codes, at k % 512 == 0 and at 5376).
# B = the benchmark build of the tree that adds them:
#   python3 benchmarks/harness/gpu_kernels.py build --lib $PWD/build/B/lib.so
#   tar -cf - build/B/lib.so | xz -T2 -3 > .carry/b_lib.tar.xz
#   device: bash benchmarks/results/h200-2026-12-05-biased/run_call.sh  (carry .carry/b_lib.tar.xz)
# 1. gpu_kernels.py check of the plan and the seven new rings;
# 2. variant_error.py: their error on operands that stress the fp32 sums, against docs/FORMAT.md's bound;
# 3. the plan against the seven in one timing loop per table, 9 and 16 tokens, five heads, twice
#    (each variant where it applies: srb, sr1, srb1 at k % 512 == 0, b, srw, srwb, srwb1 at 5376);
# 4. Nsight Compute at 16 tokens, with the time that is left: the plan and srb on 248320 x 5120,
#    the plan and srw on 262144 x 5376.
# CALL_BUDGET (default 585): the seconds it may take; each A/B loop runs where 150 s are left.
. "$(dirname "$0")/../../harness/call_preamble.sh"
tar -xJf .carry/b_lib.tar.xz || exit 1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv >"$OUT/gpu.txt"
new=streamsplitk2s3srb,streamsplitk2s3b,streamsplitk2s3srw,streamsplitk2s3srwb,streamsplitk2s3sr1,streamsplitk2s3srb1,streamsplitk2s3srwb1
logged check 150 python3 benchmarks/harness/gpu_kernels.py check --lib build/B/lib.so --variants auto,$new
tail -3 "$OUT/check.log"
logged error 90 python3 benchmarks/harness/variant_error.py --lib build/B/lib.so --variants auto,streamsplitk2s3sr,$new
tail -1 "$OUT/error.log"
T=(python3 benchmarks/harness/ab_time.py --a build/B/lib.so --b build/B/lib.so)
heads=248320x5120,151936x5120,128256x4096,262144x5376,151936x6144
budget=${CALL_BUDGET:-585} # seconds this script may take (less where a call runs something before it)
for r in 1 2; do
    if [ $((SECONDS - call_started + 150)) -le "$budget" ]; then
        logged "ab_$r" 150 "${T[@]}" --heads $heads --m 9,16 --b-variants $new
    fi
done
for f in "$OUT"/ab_*.log; do echo "== $f"; grep -vE "^# |^$" "$f" | sed -E 's/ {2,}/ /g'; done
left=$((budget - (SECONDS - call_started)))
if [ $left -gt 60 ]; then
    OUT=$OUT/ncu LIB=build/B/lib.so timeout $left bash benchmarks/harness/ncu_profile.sh \
        "16:auto:248320x5120,16:streamsplitk2s3srb:248320x5120,16:auto:262144x5376,16:streamsplitk2s3srw:262144x5376"
fi
