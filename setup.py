"""Build radiance._C: the C core, plus the GPU kernels of hip/ where build_backend/radiance_build.py
plans them (its docstring says how the backend, the architectures and the CUDA toolkit are chosen:
RADIANCE_GPU, RADIANCE_GPU_ARCHS, CUDA_HOME, or NVIDIA's PyPI toolkit).

The CUDA runtime is linked statically (libcudart_static), so a CUDA build imports and runs its CPU
path on a machine without a GPU driver. The extension uses the stable ABI of CPython 3.10 (one
abi3 wheel serves every CPython from 3.10 on), and a wheel is tagged manylinux_2_N from the glibc
symbol versions the built extension needs. MAX_JOBS caps the parallel GPU compiles (default: the
CPU count). RADIANCE_WERROR=1 (CI) turns compiler warnings, nvcc's and ptxas' included, into errors.
"""

import glob
import os
import re
import subprocess
import sys
import sysconfig
from concurrent.futures import ThreadPoolExecutor

import numpy
from setuptools import Extension, setup
try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # setuptools < 70.1 (a fresh Python 3.11 venv has 65.5): the `wheel` package's
    from wheel.bdist_wheel import bdist_wheel
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "build_backend"))
import radiance_build  # noqa: E402  (beside this file, not installed)

# Every hip/ source is the library (the benchmark-only kernel variants live in benchmarks/harness/).
HIP_SOURCES = sorted(os.path.relpath(p, HERE) for p in glob.glob(os.path.join(HERE, "hip", "**", "*.hip"),
                                                                  recursive=True))
# -I for the GPU compile: the kernels' own folder and the contract headers they share with the C core.
GPU_INCLUDE_DIRS = [os.path.join(HERE, "hip"), os.path.join(HERE, "csrc", "include")]
WERROR = os.environ.get("RADIANCE_WERROR", "") not in ("", "0")
# The stable ABI (abi3) from CPython 3.10; free-threaded CPython has none, so there it is a plain build.
LIMITED_API = not sysconfig.get_config_var("Py_GIL_DISABLED")
LIMITED_API_TAG, LIMITED_API_HEX = "cp310", "0x030A0000"


def log(message):
    print(f"radiance: {message}", file=sys.stderr, flush=True)


def compile_flags(backend, archs, toolkit_include_dirs=()):
    """The GPU compiler's flags (benchmarks/harness/sass_fingerprint.py compiles with them too)."""
    common = ["-O3", "-std=c++17"] + [f"-I{d}" for d in GPU_INCLUDE_DIRS]
    if backend == "rocm":
        return common + ["-fPIC"] + [f"--offload-arch={a}" for a in archs] + (["-Werror"] if WERROR else [])
    # Hopper's wgmma kernel needs the arch-specific target; sm_90a code runs on every sm_90 GPU
    archs = ["90a" if a == "90" else a for a in archs]
    flags = common + [f for d in toolkit_include_dirs for f in ("-isystem", d)]
    flags += ["-x", "cu", "-Xcompiler", "-fPIC"]
    # Spills are a performance note for the kernels' authors, not an error: asked for only where
    # warnings stay warnings (nvcc's all-warnings reaches ptxas too). So is #177 (declared but never
    # referenced): the wgmma kernels' helpers have no caller in the passes for other targets.
    flags += (["-Werror", "all-warnings", "--diag-suppress", "177"] if WERROR
              else ["-Xptxas", "-warn-spills"])
    for arch in archs:
        flags += ["-gencode", f"arch=compute_{arch},code=sm_{arch}"]
    # PTX of the newest plain target, which the driver compiles for GPUs newer than every listed one
    # (an arch-specific 'a'/'f' target's PTX runs on that GPU only)
    ptx = max(archs, key=lambda a: int(a.rstrip("af"))).rstrip("af")
    flags += ["-gencode", f"arch=compute_{ptx},code=compute_{ptx}"]
    return flags


