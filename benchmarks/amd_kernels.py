"""Per AMD kernel and target: VGPRs, AGPRs, LDS, scratch and waves per SIMD, from the compiler's own output.

    python3 benchmarks/amd_kernels.py                 # compile hip/*.hip for every shipped target
    python3 benchmarks/amd_kernels.py --check         # the same, exit 1 on scratch or a missing v_mfma_
    python3 benchmarks/amd_kernels.py --asm a.s ...   # read assembly that was already compiled
    python3 benchmarks/amd_kernels.py --loops         # also the main loop's instructions per kernel
    python3 benchmarks/amd_kernels.py apply_mfma apply_vector   # only these sources of hip/

Compiles each library source of hip/ to assembly with Debian's clang-19 (as hip/build_check.sh does:
device code only, no device libraries) and reads, per kernel, the code-object metadata that clang
writes at the end of the file (.vgpr_count, .agpr_count, .group_segment_fixed_size = LDS,
.private_segment_fixed_size = scratch bytes per lane, .vgpr_spill_count) and the "; Occupancy: N"
line of its kernel-info comment (waves per SIMD as the compiler computes it from registers and LDS).
Nothing here has run on an AMD GPU: these are the compiler's numbers.

--loops adds, per kernel, the instructions of its main loop (the innermost loop that holds a 16-byte
global load, the weights' stream): vector (v_*, MFMAs apart), MFMA and global loads per iteration,
the counts behind docs/amd.md's instructions per weight.

--check fails (exit 1) where any kernel has scratch or spilled VGPRs (into scratch, or on gfx90a/gfx942
into AGPRs: .vgpr_spill_count; SGPRs spilled into VGPR lanes are no failure), or where the gfx942 or
gfx90a code of the MFMA path (apply_mfma.hip) holds no v_mfma_ instruction.
"""

import argparse
import glob
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CLANG = os.environ.get("CLANGXX", "/usr/lib/llvm-19/bin/clang++")
TARGETS = os.environ.get("RADIANCE_AMD_TARGETS", "gfx1201 gfx942 gfx90a gfx1100").split()
MFMA_TARGETS = ("gfx942", "gfx90a")
MFMA_SOURCE = "apply_mfma"


def library_sources():
    """hip/*.hip of the library build: setup.py compiles every .hip under hip/ (the benchmark-only
    variants live in benchmarks/harness/)."""
    return sorted(glob.glob(os.path.join(ROOT, "hip", "**", "*.hip"), recursive=True))


def compile_asm(src, target, out_dir):
    out = os.path.join(out_dir, f"{os.path.basename(src)[:-4]}-{target}.s")
    cmd = [CLANG, "-x", "hip", f"--offload-arch={target}", "--cuda-device-only", "-nogpulib", "-O3",
           "-std=c++17", "-I", os.path.join(ROOT, "hip"), "-I", os.path.join(ROOT, "csrc")]
    for inc in ("csrc/include",):  # the shared contract headers, where the tree has them
        if os.path.isdir(os.path.join(ROOT, inc)):
            cmd += ["-I", os.path.join(ROOT, inc)]
    cmd += ["-S", src, "-o", out]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        sys.exit(f"amd_kernels: {' '.join(cmd)} failed:\n{res.stderr}")
    return out


def demangle(names):
    try:
        res = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True, check=True)
        return res.stdout.splitlines()
    except (OSError, subprocess.CalledProcessError):
        return names


def main_loop(body):
    """(vector, mfma, 16-byte global loads) instructions of the largest loop that holds a 16-byte global
    load, or None: a loop is a label marked "Loop Header" up to the branch back to it."""
    best = None
    for i, line in enumerate(body):
        head = re.match(r"^(\.LBB\w+):.*Loop Header", line)
        if not head:
            continue
        for j in range(i + 1, len(body)):
            if re.search(r"s_c?branch\w*\s+" + re.escape(head.group(1)) + r"\s*$", body[j]):
                ops = [b.split()[0] for b in body[i + 1:j + 1] if b.startswith("\t") and b.split()[0][0] not in ";."]
                loads = sum(op == "global_load_dwordx4" for op in ops)
                if loads and (best is None or len(ops) > best[0]):
                    mfma = sum(op.startswith("v_mfma") for op in ops)
                    best = (len(ops), sum(op.startswith("v_") for op in ops) - mfma, mfma, loads)
                break
    return None if best is None else best[1:]


