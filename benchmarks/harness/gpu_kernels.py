#!/usr/bin/env python3
"""Build, check and time the GPU kernels in hip/ through ctypes (no extension module needed).

The build is the benchmark build: hip/*.hip and apply_variants.hip with RADIANCE_KERNEL_VARIANTS,
so that it holds every kernel variant (radiance_gpu_apply_variant; the list: variants.def, read into
VARIANTS below), the measured alternatives that the library's planner never picks included. One
file for the harness's modes because they share the binding, the references and the heads (about
800 lines).

    python benchmarks/harness/gpu_kernels.py build  [--lib PATH] [--log PATH]  # nvcc hip/*.hip -> .so
    python benchmarks/harness/gpu_kernels.py check  [--lib PATH] [--big] [--only-quantize]  # exit 1 on any mismatch
    python benchmarks/harness/gpu_kernels.py time   [--lib PATH] [--quick] [--heads NxK,...] [--ms 1,4,..]
                                                    [--variants a,b]           # vs bf16 / fp8 / tinygemm
    python benchmarks/harness/gpu_kernels.py refcheck  # NumPy reference vs the CPU C path
    python benchmarks/harness/gpu_kernels.py sass      # instruction counts per kernel
    ncu ... python benchmarks/harness/gpu_kernels.py profile [--variants m:variant,...]  # one launch each

The quantizer is checked bit for bit against tests/reference.py, the independent NumPy reference of
docs/FORMAT.md (one rounding per step, the fixed summation order); apply against a float64
reference computed from the dequantized weights, every output poisoned with NaN bits first.
"""

import argparse
import ctypes
import math
import os
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))  # benchmarks/: seed_torch
sys.path.insert(0, os.path.join(ROOT, "tests"))  # reference: folds_on_hopper
DEFAULT_LIB = os.path.join(ROOT, "build", "libradiance_gpu.so")
SHIFTS = (0, 16, 4, 20, 8, 24, 12, 28)
RATIOS_MSE = (1.0, 0.95, 0.9, 0.85, 0.8)
F32, F16, BF16 = 0, 1, 2
CLIP_RTN, CLIP_MSE = 0, 1
VARIANTS_DEF = os.path.join(HERE, "variants.def")


def read_variants(path=VARIANTS_DEF):
    """{name: number} of the apply variants (radiance_gpu_apply_variant, apply_variants.hip) and
    ENOFIT, from variants.def, the one list the C table is built from: a variant's number is its
    position there (0: auto, the library's automatic plan)."""
    import re
    with open(path) as fh:
        text = fh.read()
    names = re.findall(r"^RAD_VARIANT\(\s*(\w+)\s*,", text, flags=re.M)
    enofit = int(re.search(r"#define RADIANCE_GPU_ENOFIT \((-?\d+)\)", text).group(1))
    return {name: i for i, name in enumerate(names)}, enofit


# A variant that cannot run for a call (G < 128 for the stream and wgmma kernels, no sm_90a, a
# refused tensor map, activations too large for shared memory) answers ENOFIT and is skipped.
VARIANTS, ENOFIT = read_variants()
# which variants the timing mode tries per m on the first head (the others get "auto" only)
TIME_VARIANTS = {
    1: "auto,stream,streamxs,streamwhole,vector",
    4: "auto,streamskipx,streamxs,streamxsbal",
    8: "auto,wgquad8,stream,streamxsbal,vector",
    12: "auto,wgquad16,streamsplitk",
    16: "auto,wgquad16,wgpipe16,streamsplitk",
    32: "auto,wgpipe32",
    48: "auto,ws3d64p,fold3x48,fold3x48t,fold3x64,fold2x48b2t,fold2x64b2t",
    64: "auto,wgtma64,ws3d64p,ws3d64n,ws2d64p,fold3x64,fold3x64t,fold1x64b2,fold2x64b2,fold2x64b2t",
    96: "auto,ws2d96p,ws2d96n,fold3x96,fold3x96t,fold1x96b2,fold2x96b2,fold2x96b2t",
    128: "auto,wgpipers128,ws3s128p,ws3s128n,ws2d128p,fold3x128,fold2x128,fold2x128t,fold1x128b2,fold1x128b2t",
    160: "auto,ws2s160p,ws2s160n,ws3s160p,ws3s160n,fold3x160,fold2x160,fold2x160t",
    192: "auto,ws2s192p,ws2s192n,fold2x192,fold2x192t",
    224: "auto,ws2s224p,ws2s224n,fold2x224,fold2x224t",
    256: "auto,wgpipers128,ws2s256p,ws2s256n,ws2d256n,fold2x256,fold2x256t,fold3x128",
}


# --------------------------------------------------------------------------------------------
# Build
# --------------------------------------------------------------------------------------------
def build(lib, log):
    os.makedirs(os.path.dirname(lib), exist_ok=True)
    srcs = sorted(os.path.join(ROOT, "hip", f) for f in os.listdir(os.path.join(ROOT, "hip")) if f.endswith(".hip"))
    srcs.append(os.path.join(HERE, "apply_variants.hip"))  # radiance_gpu_apply_variant
    srcs.append(os.path.join(HERE, "apply_wgmma_ws.hip"))  # the warp-specialized kernel (benchmark only)
    gencode = ["-gencode=arch=compute_90a,code=sm_90a"]
    if os.environ.get("RADIANCE_BENCH_ALL_ARCHS"):
        gencode += ["-gencode=arch=compute_80,code=sm_80", "-gencode=arch=compute_80,code=compute_80"]
    objs, procs = [], []
    with open(log, "w") as fh:
        for src in srcs:
            obj = os.path.join(os.path.dirname(lib), os.path.basename(src) + ".o")
            cmd = ["nvcc", "-x", "cu", "-O3", "-lineinfo", "-std=c++17", "-Xcompiler", "-fPIC", "-Xptxas", "-v",
                   "-DRADIANCE_KERNEL_VARIANTS=1", "-I", os.path.join(ROOT, "hip"), "-I", os.path.join(ROOT, "csrc", "include"), "-I", HERE,
                   *gencode, "-c", src, "-o", obj]
            procs.append((src, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)))
            objs.append(obj)
        ok = True
        for src, p in procs:
            out, _ = p.communicate()
            fh.write(f"==== {src}\n{out}\n")
            if p.returncode != 0:
                ok = False
                print(out)
        if not ok:
            sys.exit("build failed")
        cmd = ["nvcc", "-shared", "-o", lib, *objs]
        subprocess.check_call(cmd)
    print("built", lib)


