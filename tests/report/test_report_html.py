"""The HTML page of a report: one offline file (static checks on the text), written by every
command, carried by the wheel, and rendered in headless Chromium (browser_helpers.py) with the
real reports of report_fixtures.py: roots, chart, graph, table sorting and filtering, hostile
names, script errors, deep links, 20,000 variables; the sweep's and devices' views from real
sweep and devices runs; and no module of lar_prec building HTML or CSS in Python.
"""
from __future__ import annotations

import ast
import json
import math
import os
import re
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Optional

import pytest

from browser_helpers import _clean_page, _rows, browser, chromium  # noqa: F401  (chromium: a fixture)
from lar_prec.dumps.folder import DumpFolder
from lar_prec.report.model import Report, dumps, exit_code
from lar_prec.report.html import render_html, write_html
from lar_prec.report.records import ReportThreshold
from remote_fixtures import fake_adb  # noqa: F401  (a fixture)
from report_fixtures import (  # noqa: F401  (fixtures)
    NAN_NAME,
    THRESHOLD,
    clean_report,
    dumps_ab,
    faulty_report,
    runs,
    shake_report,
)


# ============================================================================ HTML, static checks


HOSTILE = ('</script><script>window.__pwned=1</script>', '<img src=x onerror="window.__pwned=2">',
           "{{7*7}} ${x} 'single' \"double\" & &amp; \u2028")


def _hostile(report: Report) -> Report:
    """The report with its two roots and one ok var renamed to HTML/JS-hostile strings."""
    names = {report.roots[0].id: HOSTILE[0], report.roots[1].id: HOSTILE[1],
             next(v.id for v in report.vars if v.status == "ok"): HOSTILE[2]}
    return replace(report,
                   vars=tuple(replace(v, name=names.get(v.id, v.name), opr=names.get(v.id, v.opr)) for v in report.vars),
                   roots=tuple(replace(r, name=names[r.id], opr=names[r.id]) for r in report.roots),
                   model="m<odel>&.mge")


URL_ATTR = re.compile(r"""\b(?:src|href|action|xlink:href)\s*=\s*["']?\s*(?:https?:)?//""", re.I)


@pytest.mark.megengine
def test_html_is_one_offline_file(faulty_report, tmp_path):
    rep = _hostile(faulty_report)
    path = write_html(rep, tmp_path / "r.html")
    text = path.read_text(encoding="utf-8")
    assert not URL_ATTR.search(text)
    assert not re.search(r"https?://", text)  # not even the SVG namespace is spelled out
    assert "<link" not in text and "@import" not in text and "url(http" not in text
    assert "Content-Security-Policy" in text and "default-src 'none'" in text
    # the embedded JSON is the report, and no name can close the script element
    m = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', text, re.S)
    assert json.loads(m.group(1)) == json.loads(dumps(rep))
    assert text.count("</script>") == 2
    assert "<img" not in text
    assert "<title>lar-prec naive-vs-default: m&lt;odel&gt;&amp;.mge</title>" in text


def test_html_of_an_empty_report_renders(tmp_path):
    rep = Report(command="compare", threshold=ReportThreshold(1e-5, "auto"))
    assert exit_code(rep) == 0
    assert "no divergence: all 0 variables" in render_html(rep)


def _page_data(page: Path) -> dict:
    m = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', page.read_text("utf-8"), re.S)
    return json.loads(m.group(1))


def _cli(*args) -> "object":
    from click.testing import CliRunner

    from lar_prec.cli import cli

    return CliRunner(mix_stderr=False).invoke(cli, [str(a) for a in args], catch_exceptions=False)


@pytest.mark.megengine
def test_compare_and_tree_write_the_html_page(dumps_ab, tmp_path):
    naive, _, faulty, fault, nan_var = dumps_ab
    r = _cli("compare", naive, faulty, "--threshold", THRESHOLD, "--html", tmp_path / "c.html",
             "--json", tmp_path / "c.json", "--format", "megengine")
    assert r.exit_code == 1, r.stderr
    data, j = _page_data(tmp_path / "c.html"), json.loads((tmp_path / "c.json").read_text())
    assert data["command"] == j["command"] == "compare"
    assert [x["id"] for x in data["roots"]] == [x["id"] for x in j["roots"]] == [fault, nan_var]
    assert data["vars"] == j["vars"] and len(data["vars"]) > 40
    assert all(x["path"][-1] == x["id"] for x in data["roots"])  # the page draws the path to each root
    assert "default-src 'none'" in (tmp_path / "c.html").read_text()
    diff = tmp_path / "diff.txt"
    diff.write_text(r.stdout)
    t = _cli("tree", diff, "--html", tmp_path / "t.html")
    assert t.exit_code == 1, t.stderr
    tdata = _page_data(tmp_path / "t.html")
    assert tdata["command"] == "tree" and fault in [x["id"] for x in tdata["roots"]]
    assert "Roots (" in t.stdout and "Verdict: divergence found" in t.stdout
    # a folder where the page should go: one line, exit 2, nothing half written
    r = _cli("compare", naive, faulty, "--html", tmp_path)
    assert r.exit_code == 2 and r.stderr.startswith("Error: ") and "HTML report" in r.stderr


