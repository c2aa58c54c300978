"""radiance.check's numbers for llama.cpp readers, each against an independent float64 computation
on a small made-up head: the perplexity of the text under each head and its ratio to the
reference head's, the KL at p90 / p99 / p99.9 beside the mean, and the RMS change of the true next
token's probability; and the same numbers in the JSON.

Needs NumPy and ml_dtypes only; no model, no torch.
"""

import json

import ml_dtypes
import numpy as np
import pytest

import radiance
from radiance import check
from radiance.check.stats import LogitStats, log_sum_exp, softmax, top_sorted, true_token_log_prob

BF16 = ml_dtypes.bfloat16
VOCAB, WIDTH, TOKENS, GROUP = 300, 64, 90, 32


def _log_softmax64(logits):
    z = logits - logits.max(axis=1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=1, keepdims=True))


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(21)
    # a head whose logits are peaked enough that the true token matters, as in a real model
    w = (rng.standard_normal((VOCAB, WIDTH)) * rng.lognormal(0, 0.3, (VOCAB, 1)) * 0.6)
    h = rng.standard_normal((TOKENS, WIDTH)) * np.linspace(0.5, 3.0, WIDTH)
    targets = rng.integers(0, VOCAB, TOKENS)
    # make the reference put some mass on the true token: the text is "likely" under the head
    targets[::3] = (h[::3].astype(BF16).astype(np.float64) @ w.T).argmax(axis=1)
    targets[[7, 40]] = -1  # positions whose next token is unknown (e.g. the end of the text)
    return w.astype(np.float32), h.astype(np.float32), targets


def _float64_numbers(ref, quant, targets):
    """The numbers from float64 log-probabilities, written from their definitions."""
    log_p, log_q = _log_softmax64(ref), _log_softmax64(quant)
    kl = (np.exp(log_p) * (log_p - log_q)).sum(axis=1)
    rows = np.flatnonzero(targets >= 0)
    cols = targets[rows]
    nll_ref, nll_quant = -log_p[rows, cols], -log_q[rows, cols]
    ppl_ref, ppl_quant = np.exp(nll_ref.mean()), np.exp(nll_quant.mean())
    change = np.exp(log_q[rows, cols]) - np.exp(log_p[rows, cols])
    return {
        "kl_mean": kl.mean(),
        "kl_p90": np.percentile(kl, 90),
        "kl_p99": np.percentile(kl, 99),
        "kl_p999": np.percentile(kl, 99.9),
        "perplexity": ppl_quant,
        "perplexity_ratio": ppl_quant / ppl_ref,
        "true_token_prob_change_rms": np.sqrt(np.mean(change**2)),
        "reference_perplexity": ppl_ref,
        "tokens": rows.size,
    }


@pytest.mark.parametrize("method", ["rtn", "mse"])
def test_perplexity_kl_tail_and_true_token_change_against_float64(data, method):
    w, h, targets = data
    result = check.check(w, h, methods=[method], group_size=GROUP, timing=False, targets=targets)
    x = h.astype(BF16).astype(np.float64)
    ref = x @ w.astype(np.float64).T
    packed, scales = radiance.quantize_rows(w, GROUP, method)
    # the quantized head's logits are bf16, as the check computes them
    quant = radiance.apply(h.astype(BF16), packed, scales, group_size=GROUP).astype(np.float64)
    expected = _float64_numbers(ref, quant, targets)
    m = result[method]
    assert result.perplexity_tokens == expected["tokens"] == TOKENS - 2
    assert result.reference_perplexity == pytest.approx(expected["reference_perplexity"], rel=1e-5)
    for key in ("perplexity", "perplexity_ratio", "true_token_prob_change_rms"):
        assert getattr(m, key) == pytest.approx(expected[key], rel=1e-5), key
    for key in ("kl_mean", "kl_p90", "kl_p99", "kl_p999"):
        assert getattr(m, key) == pytest.approx(expected[key], rel=1e-3, abs=1e-7), key
    # the numbers say something: int4 moved the distribution, and the tail is above the mean
    assert m.perplexity_ratio != 1.0 and m.true_token_prob_change_rms > 0
    assert m.kl_mean < m.kl_p90 < m.kl_p99 < m.kl_p999 <= m.kl_max

    report = json.loads(result.to_json())
    assert report["reference_perplexity"] == result.reference_perplexity
    assert report["perplexity_tokens"] == expected["tokens"]
    for key in ("perplexity", "perplexity_ratio", "kl_mean", "kl_p90", "kl_p99", "kl_p999",
                "true_token_prob_change_rms"):
        assert report["methods"][method][key] == getattr(m, key), key
    table = result.table()
    assert f"{result.reference_perplexity:.4f}" in table and f"{m.kl_p999:.5f}" in table
    assert f"{m.perplexity:.4f}" in table and f"{m.true_token_prob_change_rms:.4f}" in table


