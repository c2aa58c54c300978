#!/bin/sh
# Compile every hip/*.hip for the AMD targets we ship (device code to assembly per target, host
# code checked once), with Debian's clang-19 and HIP 5.2 headers (see shared/amd-compile.md).
# Exits non-zero on any failure.
# CI: apt-get install -y clang-19 lld-19 libamdhip64-dev, then run this script.
set -u
here=$(cd "$(dirname "$0")" && pwd)
clang=${CLANGXX:-/usr/lib/llvm-19/bin/clang++}
targets=${RADIANCE_AMD_TARGETS:-"gfx1201 gfx942 gfx90a gfx1100"}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
if [ ! -x "$clang" ]; then
    echo "build_check: $clang not found (apt-get install clang-19 lld-19 libamdhip64-dev)" >&2
    exit 2
fi
status=0
for src in "$here"/*.hip; do
    name=$(basename "$src" .hip)
    # the host side (launchers) once per file, against the same HIP headers
    if "$clang" -x hip --offload-arch=gfx942 --cuda-host-only -nogpulib -O3 -std=c++17 -Wall \
        -Werror=return-type -fsyntax-only "$src" 2>"$out/log"; then
        echo "ok    $name host"
    else
        echo "FAIL  $name host" >&2
        cat "$out/log" >&2
        status=1
    fi
    for arch in $targets; do
        if "$clang" -x hip --offload-arch="$arch" --cuda-device-only -nogpulib -O3 -std=c++17 \
            -Wall -Werror=return-type -S "$src" -o "$out/$name-$arch.s" 2>"$out/log"; then
            echo "ok    $name $arch"
        else
            echo "FAIL  $name $arch" >&2
            cat "$out/log" >&2
            status=1
        fi
    done
done
exit $status