# --------------------------------------------------------------------------------------------
# NumPy reference of the quantization rule (float32, one rounding per step, fixed order)
# --------------------------------------------------------------------------------------------
def bf16_bits_to_f32(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16_rne_bits(f):
    u = np.ascontiguousarray(f, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype(np.uint16)


def ref_quantize(w32, group, clip):
    """w32: float32 [N, K] (exact image of the input). Returns (packed int32 [N,K/8], scales uint16),
    from the project's independent NumPy reference of the rule (tests/reference.py)."""
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    from reference import pack_reference, quantize_reference

    nibbles, scales = quantize_reference(w32, group, "mse" if clip == CLIP_MSE else "rtn")
    return pack_reference(nibbles), scales.view(np.uint16)


def unpack_q(words):
    """int32 [N, K/8] -> int8 q [N, K] (nibble - 8)."""
    u = words.view(np.uint32)
    n, kw = u.shape
    q = np.empty((n, kw, 8), dtype=np.int8)
    for e_, s in enumerate(SHIFTS):
        q[..., e_] = ((u >> np.uint32(s)) & 15).astype(np.int8) - 8
    return q.reshape(n, kw * 8)


# --------------------------------------------------------------------------------------------
# ctypes binding
# --------------------------------------------------------------------------------------------
class Lib:
    def __init__(self, path):
        self.lib = ctypes.CDLL(path)
        L = self.lib
        L.radiance_gpu_backend.restype = ctypes.c_char_p
        L.radiance_gpu_error_string.restype = ctypes.c_char_p
        L.radiance_gpu_error_string.argtypes = [ctypes.c_int]
        L.radiance_gpu_quantize_rows.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_int64,
                                                 ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                                                 ctypes.POINTER(ctypes.c_int64), ctypes.c_void_p]
        L.radiance_gpu_apply.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p,
                                         ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int,
                                         ctypes.c_void_p, ctypes.c_void_p]
        L.radiance_gpu_apply_variant.argtypes = [ctypes.c_int] + L.radiance_gpu_apply.argtypes

    def err(self, code, what):
        if code != 0:
            raise RuntimeError(f"{what}: {code} {self.lib.radiance_gpu_error_string(code).decode()}")

    def quantize(self, w, group, clip, packed, scales, stream):
        import torch
        dt = {torch.float32: F32, torch.float16: F16, torch.bfloat16: BF16}[w.dtype]
        bad = ctypes.c_int64(-2)
        code = self.lib.radiance_gpu_quantize_rows(w.data_ptr(), dt, w.shape[0], w.shape[1], group, clip,
                                                   packed.data_ptr(), scales.data_ptr(), ctypes.byref(bad), stream)
        self.err(code, "quantize_rows")
        return bad.value

    def apply(self, x, packed, scales, bias, group, out, stream, variant=0):
        code = self.lib.radiance_gpu_apply_variant(variant, x.data_ptr(), x.shape[0], x.shape[1], packed.data_ptr(),
                                                   scales.data_ptr(), 0 if bias is None else bias.data_ptr(),
                                                   packed.shape[0], group, out.data_ptr(), stream)
        if code == ENOFIT:
            raise NotApplicable(f"apply variant {variant} does not apply to this call")
        self.err(code, f"apply variant {variant}")


class NotApplicable(RuntimeError):
    pass


