"""The results store on SQLite and on a real PostgreSQL server the tests start (store_url runs
each test on both): summaries of real analyses written and read back, migrations from the
first schema, a newer schema refused, check and history on real compares, and the bad inputs
(unreachable, locked, full) of the command line."""
from __future__ import annotations

import dataclasses
import json
import os
import re
import resource
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

from browser_helpers import _clean_page, browser, chromium, hover, inked, plots  # noqa: F401 (chromium: a fixture)
from conftest import ROOT
from store_fixtures import faulty, postgres, store_url  # noqa: F401 (fixtures)
from proc_helpers import user_lar
from remote_fixtures import free_port
from lar_prec.compare.tolerance import fmt_num
from lar_prec.errors import StoreError
from lar_prec.store.db import head_revision, migrate_to, open_store
from lar_prec.store.summary import Summary, series_key, summarize
from lar_prec.workflows.compare.compare import compare_dumps
from lar_prec.workflows.compare.local import compare_with_model
from lar_prec.workflows.history.history import check, history, store_result


def _cli(*args, env=None, preexec=None):
    return subprocess.run([sys.executable, "-m", "lar_prec", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env={**os.environ, **(env or {})}, preexec_fn=preexec)




def test_a_compare_written_and_read_back(store_url, lar_dump):
    ref, clean = lar_dump("cnn", "naive"), lar_dump("cnn", "default")
    report = compare_dumps(ref, clean).report
    run_id = store_result(store_url, report, argv=("lar-prec", "compare"))
    with open_store(store_url) as st:
        [run] = st.runs()
        ops = st.ops(run_id)
    assert run["command"] == "compare" and run["series"] == series_key(
        run["model_sha256"], run["input_sha256"], "compare", run["config"], run["options"], run["device_kind"])
    computed = [v for v in report.vars if v.opr_type not in ("ImmutableTensor", "Host2DeviceCopy")]
    assert [o.name for o in ops] == [v.name for v in computed]
    conv = next(o for o in ops if o.name == "c2.Convolution")
    assert conv.op_key == "n/c2.Convolution" and conv.inputs == ("n/Pooling[0]", "c/c2.weight")
    assert conv.max_err == next(v.max_err for v in computed if v.name == "c2.Convolution")


def test_check_names_the_root_among_regressed_operators(store_url, lar_dump, faulty):
    ref = lar_dump("cnn", "naive")
    for k in range(3):  # three nights: three real runs (one run's report written twice is one run of the store)
        store_result(store_url, compare_dumps(ref, lar_dump("cnn", "default", tag=f"night-{k}")).report)
    store_result(store_url, compare_dumps(ref, faulty).report)
    res = check(store_url)
    assert res["exit_code"] == 1 and res["history_runs"] == 3
    first = res["regressed"][0]
    assert first["name"] == "c2.Convolution" and first["root"]
    assert not any(v["root"] for v in res["regressed"][1:])  # downstream of c2 only carries it
    assert {v["name"] for v in res["regressed"]} >= {"c2.Convolution", "Softmax"}
    assert "c1.Convolution" not in {v["name"] for v in res["regressed"]}
    hist = history(store_url, op="c2.Convolution")
    [s] = hist["series"]
    [o] = s["ops"]
    assert len(o["points"]) == 4 and o["first_out_of_band"]["run"] == s["runs"][-1]["run"]


@pytest.mark.megengine
def test_check_finds_a_kernel_fault_within_the_floor_of_one_element_by_local_error(tmp_path, manifest, lar_dump):
    """c2's kernel 1+1e-5 too large: ~0.4 rounding units at any one element, far over the floor
    in the whole output's scale; check names it by its local error against its past."""
    c = manifest["cnn"]
    ref, clean = lar_dump("cnn", "naive"), lar_dump("cnn", "default")
    lar = user_lar(tmp_path / "lar", WRAPPED_LAR_OP_FAULT="c2.weight:1e-5")
    bad = tmp_path / "bad"
    bad.mkdir()
    subprocess.run([str(lar), str(c.model), "--input", ";".join(c.input_specs()), "--iter", "1", "--warmup-iter", "0",
                    "--bin-io-dump", str(bad)], check=True, capture_output=True, timeout=300)
    db = str(tmp_path / "results.db")
    good = compare_with_model(str(ref), str(clean), str(c.model), out=str(tmp_path / "good")).report
    for k in range(3):  # three nights that gave these numbers (one report is one run: other uids stand for them)
        s = summarize(good)
        with open_store(db) as st:
            st.write(Summary(dataclasses.replace(s.run, uid=f"{s.run.uid[:30]}{k:02d}"), s.ops))
    store_result(db, compare_with_model(str(ref), str(bad), str(c.model), out=str(tmp_path / "bad-local"),
                                        lar=str(lar)).report)
    res = check(db)
    assert res["exit_code"] == 1 and res["history_runs"] == 3
    first = res["regressed"][0]
    assert first["name"] == "c2.Convolution" and first["root"] and "x its floor" in first["why"], first
    assert "c1.Convolution" not in {v["name"] for v in res["regressed"]}


def test_check_after_one_past_run_says_not_enough_history_and_never_regressed(store_url, lar_dump, faulty):
    """One clean run, then a run 1e-3 off in c2: a band of one run is a point, so check judges
    nothing below --min-history (3) and says so, exit 0; with the history it asks for, the same
    runs regress (the rule is the minimum, not the data)."""
    ref, clean = lar_dump("cnn", "naive"), lar_dump("cnn", "default")
    store_result(store_url, compare_dumps(ref, clean).report)
    store_result(store_url, compare_dumps(ref, faulty).report)
    res = check(store_url)
    assert res["exit_code"] == 0 and res["regressed"] == [] and res["improved"] == []
    assert res["history_runs"] == 1 and res["min_history"] == 3 and res["enough_history"] is False
    assert res["verdict"].startswith("not enough history (1 of 3 runs)")
    one = check(store_url, min_history=1)
    assert one["exit_code"] == 1 and one["regressed"][0]["name"] == "c2.Convolution" and one["enough_history"]
    proc = _cli("check", "--store", store_url, "--min-history", "0")
    assert proc.returncode == 2 and "--min-history" in proc.stderr


@pytest.mark.megengine
def test_an_operator_whose_repeated_runs_differ_is_nondeterministic_never_a_regression(tmp_path, manifest):
    """Three naive-vs-default runs through one build whose c2 kernel gives another result in each
    process (tests/wrapped_lar.py WRAPPED_LAR_JITTER, the k-th process 1 + (k+1) x 1e-4): check names
    c2.Convolution nondeterministic with its spread, where the run-to-run difference starts, and
    judges no regression of it, whatever the minimum history."""
    from lar_prec.workflows.naive_vs_default.naive_vs_default import naive_vs_default

    c = manifest["cnn"]
    (tmp_path / "k").mkdir()
    lar = user_lar(tmp_path / "lar", WRAPPED_LAR_JITTER="c2.weight:1e-4", WRAPPED_LAR_JITTER_DIR=str(tmp_path / "k"))
    db = str(tmp_path / "results.db")
    dirs = []
    for k in range(3):
        a = naive_vs_default(c.model, c.input_specs(), lar=str(lar), local=False, out=tmp_path / f"nvd-{k}",
                             html=False)
        store_result(db, a.report)
        dirs.append(a.dir)
    res = check(db, str(dirs[-1]), min_history=1)
    assert res["exit_code"] == 0 and res["regressed"] == [], res["regressed"]
    nd = {n["name"]: n for n in res["nondeterministic"]}
    conv = nd["c2.Convolution"]
    assert conv["source"] and conv["this_build"] and conv["runs"] == 3 and conv["spread"] > 0
    assert conv["range"][1] - conv["range"][0] == pytest.approx(conv["spread"])
    assert not any(n["source"] for n in res["nondeterministic"] if n["name"] != "c2.Convolution")
    assert "c1.Convolution" not in nd  # before the jittering kernel: the same error in every run
    assert "nondeterministic: c2.Convolution (ConvolutionForward)" in res["verdict"]


def test_a_store_of_the_first_schema_is_migrated_and_read(store_url):
    migrate_to(store_url, "0001")
    engine = sa.create_engine(store_url if "://" in store_url else f"sqlite:///{store_url}")
    with engine.begin() as conn:  # a run as the first schema wrote it
        conn.execute(sa.text(
            "INSERT INTO runs (uid, created, command, config, options, lar_prec_version, device, cpu_features, "
            "model_sha256, input_sha256, verdict, exit_code, n_vars, n_not_ok, n_roots, argv, settings) VALUES "
            "('u1', '2026-01-01T00:00:00+00:00', 'naive-vs-default', 'default', '[]', '0.1.0', 'local AMD EPYC x86_64', "
            "'avx2', 'm', 'i', 'ok', 0, 3, 0, 0, '[]', '{}')"))
    engine.dispose()
    with open_store(store_url) as st:  # migrates to the newest schema
        [run] = st.runs()
    assert run["device_kind"] == "AMD EPYC x86_64"
    assert run["series"] == series_key("m", "i", "naive-vs-default", "default", (), "AMD EPYC x86_64")
    assert head_revision() != "0001"


def test_a_store_of_a_newer_schema_is_refused(store_url):
    with open_store(store_url):
        pass
    engine = sa.create_engine(store_url if "://" in store_url else f"sqlite:///{store_url}")
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE alembic_version SET version_num = '9999'"))
    engine.dispose()
    with pytest.raises(StoreError, match="newer lar-prec .*9999"):
        open_store(store_url)


def test_an_unreachable_store_is_one_line_and_exit_2(tmp_path, lar_dump):
    ref, clean = lar_dump("cnn", "naive"), lar_dump("cnn", "default")
    for url in (f"postgresql://lar@127.0.0.1:{free_port()}/x", str(tmp_path / "no" / "such" / "results.db")):
        p = _cli("compare", str(ref), str(clean), "--store", url, "--json", str(tmp_path / "r.json"))
        assert p.returncode == 2, p.stderr
        assert p.stderr.count("\n") == 1 and p.stderr.startswith("Error: store ") and "Traceback" not in p.stderr
        assert json.loads((tmp_path / "r.json").read_text())["command"] == "compare"  # the result is kept


def test_a_locked_sqlite_store_is_exit_2_and_keeps_it_whole(tmp_path, lar_dump):
    ref, clean = lar_dump("cnn", "naive"), lar_dump("cnn", "default")
    db = tmp_path / "results.db"
    store_result(str(db), compare_dumps(ref, clean).report)
    holder = sqlite3.connect(db)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        p = _cli("compare", str(ref), str(clean), "--store", f"sqlite:///{db}?timeout=0.2")
    finally:
        holder.rollback()
        holder.close()
    assert p.returncode == 2 and "locked" in p.stderr and p.stderr.count("\n") == 1, p.stderr
    with open_store(str(db)) as st:
        assert len(st.runs()) == 1


def test_a_full_disk_while_writing_leaves_nothing_half_written(tmp_path, lar_dump):
    ref, clean = lar_dump("cnn", "naive"), lar_dump("cnn", "default")
    db = tmp_path / "results.db"
    store_result(str(db), compare_dumps(ref, clean).report)
    with open_store(str(db)) as st:
        before = (len(st.runs()), sum(len(st.ops(r["id"])) for r in st.runs()))
    # no file of the command may grow past one page: SQLite's rollback journal (the pages a write
    # changes, kept first) cannot be written (EFBIG, as on a full disk)
    limit = lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))  # noqa: E731
    other = lar_dump("cnn", "default", tag="full-disk")  # another run: a new analysis to write
    p = _cli("compare", str(ref), str(other), "--store", str(db), preexec=limit)
    assert p.returncode == 2 and p.stderr.startswith("Error: store ") and p.stderr.count("\n") == 1, p.stderr
    with open_store(str(db)) as st:
        after = (len(st.runs()), sum(len(st.ops(r["id"])) for r in st.runs()))
    assert after == before
    p = _cli("store", "add", str(tmp_path), "--store", str(db))
    assert p.returncode == 2 and "not an analysis folder" in p.stderr


