"""The distribution test of an operator's local difference (issue 57): statistics over its
elements in rounding units, limits from the rounding model. Real sums of real cases: two real
kernels (MegEngine's naive one in a real dump, numpy's), real faults (a weight times 1 + eps u
rewritten into the model, or the stand-in load_and_run's kernel computing with it while the
model keeps its own weights)."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from lar_prec.compare import bounds, spread
from lar_prec.compare.spread import CHANNEL, RMS, WORST, sigma
from lar_prec.diagnosis.floors import local_roots, noise_floors
from lar_prec.diagnosis.local import local_errors
from lar_prec.dumps.folder import DumpFolder


def test_sigma_is_the_rounding_models_for_any_number_of_terms():
    # one term: the product and the result rounded on each side: 2 (1 + 1) u^2 T^2 / 3 in (2 u T (1 + 1))^2
    assert sigma(1) == pytest.approx(math.sqrt(2 / 6) / 2)
    assert all(sigma(k) < sigma(4 * k) < 1 / math.sqrt(6) for k in (1, 9, 64, 1024))
    assert spread.chi2_limit(1) == pytest.approx(1 + 2 * math.sqrt(20) + 40)


def _fc(lar_dump, name: str):
    """vit's linear layer ``name``: its reference input, weight and output from a naive dump."""
    ref = DumpFolder(lar_dump("vit", "naive"))
    out = next(d for d in ref if d.var.name == f"{name}.MatrixMul")
    x, w = (ref[u].array() for u in ref.inputs_of(out.id))
    return x.astype(np.float32), w.astype(np.float32), out.array()


@pytest.mark.megengine
@pytest.mark.parametrize("layer", ["blocks.1.fc2", "blocks.0.attn.qkv", "blocks.1.attn.proj"])
def test_another_correct_kernel_passes_and_a_weight_off_by_2e_6_fails_the_channel_test(lar_dump, layer):
    """numpy's float32 product against MegEngine's naive one on the same inputs passes every test;
    the weight times 1 + 2e-6 u (u ~ U[-1, 1]) passes the worst element and fails a channel's
    mean: every element a little off, the same way over the tokens."""
    x, w, want = _fc(lar_dump, layer)
    x2 = x.reshape(-1, x.shape[-1])
    tb = w.shape[-1] == x2.shape[-1] and w.shape[0] == want.shape[-1]  # a Linear computes x @ W^T
    k = x2.shape[-1]
    mag = (np.abs(x2.astype(np.float64)) @ np.abs(w.astype(np.float64)).T) if tb else \
        np.abs(x2.astype(np.float64)) @ np.abs(w.astype(np.float64))
    scale = bounds.terms_scale(mag, k)
    want2 = want.reshape(mag.shape)

    def judged(weight):
        got = (x2 @ weight.T) if tb else x2 @ weight  # numpy's float32 kernel
        return bounds.measure(got, want2, scale, "float32", "terms", bounds.roundings(k), k, "MatrixMul")

    clean = judged(w)
    assert clean.spread is not None and clean.spread.limits().failed() == (), clean
    assert clean.units <= bounds.TERMS_C and clean.spread.units_rms < sigma(k)
    u = np.random.default_rng(0).uniform(-1, 1, w.shape)
    off = judged((w.astype(np.float64) * (1 + 2e-6 * u)).astype(np.float32))
    assert off.units <= bounds.TERMS_C  # the worst element alone calls it rounding
    assert CHANNEL in off.spread.limits().failed(), off.spread.limits()
    assert off.spread.limits().chi2 > 3 * off.spread.limits().chi2_limit


