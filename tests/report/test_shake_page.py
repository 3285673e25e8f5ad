"""A real shake report in the terminal and on the page: the cause of each root and var, the
algorithms, and the run-by-operator view (issue 22 #6), drawn from the JSON alone."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from browser_helpers import _clean_page, browser, chromium  # noqa: F401  (fixture)
from conftest import ROOT
from lar_prec.report.html import write_html
from lar_prec.report.model import read_json
from lar_prec.report.terminal import render_terminal

pytestmark = pytest.mark.megengine


@pytest.fixture(scope="module")
def shake_json(manifest, tmp_path_factory) -> Path:
    """fast-run shake of fastrun_shake: whether the results jitter depends on the CPU, but the
    runs' algorithm choices are known either way (and usually differ somewhere)."""
    tmp = tmp_path_factory.mktemp("shake")
    case = manifest["fastrun_shake"]
    proc = subprocess.run([sys.executable, "-m", "lar_prec", "shake", str(case.model), "--input",
                           ";".join(case.input_specs()), "--config", "fast-run", "--repeat", "3", "-q",
                           "--out", str(tmp / "s"), "--json", str(tmp / "s.json")],
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True)
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    return tmp / "s.json"


def test_terminal_shows_algorithms_disk_and_causes(shake_json):
    rep = read_json(shake_json)
    buf = io.StringIO()
    render_terminal(rep, buf)
    out = buf.getvalue()
    assert "Algorithms: from each run's own fast-run cache" in out
    assert "Disk: run 1 kept whole" in out
    for k, r in enumerate(rep.roots[:10], 1):
        assert f"root #{k} cause: {r.extra['cause']}" in out
    if rep.n_not_ok:
        assert "Runs by operator" in out and " cause" in out.split("Most divergent variables")[1].splitlines()[1]


@browser
@pytest.mark.browser
def test_page_draws_runs_by_operator(shake_json, chromium, tmp_path):  # noqa: F811
    d = json.loads(shake_json.read_text())
    chromium.open(write_html(read_json(shake_json), tmp_path / "shake.html"))
    _clean_page(chromium)
    assert chromium.js("document.getElementById('shake-section').hidden") is False
    meta = chromium.js("document.getElementById('meta').innerText")
    assert "algorithms" in meta and "disk" in meta
    shown = [v for v in d["vars"] if v["status"] != "ok" or v.get("algorithm_differs")]
    rows = chromium.js("document.querySelectorAll('#shake-matrix-table tbody tr').length")
    assert rows == min(len(shown), 200)
    if not shown:
        assert "No operator differs" in chromium.js("document.getElementById('shake-matrix').innerText")
        return
    labels = [r["label"] for r in d["shake_runs"]]
    heads = chromium.js("Array.from(document.querySelectorAll('#shake-matrix-table thead th')).map(t => t.innerText)")
    assert heads[1:] == labels
    v = shown[0]
    first = chromium.js(f"Array.from(document.querySelectorAll('#shake-matrix-table tr[data-id=\"{v['id']}\"] td.mx'))"
                        ".map(td => [td.className, td.title])")
    assert len(first) == len(labels)
    for (cls, title), lbl in zip(first, labels):
        assert title.startswith(f"{v['name']} in {lbl}: ")
        if v.get("algorithms", {}).get(lbl):
            assert "algorithm: " + v["algorithms"][lbl] in title
        groups = v.get("results") or [{"runs": labels}]
        same = lbl in groups[0]["runs"]
        assert ("mx-ok" in cls) == same and ("mx-divergent" in cls) == (not same)
    if d["roots"]:
        causes = chromium.js("Array.from(document.querySelectorAll('#roots-table tbody tr')).map(t => t.lastChild.innerText)")
        assert causes[0] == d["roots"][0]["cause_text"]
        assert chromium.js("document.querySelector('th[data-key=_cause]') !== null")
