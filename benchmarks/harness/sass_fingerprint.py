#!/usr/bin/env python3
"""Per-kernel SASS fingerprints of the library build, to show that a change to hip/ leaves the
shipped machine code alone (or which kernels it changes).

    python benchmarks/harness/sass_fingerprint.py record OUT.json [--archs 80,90] [--sources hip/a.hip,...]
    python benchmarks/harness/sass_fingerprint.py compare BEFORE.json AFTER.json

`record` compiles each of setup.py's HIP_SOURCES (or the --sources given, which update an existing
OUT.json file by file, dropping files that setup.py no longer lists) with the flags of setup.py's compile_flags, without the portable PTX (no
SASS in it), one file at a time, disassembles the objects with cuobjdump and writes, per arch and
kernel, the instruction count and a SHA-256 of the instruction text. Both lists are read from
setup.py itself, so the fingerprint follows the library build. Anonymous namespaces are named
after their file by nvcc; that part of a kernel's name is dropped, so a kernel that moves to
another file keeps its name.

cuobjdump: $CUOBJDUMP, else on PATH, else NVIDIA's PyPI wheel nvidia-cuda-cuobjdump in the venv
/work/wt/venvs/cudatools (`pip install nvidia-cuda-cuobjdump`). `compare` exits 1 when any kernel
differs, appears or disappears.
"""

import argparse
import ast
import glob
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def library_build():
    """HIP_SOURCES and compile_flags of setup.py, taken from its source (importing it would run
    setup())."""
    with open(os.path.join(ROOT, "setup.py")) as fh:
        tree = ast.parse(fh.read())
    keep = [node for node in tree.body
            if (isinstance(node, ast.Assign) and any(getattr(t, "id", "") in ("HIP_SOURCES", "HERE",
                                                                              "GPU_INCLUDE_DIRS", "WERROR")
                                                      for t in node.targets))
            or (isinstance(node, ast.FunctionDef) and node.name == "compile_flags")]
    namespace = {"os": os, "glob": glob, "__file__": os.path.join(ROOT, "setup.py")}
    exec(compile(ast.Module(body=keep, type_ignores=[]), "setup.py", "exec"), namespace)
    return namespace["HIP_SOURCES"], namespace["compile_flags"]


def sass_flags(compile_flags, archs):
    """compile_flags("cuda", archs) without the trailing PTX gencode (it holds no SASS)."""
    flags = compile_flags("cuda", archs)
    ptx = [i for i in range(len(flags) - 1) if flags[i] == "-gencode" and "code=compute_" in flags[i + 1]]
    for i in reversed(ptx):
        del flags[i:i + 2]
    return flags


