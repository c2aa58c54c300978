"""``check()``: quantize a head with each method, run it on real hidden states, and compare its
logits with the unquantized head's.

The order of the work: validate; split off the calibration tokens when a method needs E[x²] and
none was given (those tokens are never evaluated); quantize every method once; the per-row weight
error in row chunks; then one pass over the evaluation tokens in chunks that computes the
reference logits once per chunk and feeds every method's logits to its statistics; then the
timing of one int4 head call.
"""

from __future__ import annotations

import math
import sys
import time
from typing import Callable, Optional, Sequence

import numpy as np

from radiance import calibration, peer_formats

from .backends import (
    NumpyBackend,
    TorchBackend,
    dtype_name,
    is_torch,
    median_ms,
    quantize,
    to_numpy,
    torch_module,
)
from .methods import DEFAULT_METHODS, choose_group_size, resolve_methods
from .report import CheckResult, MethodResult
from .stats import LogitStats, log_sum_exp, softmax, top_sorted, true_token_log_prob

TOPK = (1, 5, 16)
# The tail of the per-token KL that the report gives beside its mean (as llama.cpp does).
KL_PERCENTILES = (90, 99, 99.9)
# Host memory for one chunk of float32 logits; bounds the check's footprint for large vocabularies.
_LOGIT_CHUNK_BYTES = 128 << 20
# Also few enough tokens per chunk that the progress bar moves on a small head.
_LOGIT_CHUNK_TOKENS = 128
_ROW_CHUNK_ELEMENTS = 32 << 20
_BINS = 40


def _validate(weight, hidden, bias):
    for name, a in (("weight", weight), ("hidden", hidden)):
        shape = tuple(a.shape)
        if len(shape) != 2:
            raise ValueError(f"{name} must be 2-D, got shape {shape}")
        if 0 in shape:
            raise ValueError(f"{name} is empty: shape {shape}")
        dtype = dtype_name(a)
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


def _activation_sq_argument(activation_sq, width):
    """(float32 [width], token count or None) of ``activation_sq``: an array or a Stats."""
    tokens = None
    if isinstance(activation_sq, calibration.Stats):
        tokens = activation_sq.tokens
        activation_sq = activation_sq.activation_sq
    a = np.asarray(to_numpy(activation_sq))
    if a.ndim != 1 or a.shape[0] != width:
        raise ValueError(
            f"activation_sq must be [hidden] = [{width}] for this head, got shape {a.shape}"
        )
    a = a.astype(np.float32)
    bad = np.flatnonzero(~(np.isfinite(a) & (a >= 0)))
    if bad.size:
        raise ValueError(
            f"activation_sq[{bad[0]}] is {a[bad[0]]}; every entry must be finite and >= 0"
        )
    return a, tokens


def _targets_argument(targets, tokens, vocab):
    """``targets`` as int64 [tokens], -1 where a row has no known next token."""
    t = np.asarray(to_numpy(targets))
    if t.ndim != 1 or t.shape[0] != tokens:
        raise ValueError(
            f"targets must be [tokens] = [{tokens}] (the next token id of each row of hidden), "
            f"got shape {t.shape}"
        )
    if t.dtype.kind not in "iu":
        raise TypeError(f"targets must be integer token ids, got {t.dtype}")
    t = t.astype(np.int64)
    past = np.flatnonzero(t >= vocab)
    if past.size:
        raise ValueError(
            f"targets[{past[0]}] is {t[past[0]]}, past the head's vocabulary of {vocab} rows"
        )
    return np.where(t < 0, -1, t)


# act calibrates on this fraction of the tokens, the first ones; the rest are evaluated.
DEFAULT_CALIBRATION_FRACTION = 0.5


def split_tokens(tokens, calibration_fraction=DEFAULT_CALIBRATION_FRACTION):
    """(calibration rows, evaluation rows) of ``tokens`` rows: the first part calibrates. Either
    range may be empty; ``check()`` refuses that, the ``radiance check`` command says what to
    change before it computes any hidden state."""
    if isinstance(calibration_fraction, bool) or not 0 < calibration_fraction < 1:
        raise ValueError(
            f"calibration_fraction must be between 0 and 1 (exclusive), got "
            f"{calibration_fraction!r}"
        )
    calibration_tokens = int(tokens * calibration_fraction)
    return range(0, calibration_tokens), range(calibration_tokens, tokens)


