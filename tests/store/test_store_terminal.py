"""The store's commands speak in numbers (issue 53): an analysis with ``--store`` names the run
it stored, ``history`` prints its runs as a table and an operator's trend with its min and max,
``history --diff`` names each changed operator with both values, ``check`` names the run it
checked, an empty store says so, and ``postgres://`` URLs open the store ``postgresql://`` names.
Real compares of cnn (a clean default run, and one through tests/wrapped_lar.py with c2's
weight 1+1e-3), on SQLite and the tests' own PostgreSQL; every number printed is checked
against the command's own JSON."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from xml.etree import ElementTree


from conftest import ROOT
from store_fixtures import faulty, postgres, store_url  # noqa: F401 (fixtures)
from lar_prec.store.db import open_store
from lar_prec.workflows.compare.compare import compare_dumps
from lar_prec.workflows.history.history import store_result


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "lar_prec", *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "LAR_PREC_STORE": "", "NO_COLOR": "1"})




def test_the_store_commands_print_the_numbers_they_hold(store_url, lar_dump, faulty, tmp_path):
    ref, clean = lar_dump("cnn", "naive"), lar_dump("cnn", "default")
    for i in range(3):  # three nights: a run is its content, so each is its own run
        store_result(store_url, compare_dumps(ref, clean if i == 0 else lar_dump("cnn", "default", tag=f"night-{i}")).report)
    # the last one through the command line, its store named the way Heroku and libpq spell it
    url = store_url.replace("postgresql://", "postgres://", 1)
    p = _cli("compare", ref, faulty, "--store", url)
    assert p.returncode == 1, p.stderr
    with open_store(store_url) as st:
        runs = st.runs()
        last = runs[-1]
        n_ops = len({o.op_key for o in st.ops(last["id"])})
    assert len(runs) == 4
    assert p.stderr.splitlines()[-1] == f"stored run {last['uid'][:12]} ({n_ops} operators) in {url}"

    h = _cli("history", "--store", store_url, "--json", "-")
    hist = json.loads(h.stdout)
    [series] = hist["series"]
    text = _cli("history", "--store", store_url).stdout
    lines = text.splitlines()
    assert all(len(ln) <= 100 for ln in lines), max(lines, key=len)
    assert lines[0].endswith(": 4 runs")
    rows = [ln for ln in lines if re.match(r"  \d{4}-\d\d-\d\d \d\d:\d\d  [0-9a-f]{12} ", ln)]
    assert [r.split()[2] for r in rows] == [r["run"][:12] for r in series["runs"]]
    value = [re.search(r"(\S+)  (ok|diverged.*)$", r).groups() for r in rows]
    assert [v for v, _ in value] == [f"{r['output_err']:.3g}" for r in series["runs"]]
    assert [r for _, r in value] == ["ok", "ok", "ok", "diverged (1 root)"]
    # the operators whose error moved, each a trend line whose last point (the faulty run) is the highest
    conv = next(o for o in series["ops"] if o["name"] == "c2.Convolution")
    vals = [pt["max_err"] for pt in conv["points"]]
    [trend] = [ln for ln in lines if ln.strip().startswith("c2.Convolution ")]
    assert f"min {min(vals):.3g}  max {max(vals):.3g}  (4 runs)" in trend and "\u2581\u2581\u2581\u2588" in trend

    o = _cli("history", "--store", store_url, "--op", "c2.Convolution")
    assert o.returncode == 0, o.stderr
    assert f"min {min(vals):.3g}  max {max(vals):.3g}  (4 runs)" in o.stdout
    assert f"first out of its band: run {last['uid'][:12]}" in o.stdout
    op_rows = [ln.split() for ln in o.stdout.splitlines() if re.match(r"  \d{4}-", ln)]
    assert [r[-2] for r in op_rows[4:]] == [f"{v:.3g}" for v in vals]  # the runs table first, then the operator's

    d = _cli("history", "--store", store_url, "--diff", runs[0]["uid"][:8], "--diff", last["uid"][:8])
    assert d.returncode == 0, d.stderr
    dj = json.loads(_cli("history", "--store", store_url, "--diff", runs[0]["uid"][:8], "--diff", last["uid"][:8],
                         "--json", "-").stdout)["diff"]
    changed = {c["name"]: c for c in dj["ops"]}
    assert "c2.Convolution" in changed and "c1.Convolution" not in changed
    assert f"{len(changed)} operators changed between run {runs[0]['uid'][:12]} (A) and {last['uid'][:12]} (B):" \
        in d.stdout
    diff_part = d.stdout.split("(B):\n", 1)[1].splitlines()
    for name, c in changed.items():
        [row] = [ln.split() for ln in diff_part if ln.split()[:1] == [name]]
        assert row[1] == f"{c['a']['max_err']:.3g}" and row[3] == f"{c['b']['max_err']:.3g}", row

    c = _cli("check", "--store", store_url, "--junit", tmp_path / "check.xml")
    assert c.returncode == 1, c.stderr
    assert c.stdout.startswith(f"checked run {last['uid'][:12]} (compare ")
    res = json.loads(_cli("check", "--store", store_url, "--json", "-").stdout)
    assert c.stdout.splitlines()[1] == res["verdict"] and res["run"]["uid"] == last["uid"]
    # --junit: the history a passing case, each regressed operator a failure naming its numbers
    suite = ElementTree.parse(tmp_path / "check.xml").getroot()
    failed = {tc.get("name"): tc.find("failure").get("message") for tc in suite.iter("testcase")
              if tc.find("failure") is not None}
    assert suite.get("failures") == str(len(res["regressed"])) == str(len(failed)) and res["regressed"]
    assert suite.get("tests") == str(1 + len(res["regressed"]) + len(res["improved"]) + len(res["nondeterministic"]))
    for v in res["regressed"]:
        assert failed[f"{v['name']} ({v['opr_type']})"] == f"regressed{' (root)' if v['root'] else ''}: {v['why']}"
        assert re.search(r"\d\.\d+e-0\d", v["why"]), v["why"]  # the numbers are in it


def test_a_junit_path_that_cannot_be_written_is_exit_2_before_the_store_opens(tmp_path):
    db = tmp_path / "results.db"
    for bad in (tmp_path / "no" / "check.xml", tmp_path, "-"):
        c = _cli("check", "--store", db, "--junit", bad)
        assert c.returncode == 2 and c.stderr.startswith("Error: ") and c.stderr.count("\n") == 1, c.stderr
        assert "JUnit" in c.stderr or "--junit" in c.stderr
    assert not db.exists()


def test_an_empty_store_says_it_is_empty(store_url):
    h = _cli("history", "--store", store_url)
    assert h.returncode == 0 and h.stdout.strip().endswith("is empty: no run stored yet (an analysis with --store "
                                                           "writes one)"), h.stdout + h.stderr
    c = _cli("check", "--store", store_url)
    assert c.returncode == 2 and c.stderr.count("\n") == 1 and "is empty" in c.stderr, c.stderr
