"""The page's plots rendered in headless Chromium from real reports, asserted on the DOM a reader
meets (captions that name what is shown, ticked and labelled axes, values on hover) and on a
screenshot: the plot area really has ink. The report page's chart and one variable's error
histogram here (report_fixtures.py: real attention runs, one operator corrupted); mixed's
trade-off in tests/workflows/test_mixed.py, the trend page in tests/store/test_store.py."""
from __future__ import annotations

from dataclasses import replace

import pytest

from browser_helpers import _clean_page, browser, chromium, hover, inked, plots  # noqa: F401  (chromium: a fixture)
from lar_prec.compare.tolerance import fmt_num
from lar_prec.report.html import write_html
from report_fixtures import dumps_ab, faulty_report, runs  # noqa: F401  (fixtures)

def _js_fmt(x: float) -> str:
    """A number as the page writes it (fmt in plots.js): 3 significant digits, exponent unpadded."""
    return fmt_num(x).replace("e-0", "e-").replace("e+0", "e+")


def _share(tip: str) -> float:
    """The share of elements a bar's tip states ("9% of the elements: ...")."""
    return float(tip.split("% of the elements")[0]) / 100


@browser
@pytest.mark.browser
@pytest.mark.megengine
def test_the_report_page_plots_each_variables_error_histogram_and_says_what_it_compares(chromium, faulty_report, tmp_path):
    b = chromium
    b.open(write_html(faulty_report, tmp_path / "report.html"))
    _clean_page(b)
    naive_dir = faulty_report.runs[0].dir
    # the chart says which runs it compares: the report's dumps A and B (B here a copy, named by its folder)
    subject = b.js("document.getElementById('chart-subject').innerText")
    assert subject.startswith("max_err of ") and subject.split("; ")[0].endswith("against run naive"), subject
    assert naive_dir not in subject and "default-faulty" in subject
    # the histogram opens on root #1 (the corrupted operator), its caption naming it and the comparison
    root = faulty_report.var(faulty_report.roots[0].id)
    [hist] = [p for p in plots(b) if p["id"] == "hist-plot"]
    assert f"of {root.name} (var {root.id}, {root.opr_type})" in hist["caption"] and "against run naive" in hist["caption"]
    assert hist["aria"] == hist["caption"] and hist["x"].startswith("error of an element") and hist["y"] == "share of elements"
    assert hist["yticks"] == ["100%", "10%", "1%", "0.1%"] and len(hist["xticks"]) >= 2
    # its bars: the elements between its quantiles, 100% in all; a bar's value shows on hover
    tips = b.js("Array.from(document.querySelectorAll('#hist-plot .hist-bar')).map(r => r.getAttribute('data-tip'))")
    assert 1 <= len(tips) <= 5 and abs(sum(_share(t) for t in tips) - 1) < 1e-9, tips
    assert hover(b, "#hist-plot .hist-bar", len(tips) - 1) == tips[-1]
    assert tips[-1].endswith(" max " + _js_fmt(root.max_err)), (tips[-1], root.max_err)
    # the root's error exceeds the threshold: its worst band is drawn as over it
    assert b.js("document.querySelectorAll('#hist-plot .hist-bar.over').length") >= 1
    far, total = inked(b, "#hist-plot .plot-area")
    assert far > 0.05 * total, (far, total)
    far, total = inked(b, "#chart")
    assert far > 0.005 * total, (far, total)
    # a click on another variable in the table shows its own histogram
    other = max((v for v in faulty_report.vars if v.id != root.id and v.status == "ok" and v.max_err),
                key=lambda v: v.max_err)
    b.js(f"document.getElementById('filter').value = {other.id}; document.getElementById('filter').dispatchEvent(new Event('input'))")
    b.settle()
    b.js("document.querySelector('#vars-body tr a.var').click()")
    caption = b.js("document.querySelector('#hist-plot figcaption').innerText")
    assert f"of {other.name} (var {other.id}," in caption
    assert b.problems() == []


@browser
@pytest.mark.browser
@pytest.mark.megengine
def test_a_variable_with_nan_or_without_quantiles_says_so_and_a_page_without_any_has_no_histogram(chromium, faulty_report,
                                                                                                  tmp_path):
    b = chromium
    # the var given a NaN (a deep link selects it): its finite elements drawn, the NaN said
    nan = next(v for v in faulty_report.vars if v.status == "nonfinite" and v.err_p50 is not None)
    b.open(write_html(faulty_report, tmp_path / "report.html"), f"#var={nan.id}")
    _clean_page(b)
    caption = b.js("document.querySelector('#hist-plot figcaption').innerText")
    assert f"of {nan.name} (var {nan.id}," in caption and f"its {nan.n_nonfinite} element(s) NaN/Inf on one side only" in caption
    # a var whose quantiles are unknown says so
    root = faulty_report.roots[0].id
    bare = replace(faulty_report, vars=tuple(replace(v, err_p50=None) if v.id == root else v for v in faulty_report.vars))
    b.open(write_html(bare, tmp_path / "bare.html"), f"#var={root}")
    _clean_page(b)
    assert b.js("document.getElementById('hist-none').innerText").startswith(f"{bare.var(root).name} (var {root}, divergent)")
    # no var with quantiles (a sweep's vars have none): no histogram section
    bare = replace(faulty_report, vars=tuple(replace(v, err_p50=None) for v in faulty_report.vars))
    b.open(write_html(bare, tmp_path / "bare.html"))
    _clean_page(b)
    assert b.js("document.getElementById('hist-section').hidden") is True
