"""What int4 costs a real model: the offline check of a quantized lm_head.

``check(weight, hidden)`` quantizes a head ``[vocab, hidden]`` with each method (``rtn``, ``mse``,
or any registered with ``register_method``), applies it to real final hidden states
``[tokens, hidden]`` and compares the logits with those of the unquantized head::

    import radiance.check
    result = radiance.check.check(head, hidden_states)
    print(result)            # a table, one column per method
    result.to_dict()         # the same numbers, JSON-ready

NumPy in and out; torch tensors are accepted too (CUDA tensors run quantize and apply on their GPU;
the statistics are always gathered on the host, in float64, over chunks of tokens and rows so that
a 250k-vocab head fits in memory).

The reference logits are ``x @ W.T`` in float32 with the same bf16-rounded activations that the
int4 head gets, so every difference reported comes from the weights (and the bf16 output that
``apply`` returns).
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, Optional, Sequence

import ml_dtypes
import numpy as np

import radiance

__all__ = [
    "check",
    "CheckResult",
    "MethodResult",
    "Method",
    "METHODS",
    "register_method",
    "choose_group_size",
    "DEFAULT_GROUP_SIZE",
    "GROUP_SIZES",
    "TOPK",
]

GROUP_SIZES = (32, 64, 128, 256)
# The group size that the vLLM hook deploys by default; the check measures it when it can.
DEFAULT_GROUP_SIZE = 128
TOPK = (1, 5, 16)
_ACCEPTED_DTYPES = (np.dtype(np.float32), np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))
# Host memory for one chunk of float32 logits; bounds the check's footprint for large vocabularies.
_LOGIT_CHUNK_BYTES = 128 << 20
_ROW_CHUNK_ELEMENTS = 32 << 20
_BINS = 40


# -- methods -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Method:
    """A way to turn a head into radiance's int4 format.

    ``quantize(weight, group_size)`` returns ``(packed, scales)`` in the layout of
    ``radiance.quantize_rows`` so that ``radiance.apply`` can run it.
    """

    name: str
    quantize: Callable
    description: str = ""


def _clip_method(clip):
    def quantize(weight, group_size):
        return radiance.quantize_rows(weight, group_size=group_size, clip=clip)

    return quantize


METHODS: Dict[str, Method] = {
    "rtn": Method("rtn", _clip_method("rtn"), "round to nearest, scale = absmax / 7"),
    "mse": Method("mse", _clip_method("mse"), "clip ratio per group by least squared error"),
}


def register_method(name, quantize, description=""):
    """Make ``name`` usable in ``check(methods=...)`` and ``radiance check --methods``."""
    if not isinstance(name, str) or not name:
        raise ValueError("method name must be a non-empty string")
    METHODS[name] = Method(name, quantize, description)
    return METHODS[name]


def _resolve_methods(methods):
    resolved = []
    for item in methods:
        if isinstance(item, Method):
            resolved.append(item)
        elif item in METHODS:
            resolved.append(METHODS[item])
        else:
            raise ValueError(f"unknown method {item!r}; known methods: {', '.join(METHODS)}")
    if not resolved:
        raise ValueError("methods is empty: name at least one of " + ", ".join(METHODS))
    names = [m.name for m in resolved]
    if len(set(names)) != len(names):
        raise ValueError(f"methods has duplicates: {names}")
    return resolved


def choose_group_size(hidden_size, group_size=None):
    """The group size to use for a head with ``hidden_size`` columns, and a note or None.

    Without a request: 128 (what a deployment uses) when it divides ``hidden_size``, else the
    largest of 64, 32 that does. A requested size must be allowed and divide ``hidden_size``.
    """
    dividing = [g for g in GROUP_SIZES if hidden_size % g == 0]
    if group_size is None:
        if DEFAULT_GROUP_SIZE in dividing:
            return DEFAULT_GROUP_SIZE, None
        smaller = [g for g in dividing if g < DEFAULT_GROUP_SIZE]
        if not smaller:
            raise ValueError(
                f"hidden size {hidden_size} is not a multiple of any allowed group size "
                f"({', '.join(map(str, GROUP_SIZES))}): radiance cannot quantize this head"
            )
        chosen = max(smaller)
        return chosen, (
            f"hidden size {hidden_size} is not a multiple of {DEFAULT_GROUP_SIZE}; "
            f"using group size {chosen} (pass group_size / --group-size to choose another)"
        )
    if isinstance(group_size, bool) or not isinstance(group_size, (int, np.integer)):
        raise TypeError(f"group_size must be an int, got {type(group_size).__name__}")
    group_size = int(group_size)
    if group_size not in GROUP_SIZES:
        raise ValueError(
            f"group_size must be one of {', '.join(map(str, GROUP_SIZES))}, got {group_size}"
        )
    if hidden_size % group_size:
        hint = ", ".join(map(str, sorted(dividing, reverse=True))) if dividing else "none"
        raise ValueError(
            f"group size {group_size} does not divide the hidden size {hidden_size} "
            f"({hidden_size} = {hidden_size // group_size} * {group_size} + "
            f"{hidden_size % group_size}); group sizes that divide it: {hint}"
        )
    return group_size, None


# -- results -------------------------------------------------------------------------------------


@dataclass
class MethodResult:
    """The numbers of one quantization method. Fractions are in [0, 1]; errors are relative."""

    method: str
    weight_rel_rms: float  # ||W_int4 - W|| / ||W||  (Frobenius)
    logit_rel_rms: float  # RMS(logits_int4 - logits) / RMS(logits)
    top1_agreement: float  # fraction of tokens whose argmax is unchanged
    topk_overlap: Dict[int, float]  # mean |top-k(ref) & top-k(int4)| / k
    kl_mean: float  # mean over tokens of KL(p_ref || p_int4), nats
    kl_p99: float
    kl_max: float
    row_error_percentiles: Dict[str, float]  # of the per-row relative weight error
    worst_rows: list  # rows with the largest logit error, largest first
    quantize_seconds: float
    logit_error_bins: dict  # RMS logit error binned by the reference logit
    row_rel_error: np.ndarray = field(repr=False, default=None)  # [vocab], for plots
    logit_sample: np.ndarray = field(repr=False, default=None)  # [n, 2] (ref, error), for plots

    def to_dict(self):
        return {
            "method": self.method,
            "weight_rel_rms": self.weight_rel_rms,
            "logit_rel_rms": self.logit_rel_rms,
            "top1_agreement": self.top1_agreement,
            "topk_overlap": {str(k): v for k, v in self.topk_overlap.items()},
            "kl_mean": self.kl_mean,
            "kl_p99": self.kl_p99,
            "kl_max": self.kl_max,
            "row_error_percentiles": dict(self.row_error_percentiles),
            "worst_rows": [dict(r) for r in self.worst_rows],
            "quantize_seconds": self.quantize_seconds,
            "logit_error_bins": self.logit_error_bins,
        }


@dataclass
class CheckResult:
    """All methods' numbers for one head and one set of hidden states.

    ``print(result)`` gives a table; ``result.to_dict()`` / ``result.to_json(path)`` the data.
    ``result["mse"]`` is the MethodResult of a method.
    """

    vocab_size: int
    hidden_size: int
    tokens: int
    group_size: int
    weight_dtype: str
    device: str
    methods: Dict[str, MethodResult]
    timing: dict
    notes: list
    source: dict = field(default_factory=dict)

    def __getitem__(self, method):
        return self.methods[method]

    def to_dict(self):
        return {
            "radiance_version": getattr(radiance, "__version__", None),
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "tokens": self.tokens,
            "group_size": self.group_size,
            "weight_dtype": self.weight_dtype,
            "device": self.device,
            "source": dict(self.source),
            "notes": list(self.notes),
            "methods": {name: m.to_dict() for name, m in self.methods.items()},
            "timing": self.timing,
        }

    def to_json(self, path=None, indent=2):
        """The report as JSON text; also written to ``path`` when given."""
        text = json.dumps(self.to_dict(), indent=indent, allow_nan=False)
        if path is not None:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text + "\n")
        return text

    def table(self):
        return _format_table(self)

    def __str__(self):
        return _format_table(self)

    def _repr_pretty_(self, printer, cycle):  # IPython / Jupyter
        printer.text(self.table())

    def plot(self, path=None):
        """A matplotlib Figure: the per-row weight error distribution and the logit error against
        the reference logit, one colour per method; saved as PNG to ``path`` when given."""
        return _plot(self, path)


def _format_table(result):
    names = list(result.methods)
    title = (
        f"radiance check: head {result.vocab_size} x {result.hidden_size} ({result.weight_dtype}), "
        f"{result.tokens} tokens, int4 group size {result.group_size}, device {result.device}"
    )
    rows = [
        ("weight error (relative RMS)", lambda m: f"{m.weight_rel_rms:.4f}"),
        ("logit error / logit RMS", lambda m: f"{m.logit_rel_rms:.4f}"),
        ("top-1 agreement", lambda m: f"{m.top1_agreement:.4f}"),
    ]
    for k in next(iter(result.methods.values())).topk_overlap:
        if k > 1:  # top-1 overlap is the top-1 agreement
            rows.append((f"top-{k} overlap", lambda m, k=k: f"{m.topk_overlap[k]:.4f}"))
    rows += [
        ("KL(ref || int4) mean [nats]", lambda m: f"{m.kl_mean:.5f}"),
        ("KL(ref || int4) p99 [nats]", lambda m: f"{m.kl_p99:.5f}"),
        ("row weight error p99", lambda m: f"{m.row_error_percentiles['p99']:.4f}"),
        ("quantize time [s]", lambda m: f"{m.quantize_seconds:.2f}"),
    ]
    label_width = max(len(r[0]) for r in rows) + 2
    cells = [[fmt(result.methods[n]) for n in names] for _, fmt in rows]
    col_width = max([len(n) for n in names] + [len(c) for row in cells for c in row]) + 3
    lines = [title, "", " " * label_width + "".join(n.rjust(col_width) for n in names)]
    for (label, _), row in zip(rows, cells):
        lines.append(label.ljust(label_width) + "".join(c.rjust(col_width) for c in row))
    shown = 3
    lines.append("")
    lines.append(f"worst rows (logit error / logit RMS, row weight error), top {shown}:")
    for name, m in result.methods.items():
        entries = []
        for r in m.worst_rows[:shown]:
            token = f" {r['token']!r}" if r.get("token") is not None else ""
            entries.append(
                f"{r['row']}{token} {r['logit_rel_rms']:.3f} ({r['weight_rel_rms']:.3f})"
            )
        lines.append(f"  {name}: " + ("; ".join(entries) if entries else "-"))
    timing = result.timing or {}
    if timing.get("batches"):
        lines.append("")
        lines.append(f"time of one head call on {timing['device']} (median), M = tokens per call:")
        for batch, t in timing["batches"].items():
            lines.append(
                f"  M={batch:<4} int4 apply {t['int4_ms']:8.2f} ms   unquantized "
                f"({timing['reference']}) {t['reference_ms']:8.2f} ms   "
                f"speedup {t['speedup']:.2f}x"
            )
    for note in result.notes:
        lines.append(f"note: {note}")
    return "\n".join(lines)


# -- array plumbing ------------------------------------------------------------------------------


def _torch_module():
    return sys.modules.get("torch")


def _is_torch(obj):
    torch = _torch_module()
    return torch is not None and isinstance(obj, torch.Tensor)


def _to_numpy(a):
    """A host NumPy array of ``a`` (NumPy or torch, any device); bf16 stays ml_dtypes.bfloat16."""
    if _is_torch(a):
        torch = _torch_module()
        t = a.detach().to("cpu")
        if t.dtype == torch.bfloat16:
            return t.contiguous().view(torch.int16).numpy().view(ml_dtypes.bfloat16)
        return t.numpy()
    return np.asarray(a)


def _float32(a):
    """float32 copy of a NumPy array; bf16 by a bit shift, which ml_dtypes' cast is slow at."""
    if a.dtype == ml_dtypes.bfloat16:
        return (np.ascontiguousarray(a).view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    return a.astype(np.float32)


def _numpy_to_torch(a, device):
    torch = _torch_module()
    a = np.ascontiguousarray(a)
    if a.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16).to(device)
    return torch.from_numpy(a).to(device)


