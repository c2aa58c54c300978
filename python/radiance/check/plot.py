"""The figure of a check: per-row weight error and logit error against the reference logit.

matplotlib is imported only when a figure is asked for (it is in the ``check`` extra).
"""

from __future__ import annotations

import os
import sys

import numpy as np


def plot_result(result, path=None):
    """A matplotlib Figure of `result` (a CheckResult); saved as PNG to ``path`` when given."""
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
