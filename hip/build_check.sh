#!/bin/sh
# Compile every hip/*.hip (and through them every header) for the AMD targets we ship (device code
# to assembly per target, host code checked once), with Debian's clang-19 and HIP 5.2 headers:
# once as the library (setup.py) builds it and once as the benchmark build (RADIANCE_KERNEL_VARIANTS,
# benchmarks/harness/gpu_kernels.py), which adds benchmarks/harness/apply_variants.hip and
# apply_wgmma_ws.hip; the two builds run side by side. Exits
# non-zero on any failure, and where a kernel of the library build has scratch or spilled registers,
# or the gfx942 / gfx90a code of the MFMA path (apply_mfma.hip) has no v_mfma_ instruction
# (benchmarks/amd_kernels.py --check, which also prints each kernel's VGPRs, AGPRs, LDS, scratch and
# waves per SIMD).
# CI: apt-get install -y clang-19 lld-19 libamdhip64-dev, then run this script.
set -u
here=$(cd "$(dirname "$0")" && pwd)
harness=$here/../benchmarks/harness
clang=${CLANGXX:-/usr/lib/llvm-19/bin/clang++}
targets=${RADIANCE_AMD_TARGETS:-"gfx1201 gfx942 gfx90a gfx1100"}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
mkdir -p "$out/library" "$out/variants"
if [ ! -x "$clang" ]; then
    echo "build_check: $clang not found (apt-get install clang-19 lld-19 libamdhip64-dev)" >&2
    exit 2
fi
# hip/ and the contract headers only (csrc/include/radiance/), as setup.py compiles them
flags="-O3 -std=c++17 -Wall -Werror=return-type -I $here -I $here/../csrc/include"
# one build's compiles, its lines on stdout, its failures' logs on stderr; exit 1 on any failure
check_build() {
    build=$1
    defs=""
    sources=$(ls "$here"/*.hip)
    if [ "$build" = variants ]; then
        # the benchmark build adds the variant table and the benchmark-only warp-specialized kernel
        defs="-DRADIANCE_KERNEL_VARIANTS=1 -I $harness"
        sources="$sources $harness/apply_variants.hip $harness/apply_wgmma_ws.hip"
    fi
    failed=0
    for src in $sources; do
        name=$(basename "$src" .hip)
        # the host side (planner, launchers) once per file, against the same HIP headers
        if "$clang" -x hip --offload-arch=gfx942 --cuda-host-only -nogpulib $flags $defs -fsyntax-only "$src" \
            2>"$out/$build.err"; then
            echo "ok    $name $build host"
        else
            echo "FAIL  $name $build host"
            cat "$out/$build.err" >&2
            failed=1
        fi
        for arch in $targets; do
            if "$clang" -x hip --offload-arch="$arch" --cuda-device-only -nogpulib $flags $defs -S "$src" \
                -o "$out/$build/$name-$arch.s" 2>"$out/$build.err"; then
                echo "ok    $name $build $arch"
            else
                echo "FAIL  $name $build $arch"
                cat "$out/$build.err" >&2
                failed=1
            fi
        done
    done
    return $failed
}
# the two builds side by side (two cores), each one file at a time; their lines follow in order
status=0
check_build library >"$out/library.log" 2>&1 &
library_pid=$!
check_build variants >"$out/variants.log" 2>&1 &
variants_pid=$!
wait "$library_pid" || status=1
wait "$variants_pid" || status=1
cat "$out/library.log" "$out/variants.log"
# the shipped kernels (library build) only: the variants are benchmark experiments
case " $targets " in
*" gfx942 "*|*" gfx90a "*) ;;
*) echo "build_check: no gfx942 or gfx90a in RADIANCE_AMD_TARGETS, the v_mfma_ check is not made" >&2 ;;
esac
if python3 "$here/../benchmarks/amd_kernels.py" --check --asm "$out"/library/*.s; then
    echo "ok    no scratch, no spills; v_mfma_ in the MFMA path's CDNA code"
else
    status=1
fi
exit $status
