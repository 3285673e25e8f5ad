"""``lar-prec mixed`` on real cases and real runs (issue 23 #1).

Which operators a CPU's float16 kernels get wrong differs between machines (cnn's float16 max
pooling is wrong under ioc16 on the AMD EPYC measured, NaN in some runs); so the tests check
what must hold whatever the CPU: the list widens as documented, the verified model is within
tolerance when it says so (checked again here, from its own run, by numpy), the keep-list file
rewrites to the same model, and the fraction left in float16 counts what the list leaves.
"""
from __future__ import annotations

import io
import json
import math
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from browser_helpers import _clean_page, browser, chromium, hover, inked, plots  # noqa: F401  (fixture)
from conftest import run_lar
from proc_helpers import user_lar

from lar_prec.compare.metrics import max_megengine_err
from lar_prec.compare.tolerance import fmt_num
from lar_prec.diagnosis.graphinfo import describe_model
from lar_prec.diagnosis.oracle import KERNEL_WRONG
from lar_prec.dumps.folder import DumpFolder
from lar_prec.errors import UsageError
from lar_prec.lar.mixed_rewrite import KeepList
from lar_prec.report.html import write_html
from lar_prec.report.mixed import render_mixed_terminal
from lar_prec.workflows.precision.mixed import mixed_analysis
from lar_prec.workflows.sweep.speed import ITERS, WARMUP_ITER, iteration_ms

NAIVE = {"MGB_USE_MEGDNN_DBG": "2"}


def _last(folder: DumpFolder) -> dict:
    return {d.var.name: d for d in folder}


def _output_err(case, graph, ref: DumpFolder, model: Path, out: Path) -> float:
    """The mixed model run once more, its outputs against the reference by numpy."""
    run_lar(model, case.input_specs(), out)
    a, b = _last(ref), _last(DumpFolder(out))
    names = [graph.vars[v].name for v in graph.outputs]
    return max(max_megengine_err(np.asarray(a[n].array()), np.asarray(b[n].array())) for n in names)


def _check_agreement(data: dict, a: dict) -> None:
    """A classifier output's top-1/top-5 agreement, recomputed from the verification's own dump."""
    ref = _last(DumpFolder(data["runs"][0]["dump_dir"]))
    got = _last(DumpFolder(Path(a["run_dir"]) / "dump"))
    for g in a["agreement"]:
        x, y = np.asarray(ref[g["name"]].array()), np.asarray(got[g["name"]].array())
        x, y = x.reshape(x.shape[0], -1), y.reshape(y.shape[0], -1)
        assert g["classes"] == x.shape[1] >= 10 and g["samples"] == x.shape[0]
        assert g["top1"] == int(np.sum(x.argmax(1) == y.argmax(1)))
        five = np.argsort(-y, axis=1, kind="stable")[:, :5]
        assert g["top5"] == sum(int(b in row) for b, row in zip(x.argmax(1), five))