def _dtype_name(a):
    if _is_torch(a):
        return str(a.dtype).replace("torch.", "")
    return str(np.asarray(a).dtype) if not hasattr(a, "dtype") else str(a.dtype)


def _validate(weight, hidden, bias):
    for name, a in (("weight", weight), ("hidden", hidden)):
        shape = tuple(a.shape)
        if len(shape) != 2:
            raise ValueError(f"{name} must be 2-D, got shape {shape}")
        if 0 in shape:
            raise ValueError(f"{name} is empty: shape {shape}")
        dtype = _dtype_name(a)
        if dtype not in ("float32", "float16", "bfloat16"):
            raise TypeError(
                f"{name} has unsupported dtype {dtype}; expected bfloat16, float16 or float32"
            )
    vocab, width = weight.shape
    if hidden.shape[1] != width:
        raise ValueError(
            f"head and hidden states do not match: the head is [{vocab}, {width}] (hidden size "
            f"{width}) but the hidden states are [{hidden.shape[0]}, {hidden.shape[1]}] "
            f"(hidden size {hidden.shape[1]})"
        )
    if bias is not None and tuple(bias.shape) != (vocab,):
        raise ValueError(f"bias must have shape ({vocab},), got {tuple(bias.shape)}")


class _NumpyBackend:
    """Quantize, dequantize and apply with NumPy arrays on the CPU."""

    def __init__(self, weight, bias):
        self.device = "cpu"
        self.weight = np.ascontiguousarray(weight)
        self.weight_f32 = _float32(self.weight)
        self.bias = None if bias is None else np.asarray(bias).astype(np.float32)
        self.bias_native = None if bias is None else np.asarray(bias)
        self.reference_name = "NumPy float32 matmul"

    def activations(self, hidden):
        return np.ascontiguousarray(_to_numpy(hidden).astype(ml_dtypes.bfloat16))

    def quantize(self, method, group_size):
        return method.quantize(self.weight, group_size)

    def weight_rows(self, r0, r1):
        return self.weight_f32[r0:r1]

    def dequantize_rows(self, packed, scales, r0, r1, group_size):
        return _to_numpy(radiance.dequantize(packed[r0:r1], scales[r0:r1], group_size))

    def reference_logits(self, x):
        y = _float32(x) @ self.weight_f32.T
        return y if self.bias is None else y + self.bias

    def int4_logits(self, x, packed, scales, group_size):
        y = radiance.apply(x, packed, scales, bias=self.bias_native, group_size=group_size)
        return _float32(_to_numpy(y))

    def timers(self, x, packed, scales, group_size):
        bias = self.bias

        x_f32 = _float32(x)

        def reference():
            y = x_f32 @ self.weight_f32.T
            return y if bias is None else y + bias

        def int4():
            return radiance.apply(x, packed, scales, bias=self.bias_native, group_size=group_size)

        return reference, int4, lambda: None