def test_the_calibration_split_takes_the_targets_of_the_evaluated_rows(data):
    w, h, targets = data
    result = check.check(w, h, methods=["act", "rtn"], group_size=GROUP, timing=False,
                         targets=targets)
    c0, c1 = result.calibration["evaluation_rows"]
    assert (c0, c1) == (TOKENS // 2, TOKENS)
    x = h[c0:c1].astype(BF16).astype(np.float64)
    ref = x @ w.astype(np.float64).T
    expected = _float64_numbers(ref, ref, targets[c0:c1])
    assert result.perplexity_tokens == expected["tokens"] == np.count_nonzero(targets[c0:] >= 0)
    assert result.reference_perplexity == pytest.approx(expected["reference_perplexity"], rel=1e-5)


def test_an_identical_head_has_ratio_one_and_no_change():
    rng = np.random.default_rng(3)
    ref = (rng.standard_normal((20, 50)) * 4).astype(np.float32)
    targets = rng.integers(-1, 50, 20)
    stats = LogitStats(50, (1,), 2)
    lse = log_sum_exp(ref)
    _, ref_log_p = true_token_log_prob(ref, lse, targets)
    stats.add(ref, top_sorted(ref, 1), lse, softmax(ref, lse), ref, np.zeros(ref.size, np.int64),
              np.arange(2), targets, ref_log_p)
    np.testing.assert_array_equal(np.concatenate(stats.nll), -ref_log_p)
    np.testing.assert_array_equal(np.concatenate(stats.true_prob_change), 0.0)
    rows = np.flatnonzero(targets >= 0)
    np.testing.assert_allclose(
        ref_log_p, _log_softmax64(ref.astype(np.float64))[rows, targets[rows]], rtol=1e-6
    )


def test_without_targets_there_is_no_perplexity(data):
    w, h, _ = data
    result = check.check(w, h, methods=["rtn"], group_size=GROUP, timing=False)
    assert result.reference_perplexity is None and result.perplexity_tokens == 0
    assert result["rtn"].perplexity is None and result["rtn"].true_token_prob_change_rms is None
    assert result["rtn"].kl_p999 >= result["rtn"].kl_p99  # the KL tail needs no targets
    report = json.loads(result.to_json())
    assert report["reference_perplexity"] is None and report["methods"]["rtn"]["perplexity"] is None
    assert "no perplexity" in result.table()


@pytest.mark.parametrize(
    "targets, error, match",
    [
        (np.zeros(TOKENS - 1, np.int64), ValueError, r"targets must be \[tokens\] = \[90\]"),
        (np.zeros(TOKENS, np.float32), TypeError, "targets must be integer token ids"),
        (np.full(TOKENS, VOCAB), ValueError, r"targets\[0\] is 300, past the head's vocabulary"),
    ],
)
def test_bad_targets_are_refused_by_name(data, targets, error, match):
    w, h, _ = data
    with pytest.raises(error, match=match):
        check.check(w, h, methods=["rtn"], group_size=GROUP, timing=False, targets=targets)


def test_next_tokens_are_the_following_ids():
    from radiance.check.hidden import next_tokens

    np.testing.assert_array_equal(next_tokens([5, 6, 7, 8], 3), [6, 7, 8])
    np.testing.assert_array_equal(next_tokens([5, 6, 7], 3), [6, 7, -1])