def _check_invariants(case, data: dict, tmp_path: Path, lar_dump) -> None:
    adir = Path(data["analysis_dir"])
    tol = data["tolerance"]
    attempts = data["attempts"]
    proposal = data["proposal"]
    bugs = data["kernel_bugs"]
    # the tolerance: the one rule (compare.tolerance) unless the user gave one
    ot = data["output_tolerance"]
    assert ot["value"] == tol
    if ot["given"] is None:
        level = data["level"]["output_err"] if data["level"] else None
        assert ot["level"] == level and tol == max(ot["band"], 2 * (level or 0.0)), ot
        assert ot["text"].startswith(f"tolerance {fmt_num(tol)} = ")
    # each verification keeps what the one before kept: the kernel bugs first, then the other
    # local roots, then widening by 1, 2, 4, ... operators (the last may keep every operator, or
    # the candidates left)
    kinds = [a["kind"] for a in attempts]
    sizes = [len(a["keep"]) for a in attempts]
    for prev, cur in zip(attempts, attempts[1:]):
        assert set(prev["keep"]) <= set(cur["keep"])
    assert set(bugs) <= set(proposal)
    if attempts and data["plain"]["failed"] is None:
        first = ("kernel bugs", bugs) if bugs else ("local roots", proposal) if proposal else ("widened", None)
        assert kinds[0] == first[0], kinds
        if first[1] is not None:
            assert sorted(attempts[0]["keep"]) == sorted(first[1])
        else:
            assert sizes[0] == 1 or kinds[0] == "every operator"
    deltas = [b - a for a, b, k in zip([0] + sizes, sizes, kinds) if k == "widened"]
    if deltas:
        assert deltas[:-1] == [2 ** j for j in range(len(deltas) - 1)] and deltas[-1] <= 2 ** (len(deltas) - 1), sizes
    assert all(a["within"] == (a["output_err"] is not None and a["output_err"] <= tol) for a in attempts)
    # every model tried is a point: the share it leaves in float16 counts what it keeps
    for a in attempts:
        assert a["oprs_total"] - a["oprs_float16"] == len(a["keep"]) or a["kind"] == "every operator", a
        assert 0.0 <= (a["macs_fraction"] or 0.0) <= 1.0
        _check_agreement(data, a)
    if data["verdict"] == "within":
        assert attempts == [] and data["kept"] == [] and data["plain"]["output_err"] <= tol
        return
    assert data["verified"] == attempts[-1]["within"]
    assert [k["name"] for k in data["kept"]] == attempts[-1]["keep"]
    # the deployable model: the last one tried, under one name, within tolerance when verified
    graph = describe_model(case.model, tmp_path / "graph.json")
    mm = Path(data["mixed_model"]["path"])
    assert mm == adir / "mixed.mge" and mm.read_bytes() == Path(attempts[-1]["model"]).read_bytes()
    err = _output_err(case, graph, DumpFolder(lar_dump(case.name, "naive")), mm, tmp_path / "again")
    assert err == pytest.approx(attempts[-1]["output_err"], rel=0.5, abs=2 ** -11)
    if data["verified"]:
        assert err <= tol + 2 ** -11
    # the keep-list file reads back as a keep-list, black and white lists cover every float operator
    keep = json.loads((adir / "keep.json").read_text())
    kl = KeepList.from_json(keep, "keep.json")
    assert sorted(kl.instances) == sorted(k["name"] for k in data["kept"])
    assert not set(keep["float16"]["instances"]) & set(kl.instances)
    by_type = keep["by_type"]
    assert sum(c["float32"] for c in by_type.values()) == len(kl.instances)
    frac = data["fp16_fraction"]
    assert frac["oprs_total"] - frac["oprs_float16"] == len(kl.instances)
    assert sum(c["float16"] for c in by_type.values()) == frac["oprs_float16"]


@pytest.fixture(scope="module")
def cnn_ioc16(manifest, tmp_path_factory):
    """One ``mixed`` analysis of cnn under ioc16 (2 rounds of timed runs, no budget: every point
    timed to its end), shared by the tests that only read it."""
    case = manifest["cnn"]
    return mixed_analysis(case.model, case.input_specs(), option="ioc16", out=tmp_path_factory.mktemp("mixed") / "a",
                          speed_runs=2, speed_budget="none")


