"""The figure of a check: per-row weight error, logit error against the reference logit, and
expected acceptance against bytes per step.

Each method has its own colour, line style and marker, so curves that lie on top of each other
stay distinguishable. matplotlib is imported only when a figure is asked for (the ``check``
extra).
"""

from __future__ import annotations

import os
import sys

import numpy as np

LINESTYLES = ("-", "--", "-.", ":", (0, (5, 1, 1, 1, 1, 1)), (0, (1, 3)))
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


def method_styles(names, colors):
    """{name: (color, linestyle, marker)}, a different triple per method and each part cycling
    at its own length, so no two of up to 6 methods share a colour, a line style or a marker."""
    return {
        name: (
            colors[i % len(colors)],
            LINESTYLES[i % len(LINESTYLES)],
            MARKERS[i % len(MARKERS)],
        )
        for i, name in enumerate(names)
    }


def plot_result(result, path=None):
    """A matplotlib Figure of `result` (a CheckResult); saved as PNG to ``path`` when given."""
    import matplotlib

    if path is not None and "matplotlib.pyplot" not in sys.modules:
        matplotlib.use("Agg")  # a file is wanted: no screen needed
    import matplotlib.pyplot as plt

    fig, (ax_rows, ax_logits, ax_accept) = plt.subplots(
        1, 3, figsize=(18, 5.2), constrained_layout=True
    )
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    styles = method_styles(list(result.methods), colors)
    all_rows = np.concatenate([m.row_rel_error for m in result.methods.values()])
    high = float(all_rows.max()) * 1.02 or 1.0
    edges = np.linspace(0.0, high, 81)
    for name, m in result.methods.items():
        color, linestyle, marker = styles[name]
        counts, _ = np.histogram(np.clip(m.row_rel_error, 0, high), bins=edges)
        ax_rows.step(
            edges[:-1],
            np.maximum(counts, 0.5),  # empty bins sit below the log axis' first decade
            where="post",
            color=color,
            linestyle=linestyle,
            linewidth=1.5,
            label=f"{name}: median {m.row_error_percentiles['p50']:.4f}, "
            f"p99 {m.row_error_percentiles['p99']:.4f}",
        )
        bins = m.logit_error_bins
        centers = 0.5 * (np.asarray(bins["edges"][:-1]) + np.asarray(bins["edges"][1:]))
        keep = np.asarray(bins["count"]) >= 20
        ax_logits.plot(
            centers[keep],
            np.asarray(bins["rms_error"])[keep],
            color=color,
            linestyle=linestyle,
            marker=marker,
            markersize=4,
            linewidth=1.5,
            label=f"{name}: logit error {m.logit_rel_rms:.4f} of the logit RMS",
        )
        ax_accept.plot(
            [m.bytes_per_step / 1e6],
            [m.expected_acceptance],
            linestyle="none",
            marker=marker,
            markersize=9,
            color=color,
            label=f"{name}: {m.expected_acceptance:.4f} (greedy {m.top1_agreement:.4f})",
        )
    ax_rows.set_yscale("log")
    ax_rows.set_ylim(bottom=0.8)
    ax_rows.set_xlabel("relative RMS error of a row (a vocabulary entry)")
    ax_rows.set_ylabel("rows")
    ax_rows.set_title(f"per-row weight error, {result.vocab_size} rows")
    ax_rows.legend(fontsize=8)
    ax_logits.set_yscale("log")
    ax_logits.set_xlabel("reference logit (unquantized head)")
    ax_logits.set_ylabel("RMS |quantized logit - reference logit|")
    ax_logits.set_title(f"logit error vs logit, {result.tokens} evaluated tokens")
    ax_logits.legend(fontsize=8, loc="upper left")
    if result.bytes_per_step_bf16:
        ax_accept.axvline(result.bytes_per_step_bf16 / 1e6, color="0.6", linewidth=1)
        ax_accept.plot(
            [result.bytes_per_step_bf16 / 1e6], [1.0], marker="*", markersize=12, color="0.4",
            linestyle="none", label="bf16 (the reference)",
        )  # fmt: skip
    ax_accept.set_xlabel("bytes per decode step [MB]")
    ax_accept.set_ylabel("expected acceptance, mean 1 - TV(p_ref, p_quant)")
    ax_accept.set_title("as a drafter head: acceptance vs bytes read")
    ax_accept.grid(alpha=0.3)
    ax_accept.legend(fontsize=8, loc="lower right")
    fig.suptitle(
        f"radiance check: head {result.vocab_size} x {result.hidden_size}, "
        f"int4 group size {result.group_size}"
        + (f" ({os.path.basename(result.source['path'])})" if result.source.get("path") else "")
    )
    if path is not None:
        fig.savefig(path, dpi=100)
        plt.close(fig)
    return fig
