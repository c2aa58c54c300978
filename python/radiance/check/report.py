"""What ``check`` returns: one MethodResult per method inside a CheckResult, which prints as a
table and writes JSON (the plot is in plot.py), and the rule a head must meet to replace the
model's own head."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Dict

import numpy as np

import radiance

from .plot import plot_result


# The README's rule for replacing the model's own head (docs: "What is acceptable").
RULE_TOP1 = 0.99
RULE_KL = 0.01
RULE_TEXT = f"top-1 agreement >= {RULE_TOP1} and mean KL <= {RULE_KL} nats"


def meets_rule(top1_agreement, kl_mean):
    """Whether a head with these numbers may replace the model's own head (the README's rule)."""
    return top1_agreement >= RULE_TOP1 and kl_mean <= RULE_KL


@dataclass
class MethodResult:
    """The numbers of one method. Fractions are in [0, 1]; errors are relative."""

    method: str
    format: str  # "int4", "fp8" or "nvfp4"
    weight_rel_rms: float  # ||W_quant - W|| / ||W||  (Frobenius)
    logit_rel_rms: float  # RMS(logits_quant - logits) / RMS(logits)
    top1_agreement: float  # fraction of tokens whose argmax is unchanged (= greedy acceptance)
    topk_overlap: Dict[int, float]  # mean |top-k(ref) & top-k(quant)| / k
    kl_mean: float  # mean over tokens of KL(p_ref || p_quant), nats
    kl_p90: float  # percentiles of the per-token KL, beside the mean (as llama.cpp reports)
    kl_p99: float
    kl_p999: float
    kl_max: float
    expected_acceptance: float  # mean over tokens of 1 - TV(p_ref, p_quant), temperature 1
    bytes_per_step: int  # bytes of weights and scales read per decode step
    row_error_percentiles: Dict[str, float]  # of the per-row relative weight error
    worst_rows: list  # rows with the largest logit error, largest first
    quantize_seconds: float
    logit_error_bins: dict  # RMS logit error binned by the reference logit
    row_rel_error: np.ndarray = field(repr=False, default=None)  # [vocab], for plots
    logit_sample: np.ndarray = field(repr=False, default=None)  # [n, 2] (ref, error), for plots
    # Where the true next tokens are known (else None): exp(mean -log p_quant(true)) over the
    # evaluated tokens, its ratio to the reference head's, and the RMS over those tokens of
    # p_quant(true) - p_ref(true) (a probability, not a percentage).
    perplexity: float = None
    perplexity_ratio: float = None
    true_token_prob_change_rms: float = None

    @property
    def greedy_acceptance(self):
        """Acceptance of a greedy drafted token: the argmax is unchanged."""
        return self.top1_agreement

    @property
    def meets_rule(self):
        return meets_rule(self.top1_agreement, self.kl_mean)

    def to_dict(self):
        return {
            "method": self.method,
            "format": self.format,
            "bytes_per_step": self.bytes_per_step,
            "weight_rel_rms": self.weight_rel_rms,
            "logit_rel_rms": self.logit_rel_rms,
            "top1_agreement": self.top1_agreement,
            "topk_overlap": {str(k): v for k, v in self.topk_overlap.items()},
            "kl_mean": self.kl_mean,
            "kl_p90": self.kl_p90,
            "kl_p99": self.kl_p99,
            "kl_p999": self.kl_p999,
            "kl_max": self.kl_max,
            "perplexity": self.perplexity,
            "perplexity_ratio": self.perplexity_ratio,
            "true_token_prob_change_rms": self.true_token_prob_change_rms,
            "expected_acceptance": self.expected_acceptance,
            "greedy_acceptance": self.greedy_acceptance,
            "meets_rule": self.meets_rule,
            "row_error_percentiles": dict(self.row_error_percentiles),
            "worst_rows": [dict(r) for r in self.worst_rows],
            "quantize_seconds": self.quantize_seconds,
            "logit_error_bins": self.logit_error_bins,
        }


@dataclass
class CheckResult:
    """All methods' numbers for one head and one set of hidden states.

    ``print(result)`` gives a table; ``result.to_dict()`` / ``result.to_json(path)`` the data.
    ``result["mse"]`` is the MethodResult of a method. ``tokens`` counts the evaluated tokens;
    ``calibration`` says where ``act``'s statistics came from (``"split"``: the rows
    ``calibration_rows`` of the input, never evaluated; ``"given"``: passed in) and which rows
    were evaluated; ``activation_sq`` holds those statistics. ``reference_perplexity`` is the
    unquantized head's perplexity over the ``perplexity_tokens`` evaluated tokens whose next
    token is known (None without targets).
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
    calibration: dict = field(default_factory=dict)
    bytes_per_step_bf16: int = 0
    activation_sq: np.ndarray = field(repr=False, default=None)
    reference_perplexity: float = None
    perplexity_tokens: int = 0

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
            "calibration": dict(self.calibration),
            "bytes_per_step": {
                "bf16": self.bytes_per_step_bf16,
                **{name: m.bytes_per_step for name, m in self.methods.items()},
            },
            "reference_perplexity": self.reference_perplexity,
            "perplexity_tokens": self.perplexity_tokens,
            "rule": {"top1_agreement_min": RULE_TOP1, "kl_mean_max": RULE_KL},
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

    def verdict(self):
        """One line: which methods meet the README's rule for replacing the model's head."""
        return format_verdict(self)

    def __str__(self):
        return format_table(self)

    def _repr_pretty_(self, printer, cycle):  # IPython / Jupyter
        printer.text(self.table())

    def plot(self, path=None):
        """A matplotlib Figure: the per-row weight error, the logit error against the reference
        logit, and expected acceptance against bytes per step, one style per method; saved as
        PNG to ``path`` when given."""
        return plot_result(self, path)