def test_equal_inputs_count_once():
    """A convolution's output over a flat image (a checkerboard of +-0.3, one other value per
    channel): every element of one value sums the same terms, so its rounding is the same. The
    same half-unit error at all 256 elements of a channel is one rounding, not 256: counted
    once, it passes; counted 256 times it would be far beyond rounding."""
    rng = np.random.default_rng(1)
    ref = np.where((np.arange(16)[:, None] + np.arange(16)) % 2 == 0, 0.3, -0.3) * np.ones((1, 4, 1, 1))
    ref[:, :, 0, 0] = rng.uniform(0.1, 0.5, 4)
    scale = np.abs(ref) * 4  # K = 9: sqrt(9) + 1
    local = ref + 0.5 * bounds.EPS["float32"] * 1.2  # half a unit of the +-0.3 elements everywhere
    b = bounds.measure(local, ref, scale, "float32", "terms", bounds.roundings(9), 9, "ConvolutionForward")
    assert b.spread.n == 12 and b.spread.channels == 4 and b.spread.worst_channel_n == 3
    assert b.spread.limits().failed() == ()
    many = 4 * 256 * 0.5 ** 2 / sigma(9) ** 2  # the chi2 had each element counted
    assert many > 10 * b.spread.limits().chi2_limit


@pytest.mark.megengine
def test_a_clean_model_has_no_distribution_root_and_the_fault_is_named_by_its_test(manifest, lar_dump,
                                                                                  tmp_path):
    """vit, default against naive: every sum of terms has its distribution measured and within
    the limits. The same model with blocks.1.fc2's weight times 1 + 2e-6 u (a real rewrite of
    the model, run by the default kernels): the first root is blocks.1.fc2 by its channel test
    alone (its worst element is within 1.5 units)."""
    from lar_prec.diagnosis.local import perturb_constant

    from conftest import run_lar

    case = manifest["vit"]
    clean = local_errors(case.model, lar_dump("vit", "naive"), "default", out_dir=tmp_path / "clean",
                         test_dump=lar_dump("vit", "default"), checks=False)
    sums = [v for v in clean.vars if v.bound is not None and v.bound.kind == "terms"]
    assert sums and all(v.bound.spread is not None for v in sums)
    assert local_roots(clean, noise_floors(clean)).roots == ()
    faulty = perturb_constant(case.model, "blocks.1.fc2.weight", 2e-6, tmp_path / "faulty.mge", seed=0)
    test = tmp_path / "faulty-dump"
    run_lar(faulty, case.input_specs(), test)
    res = local_errors(faulty, lar_dump("vit", "naive"), "default", out_dir=tmp_path / "faulty", test_dump=test,
                       checks=False)
    roots = local_roots(res, noise_floors(res)).roots
    assert roots and roots[0].name == "blocks.1.fc2.MatrixMul", [r.name for r in roots]
    # every element a little off: its channel's mean (and, with its own sigma, perhaps its RMS), not its worst
    assert CHANNEL in roots[0].tests and WORST not in roots[0].tests, roots[0].tests
    assert roots[0].local_err <= roots[0].floor and roots[0].margin > 1


@pytest.mark.megengine
def test_right_weights_wrong_kernel_is_a_root_by_its_distribution(manifest, tmp_path):
    """The stand-in load_and_run's default kernel for vit's blocks.1.attn.proj computes with its
    weight times 1 + 2e-6 u while the dump shows the model's own weights (exit 0 before issue
    57: nothing but rounding in the worst element). naive-vs-default: exit 1, the root named
    with its test; every judged sum carries units_rms and its limits in the JSON."""
    from click.testing import CliRunner

    from lar_prec.cli import cli
    from proc_helpers import user_lar

    case = manifest["vit"]
    lar = user_lar(tmp_path / "lar", WRAPPED_LAR_OP_FAULT="blocks.1.attn.proj.weight:u=2e-6")
    res = CliRunner().invoke(cli, ["naive-vs-default", str(case.model), *[a for s in case.input_specs()
                                                                          for a in ("--input", s)],
                                   "--lar", str(lar), "--out", str(tmp_path / "out"), "--json",
                                   str(tmp_path / "r.json"), "-q"])
    assert res.exit_code == 1, res.output[-3000:]
    d = json.loads((tmp_path / "r.json").read_text())
    assert not d.get("different_weights"), d.get("different_weights")
    root = d["roots"][0]
    # its channels' means and (with each element's own sigma from its terms) its RMS; not one element far off
    assert root["name"] == "blocks.1.attn.proj.MatrixMul" and root["tests"] == ["rms", "channel_mean"], root
    assert "a channel's mean" in root["note"], root["note"]
    assert "root: blocks.1.attn.proj.MatrixMul (MatrixMul, var " in d["verdict"] and \
        "failed: rms, channel mean)" in d["verdict"], d["verdict"]
    judged = [v for v in d["vars"] if v.get("spread")]
    assert judged and all(v["units_rms"] == v["spread"]["units_rms"] and v["spread"]["rms_limit"] > 0
                          for v in judged)
    by_name = {v["name"]: v for v in d["vars"]}
    proj = by_name["blocks.1.attn.proj.MatrixMul"]
    assert proj["spread"]["failed"] == ["rms", "channel_mean"] and proj["units_max"] <= 1.5
    assert proj["spread"]["channel_chi2"] > proj["spread"]["channel_chi2_limit"]
    # its 3120 outputs of 48 terms: its own sigma per element, a weight fault of 1e-5 is found whatever the terms
    assert proj["spread"]["sigma_per_element"] is True and 0 < proj["spread"]["detectable_fault"] < 1e-5


