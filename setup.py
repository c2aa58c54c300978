"""Build radiance._C: the C core, plus the GPU kernels of hip/ where a toolchain is found.

Backend choice (RADIANCE_GPU = auto | rocm | cuda | none, default auto):
  rocm  when hipcc is found (ROCM_PATH/bin or PATH), archs from RADIANCE_GPU_ARCHS
        (default gfx1201;gfx1100;gfx942;gfx90a);
  cuda  when nvcc is found (CUDA_HOME/bin or PATH), archs from RADIANCE_GPU_ARCHS
        (default 80;90; each as sm_XX machine code, 90 as sm_90a for the wgmma kernel, plus PTX
        of the last);
  none  otherwise: the CPU path only.
The GPU runtime is linked statically on CUDA (libcudart_static), so a CUDA build imports and runs
its CPU path on a machine without a GPU driver.
"""

import glob
import os
import shutil
import subprocess
import sys

import numpy
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
# hip/*.hip of the library (the kernel variants of benchmarks/harness/ are not in it)
HIP_SOURCES = ["hip/runtime.hip", "hip/quantize.hip", "hip/apply.hip", "hip/apply_vector.hip", "hip/apply_mma.hip",
               "hip/apply_stream.hip", "hip/apply_wgmma_pipe.hip", "hip/apply_wgmma_ws.hip",
               "hip/apply_wgmma_fold.hip", "hip/apply_wmma.hip", "hip/apply_mfma.hip", "hip/apply_check.hip"]


def log(message):
    print(f"radiance: {message}", file=sys.stderr, flush=True)


def find_tool(name, home_vars):
    for var in home_vars:
        home = os.environ.get(var)
        if home and os.path.isfile(os.path.join(home, "bin", name)):
            return os.path.join(home, "bin", name)
    return shutil.which(name)


def choose_backend():
    requested = os.environ.get("RADIANCE_GPU", "auto").strip().lower()
    if requested not in ("auto", "rocm", "cuda", "none"):
        raise SystemExit(f"RADIANCE_GPU must be auto, rocm, cuda or none, got {requested!r}")
    if requested == "none":
        return "none", None
    hipcc = find_tool("hipcc", ["ROCM_PATH", "HIP_PATH"]) or (
        "/opt/rocm/bin/hipcc" if os.path.isfile("/opt/rocm/bin/hipcc") else None
    )
    nvcc = find_tool("nvcc", ["CUDA_HOME", "CUDA_PATH"])
    if requested == "rocm" and not hipcc:
        raise SystemExit("RADIANCE_GPU=rocm but hipcc was not found (set ROCM_PATH)")
    if requested == "cuda" and not nvcc:
        raise SystemExit("RADIANCE_GPU=cuda but nvcc was not found (set CUDA_HOME)")
    if requested in ("auto", "rocm") and hipcc:
        return "rocm", hipcc
    if requested in ("auto", "cuda") and nvcc:
        return "cuda", nvcc
    return "none", None


def gpu_archs(backend):
    default = "gfx1201;gfx1100;gfx942;gfx90a" if backend == "rocm" else "80;90"
    raw = os.environ.get("RADIANCE_GPU_ARCHS", default)
    archs = [a.strip().removeprefix("sm_") for a in raw.replace(",", ";").split(";") if a.strip()]
    if not archs:
        raise SystemExit("RADIANCE_GPU_ARCHS is empty")
    return archs


def compile_flags(backend, archs):
    common = ["-O3", "-std=c++17", "-I", os.path.join(HERE, "hip"), "-I", os.path.join(HERE, "csrc", "include")]
    if backend == "rocm":
        return common + ["-fPIC"] + [f"--offload-arch={a}" for a in archs]
    flags = common + ["-x", "cu", "-Xcompiler", "-fPIC", "-Xptxas", "-warn-spills"]
    for arch in archs:
        # Hopper's wgmma kernel needs the arch-specific target: sm_90a code runs on every sm_90 GPU
        sass = "90a" if arch == "90" else arch
        flags += ["-gencode", f"arch=compute_{sass},code=sm_{sass}"]
    ptx = archs[-1].removesuffix("a")  # portable PTX for newer GPUs (no wgmma: the tiled kernel)
    flags += ["-gencode", f"arch=compute_{ptx},code=compute_{ptx}"]
    return flags