@pytest.mark.megengine
def test_cnn_under_ioc16_keeps_what_the_cpu_gets_wrong_and_verifies_it(manifest, lar_dump, cnn_ioc16, tmp_path):
    case = manifest["cnn"]
    res = cnn_ioc16
    data = json.loads((res.analysis_dir / "mixed.json").read_text())
    assert data == json.loads(json.dumps(res.to_json()))
    assert data["output_tolerance"]["given"] is None and data["level"] is not None  # correct float16 ran
    _check_invariants(case, data, tmp_path, lar_dump)
    # the reference, the option alone, correct float16 (its naive kernels: the tolerance's level), then
    # the verifications: one model run more than a sweep of ioc16 needs when the first step holds
    assert [r["label"] for r in data["runs"]][:3] == ["reference", "ioc16", "ioc16-naive"]
    # the option alone out of tolerance runs once more (issue 51 #6): its wrong value the same bits, or
    # not (this CPU's float16 max pooling reads memory it did not write in some runs), said either way
    n = data["nondeterminism"]
    assert (n is None) == (data["verdict"] == "within")
    if n is not None:
        assert data["runs"][3]["label"] == "ioc16-again" and n["told"] and n["same_bits"] != n["differs"], n
        assert data["advice"][1] == n["words"]
    if data["verdict"] == "fixed" and len(data["attempts"]) == 1:
        assert len(data["runs"]) == 5
    # what this CPU's float16 kernels get wrong (the oracle says which: cnn's float16 max pooling on
    # the AMD EPYC measured) is kept first, as its own step; within tolerance after it, nothing more
    # is kept: what is left is float16's own error
    bugs = data["kernel_bugs"]
    if bugs:
        assert data["attempts"][0]["kind"] == "kernel bugs" and sorted(data["attempts"][0]["keep"]) == sorted(bugs)
        assert all(k["cause"] == KERNEL_WRONG and k["listed"].startswith("kernel bug under ioc16")
                   for k in data["kept"] if k["name"] in bugs)
        if data["attempts"][0]["within"]:
            assert len(data["attempts"]) == 1 and data["verified"]
            assert any("float16's own level" in line for line in data["advice"])
    pool = [k for k in data["kept"] if k["opr_type"] == "PoolingForward"]
    if any(r["opr_type"] == "PoolingForward" for r in data["local"]["roots"]):
        assert pool and pool[0]["listed"].split(" under ")[0] in ("kernel bug", "local root")
        assert (pool[0]["cause"] == KERNEL_WRONG) == (pool[0]["name"] in bugs), pool[0]
    # cnn's output is a classifier's 10 scores: top-1/top-5 agreement beside the error at every point
    # whose scores are finite (this CPU's float16 max pooling now and then writes NaN, as from memory
    # it never set: seen once in CI, the option alone's Softmax all NaN; NaN scores have no ranks)
    for p in [data["plain"], *data["curve"]]:
        if p["nonfinite"]:
            assert p["agreement"] == [], p
        else:
            assert [g["name"] for g in p["agreement"]] == [o["name"] for o in p["outputs"]], p
    assert any(p["agreement"] for p in data["curve"])


@pytest.mark.megengine
def test_long_reductions_widen_until_the_output_holds(manifest, lar_dump, tmp_path):
    """longred sums thousands of terms per output: float16 accumulation, no single wrong kernel;
    a tolerance below what the option gives makes the list widen, worst local error first."""
    case = manifest["longred"]
    res = mixed_analysis(case.model, case.input_specs(), option="ioc16", tolerance=2.0 ** -12, out=tmp_path / "a",
                         speed_runs=0)
    data = res.to_json()
    _check_invariants(case, data, tmp_path, lar_dump)
    if data["plain"]["output_err"] > 2.0 ** -12:
        assert data["attempts"], data
        errs = {o["name"]: o["local_err"] for o in data["operators"]}
        first = data["attempts"][0]["keep"]
        if not data["proposal"]:  # widened from nothing: the worst local error first
            assert errs[first[0]] == max(e for e in errs.values() if e is not None)
        widened = [k for k in data["kept"] if k["listed"].startswith("widened")]
        assert all(k["cause"] for k in widened if k["opr_type"] == "ConvolutionForward")