# --------------------------------------------------------------------------------------------
# Correctness
# --------------------------------------------------------------------------------------------
def make_weights(rng, n, k, kind):
    if kind == "gauss":
        w = rng.standard_normal((n, k)).astype(np.float32) * 0.02
    elif kind == "student":
        w = (rng.standard_t(3, (n, k)) * 0.02).astype(np.float32)
    elif kind == "outliers":
        w = rng.standard_normal((n, k)).astype(np.float32) * 0.02
        mask = rng.random((n, k)) < 0.01
        w[mask] *= 8
    elif kind == "ties":
        # small integers times a power of two: w / s lands exactly on half-integers often
        w = (rng.integers(-40, 41, (n, k)).astype(np.float32)) * np.float32(2.0 ** -7)
    elif kind == "tiny":
        w = rng.standard_normal((n, k)).astype(np.float32) * np.float32(1e-9)
    elif kind == "tinymix":
        # bf16 weights with 0 < |w| < 2^-63 beside normal ones: their warps leave the saturating search
        w = rng.standard_normal((n, k)).astype(np.float32) * 0.02
        mask = rng.random((n, k)) < 0.02
        w[mask] *= np.float32(2.0 ** -60)
    elif kind == "huge":
        # amax around 2^97 (saturating search) and, in every 7th row, 2^101 (ratio_error)
        w = rng.standard_normal((n, k)).astype(np.float32) * np.float32(2.0 ** 95)
        w[::7, 3] = np.float32(2.0 ** 101)
    else:
        raise ValueError(kind)
    if n > 3:
        w[n // 3] = 0  # all-zero row (padded vocab)
        w[1, : k // 2] = 0  # zero groups
    return w


def to_dtype_np(w32, dtype_name):
    """Round w32 to the input dtype; return (torch-able array, exact float32 image)."""
    if dtype_name == "f32":
        return w32, w32
    if dtype_name == "f16":
        h = w32.astype(np.float16)
        return h, h.astype(np.float32)
    bits = f32_to_bf16_rne_bits(w32)
    return bits, bf16_bits_to_f32(bits)


def check_quantize(L, rng, torch, failures, big=False):
    stream = torch.cuda.current_stream().cuda_stream
    shapes = [(37, 256), (1000, 384), (129, 640), (3, 8192), (257, 1024), (1, 128)]
    count = 0
    for dtype_name in ("bf16", "f16", "f32"):
        for group in (32, 64, 128, 256):
            for clip in (CLIP_MSE, CLIP_RTN):
                for kind in ("gauss", "student", "outliers", "ties", "tiny"):
                    n, k = shapes[count % len(shapes)]
                    count += 1
                    if k % group:
                        k = group * max(1, k // group)
                    w32 = make_weights(rng, n, k, kind)
                    arr, exact = to_dtype_np(w32, dtype_name)
                    if dtype_name == "bf16":
                        wt = torch.from_numpy(arr.view(np.int16)).cuda().view(torch.bfloat16)
                    else:
                        wt = torch.from_numpy(arr).cuda()
                    packed = torch.full((n, k // 8), -559038737, dtype=torch.int32, device="cuda")
                    scales = torch.full((n, k // group), -1, dtype=torch.int16, device="cuda")
                    bad = L.quantize(wt, group, clip, packed, scales, stream)
                    rp, rs = ref_quantize(exact, group, clip)
                    gp = packed.cpu().numpy()
                    gs = scales.cpu().numpy().view(np.uint16)
                    tag = f"quantize {dtype_name} G={group} clip={'mse' if clip else 'rtn'} {kind} {n}x{k}"
                    if bad != -1:
                        failures.append(f"{tag}: first_bad_row={bad}, expected -1")
                    nw = int((gp != rp).sum())
                    ns = int((gs != rs).sum())
                    if nw or ns:
                        failures.append(f"{tag}: {nw} words and {ns} scales differ")
                    else:
                        print(f"ok  {tag}")
    # the inputs that steer hip/quantize.hip between its two search paths (saturating, ratio_error)
    for dtype_name, kind, group in (("bf16", "tinymix", 128), ("bf16", "huge", 128), ("bf16", "tinymix", 32),
                                    ("bf16", "huge", 256), ("f32", "huge", 64), ("bf16", "ties", 128),
                                    ("f16", "ties", 64), ("bf16", "gauss", 128)):
        n, k = 777, 1024
        w32 = make_weights(rng, n, k, kind)
        arr, exact = to_dtype_np(w32, dtype_name)
        wt = torch.from_numpy(arr.view(np.int16) if dtype_name == "bf16" else arr).cuda()
        if dtype_name == "bf16":
            wt = wt.view(torch.bfloat16)
        rp, rs = ref_quantize(exact, group, CLIP_MSE)
        packed = torch.full((n, k // 8), -559038737, dtype=torch.int32, device="cuda")
        scales = torch.full((n, k // group), -1, dtype=torch.int16, device="cuda")
        bad = L.quantize(wt, group, CLIP_MSE, packed, scales, stream)
        nw = int((packed.cpu().numpy() != rp).sum())
        ns = int((scales.cpu().numpy().view(np.uint16) != rs).sum())
        tag = f"quantize search {dtype_name} G={group} mse {kind} {n}x{k}"
        if bad != -1 or nw or ns:
            failures.append(f"{tag}: {nw} words and {ns} scales differ, first_bad_row={bad}")
        else:
            print(f"ok  {tag}")
    # non-finite weights: smallest row index reported
    for dtype_name in ("bf16", "f16", "f32"):
        n, k = 300, 512
        w32 = make_weights(rng, n, k, "gauss")
        w32[217, 5] = np.inf
        w32[123, 500] = np.nan
        w32[250, 0] = -np.inf
        arr, _ = to_dtype_np(w32, dtype_name)
        if dtype_name == "bf16":
            wt = torch.from_numpy(arr.view(np.int16)).cuda().view(torch.bfloat16)
        else:
            wt = torch.from_numpy(arr).cuda()
        packed = torch.empty((n, k // 8), dtype=torch.int32, device="cuda")
        scales = torch.empty((n, k // 128), dtype=torch.int16, device="cuda")
        bad = L.quantize(wt, 128, CLIP_MSE, packed, scales, stream)
        if bad != 123:
            failures.append(f"non-finite {dtype_name}: first_bad_row={bad}, expected 123")
        else:
            print(f"ok  non-finite {dtype_name} -> row 123")
    # misaligned input pointer (scalar load path)
    n, k = 64, 256
    w32 = make_weights(rng, n, k, "gauss")
    bits = f32_to_bf16_rne_bits(w32)
    base = torch.from_numpy(np.concatenate([[0], bits.reshape(-1)]).astype(np.uint16).view(np.int16)).cuda()
    wt = base[1:].view(n, k).view(torch.bfloat16)
    packed = torch.empty((n, k // 8), dtype=torch.int32, device="cuda")
    scales = torch.empty((n, k // 64), dtype=torch.int16, device="cuda")
    L.quantize(wt, 64, CLIP_MSE, packed, scales, stream)
    rp, rs = ref_quantize(bf16_bits_to_f32(bits), 64, CLIP_MSE)
    if (packed.cpu().numpy() != rp).any() or (scales.cpu().numpy().view(np.uint16) != rs).any():
        failures.append("quantize misaligned bf16: mismatch")
    else:
        print("ok  quantize misaligned bf16 input")
    if big:
        # packed bytes past 2^31: N * K / 2 > 2^31
        n, k = 524309, 8192
        torch.manual_seed(1)
        wt = (torch.randn(n, k, device="cuda", dtype=torch.float32) * 0.02).to(torch.bfloat16)
        packed = torch.full((n, k // 8), -559038737, dtype=torch.int32, device="cuda")
        scales = torch.full((n, k // 128), -1, dtype=torch.int16, device="cuda")
        bad = L.quantize(wt, 128, CLIP_MSE, packed, scales, stream)
        rows = np.concatenate([np.arange(0, 300), rng.integers(0, n, 300), np.arange(n - 700, n)])
        sub = wt[torch.from_numpy(rows).cuda()].view(torch.int16).cpu().numpy().view(np.uint16)
        rp, rs = ref_quantize(bf16_bits_to_f32(sub), 128, CLIP_MSE)
        gp = packed[torch.from_numpy(rows).cuda()].cpu().numpy()
        gs = scales[torch.from_numpy(rows).cuda()].cpu().numpy().view(np.uint16)
        if bad != -1 or (gp != rp).any() or (gs != rs).any():
            failures.append(f"quantize big {n}x{k}: mismatch on sampled rows (bad={bad})")
        else:
            print(f"ok  quantize big {n}x{k} (packed {n * k // 2 / 2**30:.2f} GiB), sampled rows")
        del wt, packed, scales
        torch.cuda.empty_cache()


def apply_reference(x64, q, s, group, bias, folded=False):
    """float64 reference and float64 |x| @ |W|^T (for the tolerance). folded: of the weights the
    folding kernel multiplies, bf16_rne(q * s) (docs/FORMAT.md, "Rounding of apply"; q * s is exact
    in float32), else of q * s exactly."""
    n, k = q.shape
    w = (q.astype(np.float64).reshape(n, k // group, group) * s.astype(np.float64)[..., None]).reshape(n, k)
    if folded:
        w = bf16_bits_to_f32(f32_to_bf16_rne_bits(w.astype(np.float32))).astype(np.float64)
    ref = x64 @ w.T
    absref = np.abs(x64) @ np.abs(w).T
    if bias is not None:
        ref = ref + bias[None, :]
        absref = absref + np.abs(bias)[None, :]
    return ref, absref


def compare_apply(out_bits, ref, absref, tag, failures):
    out = bf16_bits_to_f32(out_bits).astype(np.float64)
    if not np.isfinite(out).all():
        failures.append(f"{tag}: {int((~np.isfinite(out)).sum())} outputs not written (NaN poison) or not finite")
        return False
    tol = 2.0 ** -8 * np.abs(ref) + 2.0 ** -14 * absref + 1e-30
    bad = np.abs(out - ref) > tol
    rel = np.linalg.norm(out - ref) / max(np.linalg.norm(ref), 1e-30)
    if bad.any() or rel > 4e-3:
        i = np.argwhere(bad)[:3].tolist()
        failures.append(f"{tag}: {int(bad.sum())} elements out of tolerance (first {i}), rel err {rel:.2e}")
        return False
    return True


def check_apply(L, rng, torch, failures, big=False, only="", skip=""):
    from reference import folds_on_hopper
    stream = torch.cuda.current_stream().cuda_stream
    hopper = torch.cuda.get_device_capability() == (9, 0)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    # 270: split256's second call of 14 tokens folds only for groups under 128
    ms = (1, 2, 3, 5, 8, 16, 17, 33, 64, 100, 256, 270, 300)
    cases = []
    for group in (32, 64, 128, 256):
        for n, k in ((1, 256), (37, 768), (1001, 1280), (333, 8192), (4099, 512), (250, 4096), (515, 2304)):
            if k % group:
                continue
            cases.append((group, n, k))
    cases.append((32, 77, 160))   # k not a multiple of 128 (partial last step)
    cases.append((64, 45, 192))
    cases.append((32, 123, 32))
    cases.append((64, 130, 64 * 7))
    # n % 8 == 0: the output's rows 16-byte aligned, which the TMA-store variants (fold2x..t) need
    cases.append((128, 2000, 1280))
    cases.append((64, 3000, 576))
    cases.append((128, 40000, 256))  # and more tiles than SMs: several per persistent block
    # the vector kernels only: more rows than their grid covers at once (each block loops over row
    # blocks, the activations staged once per block), n not a multiple of a block's rows
    vector_only = {(128, 40009, 256), (32, 20011, 576)}
    cases.extend(sorted(vector_only))
    # the persistent stream kernels (6-16 tokens) only: two or more 16-row units per warp on an
    # H200 (132 SMs x 16 warps x 16 rows = 33792 rows a round; split k: half that), so that the
    # ring runs on from one unit into the next; k with a tail super-step, whole ones, and halves
    # of k of 3 steps (one partial super-step each)
    stream_multi = {(128, 70001, 768): (6, 8, 9, 16), (256, 69997, 1024): (7, 12),
                    (128, 70001, 2048): (1, 4, 8, 16), (256, 70003, 2560): (6, 16),
                    (128, 17011, 5376): (9, 16)}  # split k in 2-step super-steps (run 79)
    cases.extend(sorted(stream_multi))
    # the folding kernel only: more tiles than its persistent blocks, with a last round that leaves
    # at least half of them idle for some tile (dispatch.h, fold_tail_parts: that round cut along
    # k; on an H200 26003 rows are 136 tiles of 192 rows on 132 blocks, 20704 are 162 of 128)
    fold_tail = {(128, 26003, 4096): (40, 64, 100, 128, 200, 300), (64, 20704, 2048): (48, 96, 128, 256),
                 (128, 20704, 4096): (64, 160, 256)}
    cases.extend(sorted(fold_tail))
    only_set, skip_set = set(filter(None, only.split(","))), set(filter(None, skip.split(",")))
    unknown = (only_set | skip_set) - set(VARIANTS)
    if unknown:
        sys.exit(f"unknown variants: {sorted(unknown)}")
    variants = [(v, i) for v, i in VARIANTS.items() if (not only_set or v in only_set) and v not in skip_set]
    n_ok = n_skipped = 0
    for ci, (group, n, k) in enumerate(cases):
        # packed words: random nibbles, plus an all-zero-scale row; scales positive and negative
        words = rng.integers(0, 2 ** 32, (n, k // 8), dtype=np.uint64).astype(np.uint32).view(np.int32)
        s32 = (rng.random((n, k // group)).astype(np.float32) * 0.02 + 0.001) * np.where(
            rng.random((n, k // group)) < 0.1, -1, 1).astype(np.float32)
        sbits = f32_to_bf16_rne_bits(s32)
        if n > 2:
            sbits[n // 2] = f32_to_bf16_rne_bits(np.array([1e-8], np.float32))[0]
        if n > 6 and k // group >= 3:
            # scales the running-scale kernel hands to its exact loop: a zero group, a drop of
            # more than 2^24 from the row's largest scale, and a subnormal
            sbits[3, 1] = 0
            sbits[4, :] = f32_to_bf16_rne_bits(np.full(k // group, 1e-9, np.float32))
            sbits[4, 0] = f32_to_bf16_rne_bits(np.array([1.0], np.float32))[0]
            sbits[5, 2] = 0x0003
        q = unpack_q(words)
        s = bf16_bits_to_f32(sbits)
        pk = torch.from_numpy(words).cuda()
        sc = torch.from_numpy(sbits.view(np.int16)).cuda()
        own_ms = stream_multi.get((group, n, k), fold_tail.get((group, n, k)))
        for mi, m in enumerate(own_ms or ms):
            if (ci + mi) % 2 and m not in (1, 64, 300) and own_ms is None:
                continue  # keep the run short: every other m per case, always 1, 64 and 300
            xb = f32_to_bf16_rne_bits(rng.standard_normal((m, k)).astype(np.float32))
            if m > 1:
                xb[m // 2, : k // 3] = f32_to_bf16_rne_bits(
                    rng.standard_normal(k // 3).astype(np.float32) * 50)  # outlier token
            x64 = bf16_bits_to_f32(xb).astype(np.float64)
            use_bias = (ci + mi) % 3 == 0
            bb = f32_to_bf16_rne_bits(rng.standard_normal(n).astype(np.float32)) if use_bias else None
            b64 = None if bb is None else bf16_bits_to_f32(bb).astype(np.float64)
            refs = {}  # folded: (reference, |reference|), each computed once and only where used

            def reference(folded):
                if folded not in refs:
                    refs[folded] = apply_reference(x64, q, s, group, b64, folded=folded)
                return refs[folded]
            # the folding kernel's variants, and the automatic plan where it folds
            auto_folds = hopper and folds_on_hopper(m, k, group, n, sms)
            xt = torch.from_numpy(xb.view(np.int16)).cuda()
            bt = None if bb is None else torch.from_numpy(bb.view(np.int16)).cuda()
            for vname, v in variants:
                if vname.startswith("vector") and m > 64 and k > 2048:
                    continue  # slow path, covered at smaller sizes
                if (group, n, k) in vector_only and not vname.startswith("vector"):
                    continue
                if (group, n, k) in stream_multi and not (vname == "auto" or vname.startswith("stream")):
                    continue
                if (group, n, k) in fold_tail and not (vname == "auto" or vname.startswith("fold")):
                    continue
                out = torch.full((m, n), -1, dtype=torch.int16, device="cuda")  # 0xFFFF: NaN
                tag = f"apply {vname} G={group} n={n} k={k} m={m} bias={use_bias}"
                try:
                    L.apply(xt, pk, sc, bt, group, out, stream, v)
                    torch.cuda.synchronize()
                except NotApplicable:
                    n_skipped += 1
                    continue
                except RuntimeError as e:  # a launch or kernel error: recorded, the other variants go on
                    failures.append(f"{tag}: {str(e)[:200]}")
                    continue
                fold = vname.startswith("fold") or (vname in ("auto", "split256") and auto_folds)
                ref = reference(fold)
                first = m // 256 * 256
                if vname == "split256" and 0 < first < m:  # two calls, each folding by its own count
                    head, rest = (reference(hopper and folds_on_hopper(c, k, group, n, sms))
                                  for c in (first, m - first))
                    ref = tuple(np.concatenate([h[:first], r[first:]]) for h, r in zip(head, rest))
                if compare_apply(out.cpu().numpy().view(np.uint16), *ref, tag, failures):
                    n_ok += 1
        print(f"ok  apply G={group} n={n} k={k}: all variants, {n_ok} runs so far ({n_skipped} not applicable)")
    # argument errors
    x = torch.zeros((1, 128), dtype=torch.int16, device="cuda")
    pk = torch.zeros((8, 16), dtype=torch.int32, device="cuda")
    sc = torch.zeros((8, 1), dtype=torch.int16, device="cuda")
    out = torch.zeros((1, 8), dtype=torch.int16, device="cuda")
    code = L.lib.radiance_gpu_apply(x.data_ptr(), 1, 128, pk.data_ptr(), sc.data_ptr(), None, 8, 48,
                                    out.data_ptr(), None)
    if code != -1:
        failures.append(f"apply with group 48 returned {code}, expected -1")
    if big:
        n, k, group = 524309, 8192, 128
        torch.manual_seed(2)
        pk = torch.randint(-2 ** 31, 2 ** 31 - 1, (n, k // 8), dtype=torch.int32, device="cuda")
        sc = ((torch.rand(n, k // group, device="cuda") * 0.02 + 0.001).to(torch.bfloat16)).view(torch.int16)
        rows = np.concatenate([np.arange(0, 200), rng.integers(0, n, 200), np.arange(n - 600, n)])
        rt = torch.from_numpy(rows).cuda()
        q = unpack_q(pk[rt].cpu().numpy())
        s = bf16_bits_to_f32(sc[rt].cpu().numpy().view(np.uint16))
        for m in (1, 3, 16, 64):
            xb = f32_to_bf16_rne_bits(rng.standard_normal((m, k)).astype(np.float32))
            x64 = bf16_bits_to_f32(xb).astype(np.float64)
            ref, absref = apply_reference(x64, q, s, group, None)
            out = torch.full((m, n), -1, dtype=torch.int16, device="cuda")
            L.apply(torch.from_numpy(xb.view(np.int16)).cuda(), pk, sc, None, group, out, stream, 0)
            torch.cuda.synchronize()
            got = out[:, rt].cpu().numpy().view(np.uint16)
            full_ok = bool(torch.isfinite(out.view(torch.bfloat16).float()).all())
            if not full_ok:
                failures.append(f"apply big m={m}: unwritten outputs")
            elif compare_apply(got, ref, absref, f"apply big {n}x{k} m={m}", failures):
                print(f"ok  apply big {n}x{k} (packed {n * k / 2 / 2**30:.2f} GiB) m={m}, sampled rows")
        del pk, sc
        torch.cuda.empty_cache()


def cmd_check(args):
    import torch
    L = Lib(args.lib)
    print("backend", L.lib.radiance_gpu_backend().decode(), torch.cuda.get_device_name())
    seed = int(time.time()) if args.seed is None else args.seed
    print("seed", seed, "(rerun with --seed to reproduce)")
    rng = np.random.default_rng(seed)
    failures = []
    t0 = time.time()
    if not args.variants:  # --variants: those apply variants only
        check_quantize(L, rng, torch, failures, args.big)
        print(f"quantize checks {time.time() - t0:.1f} s")
    t0 = time.time()
    if not args.only_quantize:
        check_apply(L, rng, torch, failures, args.big, args.variants, args.skip)
        print(f"apply checks {time.time() - t0:.1f} s")
    if failures:
        print(f"FAILED: {len(failures)}")
        for f in failures[:60]:
            print("  ", f)
        sys.exit(1)
    print("ALL CHECKS PASSED")


def cmd_refcheck(args):
    """The NumPy reference against the CPU C path (python/radiance/_C), float32 and fp16 inputs."""
    import glob
    import importlib.util
    path = glob.glob(os.path.join(ROOT, "python", "radiance", "_C*.so"))[0]
    spec = importlib.util.spec_from_file_location("_C", path)
    C = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(C)
    rng = np.random.default_rng(0)
    bad = 0
    for group in (32, 64, 128, 256):
        for kind in ("gauss", "student", "outliers", "ties", "tiny"):
            for clip, cname in ((CLIP_MSE, "mse"), (CLIP_RTN, "rtn")):
                for dt in ("f32", "f16"):
                    w32 = make_weights(rng, 67, group * 5, kind)
                    arr, exact = to_dtype_np(w32, dt)
                    p, s = C.quantize_rows(arr, group, cname)
                    rp, rs = ref_quantize(exact, group, clip)
                    sb = np.asarray(s).view(np.uint16)
                    if (np.asarray(p) != rp).any() or (sb != rs).any():
                        bad += 1
                        print("MISMATCH", group, kind, cname, dt, int((np.asarray(p) != rp).sum()), int((sb != rs).sum()))
    print("refcheck", "FAILED" if bad else "ok")
    sys.exit(1 if bad else 0)


# --------------------------------------------------------------------------------------------
# Timing
# --------------------------------------------------------------------------------------------
def random_heads(torch, n, k, group, copies):
    """`copies` random int4 heads (packed int32 [n, k/8], bf16 scales as int16 [n, k/group]) and
    `copies` bf16 heads [n, k], on the GPU, for timing over rotating copies."""
    pks = [torch.randint(-2 ** 31, 2 ** 31 - 1, (n, k // 8), dtype=torch.int32, device="cuda") for _ in range(copies[0])]
    scs = [(torch.rand(n, k // group, device="cuda") * 0.02 + 1e-3).to(torch.bfloat16).view(torch.int16)
           for _ in range(copies[0])]
    wbf = [(torch.randn(n, k, device="cuda") * 0.02).to(torch.bfloat16) for _ in range(copies[1])]
    return pks, scs, wbf


def bench(fn, torch):
    import triton.testing
    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median") * 1000.0  # us


def cmd_time(args):
    import torch
    from gpu import int4_head_bytes
    from seed_torch import seed_quantize
    L = Lib(args.lib)
    stream = torch.cuda.current_stream().cuda_stream
    dev = torch.cuda.get_device_properties(0)
    print(f"# {torch.cuda.get_device_name()} sms={dev.multi_processor_count} torch={torch.__version__} "
          f"cuda={torch.version.cuda}")
    try:
        print("#", subprocess.run(["nvidia-smi", "--query-gpu=driver_version,clocks.sm,clocks.mem",
                                   "--format=csv,noheader"], capture_output=True, text=True).stdout.strip())
    except OSError:
        pass
    rows = []

    def report(what, us, nbytes=None):
        gbs = nbytes / us / 1e3 if nbytes else None
        line = f"{what:60s} {us:9.1f} us" + (f" {gbs:7.0f} GB/s" if gbs else "")
        print(line, flush=True)
        rows.append((what, us, gbs))
        return us

    # rooflines
    big = torch.empty(2 ** 30, dtype=torch.float32, device="cuda").normal_()
    t_sum = bench(lambda: big.sum(), torch)
    read_bw = 4 * 2 ** 30 / t_sum / 1e3
    report("roofline: sum of 4 GiB fp32 (read)", t_sum, 4 * 2 ** 30)
    dst = torch.empty_like(big)
    t_cp = bench(lambda: dst.copy_(big), torch)
    report("roofline: D2D copy 4 GiB (read+write)", t_cp, 8 * 2 ** 30)
    del big, dst
    torch.cuda.empty_cache()

    # quantize: ours vs the seed algorithm in torch
    n, k = 248320, 5120
    w = (torch.randn(n, k, device="cuda") * 0.02).to(torch.bfloat16)
    packed = torch.empty((n, k // 8), dtype=torch.int32, device="cuda")
    scales = torch.empty((n, k // 128), dtype=torch.int16, device="cuda")
    qbytes = n * k * 2 + n * k // 2 + n * k // 128 * 2
    for clip, cname in () if args.no_peers else ((CLIP_MSE, "mse"), (CLIP_RTN, "rtn")):
        def run_q(clip=clip):
            return L.quantize(w, 128, clip, packed, scales, stream)
        run_q()
        torch.cuda.synchronize()
        ts, te = [], []
        for _ in range(10):
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            t0 = time.perf_counter()
            e0.record()
            run_q()
            e1.record()
            ts.append((time.perf_counter() - t0) * 1e6)
            torch.cuda.synchronize()
            te.append(e0.elapsed_time(e1) * 1e3)
        report(f"quantize ours {cname} {n}x{k} g128 (events: flag memset+kernel+copy)", float(np.median(te)), qbytes)
        report(f"quantize ours {cname} {n}x{k} g128 (host wall, whole call)", float(np.median(ts)), qbytes)
    if not args.quick and not args.no_peers:
        for mse in (True, False):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            seed_quantize(w, 128, "mse" if mse else "rtn")
            torch.cuda.synchronize()
            report(f"quantize seed torch {'mse' if mse else 'rtn'} {n}x{k} g128", (time.perf_counter() - t0) * 1e6)
    del w
    torch.cuda.empty_cache()

    heads = [(248320, 5120), (151936, 5120), (128256, 4096), (262144, 640), (49152, 576)]
    ms = (1, 4, 8, 16, 32, 64, 128, 256)
    if args.ms:
        ms = tuple(int(v) for v in args.ms.split(","))
    if args.quick:
        heads = heads[:1]
    if args.heads:
        heads = [tuple(int(v) for v in h.split("x")) for h in args.heads.split(",")]
    summary = []
    for hi, (n, k) in enumerate(heads):
        group = 128 if k % 128 == 0 else 64
        int4_bytes = int4_head_bytes(n, k, group)
        bf16_bytes = n * k * 2
        nrot_i4 = max(1, math.ceil(250e6 / int4_bytes))
        nrot_bf = max(1, math.ceil(250e6 / bf16_bytes))
        torch.manual_seed(0)
        pks, scs, wbf = random_heads(torch, n, k, group, (nrot_i4, nrot_bf))
        w8 = wi = None
        # fp8 row-wise
        try:
            if args.no_peers:
                raise RuntimeError("--no-peers")
            w8 = [(wb.float() / (wb.float().abs().amax(1, keepdim=True) / 448).clamp_min(1e-12)).to(torch.float8_e4m3fn)
                  for wb in wbf]
            sb = torch.ones(1, n, device="cuda", dtype=torch.float32)
        except Exception as e:  # noqa: BLE001
            w8 = None
            print("# fp8 setup failed:", e)
        # tinygemm int4 (its own packing)
        try:
            if args.no_peers:
                raise RuntimeError("--no-peers")
            wi = [torch._convert_weight_to_int4pack(
                torch.randint(0, 256, (n, k // 2), dtype=torch.uint8, device="cuda"), 8) for _ in range(nrot_i4)]
            sz = torch.rand(k // 128, n, 2, device="cuda").to(torch.bfloat16)
        except Exception as e:  # noqa: BLE001
            wi = None
            print("# tinygemm setup failed:", e)
        for m in ms:
            x = (torch.randn(m, k, device="cuda")).to(torch.bfloat16)
            xi = x.view(torch.int16)
            out = torch.empty((m, n), dtype=torch.int16, device="cuda")
            res = {}
            it = [0]
            if args.variants:
                variants = args.variants.split(",")
            else:
                variants = TIME_VARIANTS.get(m, "auto").split(",")

            def ours(v):
                def f():
                    i = it[0] = (it[0] + 1) % nrot_i4
                    L.apply(xi, pks[i], scs[i], None, group, out, stream, v)
                return f
            for vname in variants:
                try:
                    res[vname] = report(f"{n}x{k} m={m:3d} ours[{vname}]", bench(ours(VARIANTS[vname]), torch), int4_bytes)
                except RuntimeError as e:
                    print("#", vname, e)
            itb = [0]

            def bf():
                i = itb[0] = (itb[0] + 1) % nrot_bf
                return x @ wbf[i].t()
            if not args.no_peers:
                res["bf16"] = report(f"{n}x{k} m={m:3d} bf16 cuBLAS", bench(bf, torch), bf16_bytes)
            if w8 is not None:
                x8 = x.float().clamp(-448, 448).to(torch.float8_e4m3fn)
                sa = torch.ones(m, 1, device="cuda", dtype=torch.float32)

                def f8():
                    i = itb[0] = (itb[0] + 1) % nrot_bf
                    return torch._scaled_mm(x8, w8[i].t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)
                try:
                    res["fp8"] = report(f"{n}x{k} m={m:3d} fp8 _scaled_mm rowwise", bench(f8, torch), n * k)
                except RuntimeError as e:
                    print("# fp8:", str(e)[:200])
            if wi is not None and k % 128 == 0:
                def ti():
                    i = it[0] = (it[0] + 1) % nrot_i4
                    return torch._weight_int4pack_mm(x, wi[i], 128, sz)
                try:
                    res["tinygemm"] = report(f"{n}x{k} m={m:3d} int4 tinygemm g128", bench(ti, torch), int4_bytes)
                except RuntimeError as e:
                    print("# tinygemm:", str(e)[:200])
            summary.append((n, k, m, res, int4_bytes))
        del pks, scs, wbf, w8, wi
        torch.cuda.empty_cache()

    print("\n## summary (us; ratio = peer / ours, >1 means ours is faster; %roof = int4 bytes at read roofline)")
    print(f"read roofline {read_bw:.0f} GB/s")
    print(f"{'head':>14} {'m':>4} {'ours':>8} {'variant':>8} {'%roof':>6} {'bf16':>8} {'x':>5} {'fp8':>8} {'x':>5} {'tiny':>8} {'x':>5}")
    for n, k, m, res, nbytes in summary:
        ours_keys = [v for v in res if v in VARIANTS]
        if not ours_keys:
            continue
        best = min(ours_keys, key=lambda v: res[v])
        o = res[best]
        floor = nbytes / read_bw / 1e3
        line = f"{n:>7}x{k:<6} {m:>4} {o:8.1f} {best:>8} {100 * floor / o:5.0f}%"
        for peer in ("bf16", "fp8", "tinygemm"):
            if peer in res:
                line += f" {res[peer]:8.1f} {res[peer] / o:5.2f}"
            else:
                line += f" {'-':>8} {'-':>5}"
        print(line)
    # per m: every variant timed (the automatic plan first) against the best peer, x of M = 1's auto
    print("\n## variants (us; xM1 = auto / auto at the smallest m of the head)")
    for n, k in sorted({(n, k) for n, k, *_ in summary}, key=lambda h: -h[0]):
        rows_h = [(m, res) for hn, hk, m, res, _ in summary if (hn, hk) == (n, k)]
        base = rows_h[0][1].get("auto") if rows_h else None
        for m, res in rows_h:
            ours_v = " ".join(f"{v}={res[v]:.1f}" for v in res if v in VARIANTS)
            peers = " ".join(f"{v}={res[v]:.1f}" for v in ("bf16", "fp8") if v in res)
            rel = f" xM1={res['auto'] / base:.2f}" if base and "auto" in res else ""
            print(f"{n}x{k} m={m:<3d} {ours_v} | {peers}{rel}")


def cmd_sass(args):
    """Per kernel: matrix instructions, wide loads and local-memory traffic in the SASS."""
    import re
    sass = subprocess.run(["cuobjdump", "--dump-sass", args.lib], capture_output=True, text=True).stdout
    with open(args.log, "w") as fh:
        fh.write(sass)
    name, arch, counts = None, None, {}
    keys = ("HMMA", "LDG.E.128", "LDG.E.64", "LDG.E.CONSTANT", "LDL", "STL", "HFMA2", "FFMA", "FADD", "FMUL", "FMNMX",
            "LOP3", "SHF", "PRMT", "MUFU", "SHFL", "all")

    def flush():
        if name:
            print(f"{arch:7s} {name[:90]:90s} " + " ".join(f"{k}={counts.get(k, 0)}" for k in keys))
    for line in sass.splitlines():
        m = re.search(r"Function : (\S+)", line)
        if m:
            flush()
            name, counts = m.group(1), {}
            continue
        m = re.search(r"arch = (sm_\d+a?)", line)
        if m:
            arch = m.group(1)
        if re.match(r"\s+/\*[0-9a-f]{4,}\*/\s+\S", line):  # one instruction
            counts["all"] = counts.get("all", 0) + 1
        for k in keys[:-1]:
            if re.search(r"\b" + re.escape(k), line):
                counts[k] = counts.get(k, 0) + 1
    flush()


def cmd_profile(args):
    """A few launches to run under ncu (one of each kernel of interest). --variants: m:variant or
    m:variant:NxK or m:variant:NxK:group, comma-separated (default head 248320 x 5120, group 128);
    the variant `humming` is Humming's W4A16 layer on that shape (vLLM's kernel, the peer), `bf16`
    torch's x @ W.t() of a bf16 head of that shape (cuBLAS, the other peer), `read` a plain read of
    the int4 head's bytes (torch.sum over fp32 words, gpu.py's read floor; m is ignored). Every
    operand is made and every kernel compiled first; only the launches of the runs lie between
    cudaProfilerStart and cudaProfilerStop (ncu --profile-from-start off)."""
    import torch
    from gpu import humming_layer, int4_head_bytes
    L = Lib(args.lib)
    stream = torch.cuda.current_stream().cuda_stream
    runs = ["1:stream", "16:tile2x2", "64:wgtma64"]
    if args.variants:
        runs = args.variants.split(",")
    heads, calls = {}, []
    for run in runs:
        parts = run.split(":")
        m, v = int(parts[0]), parts[1]
        n, k = (int(s) for s in (parts[2] if len(parts) > 2 else "248320x5120").split("x"))
        group = int(parts[3]) if len(parts) > 3 else 128
        x = torch.randn(m, k, device="cuda").to(torch.bfloat16)
        if v == "humming":
            codes = torch.randint(0, 16, (n, k), dtype=torch.int32, device="cuda")
            scales = (torch.rand(n, k // group, device="cuda") * 0.01 + 1e-3).to(torch.bfloat16)
            layer = humming_layer(codes, scales, group)
            del codes
            calls.append(lambda layer=layer, x=x: layer(x))
            continue
        if v == "bf16":
            w = (torch.randn(n, k, device="cuda") * 0.02).to(torch.bfloat16)
            calls.append(lambda w=w, x=x: x @ w.t())
            continue
        if v == "read":
            words = torch.rand(int4_head_bytes(n, k, group) // 4, device="cuda")
            calls.append(lambda words=words: torch.sum(words))
            continue
        if (n, k, group) not in heads:
            w = (torch.randn(n, k, device="cuda") * 0.02).to(torch.bfloat16)
            packed = torch.empty((n, k // 8), dtype=torch.int32, device="cuda")
            scales = torch.empty((n, k // group), dtype=torch.int16, device="cuda")
            L.quantize(w, group, CLIP_MSE, packed, scales, stream)
            heads[(n, k, group)] = (packed, scales)
        packed, scales = heads[(n, k, group)]
        out = torch.empty((m, n), dtype=torch.int16, device="cuda")
        calls.append(lambda x=x.view(torch.int16), packed=packed, scales=scales, group=group, out=out, v=v:
                     L.apply(x, packed, scales, None, group, out, stream, VARIANTS[v]))
    for call in calls:  # run-time compilation (Humming's NVRTC kernels) and first-launch costs
        call()
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    for call in calls:
        call()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=("build", "check", "time", "refcheck", "sass", "profile"))
    ap.add_argument("--lib", default=DEFAULT_LIB)
    ap.add_argument("--log", default=os.path.join(ROOT, "build", "nvcc.log"))
    ap.add_argument("--big", action="store_true", help="also check heads whose packed bytes pass 2^31")
    ap.add_argument("--only-quantize", action="store_true", help="check: the quantizer only, no apply kernel")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--heads", help="comma-separated NxK heads for time (default: all)")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--variants", default="", help="check/time: only these variants (comma-separated)")
    ap.add_argument("--skip", default="", help="check: all variants but these")
    ap.add_argument("--no-peers", action="store_true", help="time: no quantize, bf16, fp8 or tinygemm timings")
    ap.add_argument("--ms", default="", help="token counts to time, e.g. 1,4,8 (default 1..256)")
    args = ap.parse_args()
    if args.mode == "build":
        build(args.lib, args.log)
    elif args.mode == "check":
        cmd_check(args)
    elif args.mode == "time":
        cmd_time(args)
    elif args.mode == "profile":
        cmd_profile(args)
    elif args.mode == "sass":
        cmd_sass(args)
    else:
        cmd_refcheck(args)


if __name__ == "__main__":
    main()
