"""The source layout rules of the kernels and the C core, checked on the files (no compiler, no GPU).

- Only hip/compat.h knows whether hipcc or nvcc compiles the code; inline assembly lives in
  hip/compat.h and the hip/ptx_*.h headers; runtime API calls (cuda*/hip*) in compat.h and
  hip/runtime.* (the benchmark harness's kernel sources included).
- hip/ and csrc/ share only the contract headers of csrc/include/radiance/: neither includes a file
  of the other.
"""

import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENDOR_FILES = {"compat.h", "runtime.h", "runtime.hip"}  # plus ptx_*.h


def sources(folder, exts):
    path = os.path.join(ROOT, folder)
    return sorted(os.path.join(path, f) for f in os.listdir(path) if f.endswith(exts))


def kernel_sources():
    return sources("hip", (".hip", ".h")) + sources(os.path.join("benchmarks", "harness"), (".hip", ".def"))


def code_of(path):
    """The file without its comments (string literals kept: includes and asm templates are code)."""
    with open(path) as fh:
        text = fh.read()
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def vendor_file(path):
    name = os.path.basename(path)
    return os.path.dirname(path) == os.path.join(ROOT, "hip") and (name in VENDOR_FILES or name.startswith("ptx_"))


def offending_lines(paths, pattern):
    found = []
    for path in paths:
        for number, line in enumerate(code_of(path).splitlines(), 1):
            if re.search(pattern, line):
                found.append(f"{os.path.relpath(path, ROOT)}:{number}: {line.strip()}")
    return found


def test_sources_found():
    names = {os.path.basename(p) for p in kernel_sources()}
    assert {"compat.h", "apply.hip", "quantize.hip", "ptx_sm80.h", "variants.def"} <= names


def test_inline_assembly_only_in_compat_and_ptx_headers():
    allowed = {"compat.h"}
    paths = [p for p in kernel_sources()
             if os.path.basename(p) not in allowed and not os.path.basename(p).startswith("ptx_")]
    assert offending_lines(paths, r"\basm\b|__asm__") == []


def test_vendor_knowledge_only_behind_the_boundary():
    paths = [p for p in kernel_sources() if not vendor_file(p)]
    # runtime API names (cudaLaunchKernelEx, hipGetDevice, ...), driver types, and the tests of
    # which compiler or target this is
    pattern = r"\b(cuda|hip)[A-Z]\w*|\bCU[a-z]\w*|\bRAD_(HIP|CUDA)\b|__CUDA_ARCH|__HIP|__gfx|__GFX"
    assert offending_lines(paths, pattern) == []


@pytest.mark.parametrize("folder,other", [("hip", "csrc"), ("csrc", "hip")])
def test_hip_and_csrc_share_only_the_contract_folder(folder, other):
    paths = sources(folder, (".hip", ".h", ".c"))
    own = {os.path.basename(p) for p in paths}
    bad = []
    for path in paths:
        for name in re.findall(r'^\s*#\s*include\s+"([^"]+)"', code_of(path), flags=re.M):
            if not (name in own or name.startswith("radiance/")):
                bad.append(f"{os.path.relpath(path, ROOT)} includes {name}")
    assert bad == []
    contract = os.path.join(ROOT, "csrc", "include", "radiance")
    assert sorted(os.listdir(contract)) == ["format.h", "radiance_gpu.h"]
    assert not any(other in line for line in offending_lines(paths, r"#\s*include"))
