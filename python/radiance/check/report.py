"""What ``check`` returns: one MethodResult per method inside a CheckResult, which prints as a
table and writes JSON (the plot is in plot.py)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Dict

import numpy as np

import radiance

from .plot import plot_result


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
        return format_table(self)

    def __str__(self):
        return format_table(self)

    def _repr_pretty_(self, printer, cycle):  # IPython / Jupyter
        printer.text(self.table())

    def plot(self, path=None):
        """A matplotlib Figure: the per-row weight error distribution and the logit error against
        the reference logit, one colour per method; saved as PNG to ``path`` when given."""
        return plot_result(self, path)


def format_table(result):
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