@pytest.mark.slow
def test_wheel_carries_the_page_files(tmp_path):
    """The page's HTML, CSS and JS are package data: in the wheel, and found once installed."""
    import sys
    import zipfile

    from lar_prec.report.html import PAGE_FILES

    root = Path(__file__).resolve().parents[2]
    src = tmp_path / "src"  # a copy: building in the checkout would leave build/ and egg-info there
    shutil.copytree(root / "lar_prec", src / "lar_prec", ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(root / name, src / name)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    pip = subprocess.run([sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation", "-q",
                          "-w", str(tmp_path / "dist")], capture_output=True, text=True, timeout=600, env=env)
    assert pip.returncode == 0, pip.stderr[-2000:]
    whl = next((tmp_path / "dist").glob("lar_prec-*.whl"))
    with zipfile.ZipFile(whl) as z:
        for name in PAGE_FILES:
            assert z.read(f"lar_prec/report/page/{name}").decode("utf-8") == (root / "lar_prec" / "report" / "page" / name).read_text("utf-8")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True, timeout=300, env=env)
    py = str(venv / "bin" / "python")
    inst = subprocess.run([py, "-m", "pip", "install", "--no-deps", "--no-index", "-q", str(whl)],
                          capture_output=True, text=True, timeout=300, env=env)
    assert inst.returncode == 0, inst.stderr[-2000:]
    code = ("import lar_prec.report.model as r, lar_prec.report.records as rr, lar_prec.report.html as h\n"
            "page = h.render_html(r.Report(command='compare', threshold=rr.ReportThreshold(1e-5)))\n"
            "print(h.PAGE_DIR)\n"
            "print(\"default-src 'none'\" in page and 'function fatal' in page and '@@' not in page)\n")
    out = subprocess.run([py, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    page_dir, ok = out.stdout.split()
    assert Path(page_dir).resolve().is_relative_to(venv.resolve()) and ok == "True"


# ============================================================================ HTML in headless Chromium


@browser
@pytest.mark.browser
@pytest.mark.megengine
def test_html_shows_roots_chart_graph_and_runs(chromium, faulty_report, dumps_ab, tmp_path):
    b = chromium
    b.open(write_html(faulty_report, tmp_path / "report.html"))
    _clean_page(b)
    assert b.js("document.body.dataset.rendered") == str(len(faulty_report.vars))
    root = faulty_report.var(dumps_ab[3])
    # innerText is what a reader sees (rendered, CSS applied)
    roots_text = b.js("document.getElementById('roots').innerText")
    assert root.name in roots_text and root.opr_type in roots_text
    assert faulty_report.verdict == b.js("document.getElementById('verdict').innerText").strip()
    assert "1.00e-5 (fixed, metric megengine_rel)" in b.js("document.getElementById('meta').innerText")
    cards = b.js("document.getElementById('cards').innerText")
    assert "Root #1: " + root.name in cards and "Root #2: " + NAN_NAME in cards
    # the neighbourhood graph of root 1: the root, its input, its input's inputs, its consumer
    labels = b.js("Array.from(document.querySelectorAll('#graph-1 g.node title')).map(t => t.textContent.split('\\n')[0])")
    mul = faulty_report.var(root.inputs[0])
    assert root.name in labels and mul.name in labels
    assert all(faulty_report.var(u).name in labels for u in mul.inputs if faulty_report.var(u))
    assert any(faulty_report.var(c).name in labels for c in (v.id for v in faulty_report.vars if root.id in v.inputs))
    # each node says its statistics, as lar-prec node prints them (issue 40 #4)
    tip = b.js(f"Array.from(document.querySelectorAll('#graph-1 g.node title')).map(t => t.textContent)"
               f".find(t => t.startsWith({json.dumps(root.name + chr(10))}))")
    assert f"{root.status} \u00b7 max_err" in tip and "threshold" in tip and "error p50" in tip and "within" in tip
    # one chart point per var (fewer vars than pixels), roots marked
    assert b.js("document.querySelectorAll('#chart-points circle').length") == len(faulty_report.vars)
    assert b.js("document.querySelectorAll('#chart .root-mark').length") == len(faulty_report.roots)
    # the path from the model input, and the runs with their command lines
    assert faulty_report.var(faulty_report.roots[0].path[0]).name in b.js("document.querySelector('#root-1 .path').innerText")
    runs_text = b.js("document.getElementById('runs').innerText")
    assert "MGB_USE_MEGDNN_DBG=2 python -m lar_prec.lar" in runs_text
    assert len(_rows(b)) == min(100, len(faulty_report.vars))


@browser
@pytest.mark.browser
@pytest.mark.megengine
def test_html_table_sorts_filters_and_opens_details(chromium, faulty_report, tmp_path):
    b = chromium
    b.open(write_html(faulty_report, tmp_path / "table.html"))
    errs = {v.id: v.max_err for v in faulty_report.vars}
    assert _rows(b) == [v.id for v in faulty_report.vars][:100]  # execution order first
    b.js("document.querySelector('th[data-key=max_err]').click()")
    desc = _rows(b)
    assert desc[0] == max(errs, key=lambda i: errs[i])
    assert [errs[i] for i in desc] == sorted(errs.values(), reverse=True)
    b.js("document.querySelector('th[data-key=max_err]').click()")
    assert [errs[i] for i in _rows(b)] == sorted(errs.values())
    b.js("document.querySelector('th[data-key=name]').click()")
    names = [faulty_report.var(i).name for i in _rows(b)]
    assert names == sorted(names)
    # filter box (debounced) and the "only not ok" switch
    b.js("{ const f = document.getElementById('filter'); f.value = 'matrixmul'; f.dispatchEvent(new Event('input')); }")
    b.settle()
    got = _rows(b)
    want = [v.id for v in faulty_report.vars if "matrixmul" in (v.name + v.opr + v.opr_type).lower()]
    assert sorted(got) == sorted(want) and len(want) > 3
    assert f"of {len(want)} (filtered from {len(faulty_report.vars)})" in b.js("document.getElementById('page-info').innerText")
    b.js("{ const f = document.getElementById('filter'); f.value = ''; f.dispatchEvent(new Event('input')); }")
    b.js("{ const c = document.getElementById('only-bad'); c.checked = true; c.dispatchEvent(new Event('change')); }")
    b.settle()
    assert sorted(_rows(b)) == sorted(v.id for v in faulty_report.vars if v.status != "ok")
    # clicking a root's chart marker opens its details with inputs and consumers as links
    root = faulty_report.roots[0]
    b.js("document.querySelector('#chart .root-mark').dispatchEvent(new MouseEvent('click', {bubbles: true}))")
    assert b.js("document.getElementById('details-section').hidden") is False
    assert root.name in b.js("document.getElementById('details-title').innerText")
    details = b.js("document.getElementById('details').innerText")
    assert "consumers" in details and faulty_report.var(faulty_report.var(root.id).inputs[0]).name in details
    assert b.js("location.hash") == f"#var={root.id}"
    _clean_page(b)


@browser
@pytest.mark.browser
@pytest.mark.megengine
def test_html_escapes_hostile_names(chromium, faulty_report, tmp_path):
    b = chromium
    rep = _hostile(faulty_report)
    b.open(write_html(rep, tmp_path / "hostile.html"), "#var=" + str(faulty_report.roots[1].id))
    _clean_page(b)
    assert b.js("document.querySelectorAll('img').length") == 0
    assert b.js("typeof window.__pwned") == "undefined"
    assert b.js("document.scripts.length") == 2  # the data and the code, nothing injected
    text = b.js("document.body.textContent")
    for name in HOSTILE:
        assert name in text
    assert HOSTILE[1] in b.js("document.getElementById('details-title').textContent")  # the deep link opened it
    assert b.js("document.title") == "lar-prec naive-vs-default: m<odel>&.mge"


@browser
@pytest.mark.browser
@pytest.mark.megengine
def test_a_script_error_is_caught_and_shown(chromium, faulty_report, tmp_path):
    # the harness itself: a broken page must not pass as clean
    page = tmp_path / "broken.html"
    page.write_text(render_html(faulty_report).replace("\nchart();\n", "\nchart();\nnoSuchFunction();\n"), encoding="utf-8")
    b = chromium
    b.open(page)
    assert any("noSuchFunction" in p for p in b.problems())
    assert b.js("document.getElementById('fatal').hidden") is False
    assert "noSuchFunction" in b.js("document.getElementById('fatal').innerText")


@browser
@pytest.mark.browser
@pytest.mark.megengine
def test_html_deep_link_sorts_and_filters(chromium, faulty_report, tmp_path):
    b = chromium
    b.open(write_html(faulty_report, tmp_path / "sorted.html"), "#sort=-max_err&bad=1")
    _clean_page(b)
    bad = sorted((v for v in faulty_report.vars if v.status != "ok"), key=lambda v: -(v.max_err or 0))
    assert _rows(b) == [v.id for v in bad]


@browser
@pytest.mark.browser
@pytest.mark.megengine
def test_html_with_20000_vars_stays_responsive(chromium, faulty_report, tmp_path):
    # The real graph tiled until it has 20,000 vars, ids shifted per copy, inputs kept inside a copy.
    base = faulty_report.vars
    span = max(v.id for v in base) + 1
    copies = -(-20000 // len(base))
    big_vars = tuple(replace(v, id=v.id + k * span, inputs=tuple(u + k * span for u in v.inputs))
                     for k in range(copies) for v in base)[:20000]
    big_roots = tuple(replace(r, id=r.id + k * span, path=tuple(p + k * span for p in r.path))
                      for k in range(0, copies, 20) for r in faulty_report.roots)
    big = replace(faulty_report, vars=big_vars, roots=big_roots, verdict="")
    b = chromium
    b.open(write_html(big, tmp_path / "big.html"))
    _clean_page(b)
    assert b.js("document.body.dataset.rendered") == "20000"
    assert len(_rows(b)) == 100  # paginated
    assert b.js("document.querySelectorAll('#chart-points circle').length") < 3000  # largest error per pixel column
    assert "rows 1\u2013100 of 20000" in b.js("document.getElementById('page-info').innerText")
    b.js("document.getElementById('next').click()")
    assert _rows(b) == [v.id for v in big_vars[100:200]]
    b.js("document.querySelector('th[data-key=max_err]').click()")
    assert _rows(b)[0] == max(big_vars, key=lambda v: v.max_err).id
    # root cards come ten at a time, the rest behind a button
    assert len(big_roots) > 10
    assert b.js("document.querySelectorAll('.rootcard').length") == 10
    b.js("document.getElementById('more-roots').click()")
    assert b.js("document.querySelectorAll('.rootcard').length") == min(20, len(big_roots))
    # how long the page's own script took, for the record (no assertion on time)
    print("render ms:", b.js("document.body.dataset.renderMs"))
    _clean_page(b)


@browser
@pytest.mark.browser
@pytest.mark.megengine
def test_shake_html_shows_cause_and_runs_differing(shake_report, chromium, tmp_path):
    chromium.open(write_html(shake_report, tmp_path / "shake.html"))
    _clean_page(chromium)
    assert chromium.js("document.querySelector('th[data-key=runs_differing]') !== null")
    assert "neither the algorithm choice" in chromium.js("document.getElementById('meta').innerText")


@browser
@pytest.mark.browser
@pytest.mark.megengine
def test_compare_html_renders_in_the_browser(chromium, dumps_ab, tmp_path):
    naive, _, faulty, fault, _ = dumps_ab
    assert _cli("compare", naive, faulty, "--threshold", THRESHOLD, "--html", tmp_path / "c.html").exit_code == 1
    chromium.open(tmp_path / "c.html")
    _clean_page(chromium)
    assert "Root #1: " + DumpFolder(faulty).var_info(fault).name in chromium.js("document.getElementById('cards').innerText")


@browser
@pytest.mark.browser
@pytest.mark.megengine
def test_chart_legend_explains_ok_points_above_the_threshold_line(chromium, lar_dump, tmp_path):
    """Rounding of longred's K=4608 convolution above the band, carried along edges: ok points
    over the red line, and the legend says why (issue 20 #7)."""
    from compare_helpers import inject_fault

    naive, default = Path(lar_dump("longred", "naive")), Path(lar_dump("longred", "default"))
    conv = next(d.id for d in DumpFolder(default) if d.var.name == "c.Convolution")
    inject_fault(default, tmp_path / "b", conv, 1.5e-5)
    assert _cli("compare", naive, tmp_path / "b", "--html", tmp_path / "c.html").exit_code == 0
    chromium.open(tmp_path / "c.html")
    _clean_page(chromium)
    legend = chromium.js("document.getElementById('chart-legend').innerText")
    assert "ok variable(s) above the line carry rounding from their inputs" in legend, legend
    assert "above it carry rounding" in chromium.js("document.getElementById('verdict').innerText")


# ============================================================================ the sweep's and devices' views


def _close(text: str, value: Optional[float]) -> bool:
    """The page's short form of an error (3 significant digits) is ``value``."""
    if value is None:
        return text == "\u2014"
    return math.isclose(float(text), value, rel_tol=6e-3, abs_tol=0.0)


_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?")


def _same_words(page_text: str, terminal_text: str) -> None:
    """The same sentence, numbers compared as numbers (the page writes 3.95e-4 where the
    terminal writes 3.95e-04)."""
    assert _NUMBER.sub("#", page_text) == _NUMBER.sub("#", terminal_text), (page_text, terminal_text)
    for a, b in zip(_NUMBER.findall(page_text), _NUMBER.findall(terminal_text)):
        assert math.isclose(float(a), float(b), rel_tol=6e-3), (page_text, terminal_text)


def _matrix(b, table: str) -> list:
    """Rows of a variable-by-column table as drawn: id, and per column its cell's class,
    value, local line, root tag and tooltip."""
    return b.js(f"""Array.from(document.querySelectorAll('#{table} tbody tr')).map(r => ({{
        id: Number(r.dataset.id), name: r.querySelector('td.name a').textContent,
        cells: Object.fromEntries(Array.from(r.querySelectorAll('td.mx')).map(c => [c.dataset.col, {{
            cls: c.className, val: c.querySelector('.mx-val').textContent,
            sub: c.querySelector('.mx-sub') ? c.querySelector('.mx-sub').textContent : null,
            tag: c.querySelector('.mx-tag') ? c.querySelector('.mx-tag').textContent : null, title: c.title}}]))}}))""")


def _heads(b, table: str) -> list:
    return b.js(f"Array.from(document.querySelectorAll('#{table} thead th')).map(t => t.textContent)")


def _sort_key(err: Optional[float], nonfinite: bool) -> Optional[float]:
    return math.inf if nonfinite else err


def _sorted_column(keys: list, descending: bool) -> list:
    """A column's keys as the page sorts them: by error (NaN/Inf the worst), not compared last."""
    known = sorted((k for k in keys if k is not None), reverse=descending)
    return known + [None] * (len(keys) - len(known))


@pytest.fixture(scope="module")
def sweep_run(manifest, tmp_path_factory):
    """A real sweep of the cnn case: ioc16 diverges (x86's fp16 max pooling is wrong: a local
    root), nchw44 and nhwcd4 agree (nhwcd4 leaves some vars unpaired, and its layerwise model
    may fail: local error not measured), weight-preprocess too (where its dump has the default run's
    bits, its local column says it took the default run's local error). Returns the page and its JSON."""
    case = manifest["cnn"]
    out = tmp_path_factory.mktemp("sweep-page")
    inputs = [a for spec in case.input_specs() for a in ("--input", spec)]
    r = _cli("sweep", case.model, *inputs, "--options", "nhwcd4,ioc16,nchw44,weight-preprocess", "--timeout", "120",
             "--speed-runs", "0",
             "--out", out / "run", "--json", out / "r.json", "--html", out / "r.html", "-q")
    assert r.exit_code == 1, r.stdout + r.stderr
    return out / "r.html", json.loads((out / "r.json").read_text())


@browser
@pytest.mark.browser
@pytest.mark.megengine
def test_sweep_page_draws_options_and_option_by_variable(chromium, sweep_run):
    from lar_prec.report.sweep import STATUS_TEXT, local_text

    page, d = sweep_run
    b = chromium
    b.open(page)
    _clean_page(b)
    assert b.js("document.getElementById('sweep-section').hidden") is False
    assert b.js("document.getElementById('targets-section').hidden") is True
    # the options table: the default run (no option), then one row per option, worst first, as the JSON has them
    from lar_prec.report.sweep import VERDICT_TEXT

    rows = b.js("""Array.from(document.querySelectorAll('#sweep-options tbody tr')).map(r =>
        Array.from(r.cells).map(c => c.innerText.trim()))""")
    table = [d["default"]] + d["options"]
    assert [r[0] for r in rows] == ["default (no option)"] + [o["option"] for o in d["options"]]
    assert rows[1][0] == "ioc16"
    for r, o in zip(rows, table):
        assert r[1] == STATUS_TEXT[o["status"]] and r[4] == (VERDICT_TEXT[o["verdict"]] if o["verdict"] else "\u2014")
        assert r[2] == f"{o['vars_paired']}/{o['vars_total']}"
        # the terminal's words: output error and tolerance; ioc16's float16 max pooling returns NaN in some runs
        assert r[3] == o["output_words"] and o["output_words"].startswith("output error ")
        assert ("NaN/Inf" in r[3]) == bool(o.get("output_nonfinite"))
        _same_words(r[6], local_text(o))  # the terminal's words, the whole reason
        assert "None" not in r[5]
        if o.get("nondeterminism"):  # its run made once more (issue 51 #6): said after the cause, as the terminal does
            assert r[7].endswith(o["nondeterminism"]["words"]), (r[7], o["nondeterminism"])
    assert rows[1][5].startswith("Pooling[0]") and "Pooling[0] (PoolingForward) local error" in rows[1][6]
    assert b.js("Array.from(document.querySelectorAll('#sweep-options tr[data-option=ioc16] .st')).map(s => s.className)") == [
        "st st-opt-runs", "st st-verdict-diverges"]  # coloured by status and verdict
    # option by variable: the default run's column, then a column per option that ran, a row per
    # reference var in execution order
    ran = [o for o in d["options"] if o["status"] == "runs"]
    assert _heads(b, "sweep-matrix-table") == ["variable", "default"] + [o["option"] for o in ran]
    m = _matrix(b, "sweep-matrix-table")
    assert [r["id"] for r in m] == [v["id"] for v in d["vars"]]
    # a divergent option's roots: the local roots it adds over the default run, and its root
    local_roots = {o["option"]: {x["id"] for x in o["local"]["roots"] if x["name"] in o["added_roots"]
                                 or not (o["added_roots"] or o["shared_roots"])} | {o["root"]["reference_id"]}
                   for o in ran if o["local"]["measured"] and o["verdict"] == "diverges"}
    seen = set()
    for r, v in zip(m, d["vars"]):
        assert r["name"] == v["name"]
        assert _close(r["cells"]["default"]["val"], v["default"])
        for o in ran:
            c, name = r["cells"][o["option"]], o["option"]
            err, nonfinite = v["options"][name], name in v["options_nonfinite"]
            root = v["id"] in local_roots.get(name, ())
            want = ("nonfinite" if nonfinite else "divergent" if name in v["options_divergent"] or root
                    else "na" if err is None else "ok")
            assert f"mx-{want}" in c["cls"].split(), (v["name"], name, c)
            seen.add(want)
            assert c["val"] == "NaN/Inf" if nonfinite else _close(c["val"], err)
            assert (c["tag"] == "local root") == root == ("mx-root" in c["cls"].split())
            if name in v.get("local", {}):
                assert c["sub"].startswith("local ") and _close(c["sub"][6:], v["local"][name])
            else:
                assert c["sub"] is None
            assert c["title"].startswith(f"{v['name']} under {name}: max_err") and "tolerance" in c["title"]
    # ioc16's pooling fault shows as divergent, or as nonfinite in the runs where it returns NaN
    assert "ok" in seen and seen & {"divergent", "nonfinite"}
    pool = next(r for r in m if r["name"] == "Pooling[0]")["cells"]["ioc16"]
    assert pool["tag"] == "local root" and "local root of ioc16" in pool["title"]
    # sorting by an option: worst first (NaN/Inf first, not compared last), then back
    errs = {v["id"]: _sort_key(v["options"]["ioc16"], "ioc16" in v["options_nonfinite"]) for v in d["vars"]}
    b.js("document.querySelector('#sweep-matrix-table th[data-key=ioc16]').click()")
    got = [r["id"] for r in _matrix(b, "sweep-matrix-table")]
    assert [errs[i] for i in got] == _sorted_column(list(errs.values()), True) and got[0] != d["vars"][0]["id"]
    b.js("document.querySelector('#sweep-matrix-table th[data-key=ioc16]').click()")
    assert [errs[i] for i in (r["id"] for r in _matrix(b, "sweep-matrix-table"))] == _sorted_column(list(errs.values()), False)
    b.js("document.querySelector('#sweep-matrix-table th[data-key=variable]').click()")
    assert [r["id"] for r in _matrix(b, "sweep-matrix-table")] == [v["id"] for v in d["vars"]]
    # the filter and "only rows not ok somewhere"
    b.js("{ const f = document.getElementById('sweep-matrix-table-filter'); f.value = 'pool'; f.dispatchEvent(new Event('input')); }")
    b.settle()
    want = [v["id"] for v in d["vars"] if "pool" in (v["name"] + v["opr_type"]).lower()]
    assert [r["id"] for r in _matrix(b, "sweep-matrix-table")] == want and len(want) >= 2
    b.js("{ const f = document.getElementById('sweep-matrix-table-filter'); f.value = ''; f.dispatchEvent(new Event('input')); }")
    b.js("{ const c = document.getElementById('sweep-matrix-table-only-bad'); c.checked = true; c.dispatchEvent(new Event('change')); }")
    b.settle()
    bad = [v["id"] for v in d["vars"] if v["options_divergent"] or v["options_nonfinite"]]
    assert [r["id"] for r in _matrix(b, "sweep-matrix-table")] == bad and 0 < len(bad) < len(d["vars"])
    _clean_page(b)


@browser
@pytest.mark.browser
@pytest.mark.megengine
def test_sweep_page_escapes_hostile_option_and_var_names(chromium, sweep_run, tmp_path):
    from lar_prec.report.model import Report

    _page, d = sweep_run
    # the real report with an option and a var renamed, everywhere the JSON names them
    text = json.dumps(d).replace('"nchw44"', json.dumps(HOSTILE[1])).replace('"Pooling[0]"', json.dumps(HOSTILE[0]))
    rep = Report.from_json(json.loads(text))
    b = chromium
    b.open(write_html(rep, tmp_path / "hostile-sweep.html"))
    _clean_page(b)
    assert b.js("document.querySelectorAll('img').length") == 0 and b.js("typeof window.__pwned") == "undefined"
    assert b.js("document.scripts.length") == 2
    assert _heads(b, "sweep-matrix-table")[2:] == [HOSTILE[1] if o["option"] == "nchw44" else o["option"]
                                                    for o in d["options"] if o["status"] == "runs"]
    assert HOSTILE[0] in [r["name"] for r in _matrix(b, "sweep-matrix-table")]
    assert HOSTILE[0] in b.js("document.getElementById('sweep-options').innerText")


def _fp16_device_lar(path: Path) -> Path:
    """A phone whose load_and_run computes in float16: the bundled one with --enable_ioc16."""
    from remote_fixtures import write_exe

    root = Path(__file__).resolve().parents[2]
    return write_exe(path, f"#!/bin/sh\nPYTHONPATH={root} exec {sys.executable} -m lar_prec.lar \"$@\" --enable_ioc16\n")


@browser
@pytest.mark.browser
@pytest.mark.megengine
def test_devices_page_draws_targets_and_target_by_variable(chromium, fake_adb, manifest, tmp_path):
    case = manifest["cnn"]
    inputs = [a for spec in case.input_specs() for a in ("--input", spec)]
    r = _cli("devices", case.model, *inputs, "--local", "--remote", f"adb:SER1={_fp16_device_lar(tmp_path / 'lar16')}",
             "--remote-dir", fake_adb.remote_dir, "--timeout", "120", "--out", tmp_path / "dev",
             "--json", tmp_path / "d.json", "--html", tmp_path / "d.html", "-q")
    assert r.exit_code == 1, r.stdout + r.stderr
    d = json.loads((tmp_path / "d.json").read_text())
    targets = {t["target"]: t for t in d["targets"]}
    assert not targets["local"]["diverged"] and targets["adb:SER1"]["diverged"]
    b = chromium
    b.open(tmp_path / "d.html")
    _clean_page(b)
    assert b.js("document.getElementById('sweep-section').hidden") is True
    rows = b.js("""Array.from(document.querySelectorAll('#targets-table tbody tr')).map(r =>
        Array.from(r.cells).map(c => c.innerText.trim()))""")
    assert [r[0] for r in rows] == ["local (reference)", "adb:SER1"]
    assert rows[0][1].startswith("agrees ") and rows[1][1].startswith("diverges ")
    assert rows[1][3].startswith(targets["adb:SER1"]["root"]["name"])
    assert rows[1][4].startswith("by name") and rows[0][4] == "by id"
    assert "Pixel 7" in rows[1][5]
    # target by variable: a column per target, a row per var compared on some target
    assert _heads(b, "target-var-table") == ["variable", "local", "adb:SER1"]
    m = _matrix(b, "target-var-table")
    ids = set().union(*(map(int, t["max_err_by_var"]) for t in d["targets"]))
    assert sorted(x["id"] for x in m) == sorted(ids)
    seen = set()
    for row in m:
        for t in d["targets"]:
            c, k = row["cells"][t["target"]], str(row["id"])
            want = "na" if k not in t["max_err_by_var"] else t["not_ok_status"].get(k, "ok")
            assert f"mx-{want}" in c["cls"].split(), (row, t["target"])
            assert (row["id"] in t["not_ok"]) == (want not in ("ok", "na"))
            seen.add(want)
            err = t["max_err_by_var"].get(k)
            assert c["val"] == "NaN/Inf" if want == "nonfinite" and err is None else _close(c["val"], err)
            assert (c["tag"] == "root") == (t["root"] is not None and t["root"]["id"] == row["id"])
            assert c["title"].startswith(f"{row['name']} on {t['target']}: ")
    assert {"ok"} < seen and seen - {"ok", "na"}
    # sorted by the diverging target's errors, worst first
    sev = {x["id"]: _sort_key(targets["adb:SER1"]["max_err_by_var"].get(str(x["id"])),
                              targets["adb:SER1"]["not_ok_status"].get(str(x["id"])) == "nonfinite"
                              and targets["adb:SER1"]["max_err_by_var"].get(str(x["id"])) is None) for x in m}
    b.js("document.querySelector('#target-var-table th[data-key=\"adb:SER1\"]').click()")
    got = [x["id"] for x in _matrix(b, "target-var-table")]
    assert [sev[i] for i in got] == _sorted_column(list(sev.values()), True)
    _clean_page(b)


# ============================================================================ no markup in Python

_TAGS = ("html|head|body|div|span|p|a|b|i|em|strong|small|code|pre|br|hr|img|table|thead|tbody|tfoot|tr|td|th|"
         "caption|ul|ol|li|dl|dt|dd|h[1-6]|section|header|footer|nav|main|article|details|summary|style|script|"
         "link|meta|title|form|input|button|select|option|label|textarea|iframe|svg|g|path|rect|circle|line|text")
MARKUP = re.compile(rf"</\s*(?:{_TAGS})\s*>"                      # a closing tag
                    rf"|<\s*(?:{_TAGS})\s+[\w:-]+\s*="            # an opening tag with attributes
                    r"|<\s*(?:br|hr|img|style|script|link|meta)\b"  # tags that are markup alone
                    r"|<(?:html|head|body|div|span|table|thead|tbody|tr|td|th|section|ul|ol|li|h[1-6]|pre|svg)>"
                    r"|\bstyle\s*=\s*[\"'][^\"']*:"                  # an inline style
                    r"|\{[^{}]*\b(?:color|background(?:-color)?|border(?:-[a-z]+)?|padding|margin|font(?:-[a-z]+)?"
                    r"|text-align|display|white-space|width|height)\s*:[^{}]*\}", re.I)  # a CSS rule


def _markup_in(source: str) -> list:
    """String literals of a Python module that hold HTML or CSS (docstrings are prose, not
    output); an f-string is read whole, its fields as {}."""
    tree = ast.parse(source)
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.body
            and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    docs |= {id(v) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr) for v in n.values}  # read whole below
    found = []
    for n in ast.walk(tree):
        if isinstance(n, ast.JoinedStr):
            text = "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in n.values)
        elif isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs:
            text = n.value
        else:
            continue
        if MARKUP.search(text):
            found.append((n.lineno, text[:80]))
    return sorted(found)


def test_the_markup_check_finds_html_and_css_in_python():
    # what report_sweep.py built before the page drew the sweep (the check must see it) ...
    old = ('def cell(err, cls):\n    return f\'<td class="{cls}">{err}</td>\'\n'
           'STYLE = ("<style>#sweep table{border-collapse:collapse;margin:1em 0}"\n'
           '         "#sweep .bad{background:#f8c0c0}</style>")\n'
           'HEAD = "<h2>Sweep: options</h2>"\nBR = "<br>"\n'
           'def badge(s):\n    return "<span style=\\"color:red\\">" + s\n'
           'page = page.replace("<body>", "<body>" + section, 1)\n')
    assert [line for line, _ in _markup_in(old)] == [2, 3, 5, 6, 8, 9, 9]
    # ... and leaves alone what lar_prec's strings hold that only looks like it
    fine = ('"""A docstring may show <script type="application/json">, it is not output."""\n'
            'A = ["<title>", "./lar-prec-out/<command>-N", "<f4", "{id:(\\\\d{1,20})", " <- ", "<see lazy value below>",\n'
            '     "</dev/null >stdout.txt 2>stderr.txt &", "inp<k>: ", "name:{1,3,8,8}", "@@(TITLE|CSS|JS|DATA)@@", "<"]\n'
            'B = f"{x} <shape dep[{k}]> {y}"\n')
    assert _markup_in(fine) == []


def test_no_module_builds_html_or_css():
    """The page is drawn by lar_prec/report/page/ from the report's JSON: no module of lar_prec (any
    subpackage) writes HTML or CSS."""
    pkg = Path(__file__).resolve().parents[2] / "lar_prec"
    files = sorted(pkg.rglob("*.py"))
    assert len(files) > 20 and pkg / "report" / "html.py" in files
    found = {str(p.relative_to(pkg)): _markup_in(p.read_text(encoding="utf-8")) for p in files}
    assert {k: v for k, v in found.items() if v} == {}