class _TorchBackend:
    """Quantize and apply with torch tensors on their device (the GPU kernels for CUDA)."""

    def __init__(self, weight, bias, device):
        torch = _torch_module()
        self.torch = torch
        if not _is_torch(weight):
            weight = _numpy_to_torch(weight, device)
        self.weight = weight.detach().to(device).contiguous()
        self.device = str(self.weight.device)
        self.weight_f32 = self.weight.float()
        if bias is not None and not _is_torch(bias):
            bias = _numpy_to_torch(np.asarray(bias), device)
        self.bias = None if bias is None else bias.detach().to(self.weight.device)
        self.reference_name = "torch.nn.functional.linear bfloat16"

    def activations(self, hidden):
        torch = self.torch
        if not _is_torch(hidden):
            hidden = _numpy_to_torch(np.asarray(hidden), self.weight.device)
        return hidden.detach().to(self.weight.device).to(torch.bfloat16).contiguous()

    def quantize(self, method, group_size):
        return method.quantize(self.weight, group_size)

    def weight_rows(self, r0, r1):
        return _to_numpy(self.weight_f32[r0:r1])

    def dequantize_rows(self, packed, scales, r0, r1, group_size):
        return _to_numpy(radiance.dequantize(packed[r0:r1], scales[r0:r1], group_size))

    def reference_logits(self, x):
        torch = self.torch
        bias = None if self.bias is None else self.bias.float()
        return _to_numpy(torch.nn.functional.linear(x.float(), self.weight_f32, bias))

    def int4_logits(self, x, packed, scales, group_size):
        bias = None if self.bias is None else self.bias.to(self.torch.bfloat16)
        y = radiance.apply(x, packed, scales, bias=bias, group_size=group_size)
        return _float32(_to_numpy(y))

    def timers(self, x, packed, scales, group_size):
        torch = self.torch
        # The unquantized head as a server runs it: bf16 weights and activations.
        weight = self.weight.to(torch.bfloat16)
        x_ref = x
        bias_ref = None if self.bias is None else self.bias.to(torch.bfloat16)
        bias_int4 = bias_ref

        def reference():
            return torch.nn.functional.linear(x_ref, weight, bias_ref)

        def int4():
            return radiance.apply(x, packed, scales, bias=bias_int4, group_size=group_size)

        if self.weight.device.type == "cuda":
            sync = torch.cuda.synchronize
        else:
            sync = lambda: None  # noqa: E731
        return reference, int4, sync


