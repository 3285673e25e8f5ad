"""The HTML page of a report: one offline file (static checks on the text), written by every
command, carried by the wheel, and rendered in headless Chromium (browser_helpers.py) with the
real reports of report_fixtures.py: roots, chart, graph, table sorting and filtering, hostile
names, script errors, deep links, 20,000 variables.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from browser_helpers import _clean_page, _rows, browser, chromium  # noqa: F401  (chromium: a fixture)
from lar_prec.dumps.folder import DumpFolder
from lar_prec.report.model import Report, dumps, exit_code
from lar_prec.report.html import render_html, write_html
from lar_prec.report.records import ReportThreshold
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
            assert z.read(f"lar_prec/page/{name}").decode("utf-8") == (root / "lar_prec" / "page" / name).read_text("utf-8")
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
