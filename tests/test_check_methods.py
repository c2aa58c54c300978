"""radiance.check on small made-up heads: the statistics against independent float64 formulas,
the calibration split, the peer formats' logits, bytes per step, the README's rule, the plot.

Needs NumPy and ml_dtypes only (matplotlib for the plot test); no model, no torch.
"""

import dataclasses

import ml_dtypes
import numpy as np
import pytest

import radiance
from radiance import calibration, peer_formats
from radiance import check
from radiance.check import peers, plot
from radiance.check.stats import LogitStats, log_sum_exp, softmax, top_sorted

BF16 = ml_dtypes.bfloat16


def _head(rng, vocab=700, width=128):
    # Rows of different scales and a few outlier channels, like a real head and its inputs.
    w = rng.standard_normal((vocab, width)) * rng.lognormal(0, 0.3, (vocab, 1)) * 0.05
    return w.astype(np.float32)


def _hidden(rng, tokens, width=128):
    channel_scale = np.ones(width)
    channel_scale[[3, width // 2, width - 5]] = [12.0, 8.0, 20.0]
    return (rng.standard_normal((tokens, width)) * channel_scale).astype(np.float32)


def _softmax64(logits):
    z = logits - logits.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def _bf16_activations(x):
    return x.astype(BF16).astype(np.float64)


def _fields(m):
    d = m.to_dict()
    d.pop("quantize_seconds")
    return d


# -- the statistics against float64 formulas -----------------------------------------------------


def test_tv_and_kl_of_logit_stats_match_float64_formulas():
    rng = np.random.default_rng(5)
    tokens, vocab = 37, 501
    ref = (rng.standard_normal((tokens, vocab)) * 3).astype(np.float32)
    q = (ref + rng.standard_normal((tokens, vocab)) * rng.uniform(0, 2, (tokens, 1))).astype(
        np.float32
    )
    q[5] = ref[5]  # one token with identical logits: TV 0, KL 0
    stats = LogitStats(vocab, (1, 5), 4)
    ref_lse = log_sum_exp(ref)
    bins = np.zeros(ref.size, np.int64)
    stats.add(ref, top_sorted(ref, 5), ref_lse, softmax(ref, ref_lse), q, bins, np.arange(3))
    p64, q64 = _softmax64(ref.astype(np.float64)), _softmax64(q.astype(np.float64))
    tv = 0.5 * np.abs(p64 - q64).sum(axis=1)
    kl = (p64 * (np.log(p64) - np.log(q64))).sum(axis=1)
    np.testing.assert_allclose(stats.tv[0], tv, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(stats.kl[0], kl, rtol=1e-4, atol=1e-6)
    assert stats.tv[0][5] < 1e-6 and abs(stats.kl[0][5]) < 1e-6
    assert stats.top1_agree == int((ref.argmax(1) == q.argmax(1)).sum())


def test_check_acceptance_against_an_independent_formula():
    rng = np.random.default_rng(6)
    w = _head(rng)
    h = _hidden(rng, 48)
    r = check.check(w, h, methods=["rtn", "fp8", "nvfp4"], timing=False)
    assert r.calibration["source"] is None and r.tokens == 48  # nothing needs statistics
    x = _bf16_activations(h)
    ref = x @ w.astype(np.float64).T
    p = _softmax64(ref)
    packed, scales = radiance.quantize_rows(w, 128, "rtn")
    logits = {"rtn": radiance.apply(h.astype(BF16), packed, scales, group_size=128)}
    codes, scale = peer_formats.fp8_quantize_weight(w)
    x_codes, x_scale = peer_formats.fp8_quantize_activations(h.astype(BF16))
    logits["fp8"] = (
        peer_formats.fp8_dequantize(x_codes, x_scale).astype(np.float64)
        @ peer_formats.fp8_dequantize(codes, scale).astype(np.float64).T
    )
    logits["nvfp4"] = x @ peer_formats.nvfp4_dequantize(*peer_formats.nvfp4_quantize(w)).T
    for name, y in logits.items():
        y = np.asarray(y).astype(np.float32).astype(BF16).astype(np.float64)  # bf16 logits
        q = _softmax64(y)
        acceptance = np.mean(1 - 0.5 * np.abs(p - q).sum(axis=1))
        assert r[name].expected_acceptance == pytest.approx(acceptance, rel=2e-4), name
        assert r[name].greedy_acceptance == pytest.approx(
            np.mean(ref.argmax(1) == y.argmax(1)), abs=1.5 / 48
        )
        rel = np.sqrt(((y - ref) ** 2).sum() / (ref**2).sum())
        assert r[name].logit_rel_rms == pytest.approx(rel, rel=1e-3), name


# -- the peer heads ------------------------------------------------------------------------------


def test_round_to_bf16_is_round_to_nearest_even():
    rng = np.random.default_rng(7)
    y = (rng.standard_normal(10000) * 10.0 ** rng.integers(-6, 6, 10000)).astype(np.float32)
    bits = y.view(np.uint32)
    bits[:100] = (bits[:100] & 0xFFFF0000) | 0x8000  # exact ties
    y = bits.view(np.float32)
    expected = y.astype(BF16).astype(np.float32)
    np.testing.assert_array_equal(peers.round_to_bf16(y.copy()), expected)


def test_fp8_head_logits_as_vllm_computes_them():
    # Per-token dynamic e4m3 activations times per-row e4m3 weights, products summed exactly
    # (float64 here), scaled by both scales, then bf16.
    rng = np.random.default_rng(8)
    w, x = _head(rng, 300, 96), _hidden(rng, 20, 96).astype(BF16).astype(np.float32)
    head = peers.Fp8Head(w)
    codes, scale = peer_formats.fp8_quantize_weight(w)
    x_codes, x_scale = peer_formats.fp8_quantize_activations(x)
    exact = (
        x_codes.view(ml_dtypes.float8_e4m3fn).astype(np.float64)
        @ codes.view(ml_dtypes.float8_e4m3fn).astype(np.float64).T
    ) * (x_scale.astype(np.float64)[:, None] * scale.astype(np.float64)[None, :])
    values, token_scale = head.activations(x)
    got = head.finish(values @ head.values.T, token_scale, None)
    expected = exact.astype(np.float32).astype(BF16).astype(np.float32)
    # float32 products and the order of two scalings: at most one bf16 step apart
    ulp = np.abs(expected) * 2.0**-7 + 1e-30
    assert (np.abs(got - expected) <= ulp).all()
    assert np.mean(got == expected) > 0.99
    np.testing.assert_array_equal(head.dequantize_rows(10, 40), peer_formats.fp8_dequantize(
        codes, scale)[10:40])
    assert head.bytes_per_step() == 300 * 96 + 300 * 4


def test_nvfp4_head_is_weight_only():
    rng = np.random.default_rng(9)
    w, x = _head(rng, 200, 64), _hidden(rng, 9, 64).astype(BF16).astype(np.float32)
    head = peers.Nvfp4Head(w)
    dequantized = peer_formats.nvfp4_dequantize(*peer_formats.nvfp4_quantize(w))
    np.testing.assert_array_equal(head.dequantize_rows(0, 200), dequantized)
    values, token_scale = head.activations(x)
    assert token_scale is None and values is x  # the activations are not quantized
    bias = rng.standard_normal(200).astype(np.float32)
    got = head.finish(x @ head.values.T, None, bias)
    expected = ((x.astype(np.float64) @ dequantized.astype(np.float64).T) + bias).astype(
        np.float32
    ).astype(BF16).astype(np.float32)
    assert (np.abs(got - expected) <= np.abs(expected) * 2.0**-7 + 1e-30).all()


# -- the calibration split: never evaluated on the tokens it calibrated on -----------------------


def test_calibration_and_evaluation_tokens_are_disjoint():
    rng = np.random.default_rng(10)
    w, h = _head(rng), _hidden(rng, 64)
    r = check.check(w, h, methods=["rtn", "act"], timing=False)
    cal, ev = r.calibration["calibration_rows"], r.calibration["evaluation_rows"]
    assert cal == [0, 32] and ev == [32, 64] and r.tokens == 32
    assert set(range(*cal)).isdisjoint(range(*ev)) and len(range(*cal)) + r.tokens == 64
    # act's statistics are those of the calibration rows, and only of them
    np.testing.assert_array_equal(r.activation_sq, calibration.compute_activation_sq(h[:32]))
    # every method is evaluated on the other rows: the same numbers as a check of those rows
    alone = check.check(w, h[32:], methods=["rtn"], timing=False)
    assert _fields(r["rtn"]) == _fields(alone["rtn"])
    given = check.check(w, h[32:], methods=["act"], activation_sq=r.activation_sq, timing=False)
    assert _fields(r["act"]) == _fields(given["act"])
    assert given.calibration["source"] == "given" and given.tokens == 32
    # changing the calibration rows changes act's statistics but no evaluated number of rtn
    h2 = h.copy()
    h2[:32] *= rng.uniform(0.1, 10, (1, 128)).astype(np.float32)
    r2 = check.check(w, h2, methods=["rtn", "act"], timing=False)
    assert _fields(r2["rtn"]) == _fields(r["rtn"])
    assert not np.array_equal(r2.activation_sq, r.activation_sq)


def test_act_with_statistics_beats_mse_on_outlier_channels():
    rng = np.random.default_rng(11)
    w, h = _head(rng, 2000), _hidden(rng, 256)
    r = check.check(w, h, methods=["mse", "act"], timing=False)
    assert r["act"].logit_rel_rms < r["mse"].logit_rel_rms
    assert r["act"].weight_rel_rms >= r["mse"].weight_rel_rms  # it spends weight error elsewhere


def test_calibration_split_and_statistics_errors():
    rng = np.random.default_rng(12)
    w, h = _head(rng, 100), _hidden(rng, 10)
    with pytest.raises(ValueError, match="cannot be split"):
        check.check(w, h[:1], methods=["act"], timing=False)
    with pytest.raises(ValueError, match="calibration_fraction must be between 0 and 1"):
        check.check(w, h, methods=["act"], calibration_fraction=1.0, timing=False)
    with pytest.raises(ValueError, match=r"activation_sq must be \[hidden\] = \[128\]"):
        check.check(w, h, methods=["act"], activation_sq=np.ones(64), timing=False)
    bad = np.ones(128)
    bad[7] = np.nan
    with pytest.raises(ValueError, match=r"activation_sq\[7\] is nan"):
        check.check(w, h, methods=["act"], activation_sq=bad, timing=False)
    stats = calibration.Stats(np.ones(128, np.float32), 99, calibration.head_id(w), "")
    r = check.check(w, h, methods=["act"], activation_sq=stats, timing=False)
    assert r.calibration["tokens"] == 99 and r.tokens == 10


# -- bytes, the rule, the table ------------------------------------------------------------------


def test_bytes_per_step_of_each_format():
    rng = np.random.default_rng(13)
    w, h = _head(rng, 320, 64), _hidden(rng, 8, 64)
    r = check.check(w, h, methods=["rtn", "fp8", "nvfp4"], group_size=32, timing=False)
    assert r["rtn"].bytes_per_step == 320 * 32 + 320 * 2 * 2  # nibbles + bf16 scale per 32
    assert r["fp8"].bytes_per_step == 320 * 64 + 320 * 4
    assert r["nvfp4"].bytes_per_step == 320 * 32 + 320 * 4 + 4
    assert r.bytes_per_step_bf16 == 320 * 64 * 2
    assert "bytes per step [MB]" in r.table()


def test_rule_flips_where_the_numbers_cross_it():
    assert check.meets_rule(0.99, 0.01)
    assert check.meets_rule(1.0, 0.0)
    assert not check.meets_rule(0.9899, 0.005)
    assert not check.meets_rule(0.999, 0.0101)
    rng = np.random.default_rng(14)
    r = check.check(_head(rng, 200), _hidden(rng, 8), methods=["rtn", "mse"], timing=False)
    r.methods["rtn"] = dataclasses.replace(r["rtn"], top1_agreement=0.995, kl_mean=0.004)
    r.methods["mse"] = dataclasses.replace(r["mse"], top1_agreement=0.985, kl_mean=0.004)
    assert r.verdict().endswith("rtn meets it; mse fails it")
    assert r.to_dict()["methods"]["rtn"]["meets_rule"] is True
    row = next(line for line in r.table().splitlines() if line.startswith("meets the rule"))
    assert row.split()[-2:] == ["yes", "no"]
    r.methods["mse"] = dataclasses.replace(r["mse"], top1_agreement=0.99, kl_mean=0.0100001)
    assert r.verdict().endswith("rtn meets it; mse fails it")
    r.methods["mse"] = dataclasses.replace(r["mse"], kl_mean=0.01)
    assert r.verdict().endswith("rtn, mse meet it")


def test_worst_rows_follow_the_option():
    rng = np.random.default_rng(15)
    w, h = _head(rng, 200), _hidden(rng, 8)
    r = check.check(w, h, methods=["rtn", "fp8"], worst=3, timing=False)
    assert len(r["rtn"].worst_rows) == 3 and len(r["fp8"].worst_rows) == 3
    assert "top 3:" in r.table()
    r = check.check(w, h, methods=["rtn"], worst=0, timing=False)
    assert "worst rows" not in r.table()
    for bad in (-1, 2.5, True):
        with pytest.raises(ValueError, match="worst must be a non-negative int"):
            check.check(w, h, methods=["rtn"], worst=bad, timing=False)


def test_timing_uses_an_int4_method_or_says_why_not():
    rng = np.random.default_rng(16)
    w, h = _head(rng, 200), _hidden(rng, 8)
    r = check.check(w, h, methods=["fp8", "rtn"], timing_batches=(1,))
    assert r.timing["batches"]["1"]["int4_ms"] > 0
    r = check.check(w, h, methods=["fp8"], timing_batches=(1,))
    assert r.timing == {} and any("apply was not timed" in n for n in r.notes)


# -- the plot ------------------------------------------------------------------------------------


def test_plot_draws_every_method_distinctly(tmp_path):
    pytest.importorskip("matplotlib")
    rng = np.random.default_rng(17)
    r = check.check(_head(rng, 400), _hidden(rng, 40), timing=False)
    fig = r.plot()
    try:
        ax_rows, ax_logits, ax_accept = fig.axes
        for ax in (ax_rows, ax_logits):
            lines = ax.get_lines()
            assert len(lines) == 5
            assert len({line.get_color() for line in lines}) == 5
        assert len({line.get_marker() for line in ax_logits.get_lines()}) == 5
        # matplotlib reports every custom dash pattern as "--": check the styles it was given
        styles = plot.method_styles(list(r.methods), ["C0", "C1", "C2", "C3", "C4"])
        for part in range(3):
            assert len({str(style[part]) for style in styles.values()}) == 5
        points = [line for line in ax_accept.get_lines() if line.get_label() in r.methods or
                  line.get_label().split(":")[0] in r.methods]
        assert len(points) == 5 and len({p.get_marker() for p in points}) == 5
        for point, (name, m) in zip(points, r.methods.items()):
            assert point.get_xdata()[0] == pytest.approx(m.bytes_per_step / 1e6)
            assert point.get_ydata()[0] == pytest.approx(m.expected_acceptance)
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)
    r.plot(str(tmp_path / "p.png"))
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.gpu
def test_every_method_on_the_gpu_gives_the_cpu_numbers():
    # int4 quantization is bit-identical on the GPU; the peer formats quantize on the host and
    # multiply on the GPU; the statistics are gathered on the host either way.
    rng = np.random.default_rng(18)
    w, h = _head(rng, 3000, 256), _hidden(rng, 64, 256)
    cpu = check.check(w, h, timing=False)
    gpu = check.check(w, h, device="cuda", timing_batches=(1,))
    assert gpu.device.startswith("cuda") and gpu.timing["batches"]["1"]["int4_ms"] > 0
    np.testing.assert_array_equal(gpu.activation_sq, cpu.activation_sq)
    for name, m in cpu.methods.items():
        g = gpu[name]
        assert g.bytes_per_step == m.bytes_per_step
        assert g.weight_rel_rms == pytest.approx(m.weight_rel_rms, rel=1e-6), name
        assert g.logit_rel_rms == pytest.approx(m.logit_rel_rms, rel=1e-3), name
        assert g.expected_acceptance == pytest.approx(m.expected_acceptance, rel=1e-3), name
        assert g.top1_agreement == pytest.approx(m.top1_agreement, abs=2 / cpu.tokens), name
