"""benchmarks/amd_kernels.py reads clang's AMD assembly right: per kernel the registers, scratch and
occupancy, whether it holds an MFMA, and --check fails on scratch, spilled VGPRs or a CDNA target
whose MFMA-path code has no v_mfma_ (the CI check of hip/build_check.sh). Synthetic assembly in the
layout clang-19 writes (function body, kernel-info comment, code-object metadata), no compiler."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "benchmarks", "amd_kernels.py")


def kernel_asm(name, body, vgpr, agpr, occupancy):
    return f"""\t.text
\t.globl\t{name}
{name}:                               ; @{name}
{body}
\ts_endpgm
.Lfunc_end_{name}:
\t.size\t{name}, .Lfunc_end_{name}-{name}
; Kernel info:
; NumVgprs: {vgpr}
; NumAgprs: {agpr}
; Occupancy: {occupancy}
"""


def metadata(name, scratch, vgpr_spills, sgpr_spills=0):
    return f"""  - .args:
      - .offset:         0
        .size:           8
    .group_segment_fixed_size: 1024
    .name:           {name}
    .private_segment_fixed_size: {scratch}
    .sgpr_spill_count: {sgpr_spills}
    .vgpr_count:     99
    .vgpr_spill_count: {vgpr_spills}
    .wavefront_size: 64
"""


def write(tmp_path, filename, kernels):
    """kernels: (name, body, scratch, vgpr_spills, sgpr_spills)"""
    text = "".join(kernel_asm(k[0], k[1], 40 + i, 8, 5) for i, k in enumerate(kernels))
    text += "\t.amdgpu_metadata\n---\namdhsa.kernels:\n" + "".join(metadata(k[0], *k[2:]) for k in kernels)
    text += "amdhsa.version:\n  - 1\n...\n"
    path = tmp_path / filename
    path.write_text(text)
    return str(path)


def run(*files):
    return subprocess.run([sys.executable, SCRIPT, "--check", "--loops", "--asm", *files],
                          capture_output=True, text=True)


MFMA = "\tv_mfma_f32_16x16x16_bf16 a[0:3], v[0:1], v[2:3], a[0:3]"
PLAIN = "\tv_add_f32_e32 v0, v1, v2"


def test_report_reads_registers_and_passes_clean_code(tmp_path):
    f = write(tmp_path, "apply_mfma-gfx942.s", [("_Zk1", MFMA, 0, 0, 3), ("_Zk2", PLAIN, 0, 0, 0)])
    res = run(f)
    assert res.returncode == 0, res.stderr
    rows = [line.split() for line in res.stdout.splitlines()[1:]]
    # target, VGPR, AGPR, LDS, scratch, waves per SIMD: from the comment and the metadata
    assert rows[0][:6] == ["gfx942", "40", "8", "1024", "0", "5"], res.stdout
    assert rows[1][:2] == ["gfx942", "41"], res.stdout


def test_check_fails_on_scratch_and_on_spilled_vgprs(tmp_path):
    f = write(tmp_path, "quantize-gfx90a.s", [("_Zs", PLAIN, 800, 0, 0), ("_Zv", PLAIN, 0, 4, 0)])
    res = run(f)
    assert res.returncode == 1
    assert "_Zs: 800 bytes of scratch" in res.stderr and "_Zv: 0 bytes of scratch, 4 VGPRs spilled" in res.stderr


def test_check_fails_where_cdna_mfma_code_has_no_mfma(tmp_path):
    ok = write(tmp_path, "apply_mfma-gfx942.s", [("_Zk", MFMA, 0, 0, 0)])
    bad = write(tmp_path, "apply_mfma-gfx90a.s", [("_Zk", PLAIN, 0, 0, 0)])
    res = run(ok, bad)
    assert res.returncode == 1 and "gfx90a: no v_mfma_" in res.stderr and "gfx942: no" not in res.stderr
    # RDNA code of the same file needs none
    assert run(ok, write(tmp_path, "apply_mfma-gfx1201.s", [("_Zk", PLAIN, 0, 0, 0)])).returncode == 0