def parse(path):
    """[{name, vgpr, agpr, lds, scratch, spills, occupancy, mfma, loop}] for every kernel of one .s file."""
    text = open(path).read()
    # per function: its body (for v_mfma_ and the main loop) and its kernel-info comment (after the
    # body: architectural VGPRs and AGPRs apart, where the metadata's .vgpr_count is their sum on
    # gfx90a/gfx942)
    info, mfma, loops = {}, {}, {}
    current, body = None, []
    for line in text.splitlines():
        start = re.match(r"^([A-Za-z_.$][\w.$]*):\s*(;.*)?$", line)
        if start and not start.group(1).startswith("."):
            current, body = start.group(1), []
            continue
        size = re.match(r"^\s*\.size\s+([\w.$]+),", line)
        if size and current == size.group(1):
            mfma[current] = any(re.match(r"\s*v_mfma_", b) for b in body)
            loops[current] = main_loop(body)
            continue
        item = re.match(r"^; (NumVgprs|NumAgprs|Occupancy): (\d+)", line)
        if item and current is not None:
            info.setdefault(current, {})[item.group(1)] = int(item.group(2))
            continue
        if current is not None:
            body.append(line)
    meta = text[text.find("amdhsa.kernels:"):]
    kernels = []
    for block in re.split(r"\n  - ", meta)[1:]:
        fields = dict(re.findall(r"^\s{4}\.(\w+):\s+(\S+)", block, re.M))
        if "name" not in fields:
            continue
        name = fields["name"]
        comment = info.get(name, {})
        kernels.append({
            "name": name,
            "vgpr": comment.get("NumVgprs", int(fields.get("vgpr_count", 0))),
            "agpr": comment.get("NumAgprs", int(fields.get("agpr_count", 0))),
            "lds": int(fields.get("group_segment_fixed_size", 0)),
            "scratch": int(fields.get("private_segment_fixed_size", 0)),
            # VGPRs spilled (to scratch, or on gfx90a/gfx942 to AGPRs); SGPR spills go to VGPR lanes
            "spills": int(fields.get("vgpr_spill_count", 0)),
            "occupancy": comment.get("Occupancy"),
            "mfma": mfma.get(name, False),
            "loop": loops.get(name),
            "wave": int(fields.get("wavefront_size", 0)),
        })
    return kernels


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 on scratch, spills or a missing v_mfma_")
    ap.add_argument("--asm", nargs="*", help="assembly files named SOURCE-TARGET.s instead of compiling")
    ap.add_argument("--loops", action="store_true", help="the main loop's vector / MFMA / load instructions")
    ap.add_argument("sources", nargs="*", help="names of library sources of hip/ (default: all of setup.py's)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if args.asm:
            files = args.asm
        else:
            if not os.access(CLANG, os.X_OK):
                sys.exit(f"amd_kernels: {CLANG} not found (apt-get install clang-19 lld-19 libamdhip64-dev)")
            sources = library_sources()
            if args.sources:
                names = {os.path.basename(s)[:-4]: s for s in sources}
                unknown = [n for n in args.sources if n not in names]
                if unknown:
                    sys.exit(f"amd_kernels: not a library source of hip/: {', '.join(unknown)} (known: {', '.join(names)})")
                sources = [names[n] for n in args.sources]
            files = [compile_asm(src, t, tmp) for src in sources for t in TARGETS]
        failures, mfma_seen = [], {t: False for t in MFMA_TARGETS}
        loop_head = f" {'loop: VALU MFMA ld16':>21}" if args.loops else ""
        print(f"{'target':8} {'VGPR':>4} {'AGPR':>4} {'LDS':>6} {'scratch':>7} {'waves/SIMD':>10}{loop_head}  kernel")
        for path in files:
            stem = os.path.basename(path)[:-2]
            source, _, target = stem.rpartition("-")
            kernels = parse(path)
            for kern, pretty in zip(kernels, demangle([k["name"] for k in kernels])):
                pretty = pretty.replace("radiance::(anonymous namespace)::", "").replace("(anonymous namespace)::", "")
                pretty = pretty.split("(")[0]
                occ = "-" if kern["occupancy"] is None else str(kern["occupancy"])
                loop = ""
                if args.loops:
                    loop = " " + (f"{kern['loop'][0]:>10} {kern['loop'][1]:4} {kern['loop'][2]:5}" if kern["loop"]
                                  else f"{'-':>21}")
                print(f"{target:8} {kern['vgpr']:4} {kern['agpr']:4} {kern['lds']:6} {kern['scratch']:7} {occ:>10}{loop}  "
                      f"{source}: {pretty}")
                if kern["scratch"] or kern["spills"]:
                    failures.append(f"{target} {pretty}: {kern['scratch']} bytes of scratch, {kern['spills']} VGPRs spilled")
                if source == MFMA_SOURCE and target in mfma_seen and kern["mfma"]:
                    mfma_seen[target] = True
        # every CDNA target whose MFMA-path assembly was read (compiled: every target of TARGETS)
        compiled = {os.path.basename(f)[:-2].rpartition("-")[2] for f in files
                    if os.path.basename(f).startswith(MFMA_SOURCE + "-")}
        for target, seen in mfma_seen.items():
            if target in compiled and not seen:
                failures.append(f"{target}: no v_mfma_ in any kernel of {MFMA_SOURCE}.hip")
    if failures:
        print("\n".join(["", "FAIL:"] + failures), file=sys.stderr)
        if args.check:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