class BuildExt(build_ext):
    def build_extensions(self):
        backend, compiler = choose_backend()
        ext = self.extensions[0]
        if backend == "none":
            log("building the CPU path only (no hipcc or nvcc found, or RADIANCE_GPU=none)")
        else:
            archs = gpu_archs(backend)
            log(f"building GPU backend {backend} with {compiler} for {', '.join(archs)}")
            objects = self.compile_gpu(backend, compiler, archs)
            ext.extra_objects += objects
            ext.define_macros.append(("RADIANCE_WITH_GPU", "1"))
            bindir = os.path.dirname(os.path.realpath(compiler))
            if backend == "cuda":
                libdir = self.cuda_libdir(bindir)
                ext.library_dirs.append(libdir)
                ext.extra_link_args += [f"-L{libdir}", "-lcudart_static", "-lrt", "-ldl",
                                        "-lpthread", "-lstdc++"]
            else:
                libdir = os.path.join(os.path.dirname(bindir), "lib")
                ext.library_dirs.append(libdir)
                ext.runtime_library_dirs.append(libdir)
                ext.extra_link_args += [f"-L{libdir}", "-lamdhip64", "-lstdc++"]
        super().build_extensions()

    @staticmethod
    def cuda_libdir(bindir):
        homes = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), os.path.dirname(bindir),
                 "/usr/local/cuda", *sorted(glob.glob("/usr/local/cuda-*"), reverse=True)]
        for home in filter(None, homes):
            for sub in ("lib64", "lib", os.path.join("targets", "x86_64-linux", "lib"),
                        os.path.join("targets", "sbsa-linux", "lib")):
                if os.path.isfile(os.path.join(home, sub, "libcudart_static.a")):
                    return os.path.join(home, sub)
        raise SystemExit("libcudart_static.a not found; set CUDA_HOME to the CUDA toolkit")

    def compile_gpu(self, backend, compiler, archs):
        """Compiles the hip/ sources side by side; returns their object files."""
        out_dir = os.path.join(self.build_temp, "hip")
        os.makedirs(out_dir, exist_ok=True)
        flags = compile_flags(backend, archs)
        jobs = []
        for source in HIP_SOURCES:
            obj = os.path.join(out_dir, os.path.basename(source) + ".o")
            cmd = [compiler, *flags, "-c", os.path.join(HERE, source), "-o", obj]
            log(" ".join(cmd))
            jobs.append((obj, subprocess.Popen(cmd)))
        failed = [obj for obj, job in jobs if job.wait() != 0]
        if failed:
            raise SystemExit(f"radiance: GPU compilation failed for {', '.join(failed)}")
        return [obj for obj, _ in jobs]


c_flags = ["-O3", "-std=c11", "-ffp-contract=off", "-fno-math-errno", "-Wall", "-Wextra",
           "-Wno-unused-parameter", "-Wno-missing-field-initializers", "-Wno-psabi"]
if os.environ.get("RADIANCE_SANITIZE"):  # the ASan/UBSan debug build that CI runs
    c_flags = [f for f in c_flags if f != "-O3"] + ["-O1", "-g", "-fno-omit-frame-pointer",
                                                    "-fsanitize=address,undefined",
                                                    "-fno-sanitize-recover=undefined"]

extension = Extension(
    "radiance._C",
    sources=["csrc/module.c", "csrc/tensor_view.c", "csrc/cpu_kernels.c"],
    # csrc/include: the contract headers (radiance/format.h, radiance/radiance_gpu.h) that hip/ includes too
    include_dirs=[numpy.get_include(), os.path.join(HERE, "csrc"), os.path.join(HERE, "csrc", "include")],
    define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_25_API_VERSION"),
                   ("NPY_TARGET_VERSION", "NPY_1_25_API_VERSION")],
    extra_compile_args=c_flags,
    extra_link_args=["-pthread"] + (["-fsanitize=address,undefined"]
                                    if os.environ.get("RADIANCE_SANITIZE") else []),
    depends=["csrc/cpu_kernels.h", "csrc/tensor_view.h", "csrc/dlpack.h", "csrc/include/radiance/format.h",
             "csrc/include/radiance/radiance_gpu.h"],
)

setup(ext_modules=[extension], cmdclass={"build_ext": BuildExt})