def find_cuobjdump():
    for candidate in (os.environ.get("CUOBJDUMP"), shutil.which("cuobjdump"),
                      *glob.glob("/work/wt/venvs/cudatools/lib/python3*/site-packages/nvidia/cu*/bin/cuobjdump")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    sys.exit("cuobjdump not found: pip install nvidia-cuda-cuobjdump (or set CUOBJDUMP)")


def normalize_name(name):
    """nvcc names an anonymous namespace after its file: <length>_GLOBAL__N__<hash>_<length>_<file
    name>_<hash> in a mangled name. Both the identifier and its length prefix become _GLOBAL__N_."""
    while True:
        m = re.search(r"(\d+)(_GLOBAL__N__)", name)
        if not m:
            break
        name = name[:m.start(1)] + "_GLOBAL__N_" + name[m.start(2) + int(m.group(1)):]
    return name


def parse_sass(text):
    """{arch: {kernel: [instruction, ...]}} from cuobjdump --dump-sass output."""
    kernels, arch, name = {}, None, None
    for line in text.splitlines():
        m = re.search(r"arch = (sm_\d+a?)", line)
        if m:
            arch = m.group(1)
            continue
        m = re.search(r"Function : (\S+)", line)
        if m:
            name = normalize_name(m.group(1))
            kernels.setdefault(arch, {})[name] = []
            continue
        # an instruction: /*0040*/  OP ... ;  /* 0x... */ (the address and encoding are dropped)
        m = re.match(r"\s+/\*[0-9a-f]{4,}\*/\s+(.*?)\s*;", line)
        if m and name:
            kernels[arch][name].append(normalize_name(re.sub(r"\s+", " ", m.group(1))))
    return kernels


def record(out, archs, sources):
    all_sources, compile_flags = library_build()
    sources = sources or all_sources
    flags = sass_flags(compile_flags, archs)
    cuobjdump = find_cuobjdump()
    result = {}
    if os.path.exists(out) and sources != all_sources:
        with open(out) as fh:  # update file by file; files setup.py no longer builds are dropped
            result = {src: fp for src, fp in json.load(fh).items() if src in all_sources}
    with tempfile.TemporaryDirectory() as tmp:
        for source in sources:
            obj = os.path.join(tmp, os.path.basename(source) + ".o")
            cmd = ["nvcc", *flags, "-c", os.path.join(ROOT, source), "-o", obj]
            print(" ".join(cmd), file=sys.stderr, flush=True)
            subprocess.run(cmd, check=True)
            sass = subprocess.run([cuobjdump, "--dump-sass", obj], check=True, capture_output=True, text=True).stdout
            per_file = {}
            for arch, kernels in parse_sass(sass).items():
                per_file[arch] = {name: {"count": len(ins), "sha256": hashlib.sha256("\n".join(ins).encode()).hexdigest()}
                                  for name, ins in kernels.items()}
            result[source] = per_file
            with open(out, "w") as fh:  # after every file: a long run stopped early keeps what it did
                json.dump(result, fh, indent=1, sort_keys=True)
    print(f"wrote {out}: {sum(len(k) for f in result.values() for k in f.values())} kernels")


def flatten(recorded):
    """{(arch, kernel): (count, hash, source)} over every source file."""
    flat = {}
    for source, per_arch in recorded.items():
        for arch, kernels in per_arch.items():
            for name, fp in kernels.items():
                flat[(arch, name)] = (fp["count"], fp["sha256"], source)
    return flat


def compare(before_path, after_path):
    with open(before_path) as fh:
        before = flatten(json.load(fh))
    with open(after_path) as fh:
        after = flatten(json.load(fh))
    same = differ = 0
    for key in sorted(set(before) | set(after)):
        arch, name = key
        if key not in after:
            print(f"gone     {arch} {name} ({before[key][2]})")
            differ += 1
        elif key not in before:
            print(f"new      {arch} {name} ({after[key][2]})")
            differ += 1
        elif before[key][:2] != after[key][:2]:
            print(f"differs  {arch} {name}: {before[key][0]} -> {after[key][0]} instructions")
            differ += 1
        else:
            same += 1
    moved = sorted({(b[2], after[k][2]) for k, b in before.items() if k in after and b[2] != after[k][2]})
    for src, dst in moved:
        print(f"moved    kernels of {src} now in {dst}")
    print(f"{same} kernels identical, {differ} differ / new / gone")
    return 1 if differ else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="mode", required=True)
    rec = sub.add_parser("record")
    rec.add_argument("out")
    rec.add_argument("--archs", default="80,90", help="setup.py's RADIANCE_GPU_ARCHS form (90 means sm_90a)")
    rec.add_argument("--sources", default="", help="comma-separated; default: setup.py's HIP_SOURCES")
    cmp_ = sub.add_parser("compare")
    cmp_.add_argument("before")
    cmp_.add_argument("after")
    args = ap.parse_args()
    if args.mode == "record":
        record(args.out, [a.strip() for a in args.archs.split(",") if a.strip()],
               [s for s in args.sources.split(",") if s])
    else:
        sys.exit(compare(args.before, args.after))


if __name__ == "__main__":
    main()
