"""The logit statistics of ``check``: argmax agreement, top-k overlap, KL divergence, total
variation distance (whose complement is the acceptance probability of a drafted token), the
logit error (per vocabulary row and binned by the reference logit) and, where the true next token
of each position is known, its log-probability (perplexity) and the change of its probability,
summed over token chunks.

Everything is computed from float32 logits chunk by chunk and totalled in float64, so that a
250k-vocabulary head needs one chunk of logits in memory, not all of them.
"""

from __future__ import annotations

import numpy as np


def log_sum_exp(logits):
    """log(sum(exp(row))) of each row of float32 logits, in float64."""
    top = logits.max(axis=1, keepdims=True)
    total = np.exp(logits - top).sum(axis=1, dtype=np.float64)
    return top[:, 0].astype(np.float64) + np.log(total)


def softmax(logits, lse_rows):
    return np.exp(logits - lse_rows[:, None].astype(np.float32))


def true_token_log_prob(logits, lse_rows, targets):
    """(rows, log p of the true next token in float64) of the rows of ``logits`` whose target is
    known: ``targets`` holds one token id per row, negative where there is none."""
    rows = np.flatnonzero(targets >= 0)
    picked = logits[rows, targets[rows]].astype(np.float64)
    return rows, picked - lse_rows[rows]


def top_sorted(logits, k):
    """Indices of the k largest logits of each row, largest first (ties: lower index first)."""
    k = min(k, logits.shape[1])
    part = np.argpartition(-logits, k - 1, axis=1)[:, :k]
    vals = np.take_along_axis(logits, part, axis=1)
    order = np.lexsort((part, -vals), axis=1)
    return np.take_along_axis(part, order, axis=1)


class LogitStats:
    """Running sums over token chunks for one method."""

    def __init__(self, vocab, topk, nbins):
        self.topk = topk
        self.err_sq = 0.0
        self.top1_agree = 0
        self.overlap = {k: 0.0 for k in topk}
        self.kl = []
        self.tv = []
        self.column_err_sq = np.zeros(vocab, np.float64)
        self.bin_count = np.zeros(nbins, np.int64)
        self.bin_err_sq = np.zeros(nbins, np.float64)
        self.bin_err_max = np.zeros(nbins, np.float32)
        self.sample = []
        # per token with a known next token: -log p_quant(true), p_quant(true) - p_ref(true)
        self.nll = []
        self.true_prob_change = []

    def add(self, ref, ref_top, ref_lse, ref_p, q, bins, sample_idx, targets=None, ref_log_p=None):
        """One chunk: reference and quantized logits [tokens, vocab] float32; ``targets`` (the
        next token id per row, negative for none) with ``ref_log_p``, the reference's
        true_token_log_prob of the same rows, feed the perplexity and the probability change."""
        err = q - ref
        # Per-column sums over a chunk of a few hundred tokens are exact enough in float32;
        # the totals are float64.
        column = np.einsum("ij,ij->j", err, err).astype(np.float64)
        self.column_err_sq += column
        self.err_sq += float(column.sum())
        q_top = top_sorted(q, max(self.topk))
        self.top1_agree += int((q_top[:, 0] == ref_top[:, 0]).sum())
        for k in self.topk:
            hits = (ref_top[:, :k, None] == q_top[:, None, :k]).any(axis=2).sum(axis=1)
            self.overlap[k] += float((hits / k).sum())
        # KL(p||q) = sum p (ref - q) + lse(q) - lse(ref), without a float64 copy of the logits.
        q_lse = log_sum_exp(q)
        kl = q_lse - ref_lse - (ref_p * err).sum(axis=1, dtype=np.float64)
        self.kl.append(kl)
        # TV(p, q) = 1/2 sum |p - q|: a token drafted from q is accepted (speculative sampling
        # against p) with probability 1 - TV.
        self.tv.append(0.5 * np.abs(ref_p - softmax(q, q_lse)).sum(axis=1, dtype=np.float64))
        if targets is not None:
            _, q_log_p = true_token_log_prob(q, q_lse, targets)
            self.nll.append(-q_log_p)
            self.true_prob_change.append(np.exp(q_log_p) - np.exp(ref_log_p))
        nbins = len(self.bin_count)
        flat_err = np.abs(err).ravel()
        self.bin_count += np.bincount(bins, minlength=nbins)
        self.bin_err_sq += np.bincount(bins, weights=flat_err * flat_err, minlength=nbins)
        np.maximum.at(self.bin_err_max, bins, flat_err)
        self.sample.append(np.stack([ref.ravel()[sample_idx], err.ravel()[sample_idx]], axis=1))