def _trend_page(chromium, db: str, page: Path) -> dict:
    """history --html and --json of the store; the page opened, rendered cleanly; the JSON."""
    p = _cli("history", "--store", db, "--html", str(page), "--json", str(page.with_suffix(".json")))
    assert p.returncode == 0, p.stderr
    chromium.open(page)
    _clean_page(chromium)
    # the trend page lists the store's runs per series: no footer about dumps "compared as given"
    assert chromium.js("document.getElementById('runs-section').hidden") is True
    assert "compared as given" not in chromium.js("document.body.innerText")
    return json.loads(page.with_suffix(".json").read_text())


@browser
@pytest.mark.browser
def test_the_trend_page_draws_an_operator_over_builds(chromium, tmp_path, lar_dump, faulty):
    ref, clean = lar_dump("cnn", "naive"), lar_dump("cnn", "default")
    db = str(tmp_path / "results.db")
    # one run: each plot is its one point, drawn (the sparkline of a one-run series was blank)
    store_result(db, compare_dumps(ref, clean).report)
    data = _trend_page(chromium, db, tmp_path / "one.html")
    [s] = data["series"]
    figs = plots(chromium)
    assert [f["points"] for f in figs] == [1] * (1 + len(s["ops"]))  # the output error, then each operator
    assert all(f["xticks"] == ["1"] and f["yticks"] and f["x"] == "run, oldest first" for f in figs), figs
    far, _ = inked(chromium, "#trend-output-0 .plot-area")
    assert far >= 12  # the point (r 3 px) and its value, nothing else inside the frame
    assert chromium.js("document.querySelector('#trend-output-0 .last-value').textContent") == fmt_num(s["runs"][0]["output_err"]).replace("e-0", "e-")

    for d in (lar_dump("cnn", "default", tag="night-1"), faulty):  # a run is its content: a new run, not the first again
        store_result(db, compare_dumps(ref, d).report)
    data = _trend_page(chromium, db, tmp_path / "trend.html")
    [s] = data["series"]
    text = chromium.js("document.getElementById('advice').innerText")
    assert "c2.Convolution" in text and "3 run(s)" in text
    figs = plots(chromium)
    assert len(figs) == 1 + len(s["ops"]) == 11  # the output error, and one plot per computed operator
    assert figs[0]["caption"] == "Output error of each of the 3 run(s) of this series" and figs[0]["y"] == "output error"
    for f, op in zip(figs[1:], s["ops"]):
        assert f["caption"] == f"max_err of {op['name']} in each of 3 run(s)" == f["aria"]
        assert f["points"] == 3 and f["xticks"] == ["1", "2", "3"] and f["y"] == "max_err"
        assert all(t == "0" or re.fullmatch(r"[125]e-\d+", t) for t in f["yticks"]) and len(f["yticks"]) >= 2, f
    # hovering c2.Convolution's last point (the faulty run) shows its value and build
    k = next(i for i, op in enumerate(s["ops"]) if op["name"] == "c2.Convolution")
    last = s["ops"][k]["points"][-1]
    tip = hover(chromium, "#trend-output-0 .pt", 0)  # the output plot's first point
    assert tip and s["runs"][0]["created"] in tip and s["runs"][0]["build"] in tip
    sel = "#advice figure.trend[id^='trend-0-'] .pt"
    tip = hover(chromium, sel, 3 * k + 2)
    assert tip.startswith(last["created"]) and f"max_err {fmt_num(last['max_err']).replace('e-0', 'e-')}" in tip, tip
    far, total = inked(chromium, "#advice figure.trend[id^='trend-0-'] .plot-area")
    assert far > 0.01 * total, (far, total)
    chromium.js("Array.from(document.querySelectorAll('a.trend-op')).find(a => a.textContent === 'c2.Convolution')"
                ".click()")
    chromium.settle()
    assert chromium.js("document.querySelector('.trend-detail tbody').rows.length") == 3
    assert chromium.problems() == []