def _megabytes(count):
    return f"{count / 1e6:.1f}"


def format_tokens_line(result):
    calibration = result.calibration or {}
    line = f"evaluated on {result.tokens} tokens"
    if calibration.get("source") == "split":
        c0, c1 = calibration["calibration_rows"]
        line += (
            f"; act's statistics E[x^2] from {c1 - c0} other tokens (rows {c0}-{c1 - 1} of the "
            f"input), which are never evaluated"
        )
    elif calibration.get("source") == "file":
        count = calibration.get("tokens")
        line += f"; act's statistics from {calibration.get('path')} ({count} tokens of " + (
            f"the same text, rows 0-{count - 1}, which are not evaluated)"
            if calibration.get("same_text")
            else "another text)"
        )
    elif calibration.get("source") == "given":
        count = calibration.get("tokens")
        line += "; act's statistics given" + (f" (from {count} other tokens)" if count else "")
    return line


def _wrap_entries(first, entries, width=100, indent="      "):
    """Lines of `entries` joined by "; ", broken between entries, never inside one."""
    lines, line = [], first
    for i, entry in enumerate(entries):
        piece = entry + (";" if i < len(entries) - 1 else "")
        if line not in (first, indent) and len(line) + len(piece) > width:
            lines.append(line.rstrip())
            line = indent
        line += piece + " "
    lines.append(line.rstrip())
    return lines


def format_verdict(result):
    passing = [n for n, m in result.methods.items() if m.meets_rule]
    failing = [n for n, m in result.methods.items() if not m.meets_rule]
    parts = []
    if passing:
        parts.append(f"{', '.join(passing)} {'meets' if len(passing) == 1 else 'meet'} it")
    if failing:
        parts.append(f"{', '.join(failing)} {'fails' if len(failing) == 1 else 'fail'} it")
    return f"verdict as the model's own head ({RULE_TEXT}): " + "; ".join(parts)