def _median_ms(fn, sync, min_repeats=3, max_repeats=50, budget_s=0.5):
    fn()
    sync()
    times = []
    start = time.perf_counter()
    while len(times) < max_repeats:
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
        if len(times) >= min_repeats and time.perf_counter() - start > budget_s:
            break
    return float(np.median(times) * 1e3)


# -- statistics ----------------------------------------------------------------------------------


def _lse(logits):
    """log(sum(exp(row))) of each row of float32 logits, in float64."""
    top = logits.max(axis=1, keepdims=True)
    total = np.exp(logits - top).sum(axis=1, dtype=np.float64)
    return top[:, 0].astype(np.float64) + np.log(total)


def _softmax(logits, lse_rows):
    return np.exp(logits - lse_rows[:, None].astype(np.float32))


def _top_sorted(logits, k):
    """Indices of the k largest logits of each row, largest first (ties: lower index first)."""
    k = min(k, logits.shape[1])
    part = np.argpartition(-logits, k - 1, axis=1)[:, :k]
    vals = np.take_along_axis(logits, part, axis=1)
    order = np.lexsort((part, -vals), axis=1)
    return np.take_along_axis(part, order, axis=1)


class _LogitStats:
    """Running sums over token chunks for one method."""

    def __init__(self, vocab, topk, nbins):
        self.topk = topk
        self.err_sq = 0.0
        self.top1_agree = 0
        self.overlap = {k: 0.0 for k in topk}
        self.kl = []
        self.column_err_sq = np.zeros(vocab, np.float64)
        self.bin_count = np.zeros(nbins, np.int64)
        self.bin_err_sq = np.zeros(nbins, np.float64)
        self.bin_err_max = np.zeros(nbins, np.float32)
        self.sample = []

    def add(self, ref, ref_top, ref_lse, ref_p, q, bins, sample_idx):
        err = q - ref
        # Per-column sums over a chunk of a few hundred tokens are exact enough in float32;
        # the totals are float64.
        column = np.einsum("ij,ij->j", err, err).astype(np.float64)
        self.column_err_sq += column
        self.err_sq += float(column.sum())
        q_top = _top_sorted(q, max(self.topk))
        self.top1_agree += int((q_top[:, 0] == ref_top[:, 0]).sum())
        for k in self.topk:
            hits = (ref_top[:, :k, None] == q_top[:, None, :k]).any(axis=2).sum(axis=1)
            self.overlap[k] += float((hits / k).sum())
        # KL(p||q) = sum p (ref - q) + lse(q) - lse(ref), without a float64 copy of the logits.
        kl = _lse(q) - ref_lse - (ref_p * err).sum(axis=1, dtype=np.float64)
        self.kl.append(kl)
        nbins = len(self.bin_count)
        flat_err = np.abs(err).ravel()
        self.bin_count += np.bincount(bins, minlength=nbins)
        self.bin_err_sq += np.bincount(bins, weights=flat_err * flat_err, minlength=nbins)
        np.maximum.at(self.bin_err_max, bins, flat_err)
        self.sample.append(np.stack([ref.ravel()[sample_idx], err.ravel()[sample_idx]], axis=1))