def check(
    weight,
    hidden,
    *,
    methods: Sequence = DEFAULT_METHODS,
    group_size: Optional[int] = None,
    bias=None,
    activation_sq=None,
    calibration_fraction: float = DEFAULT_CALIBRATION_FRACTION,
    topk: Sequence[int] = TOPK,
    worst: int = 10,
    device: Optional[str] = None,
    timing: bool = True,
    timing_batches: Sequence[int] = (1, 16),
    token_text: Optional[Callable[[int], str]] = None,
    progress: bool = False,
    sample_points: int = 20000,
    source: Optional[dict] = None,
    targets=None,
) -> CheckResult:
    """Measure what a cheaper head costs ``weight [vocab, hidden]`` on ``hidden [tokens, hidden]``.

    ``weight`` and ``hidden`` are NumPy arrays (bf16 as ``ml_dtypes.bfloat16``, fp16 or fp32) or
    torch tensors; ``hidden`` must be the final hidden states that feed the head (after the last
    norm). ``methods``: int4 ``rtn``, ``mse``, ``act`` and the peer formats ``fp8``, ``nvfp4``
    (see methods.py). ``group_size=None`` picks 128, or the largest allowed size that divides the
    hidden size (announced in ``result.notes``).

    ``act`` needs E[x²] per hidden channel. ``activation_sq`` gives it (an array [hidden] or a
    ``radiance.calibration.Stats``; then every row of ``hidden`` is evaluated, so it must come
    from other tokens). Without it, the first ``calibration_fraction`` of the rows of ``hidden``
    calibrate and every method is evaluated on the other rows only; ``result.calibration`` says
    which.

    ``device`` ("cpu", "cuda", "cuda:1") moves both to a torch device; by default NumPy inputs
    run on the CPU and torch tensors where they are. ``token_text(row)`` names vocabulary rows in
    the worst-rows list. The result is deterministic for the same inputs, apart from ``timing``.

    ``targets`` (int [tokens], the token that follows each row of ``hidden`` in the text;
    negative where unknown) adds the perplexity of the text under each head, its ratio to the
    reference head's, and the RMS change of the true token's probability.
    """
    _validate(weight, hidden, bias)
    resolved = resolve_methods(methods)
    topk = tuple(sorted({int(k) for k in topk}))
    if not topk or topk[0] < 1:
        raise ValueError(f"topk must be positive integers, got {topk}")
    if isinstance(worst, bool) or not isinstance(worst, (int, np.integer)) or worst < 0:
        raise ValueError(f"worst must be a non-negative int, got {worst!r}")
    vocab, width = (int(s) for s in weight.shape)
    group_size, note = choose_group_size(width, group_size)
    notes = [note] if note else []

    all_tokens = int(hidden.shape[0])
    if targets is not None:
        targets = _targets_argument(targets, all_tokens, vocab)
    if activation_sq is not None:
        activation_sq, stats_tokens = _activation_sq_argument(activation_sq, width)
        calibration_report = {
            "source": "given",
            "tokens": stats_tokens,
            "calibration_rows": None,
            "evaluation_rows": [0, all_tokens],
        }
    elif any(m.needs_activation_sq for m in resolved):
        calibration_rows, evaluation_rows = split_tokens(all_tokens, calibration_fraction)
        if not calibration_rows or not evaluation_rows:
            raise ValueError(
                f"{all_tokens} tokens cannot be split into calibration and evaluation tokens "
                f"(calibration_fraction {calibration_fraction}); give more hidden states"
            )
        activation_sq = calibration.compute_activation_sq(
            to_numpy(hidden[calibration_rows.start : calibration_rows.stop])
        )
        hidden = hidden[evaluation_rows.start : evaluation_rows.stop]
        if targets is not None:
            targets = targets[evaluation_rows.start : evaluation_rows.stop]
        calibration_report = {
            "source": "split",
            "tokens": len(calibration_rows),
            "calibration_rows": [calibration_rows.start, calibration_rows.stop],
            "evaluation_rows": [evaluation_rows.start, evaluation_rows.stop],
        }
    else:
        calibration_report = {
            "source": None,
            "tokens": 0,
            "calibration_rows": None,
            "evaluation_rows": [0, all_tokens],
        }
    tokens = int(hidden.shape[0])

    use_torch = device is not None or is_torch(weight) or is_torch(hidden)
    if use_torch:
        if torch_module() is None:
            import torch  # noqa: F401  (device= needs torch; raises ImportError when missing)
        if device is None:
            device = weight.device if is_torch(weight) else hidden.device
        backend = TorchBackend(weight, bias, device)
    else:
        backend = NumpyBackend(weight, bias)
    x_all = backend.activations(hidden)

    # Quantize every method up front: the logit pass below visits each token chunk once.
    heads = {}
    quantize_seconds = {}
    for method in _progress(resolved, progress, desc="quantize", unit="method"):
        t0 = time.perf_counter()
        heads[method.name] = quantize(backend, method, group_size, activation_sq)
        if backend.device.startswith("cuda"):
            backend.torch.cuda.synchronize()
        quantize_seconds[method.name] = time.perf_counter() - t0

    # Weights: per-row relative error.
    row_ref_sq = np.zeros(vocab, np.float64)
    row_err_sq = {m.name: np.zeros(vocab, np.float64) for m in resolved}
    chunks = _row_chunks(vocab, width)
    for r0, r1 in _progress(chunks, progress, desc="weight error", unit="chunk"):
        w = backend.weight_rows(r0, r1).astype(np.float64)
        row_ref_sq[r0:r1] = np.einsum("ij,ij->i", w, w)
        for name, head in heads.items():
            d = head.dequantize_rows(r0, r1).astype(np.float64) - w
            row_err_sq[name][r0:r1] = np.einsum("ij,ij->i", d, d)

    # Logits: one pass over token chunks, the reference computed once per chunk.
    chunk_tokens = max(1, min(tokens, _LOGIT_CHUNK_TOKENS, _LOGIT_CHUNK_BYTES // (4 * vocab)))
    first = backend.reference_logits(x_all[:chunk_tokens])
    lo, hi = float(first.min()), float(first.max())
    margin = 0.25 * (hi - lo) + 1e-6
    edges = np.linspace(lo - margin, hi + margin, _BINS + 1)
    bin_width = np.float32((edges[-1] - edges[0]) / _BINS)
    rng = np.random.default_rng(0)
    per_chunk_sample = max(1, sample_points // math.ceil(tokens / chunk_tokens))
    stats = {m.name: LogitStats(vocab, topk, _BINS) for m in resolved}
    ref_sq = 0.0
    ref_nll = []
    token_chunks = [(t0, min(tokens, t0 + chunk_tokens)) for t0 in range(0, tokens, chunk_tokens)]
    for t0, t1 in _progress(token_chunks, progress, desc="logits", unit="chunk"):
        ref = first if t0 == 0 else backend.reference_logits(x_all[t0:t1])
        ref_sq += float(np.einsum("ij,ij->j", ref, ref).sum(dtype=np.float64))
        ref_top = top_sorted(ref, max(topk))
        ref_lse = log_sum_exp(ref)
        ref_p = softmax(ref, ref_lse)
        sample_idx = rng.choice(ref.size, size=min(per_chunk_sample, ref.size), replace=False)
        sample_idx.sort()
        bins = np.clip(((ref.ravel() - edges[0]) / bin_width).astype(np.int64), 0, _BINS - 1)
        chunk_targets = ref_log_p = None
        if targets is not None:
            chunk_targets = targets[t0:t1]
            _, ref_log_p = true_token_log_prob(ref, ref_lse, chunk_targets)
            ref_nll.append(-ref_log_p)
        for name, head in heads.items():
            q = head.logits(x_all[t0:t1])
            stats[name].add(
                ref, ref_top, ref_lse, ref_p, q, bins, sample_idx, chunk_targets, ref_log_p
            )

    logit_rms = math.sqrt(ref_sq / (tokens * vocab))
    ref_nll = np.concatenate(ref_nll) if ref_nll else np.zeros(0)
    reference_perplexity = float(np.exp(ref_nll.mean())) if ref_nll.size else None
    total_ref_sq = float(row_ref_sq.sum())
    results = {}
    for method in resolved:
        name = method.name
        s = stats[name]
        err_rows = row_err_sq[name]
        with np.errstate(divide="ignore", invalid="ignore"):
            row_rel = np.sqrt(np.where(row_ref_sq > 0, err_rows / row_ref_sq, 0.0))
        column_rel = np.sqrt(s.column_err_sq / tokens) / max(logit_rms, 1e-30)
        order = np.lexsort((np.arange(vocab), -column_rel))[: int(worst)]
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
        kl_tail = [max(float(v), 0.0) for v in np.percentile(kl, KL_PERCENTILES)]
        perplexity = perplexity_ratio = true_token_prob_change_rms = None
        if ref_nll.size:
            nll = np.concatenate(s.nll)
            perplexity = float(np.exp(nll.mean()))
            # exp of the mean log-ratio: the ratio without the rounding of two large numbers
            perplexity_ratio = float(np.exp((nll - ref_nll).mean()))
            change = np.concatenate(s.true_prob_change)
            true_token_prob_change_rms = float(np.sqrt(np.mean(change * change)))
        tv = np.concatenate(s.tv)
        counts = s.bin_count
        with np.errstate(divide="ignore", invalid="ignore"):
            bin_rms = np.where(counts > 0, np.sqrt(s.bin_err_sq / np.maximum(counts, 1)), 0.0)
        results[name] = MethodResult(
            method=name,
            format=method.format,
            weight_rel_rms=float(math.sqrt(err_rows.sum() / total_ref_sq)) if total_ref_sq else 0.0,
            logit_rel_rms=float(math.sqrt(s.err_sq / ref_sq)) if ref_sq else 0.0,
            top1_agreement=s.top1_agree / tokens,
            topk_overlap={k: s.overlap[k] / tokens for k in topk},
            kl_mean=float(max(kl.mean(), 0.0)),
            kl_p90=kl_tail[0],
            kl_p99=kl_tail[1],
            kl_p999=kl_tail[2],
            kl_max=float(max(kl.max(), 0.0)),
            expected_acceptance=float(np.clip(1.0 - tv.mean(), 0.0, 1.0)),
            bytes_per_step=int(heads[name].bytes_per_step()),
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
            perplexity=perplexity,
            perplexity_ratio=perplexity_ratio,
            true_token_prob_change_rms=true_token_prob_change_rms,
        )

    timing_report = {}
    int4_names = [m.name for m in resolved if m.format == "int4"]
    if timing and int4_names:
        head = heads[int4_names[0]]
        timing_report = _time_apply(
            backend, x_all, (head.packed, head.scales), group_size, timing_batches, progress
        )
    elif timing:
        notes.append("no int4 method among the methods: apply was not timed")
    return CheckResult(
        vocab_size=vocab,
        hidden_size=width,
        tokens=tokens,
        group_size=group_size,
        weight_dtype=dtype_name(weight),
        device=backend.device,
        methods=results,
        timing=timing_report,
        notes=notes,
        source=dict(source or {}),
        calibration=calibration_report,
        bytes_per_step_bf16=peer_formats.bytes_per_step("bf16", vocab, width),
        activation_sq=activation_sq,
        reference_perplexity=reference_perplexity,
        perplexity_tokens=int(ref_nll.size),
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
            x = (x.repeat(reps, 1) if is_torch(x) else np.tile(x, (reps, 1)))[:batch]
        reference, int4, sync = backend.timers(x, packed, scales, group_size)
        reference_ms = median_ms(reference, sync)
        int4_ms = median_ms(int4, sync)
        report["batches"][str(batch)] = {
            "int4_ms": int4_ms,
            "reference_ms": reference_ms,
            "speedup": reference_ms / int4_ms if int4_ms > 0 else float("inf"),
        }
    return report