class BuildExt(build_ext):
    def build_extensions(self):
        plan = radiance_build.plan()
        if plan.backend == "cuda" and plan.toolkit is None:
            fix = ("let pip install it (a build with isolation, the default), or pip install "
                   + " ".join(f"'{r}'" for r in radiance_build.PYPI_CUDA_TOOLKIT) + ", or set CUDA_HOME")
            if os.environ.get("RADIANCE_GPU", "auto").strip().lower() == "cuda":
                raise SystemExit(f"radiance: RADIANCE_GPU=cuda but no nvcc was found: {fix}")
            plan = radiance_build.Plan("none", [], f"the CPU path only: {plan.reason} but no nvcc: {fix}")
        ext = self.extensions[0]
        if plan.backend == "none":
            log(f"building {plan.reason}")
        else:
            log(f"building GPU backend {plan.backend} for {', '.join(plan.archs)}: {plan.reason}")
            ext.extra_objects += self.compile_gpu(plan)
            ext.define_macros.append(("RADIANCE_WITH_GPU", "1"))
            if plan.backend == "cuda":
                if not plan.toolkit.libdir:
                    raise SystemExit(f"radiance: libcudart_static.a not found for {plan.toolkit.nvcc}; "
                                     f"set CUDA_HOME to its toolkit")
                ext.library_dirs.append(plan.toolkit.libdir)
                # libstdc++ (the host code's guard variables and unwinding) linked in and kept
                # private, so that the extension needs only glibc: a manylinux wheel, beside any
                # other libstdc++ in the process
                ext.extra_link_args += [f"-L{plan.toolkit.libdir}", "-lcudart_static", "-lrt", "-ldl",
                                        "-lpthread", "-Wl,-Bstatic", "-lstdc++", "-Wl,-Bdynamic",
                                        "-Wl,--exclude-libs,ALL"]
                # the static libstdc++'s one glibc 2.36 reference, answered inside (its header says why)
                ext.sources.append("csrc/glibc_compat.c")
            else:
                libdir = os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(plan.compiler))), "lib")
                ext.library_dirs.append(libdir)
                ext.runtime_library_dirs.append(libdir)
                ext.extra_link_args += [f"-L{libdir}", "-lamdhip64", "-lstdc++"]
        super().build_extensions()
        if self.inplace:
            self.remove_shadowing_builds(ext)

    def remove_shadowing_builds(self, ext):
        """An in-place build from before the abi3 switch (_C.cpython-3XX-....so) would be imported
        ahead of _C.abi3.so, so it goes."""
        built = self.get_ext_fullpath(ext.name)
        for other in glob.glob(os.path.join(os.path.dirname(built), "_C.*.so")):
            if os.path.abspath(other) != os.path.abspath(built):
                log(f"removed {os.path.relpath(other, HERE)}: Python would import it ahead of this build")
                os.remove(other)

    def compile_gpu(self, plan):
        """Compiles the hip/ sources, MAX_JOBS (default: the CPU count) at a time; returns the objects."""
        out_dir = os.path.join(self.build_temp, "hip")
        flags = compile_flags(plan.backend, plan.archs, plan.toolkit.include_dirs if plan.toolkit else ())
        jobs = int(os.environ.get("MAX_JOBS") or os.cpu_count() or 1)

        def compile_one(source):
            obj = os.path.join(out_dir, source.removeprefix("hip" + os.sep).replace(os.sep, "_") + ".o")
            os.makedirs(out_dir, exist_ok=True)
            cmd = [plan.compiler, *flags, "-c", os.path.join(HERE, source), "-o", obj]
            log(" ".join(cmd))
            return obj, subprocess.run(cmd).returncode

        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            results = list(pool.map(compile_one, HIP_SOURCES))
        failed = [obj for obj, status in results if status != 0]
        if failed:
            raise SystemExit(f"radiance: GPU compilation failed for {', '.join(failed)}")
        return [obj for obj, _ in results]


class BdistWheel(bdist_wheel):
    def get_tag(self):
        impl, abi, plat = super().get_tag()
        if plat.startswith("linux_") and not self.plat_name_supplied:
            plat = manylinux_tag(self.get_finalized_command("build_ext").get_outputs(), plat) or plat
        return impl, abi, plat


# What manylinux lets an extension link to: glibc's own libraries. libstdc++ is on the list too,
# but its symbol versions (GLIBCXX_*) would bound the tag as well; it is left out, so a build
# that needs it keeps the plain linux tag and says so.
MANYLINUX_LIBRARIES = {"libc.so.6", "libm.so.6", "libpthread.so.0", "libdl.so.2", "librt.so.1",
                       "libgcc_s.so.1", "ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1"}


def manylinux_tag(extensions, plat):
    """manylinux_2_N_<arch> with N the newest GLIBC_2.N symbol version the extensions need, or None
    (and one log line) when one links to a library outside glibc. CI checks the result with
    `auditwheel show`."""
    newest = 17  # manylinux2014's glibc: the oldest tag pip still knows
    for path in extensions:
        try:
            dump = subprocess.run(["objdump", "-p", path], capture_output=True, text=True, check=True).stdout
        except (OSError, subprocess.CalledProcessError):
            log(f"kept the {plat} tag: objdump (binutils) could not read {path}")
            return None
        outside = sorted(set(re.findall(r"NEEDED\s+(\S+)", dump)) - MANYLINUX_LIBRARIES)
        if outside:
            log(f"kept the {plat} tag: {os.path.basename(path)} links to {', '.join(outside)}")
            return None
        for minor in re.findall(r"\bGLIBC_2\.(\d+)", dump):
            newest = max(newest, int(minor))
    return f"manylinux_2_{newest}_{plat.removeprefix('linux_')}"


c_flags = ["-O3", "-std=c11", "-ffp-contract=off", "-fno-math-errno", "-Wall", "-Wextra",
           "-Wno-unused-parameter", "-Wno-missing-field-initializers", "-Wno-psabi"] + (["-Werror"] if WERROR else [])
if os.environ.get("RADIANCE_SANITIZE"):  # the ASan/UBSan debug build that CI runs
    c_flags = [f for f in c_flags if f != "-O3"] + ["-O1", "-g", "-fno-omit-frame-pointer",
                                                    "-fsanitize=address,undefined",
                                                    "-fno-sanitize-recover=undefined"]

extension = Extension(
    "radiance._C",
    py_limited_api=LIMITED_API,
    sources=["csrc/module.c", "csrc/tensor_view.c", "csrc/cpu_kernels.c"],
    # csrc/include: the contract headers (radiance/format.h, radiance/radiance_gpu.h) that hip/ includes too
    include_dirs=[numpy.get_include(), os.path.join(HERE, "csrc"), os.path.join(HERE, "csrc", "include")],
    define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_25_API_VERSION"),
                   ("NPY_TARGET_VERSION", "NPY_1_25_API_VERSION")]
    + ([("Py_LIMITED_API", LIMITED_API_HEX)] if LIMITED_API else []),
    extra_compile_args=c_flags,
    extra_link_args=["-pthread"] + (["-fsanitize=address,undefined"]
                                    if os.environ.get("RADIANCE_SANITIZE") else []),
    depends=["csrc/cpu_kernels.h", "csrc/tensor_view.h", "csrc/dlpack.h", "csrc/include/radiance/format.h",
             "csrc/include/radiance/radiance_gpu.h"],
)

setup(ext_modules=[extension], cmdclass={"build_ext": BuildExt, "bdist_wheel": BdistWheel},
      options={"bdist_wheel": {"py_limited_api": LIMITED_API_TAG}} if LIMITED_API else {})