def _row_chunks(rows, cols):
    step = max(1, _ROW_CHUNK_ELEMENTS // max(cols, 1))
    return [(r0, min(rows, r0 + step)) for r0 in range(0, rows, step)]


def _progress(iterable, enabled, **kwargs):
    if not enabled:
        return iterable
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return iterable
    return tqdm(iterable, file=sys.stderr, **kwargs)


def check(
    weight,
    hidden,
    *,
    methods: Sequence = ("rtn", "mse"),
    group_size: Optional[int] = None,
    bias=None,
    topk: Sequence[int] = TOPK,
    worst: int = 10,
    device: Optional[str] = None,
    timing: bool = True,
    timing_batches: Sequence[int] = (1, 16),
    token_text: Optional[Callable[[int], str]] = None,
    progress: bool = False,
    sample_points: int = 20000,
    source: Optional[dict] = None,
) -> CheckResult:
    """Measure what int4 costs a head ``weight [vocab, hidden]`` on ``hidden [tokens, hidden]``.

    ``weight`` and ``hidden`` are NumPy arrays (bf16 as ``ml_dtypes.bfloat16``, fp16 or fp32) or
    torch tensors; ``hidden`` must be the final hidden states that feed the head (after the last
    norm). ``group_size=None`` picks 128, or the largest allowed size that divides the hidden
    size (announced in ``result.notes``). ``device`` ("cpu", "cuda", "cuda:1") moves both to a
    torch device; by default NumPy inputs run on the CPU and torch tensors where they are.
    ``token_text(row)`` names vocabulary rows in the worst-rows list. The result is deterministic
    for the same inputs, apart from ``timing``.
    """
    _validate(weight, hidden, bias)
    resolved = _resolve_methods(methods)
    topk = tuple(sorted({int(k) for k in topk}))
    if not topk or topk[0] < 1:
        raise ValueError(f"topk must be positive integers, got {topk}")
    vocab, width = (int(s) for s in weight.shape)
    tokens = int(hidden.shape[0])
    group_size, note = choose_group_size(width, group_size)
    notes = [note] if note else []

    use_torch = device is not None or _is_torch(weight) or _is_torch(hidden)
    if use_torch:
        if _torch_module() is None:
            import torch  # noqa: F401  (device= needs torch; raises ImportError when missing)
        if device is None:
            device = weight.device if _is_torch(weight) else hidden.device
        backend = _TorchBackend(weight, bias, device)
    else:
        backend = _NumpyBackend(weight, bias)
    x_all = backend.activations(hidden)

    # Quantize every method up front: the logit pass below visits each token chunk once.
    quantized = {}
    quantize_seconds = {}
    for method in _progress(resolved, progress, desc="quantize", unit="method"):
        t0 = time.perf_counter()
        packed, scales = backend.quantize(method, group_size)
        if backend.device.startswith("cuda"):
            backend.torch.cuda.synchronize()
        quantize_seconds[method.name] = time.perf_counter() - t0
        quantized[method.name] = (packed, scales)

    # Weights: per-row relative error.
    row_ref_sq = np.zeros(vocab, np.float64)
    row_err_sq = {m.name: np.zeros(vocab, np.float64) for m in resolved}
    chunks = _row_chunks(vocab, width)
    for r0, r1 in _progress(chunks, progress, desc="weight error", unit="chunk"):
        w = backend.weight_rows(r0, r1).astype(np.float64)
        row_ref_sq[r0:r1] = np.einsum("ij,ij->i", w, w)
        for name, (packed, scales) in quantized.items():
            d = backend.dequantize_rows(packed, scales, r0, r1, group_size).astype(np.float64) - w
            row_err_sq[name][r0:r1] = np.einsum("ij,ij->i", d, d)

    # Logits: one pass over token chunks, the reference computed once per chunk.
    chunk_tokens = max(1, min(tokens, _LOGIT_CHUNK_BYTES // (4 * vocab)))
    first = backend.reference_logits(x_all[:chunk_tokens])
    lo, hi = float(first.min()), float(first.max())
    margin = 0.25 * (hi - lo) + 1e-6
    edges = np.linspace(lo - margin, hi + margin, _BINS + 1)
    bin_width = np.float32((edges[-1] - edges[0]) / _BINS)
    rng = np.random.default_rng(0)
    per_chunk_sample = max(1, sample_points // math.ceil(tokens / chunk_tokens))
    stats = {m.name: _LogitStats(vocab, topk, _BINS) for m in resolved}
    ref_sq = 0.0
    token_chunks = [(t0, min(tokens, t0 + chunk_tokens)) for t0 in range(0, tokens, chunk_tokens)]
    for t0, t1 in _progress(token_chunks, progress, desc="logits", unit="chunk"):
        ref = first if t0 == 0 else backend.reference_logits(x_all[t0:t1])
        ref_sq += float(np.einsum("ij,ij->j", ref, ref).sum(dtype=np.float64))
        ref_top = _top_sorted(ref, max(topk))
        ref_lse = _lse(ref)
        ref_p = _softmax(ref, ref_lse)
        sample_idx = rng.choice(ref.size, size=min(per_chunk_sample, ref.size), replace=False)
        sample_idx.sort()
        bins = np.clip(((ref.ravel() - edges[0]) / bin_width).astype(np.int64), 0, _BINS - 1)
        for name, (packed, scales) in quantized.items():
            q = backend.int4_logits(x_all[t0:t1], packed, scales, group_size)
            stats[name].add(ref, ref_top, ref_lse, ref_p, q, bins, sample_idx)

    logit_rms = math.sqrt(ref_sq / (tokens * vocab))
    total_ref_sq = float(row_ref_sq.sum())
    results = {}
    for method in resolved:
        name = method.name
        s = stats[name]
        err_rows = row_err_sq[name]
        with np.errstate(divide="ignore", invalid="ignore"):
            row_rel = np.sqrt(np.where(row_ref_sq > 0, err_rows / row_ref_sq, 0.0))
        column_rel = np.sqrt(s.column_err_sq / tokens) / max(logit_rms, 1e-30)
        order = np.lexsort((np.arange(vocab), -column_rel))[: max(0, int(worst))]
        worst_rows = []
        for row in order:
            entry = {
                "row": int(row),
                "logit_rel_rms": float(column_rel[row]),
                "weight_rel_rms": float(row_rel[row]),
                "row_norm": float(math.sqrt(row_ref_sq[row])),
            }
            if token_text is not None:
                text = token_text(int(row))
                entry["token"] = None if text is None else str(text)
            worst_rows.append(entry)
        kl = np.concatenate(s.kl)
        counts = s.bin_count
        with np.errstate(divide="ignore", invalid="ignore"):
            bin_rms = np.where(counts > 0, np.sqrt(s.bin_err_sq / np.maximum(counts, 1)), 0.0)
        results[name] = MethodResult(
            method=name,
            weight_rel_rms=float(math.sqrt(err_rows.sum() / total_ref_sq)) if total_ref_sq else 0.0,
            logit_rel_rms=float(math.sqrt(s.err_sq / ref_sq)) if ref_sq else 0.0,
            top1_agreement=s.top1_agree / tokens,
            topk_overlap={k: s.overlap[k] / tokens for k in topk},
            kl_mean=float(max(kl.mean(), 0.0)),
            kl_p99=float(max(np.percentile(kl, 99), 0.0)),
            kl_max=float(max(kl.max(), 0.0)),
            row_error_percentiles={f"p{p}": float(np.percentile(row_rel, p)) for p in (50, 90, 99)}
            | {"max": float(row_rel.max())},
            worst_rows=worst_rows,
            quantize_seconds=float(quantize_seconds[name]),
            logit_error_bins={
                "edges": [float(e) for e in edges],
                "count": [int(c) for c in counts],
                "rms_error": [float(v) for v in bin_rms],
                "max_error": [float(v) for v in s.bin_err_max],
            },
            row_rel_error=row_rel,
            logit_sample=np.concatenate(s.sample),
        )

    timing_report = {}
    if timing:
        timing_report = _time_apply(
            backend, x_all, quantized[resolved[0].name], group_size, timing_batches, progress
        )
    return CheckResult(
        vocab_size=vocab,
        hidden_size=width,
        tokens=tokens,
        group_size=group_size,
        weight_dtype=_dtype_name(weight),
        device=backend.device,
        methods=results,
        timing=timing_report,
        notes=notes,
        source=dict(source or {}),
    )


def _time_apply(backend, x_all, quantized, group_size, batches, progress):
    packed, scales = quantized
    report = {"device": backend.device, "reference": backend.reference_name, "batches": {}}
    tokens = x_all.shape[0]
    for batch in _progress(list(batches), progress, desc="timing", unit="batch"):
        batch = int(batch)
        if batch < 1:
            raise ValueError(f"timing_batches must be positive, got {batch}")
        x = x_all[: min(batch, tokens)]
        if x.shape[0] < batch:  # fewer tokens than the batch: repeat rows, timing needs no meaning
            reps = math.ceil(batch / x.shape[0])
            x = (x.repeat(reps, 1) if _is_torch(x) else np.tile(x, (reps, 1)))[:batch]
        reference, int4, sync = backend.timers(x, packed, scales, group_size)
        reference_ms = _median_ms(reference, sync)
        int4_ms = _median_ms(int4, sync)
        report["batches"][str(batch)] = {
            "int4_ms": int4_ms,
            "reference_ms": reference_ms,
            "speedup": reference_ms / int4_ms if int4_ms > 0 else float("inf"),
        }
    return report


def _plot(result, path):
    import matplotlib

    if path is not None and "matplotlib.pyplot" not in sys.modules:
        matplotlib.use("Agg")  # a file is wanted: no screen needed
    import matplotlib.pyplot as plt

    fig, (ax_rows, ax_logits) = plt.subplots(1, 2, figsize=(12, 4.8), constrained_layout=True)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    all_rows = np.concatenate([m.row_rel_error for m in result.methods.values()])
    high = float(all_rows.max()) * 1.02 or 1.0
    edges = np.linspace(0.0, high, 81)
    for i, (name, m) in enumerate(result.methods.items()):
        color = colors[i % len(colors)]
        ax_rows.hist(
            np.clip(m.row_rel_error, 0, high),
            bins=edges,
            histtype="step",
            linewidth=1.5,
            color=color,
            label=f"{name}: median {m.row_error_percentiles['p50']:.4f}, "
            f"p99 {m.row_error_percentiles['p99']:.4f}",
        )
        sample = m.logit_sample
        ax_logits.scatter(
            sample[:, 0], np.abs(sample[:, 1]), s=2, alpha=0.15, color=color, rasterized=True
        )
        bins = m.logit_error_bins
        centers = 0.5 * (np.asarray(bins["edges"][:-1]) + np.asarray(bins["edges"][1:]))
        counts = np.asarray(bins["count"])
        keep = counts >= 20
        ax_logits.plot(
            centers[keep],
            np.asarray(bins["rms_error"])[keep],
            color=color,
            linewidth=2,
            label=f"{name}: RMS error (logit RMS error {m.logit_rel_rms:.4f} of logit RMS)",
        )
        ax_logits.plot(
            centers[keep],
            np.asarray(bins["max_error"])[keep],
            color=color,
            linewidth=1,
            linestyle="--",
            label=f"{name}: max error",
        )
    ax_rows.set_yscale("log")
    ax_rows.set_xlabel("relative RMS error of a row (a vocabulary entry)")
    ax_rows.set_ylabel("rows")
    ax_rows.set_title(f"per-row weight error, {result.vocab_size} rows")
    ax_rows.legend(fontsize=8)
    ax_logits.set_yscale("log")
    ax_logits.set_xlabel("reference logit (unquantized head)")
    ax_logits.set_ylabel("|int4 logit - reference logit|")
    ax_logits.set_title(f"logit error vs logit, {result.tokens} tokens (dots: a sample)")
    ax_logits.legend(fontsize=8, loc="lower right")
    fig.suptitle(
        f"radiance check: head {result.vocab_size} x {result.hidden_size}, "
        f"int4 group size {result.group_size}"
        + (f" ({os.path.basename(result.source['path'])})" if result.source.get("path") else "")
    )
    if path is not None:
        fig.savefig(path, dpi=110)
        plt.close(fig)
    return fig