@pytest.mark.megengine
def test_a_model_megengines_io16xc32_refuses_is_rewritten_and_runs(manifest, lar_dump, tmp_path):
    """attention's integer reduction makes MegEngine's own io16xc32 pass fail at load; the
    rewrite sets float32 compute on float reductions only, so the mixed model runs."""
    case = manifest["attention"]
    proc = subprocess.run([sys.executable, "-m", "lar_prec", "mixed", str(case.model), "--input",
                           ";".join(case.input_specs()), "--option", "io16xc32", "--out", str(tmp_path / "a"),
                           "--json", str(tmp_path / "m.json"), "--html", str(tmp_path / "m.html"), "-q",
                           "--speed-runs", "2"],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 1, proc.stderr
    data = json.loads((tmp_path / "m.json").read_text())
    assert "Reduce" in data["plain"]["failed"] or "reduce" in data["plain"]["failed"]
    assert data["runs"][1]["status"] == "failed"
    assert data["attempts"][0]["keep"] == [] or data["attempts"][0]["step"] == 1
    assert data["mixed_model"] is not None and Path(data["mixed_model"]["path"]).is_file()
    assert "alone does not run here" in proc.stdout
    _check_invariants(case, data, tmp_path, lar_dump)
    assert (tmp_path / "m.html").is_file() and (tmp_path / "a" / "mixed.html").is_file()
    # the option alone does not run, so it is not timed; float32 and each keep-list are
    assert data["plain"]["speed"] is None and "ioc16" not in data["speed"]["rows"] and "io16xc32" not in data["speed"]["rows"]
    assert data["speed"]["float32"]["status"] == "timed"
    assert all(a["speed"]["run_dirs"] for a in data["attempts"])


@pytest.mark.megengine
def test_an_option_within_tolerance_costs_no_verification_and_exits_0(manifest, tmp_path):
    case = manifest["mlp"]
    proc = subprocess.run([sys.executable, "-m", "lar_prec", "mixed", str(case.model), "--input",
                           ";".join(case.input_specs()), "--tolerance", "0.5", "--out", str(tmp_path / "a"),
                           "--json", "-", "-q", "--speed-runs", "0"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["verdict"] == "within" and data["attempts"] == [] and data["kept"] == []
    assert [r["label"] for r in data["runs"]] == ["reference", "ioc16", "ioc16-naive"]
    assert data["output_tolerance"]["given"] == 0.5 and "given" in data["output_tolerance"]["text"]
    assert data["fp16_fraction"]["oprs_fraction"] == 1.0
    assert data["mixed_model"] is None
    # --speed-runs 0: nothing timed, no speed folder, no speed column
    assert data["speed"]["off"] and data["plain"]["speed"] is None and not (tmp_path / "a" / "speed").exists()
    out = io.StringIO()
    render_mixed_terminal(data, out)
    assert "vs float32" not in out.getvalue() and not any(a.startswith("speed") for a in data["advice"])


@pytest.mark.parametrize("args,match", [
    (["--option", "nchw44"], "Invalid value for '--option'"),
    (["--tolerance", "-1"], "Invalid value for '--tolerance'"),
    (["--speed-runs", "1"], "--speed-runs 1: expected 0 (no timing) or 2 to 50"),
    (["--speed-runs", "51"], "--speed-runs 51: expected 0"),
    (["--speed-runs", "-1"], "--speed-runs -1: expected 0"),
    (["--speed-runs", "x"], "Invalid value for '--speed-runs'"),
    (["--speed-budget", "0"], "--speed-budget '0': expected a fraction"),
    (["--speed-budget", "x"], "--speed-budget 'x': expected a fraction"),
])
def test_bad_options_are_usage_errors(manifest, tmp_path, args, match):
    case = manifest["mlp"]
    proc = subprocess.run([sys.executable, "-m", "lar_prec", "mixed", str(case.model), "--input",
                           ";".join(case.input_specs()), "--out", str(tmp_path / "a"), *args],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and match in proc.stderr
    assert "Traceback" not in proc.stderr and [ln for ln in proc.stderr.splitlines() if "Error" in ln] == [
        next(ln for ln in proc.stderr.splitlines() if ln.startswith("Error: "))], proc.stderr  # one error line
    assert not (tmp_path / "a").exists()


def test_a_missing_model_names_the_file(tmp_path):
    with pytest.raises(UsageError, match="missing.mge"):
        mixed_analysis(tmp_path / "missing.mge", "data:x.npy", out=tmp_path / "a")
    with pytest.raises(UsageError, match="--tolerance"):
        mixed_analysis(tmp_path / "missing.mge", "data:x.npy", tolerance=float("nan"))
    assert not (tmp_path / "a").exists()


@browser
@pytest.mark.browser
@pytest.mark.megengine
def test_the_page_draws_the_keep_list_and_each_verification(cnn_ioc16, chromium, tmp_path):  # noqa: F811
    data = cnn_ioc16.to_json()
    chromium.open(write_html(data, tmp_path / "m.html"))
    _clean_page(chromium)
    assert chromium.js("document.getElementById('advice-section').hidden") is False
    assert chromium.js("document.getElementById('table-section').hidden") is True
    # the banner is where the analysis ends, in the terminal's words: green for a verified keep-list
    verdict = chromium.js("document.getElementById('verdict').innerText")
    assert verdict == data["headline"] and data["headline"] in data["advice"]
    good = chromium.js("document.getElementById('verdict').classList.contains('good')")
    assert good is (data["verdict"] in ("within", "fixed")) and (data["verdict"] == "fixed") is data["verified"]
    if data["verdict"] == "fixed":
        assert verdict.startswith("verified: ")
    items = chromium.js("Array.from(document.querySelectorAll('#mixed-advice li')).map(li => li.innerText)")
    assert items == [a for a in data["advice"] if a != data["headline"]] and items[0].startswith("--enable-ioc16 alone")
    # the trade-off: each model tried a point at its output error and MAC share, the chosen keep-list ringed
    plot, speed = plots(chromium)
    assert plot["caption"].startswith("Trade-off: output error against the share of MACs left in float16")
    assert plot["x"] == "share of MACs left in float16" and plot["xticks"][0] == "0%" and plot["xticks"][-1] == "100%"
    assert plot["y"] == "output error" and plot["yticks"]
    tried = [data["plain"]] * (not data["plain"]["failed"]) + [data["level"]] * (data["level"] is not None) + data["attempts"]
    assert plot["points"] == len(tried)
    chosen = [a for a in [data["plain"]] + data["attempts"] if a.get("chosen")]
    assert len(chosen) == 1 and (chosen[0] is data["attempts"][-1] if data["attempts"] else True)
    assert chromium.js("document.querySelectorAll('#mixed-tradeoff .chosen-ring').length") == 1
    tip = hover(chromium, "#mixed-tradeoff .pt.chosen")
    assert tip.startswith(chosen[0]["label"] + "\n") and "(the chosen keep-list)" in tip
    assert f"output error {fmt_num(chosen[0]['output_err']).replace('e-0', 'e-')}" in tip
    far, total = inked(chromium, "#mixed-tradeoff .plot-area")
    assert far > 0.002 * total, (far, total)
    # speed as the third dimension (issue 55): each timed point's speed-up against float32 over its error
    timed = [p for p in [data["plain"], *data["attempts"]] if (p.get("speed") or {}).get("speedup") is not None]
    assert speed["id"] == "mixed-speed" and speed["caption"].startswith("Speed: each timed point")
    assert speed["x"] == "output error" and speed["y"] == "speed-up against float32"
    assert speed["points"] == len(timed) and all(t.endswith("x") for t in speed["yticks"])
    assert chromium.js("document.querySelectorAll('#mixed-speed .speed-interval').length") == len(timed)
    hollow = chromium.js("document.querySelectorAll('#mixed-speed .pt.same').length")
    assert hollow == sum(not p["speed"]["measurable"] for p in timed)
    if data["attempts"]:
        tip = hover(chromium, "#mixed-speed .pt.chosen")
        assert tip.startswith(chosen[0]["label"] + "\n" + chosen[0]["speed"]["words"])
    far, total = inked(chromium, "#mixed-speed .plot-area")
    assert far > 0.002 * total, (far, total)
    # the points table has the speed column, in the JSON's words
    head = chromium.js("Array.from(document.querySelectorAll('#advice table')[%d].querySelectorAll('th')).map(t => t.innerText)"
                       % (1 if data["kept"] else 0))
    col = head.index("speed against float32")
    cells = chromium.js("Array.from(document.querySelectorAll('#advice table')[%d].querySelectorAll('tbody tr')).map(r => r.cells[%d].innerText)"
                        % (1 if data["kept"] else 0, col))
    assert cells[0].startswith(data["plain"]["speed"]["words"]) and cells[1] == "\u2014"  # correct float16: not timed
    assert [c.split(" (")[0] for c in cells[2:]] == [a["speed"]["words"] for a in data["attempts"]]
    # the runs table names each run's configuration (a run record's config is an object)
    runs = chromium.js("Array.from(document.querySelectorAll('#runs-table tbody tr td:first-child')).map(td => td.innerText)")
    assert runs[0] == "reference (naive)" and not any("object" in r for r in runs), runs
    tables = chromium.js("Array.from(document.querySelectorAll('#advice table')).map(t => t.querySelectorAll('tbody tr').length)")
    n_ver = 1 + (data["level"] is not None) + len(data["attempts"])  # the option alone, correct float16, each verification
    if data["kept"]:
        assert tables == [len(data["kept"]), n_ver, len(data["operators"])]
        first = chromium.js("document.querySelector('#advice table tbody tr td').innerText")
        assert first == data["kept"][0]["name"]
    else:
        assert tables == [n_ver, len(data["operators"])]
    kept_rows = chromium.js("document.querySelectorAll('#advice tr.kept').length")
    assert kept_rows == len(data["kept"])
    assert chromium.js("document.querySelectorAll('#runs-table tbody tr').length") == len(data["runs"])


@pytest.mark.megengine
def test_a_users_binary_whose_kernel_is_wrong_in_any_precision_is_not_fixed_by_float32(manifest, tmp_path):
    """``--lar``: a user's load_and_run (tests/wrapped_lar.py, the bundled one really run) whose
    default kernels get conv c2 wrong by 10%. Under ioc16 that convolution is the local root
    and the oracle says its kernel is wrong; keeping it (and then everything) in float32 does not
    help, because the binary is wrong in float32 too: the list widens to every operator and the
    verdict says no keep-list holds."""
    case = manifest["cnn"]
    lar = user_lar(tmp_path / "lar", WRAPPED_LAR_FAULT="c2.weight:1e-1")
    proc = subprocess.run([sys.executable, "-m", "lar_prec", "mixed", str(case.model), "--input",
                           ";".join(case.input_specs()), "--lar", str(lar), "--out", str(tmp_path / "a"),
                           "--json", str(tmp_path / "m.json"), "-q", "--speed-runs", "0"], capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 1, proc.stderr
    data = json.loads((tmp_path / "m.json").read_text())
    assert all(r["load_and_run"]["path"] == str(lar) for r in data["runs"]), [r["load_and_run"] for r in data["runs"]]
    assert "c2.Convolution" in data["proposal"]
    conv = next(k for k in data["kept"] if k["name"] == "c2.Convolution")
    assert conv["cause"] == KERNEL_WRONG, conv
    assert data["verdict"] == "not_fixed" and not data["verified"]
    assert len(data["kept"]) == len(data["operators"])  # the last verification kept every operator
    assert "no keep-list tried brings it within" in proc.stdout


@pytest.mark.megengine
def test_sweep_mixed_and_naive_vs_default_hold_outputs_to_one_rule_in_the_same_words(manifest, cnn_ioc16, tmp_path):
    """Issue 34 #4: one tolerance for outputs, max(band, 2 x level of correct kernels), printed in
    the same words. The naive kernels are deterministic: sweep's and mixed's correct float16 runs
    give the same level, hence the same tolerance on the same model and inputs."""
    from test_sweep import by_option, case_args, invoke, sweep_json

    d, _ = sweep_json(tmp_path / "s", manifest["cnn"], ["ioc16"], "--no-local", expect=None)
    o, m = by_option(d)["ioc16"], cnn_ioc16.to_json()
    keys = ("value", "band", "level", "factor", "dtype", "text")
    assert {k: o["output_tolerance"][k] for k in keys} == {k: m["output_tolerance"][k] for k in keys}
    tol = cnn_ioc16.output_tolerance
    err = math.inf if o["output_nonfinite"] else o["output_err"]  # the pooling's NaN in some runs
    assert o["output_words"] == tol.words(err) and o["tolerance"] == m["tolerance"]
    err = math.inf if m["plain"]["nonfinite"] else m["plain"]["output_err"]
    assert m["advice"][0] == (f"--enable-ioc16 alone: {tol.words(err)}: "
                              f"{'within' if m['verdict'] == 'within' else 'out of tolerance'}")
    # naive-vs-default: the same rule with level 0 (both sides do the same arithmetic), as the sweep's
    # default run (no option) has it
    res = invoke(["naive-vs-default", *case_args(manifest["cnn"]), "--no-local", "--out", str(tmp_path / "n"),
                  "--json", str(tmp_path / "n.json"), "-q"])
    n = json.loads((tmp_path / "n.json").read_text())
    assert n["output_tolerance"] == d["default"]["output_tolerance"] and n["output_tolerance"]["level"] == 0.0
    words = d["default"]["output_words"].replace(fmt_num(d["default"]["output_err"]), fmt_num(n["output_err"]))
    assert f"outputs: {words}: within" in n["notes"] and res.exit_code in (0, 1)


@pytest.mark.megengine
def test_an_option_whose_wrong_output_differs_run_to_run_is_named_nondeterministic(manifest, tmp_path):
    """Issue 51 #6: the stand-in's default kernel for l2 under --enable-ioc16 scales its weight by a
    factor new in every process (tests/wrapped_lar.py, WRAPPED_LAR_JITTER_IF_FLAG): the option alone
    is out of tolerance, its second run differs from the first from l2.MatrixMul on, and the advice
    says so with the operator (the verifications run the rewritten model without the flag: right)."""
    case = manifest["mlp"]
    jitter = tmp_path / "jitter"
    jitter.mkdir()
    lar = user_lar(tmp_path / "lar", WRAPPED_LAR_JITTER_IF_FLAG="--enable-ioc16=l2.weight:0.2",
                   WRAPPED_LAR_JITTER_DIR=str(jitter))
    data = mixed_analysis(case.model, case.input_specs(), option="ioc16", out=tmp_path / "a", lar=str(lar),
                          speed_runs=0).to_json()
    assert data["plain"]["output_err"] > data["tolerance"], data["plain"]
    n = data["nondeterminism"]
    assert n["told"] and n["differs"] and n["first"]["name"] == "l2.MatrixMul", n
    assert n["first"]["spread"] > data["tolerance"] and n["output_spread"] > 0
    assert n["words"].startswith("nondeterministic under --enable-ioc16: l2.MatrixMul (MatrixMul)")
    assert data["advice"][1] == n["words"]
    assert [r["label"] for r in data["runs"]][:4] == ["reference", "ioc16", "ioc16-naive", "ioc16-again"]
    assert "l2.MatrixMul" in data["proposal"]


def _run_json(run_dir: str) -> dict:
    return json.loads((Path(run_dir) / "run.json").read_text())


@pytest.mark.megengine
def test_each_point_is_timed_against_float32_in_interleaved_rounds(manifest, cnn_ioc16):
    """Issue 55: float32 (the plain model), the option alone and each verified keep-list, timed
    with load_and_run's own per-iteration lines, no dumps, interleaved rounds. Which is faster on
    this CPU is not asserted: where the numbers come from, the rounds and the interval rule are."""
    case, res = manifest["cnn"], cnn_ioc16
    data = res.to_json()
    sp = data["speed"]
    assert sp["off"] is None and sp["rounds"] == 2 and sp["iter"] == ITERS and sp["warmup_iter"] == WARMUP_ITER
    assert sp["threads"] == 1 and sp["device"].startswith("cpu") and sp["baseline"] == "float32"
    base = sp["float32"]
    rows = [("float32", base, case.model.resolve(), ())]
    if not data["plain"]["failed"]:
        rows.append(("ioc16", data["plain"]["speed"], case.model.resolve(), ("--enable-ioc16",)))
    rows += [(f"mixed-{a['step']}", a["speed"], Path(a["model"]), ()) for a in data["attempts"]]
    assert set(sp["rows"]) == {r[0] for r in rows}
    assert data["level"].get("speed") is None  # correct float16 is a yardstick, not a deployment
    speed_dir = Path(data["analysis_dir"]) / "speed"
    for name, s, model, flags in rows:
        assert s["status"] == "timed", (name, s)
        assert len(s["run_dirs"]) == 2 and len(s["iterations_ms"]) == 2
        for k, (run_dir, times) in enumerate(zip(s["run_dirs"], s["iterations_ms"])):
            # each round's times are the run's own stderr lines; the run dumped nothing
            assert Path(run_dir).parent == speed_dir
            assert Path(run_dir).name == f"{'default' if name == 'float32' else name}-{k + 1}"
            assert list(iteration_ms((Path(run_dir) / "stderr.txt").read_text())) == times and len(times) == ITERS
            rj = _run_json(run_dir)
            assert rj["timed"] == {"warmup_iter": WARMUP_ITER, "iter": ITERS} and rj["dump_dir"] is None
            assert not (Path(run_dir) / "dump").exists()
            assert Path(rj["model"]["path"]).resolve() == model.resolve()
            assert all(f in rj["argv"] for f in flags) and ("--enable-ioc16" in rj["argv"]) == bool(flags)
        assert s["median_ms"] == pytest.approx(statistics.median(t for r in s["iterations_ms"] for t in r), abs=1e-4)
        if name == "float32":
            assert s["speedup"] is None and s["words"].endswith("ms per iteration")
            continue
        # the speed-up: per round float32's median / this point's, their median and range
        ratios = [statistics.median(b) / statistics.median(o) for b, o in zip(base["iterations_ms"], s["iterations_ms"])]
        assert s["speedup"] == pytest.approx(statistics.median(ratios), rel=1e-3, abs=1e-4)
        assert s["speedup_interval"] == pytest.approx([min(ratios), max(ratios)], rel=1e-3, abs=1e-4)
        (bl, bh), (ol, oh) = base["spread_ms"], s["spread_ms"]
        assert s["measurable"] == (oh < bl or ol > bh)
        assert (s["words"] == "no measurable difference") == (not s["measurable"])
        if s["measurable"]:
            assert s["words"].endswith(" faster" if s["speedup"] > 1 else " slower")
    # interleaved: every row's first round ended before any second round began (run.json written last)
    order = sorted(((Path(d) / "run.json").stat().st_mtime_ns, Path(d).name) for _, s, _, _ in rows for d in s["run_dirs"])
    firsts = {Path(s["run_dirs"][0]).name for _, s, _, _ in rows}
    assert {n for _, n in order[:len(rows)]} == firsts, order
    # the curve's points carry the same timing as the attempts they are
    by_label = {a["label"]: a["speed"] for a in data["attempts"]}
    by_label[data["plain"]["label"]] = data["plain"]["speed"]
    assert all(p["speed"] == by_label[p["label"]] for p in data["curve"])
    # the words: one advice line, a column in the terminal table
    line = next(a for a in data["advice"] if a.startswith("speed against the float32 model"))
    assert all(f"verification {a['step']}: {a['speed']['words']}" in line for a in data["attempts"])
    out = io.StringIO()
    render_mixed_terminal(data, out)
    text = out.getvalue()
    assert "vs float32" in text and "speed: 2 interleaved rounds of --warmup-iter 1 --iter 10 without dumps" in text
    for a in data["attempts"]:
        row = next(r for r in text.splitlines() if r.strip().startswith(a["label"]))
        assert a["speed"]["words"] in row
    # timing is not among the precision runs
    assert str(speed_dir) not in json.dumps(data["runs"])


@pytest.mark.megengine
def test_a_keep_list_whose_timed_run_crashes_keeps_its_precision_verdict(manifest, tmp_path):
    """The stand-in load_and_run aborts when run without a dump on the first keep-list's model
    (``WRAPPED_LAR_CRASH_TIMED``: its path in argv): its verification ran (a dump) and keeps its
    point; its timing says how it failed and is not tried again; the others are timed.
    ``--tolerance 0`` makes at least one verification on any CPU."""
    case = manifest["mlp"]
    adir = (tmp_path / "a").resolve()
    lar = user_lar(tmp_path / "lar", WRAPPED_LAR_CRASH_TIMED=str(adir / "mixed-1.mge"))
    proc = subprocess.run([sys.executable, "-m", "lar_prec", "mixed", str(case.model), "--input",
                           ";".join(case.input_specs()), "--lar", str(lar), "--tolerance", "0", "--out", str(adir),
                           "--json", str(tmp_path / "m.json"), "--speed-runs", "2", "--speed-budget", "none", "-q"],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 1, proc.stderr[-2000:]  # out of tolerance: the precision's exit code
    data = json.loads((tmp_path / "m.json").read_text())
    first = data["attempts"][0]
    assert first["model"] == str(adir / "mixed-1.mge") and first["run_dir"]
    assert isinstance(first["output_err"], float) and first["within"] == (first["output_err"] <= data["tolerance"])
    assert (Path(first["run_dir"]) / "dump").is_dir()  # its verification ran, with its dump
    s = first["speed"]
    assert s["status"] == "crashed" and "SIGABRT" in s["reason"] and s["words"].startswith("timing crashed: ")
    assert len(s["run_dirs"]) == 1 and s["speedup"] is None  # not timed again after it crashed
    assert data["speed"]["float32"]["status"] == "timed" and data["plain"]["speed"]["status"] == "timed"
    assert all(a["speed"]["status"] == "timed" for a in data["attempts"][1:])
    assert "verification 1: timing crashed: " in next(a for a in data["advice"] if a.startswith("speed against"))
    assert "timing crashed" in proc.stdout and "SIGABRT" in proc.stdout