def format_table(result):
    names = list(result.methods)
    bf16 = result.bytes_per_step_bf16
    title = (
        f"radiance check: head {result.vocab_size} x {result.hidden_size} ({result.weight_dtype}), "
        f"int4 group size {result.group_size}, device {result.device}"
    )
    rows = [
        ("format", lambda m: m.format),
        ("bytes per step [MB]", lambda m: _megabytes(m.bytes_per_step)),
    ]
    if bf16:
        rows.append(("  of bf16's", lambda m: f"{m.bytes_per_step / bf16:.3f}"))
    rows += [
        ("weight error (relative RMS)", lambda m: f"{m.weight_rel_rms:.4f}"),
        ("logit error / logit RMS", lambda m: f"{m.logit_rel_rms:.4f}"),
        ("top-1 agreement (greedy acceptance)", lambda m: f"{m.top1_agreement:.4f}"),
    ]
    for k in next(iter(result.methods.values())).topk_overlap:
        if k > 1:  # top-1 overlap is the top-1 agreement
            rows.append((f"top-{k} overlap", lambda m, k=k: f"{m.topk_overlap[k]:.4f}"))
    rows += [
        ("KL(ref || quant) mean [nats]", lambda m: f"{m.kl_mean:.5f}"),
        ("KL(ref || quant) p90 [nats]", lambda m: f"{m.kl_p90:.5f}"),
        ("KL(ref || quant) p99 [nats]", lambda m: f"{m.kl_p99:.5f}"),
        ("KL(ref || quant) p99.9 [nats]", lambda m: f"{m.kl_p999:.5f}"),
    ]
    if result.reference_perplexity is not None:
        rows += [
            ("perplexity", lambda m: f"{m.perplexity:.4f}"),
            ("  ratio to the reference's", lambda m: f"{m.perplexity_ratio:.4f}"),
            ("true-token probability change RMS", lambda m: f"{m.true_token_prob_change_rms:.4f}"),
        ]
    rows += [
        ("expected acceptance (1 - TV)", lambda m: f"{m.expected_acceptance:.4f}"),
        ("row weight error p99", lambda m: f"{m.row_error_percentiles['p99']:.4f}"),
        ("quantize time [s]", lambda m: f"{m.quantize_seconds:.2f}"),
        ("meets the rule (own head)", lambda m: "yes" if m.meets_rule else "no"),
    ]
    label_width = max(len(r[0]) for r in rows) + 2
    cells = [[fmt(result.methods[n]) for n in names] for _, fmt in rows]
    col_width = max([len(n) for n in names] + [len(c) for row in cells for c in row]) + 3
    lines = [title, format_tokens_line(result)]
    if bf16:
        lines.append(f"the unquantized bf16 head reads {_megabytes(bf16)} MB per step")
    lines += ["", " " * label_width + "".join(n.rjust(col_width) for n in names)]
    for (label, _), row in zip(rows, cells):
        lines.append(label.ljust(label_width) + "".join(c.rjust(col_width) for c in row))
    lines.append("")
    lines.append(format_verdict(result))
    lines.append(
        "as a drafter head (the target verifies every drafted token): the output is unchanged; "
        "compare expected acceptance against bytes per step"
    )
    if result.reference_perplexity is not None:
        lines.append(
            f"perplexity of the unquantized head: {result.reference_perplexity:.4f} over the "
            f"{result.perplexity_tokens} evaluated tokens whose next token is known"
        )
    else:
        lines.append("no perplexity: the true next tokens are not known (no targets given)")
    shown = max(len(m.worst_rows) for m in result.methods.values())
    if shown:
        lines.append("")
        lines.append(f"worst rows (logit error / logit RMS, row weight error), top {shown}:")
        for name, m in result.methods.items():
            entries = []
            for r in m.worst_rows:
                token = f" {r['token']!r}" if r.get("token") is not None else ""
                entries.append(
                    f"{r['row']}{token} {r['logit_rel_rms']:.3f} ({r['weight_rel_rms']:.3f})"
                )
            lines.extend(_wrap_entries(f"  {name}: ", entries or ["-"]))
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
