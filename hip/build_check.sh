#!/bin/sh
# Compile every hip/*.hip (and through them every header) for the AMD targets we ship (device code
# to assembly per target, host code checked once), with Debian's clang-19 and HIP 5.2 headers:
# once as the library (setup.py) builds it and once as the benchmark build (RADIANCE_KERNEL_VARIANTS,
# benchmarks/harness/gpu_kernels.py), which adds benchmarks/harness/apply_variants.hip. Exits
# non-zero on any failure.
# CI: apt-get install -y clang-19 lld-19 libamdhip64-dev, then run this script.
set -u
here=$(cd "$(dirname "$0")" && pwd)
harness=$here/../benchmarks/harness
clang=${CLANGXX:-/usr/lib/llvm-19/bin/clang++}
targets=${RADIANCE_AMD_TARGETS:-"gfx1201 gfx942 gfx90a gfx1100"}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
if [ ! -x "$clang" ]; then
    echo "build_check: $clang not found (apt-get install clang-19 lld-19 libamdhip64-dev)" >&2
    exit 2
fi
# hip/ and the contract headers only (csrc/include/radiance/), as setup.py compiles them
flags="-O3 -std=c++17 -Wall -Werror=return-type -I $here -I $here/../csrc/include"
status=0
for build in library variants; do
    defs=""
    sources=$(ls "$here"/*.hip)
    if [ "$build" = variants ]; then
        defs="-DRADIANCE_KERNEL_VARIANTS=1 -I $harness"
        sources="$sources $harness/apply_variants.hip"
    fi
    for src in $sources; do
        name=$(basename "$src" .hip)
        # the host side (planner, launchers) once per file, against the same HIP headers
        if "$clang" -x hip --offload-arch=gfx942 --cuda-host-only -nogpulib $flags $defs -fsyntax-only "$src" \
            2>"$out/log"; then
            echo "ok    $name $build host"
        else
            echo "FAIL  $name $build host" >&2
            cat "$out/log" >&2
            status=1
        fi
        for arch in $targets; do
            if "$clang" -x hip --offload-arch="$arch" --cuda-device-only -nogpulib $flags $defs -S "$src" \
                -o "$out/$name-$arch.s" 2>"$out/log"; then
                echo "ok    $name $build $arch"
            else
                echo "FAIL  $name $build $arch" >&2
                cat "$out/log" >&2
                status=1
            fi
        done
    done
done
exit $status