def test_the_terms_bound_holds_for_real_float32_sums_in_any_order():
    """Each element's own variance from its terms (partial sums of k terms at most max(P_k, N_k))
    is below the model's (K + 1) T^2, and real float32 sums stay within it: numpy's sequential
    cumsum and its pairwise sum of float32 products, against the exact sum, over 4000 rows of
    64 terms of both signs."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4000, 64)).astype(np.float32)
    w = (rng.standard_normal(64) * np.exp(rng.uniform(-2, 2, 64))).astype(np.float32)
    prods = x * w  # float32 products, rounded
    exact = x.astype(np.float64) @ w.astype(np.float64)
    terms = x.astype(np.float64) * w.astype(np.float64)
    s = spread.partial_sums_bound(terms)
    t = np.abs(terms).sum(axis=1)
    assert np.all(s <= 65 * t * t) and np.median(s / (65 * t * t)) < 0.4
    u2 = 2.0 ** -48 / 3.0  # (eps / 2)^2 / 3 per rounding of a value at its bound
    for summed in (np.cumsum(prods, axis=1, dtype=np.float32)[:, -1], prods.sum(axis=1, dtype=np.float32)):
        err2 = (summed.astype(np.float64) - exact) ** 2
        assert err2.sum() < u2 * s.sum(), (err2.sum(), u2 * s.sum())


@pytest.mark.megengine
def test_a_small_products_own_sigma_finds_what_sigma_k_misses(lar_dump):
    """mlp's l2 (8 x 64 outputs of 128 terms): numpy's float32 product with the weight times 1 +
    5e-6 u passes every test with sigma(K) = 0.38 for all, and fails the RMS test with each
    element's own sigma from its terms (0.24 at most); numpy's clean product passes both."""
    ref = DumpFolder(lar_dump("mlp", "naive"))
    out = next(d for d in ref if d.var.name == "l2.MatrixMul")
    a, b = (ref[u].array().astype(np.float32) for u in ref.inputs_of(out.id))
    want = out.array()
    ps = spread.matmul_partial_sums(a, b, want)
    assert ps is not None and ps.shape == want.shape
    x, w = (a, b) if a.shape[-1] == b.shape[0] and (a @ b).shape == want.shape else (a, b.T)
    k = x.shape[-1]
    scale = bounds.terms_scale(np.abs(x.astype(np.float64)) @ np.abs(w.astype(np.float64)), k)
    u = np.random.default_rng(0).uniform(-1, 1, w.shape)
    faulty = (w.astype(np.float64) * (1 + 5e-6 * u)).astype(np.float32)
    for weight, found in ((w, False), (faulty, True)):
        got = x @ weight
        plain = bounds.measure(got, want, scale, "float32", "terms", bounds.roundings(k), k, "MatrixMul")
        own = bounds.measure(got, want, scale, "float32", "terms", bounds.roundings(k), k, "MatrixMul", ps)
        assert plain.spread.limits().failed() == () and not plain.spread.per_element
        assert own.spread.per_element and own.spread.sigma < sigma(k)
        assert (RMS in own.spread.limits().failed()) == found, own.spread.limits()
