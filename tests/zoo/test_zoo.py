"""A zoo on the embedded LocalCluster, for real: the cnn case's analyses run by Dask worker processes
into an SQLite store; a zoo over the same store runs only what the store lacks; a second build whose
default kernels are wrong (tests/wrapped_lar.py) is marked as a regression against the first
build's history on the page (checked in Chromium), a build whose runs crash leaves a failure row
saying why after its retries; Ctrl-C ends with 130 and no process left."""
from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from xml.etree import ElementTree

import pytest

from browser_helpers import _clean_page, browser, chromium  # noqa: F401 (chromium: a fixture)
from conftest import ROOT
from remote_fixtures import write_exe
from zoo_helpers import descendants, processes_running, rows_by_task, write_manifest, zoo_cli

RUNS = """
[[run]]
command = "naive-vs-default"
[[config]]
name = "default"
[[config]]
name = "reproducible"
flags = ["--reproducible"]
[[build]]
name = "bundled"
"""


def broken_build(path) -> str:
    """A build whose every run crashes (SIGSEGV: tests/fake_lar.py)."""
    write_exe(path, f"#!/bin/sh\nFAKE_LAR_MODE=segv exec {sys.executable} {ROOT / 'tests' / 'fake_lar.py'} \"$@\"\n")
    return f'[[build]]\nname = "broken"\npath = "{path}"\n'


def faulty_build(path) -> str:
    """A user's build whose default kernels scale c2.weight by 1+1e-3 (tests/wrapped_lar.py)."""
    write_exe(path, f"#!/bin/sh\nWRAPPED_LAR_FAULT=c2.weight:1e-3 PYTHONPATH={ROOT} exec {sys.executable} "
                    f"{ROOT / 'tests' / 'wrapped_lar.py'} \"$@\"\n")
    return f'[[build]]\nname = "faulty"\npath = "{path}"\n'


@pytest.fixture(scope="module")
def zoo_runs(manifest, tmp_path_factory, worker_id):
    """The zoo of the bundled build, then the same zoo with a faulty and a broken build added (the
    bundled tasks are in the store: only the new builds' run). Made once per test session: under
    pytest-xdist the tests using it may land on several workers, which share the session's folder."""
    shared = tmp_path_factory.getbasetemp().parent if worker_id != "master" else tmp_path_factory.mktemp("s")
    d = shared / "zoo-runs"
    with open(shared / "zoo-runs.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the first worker runs the zoos, the others wait for them
        if not (d / "second.out.json").exists():
            d.mkdir(exist_ok=True)
            _run_zoos(manifest, d)
    out = {name: (json.loads((d / f"{name}.out.json").read_text()), json.loads((d / f"{name}.json").read_text()))
           for name in ("first", "second")}
    return d, d / "results.db", out


def _run_zoos(manifest, d: Path) -> None:
    first = write_manifest(d / "first.toml", [manifest["cnn"]], RUNS)
    # a history of one run is what this zoo has: asked for (the default is 3 runs before a regression)
    second = write_manifest(d / "second.toml", [manifest["cnn"]], RUNS + faulty_build(d / "bin" / "load_and_run")
                            + broken_build(d / "bin" / "broken"), zoo="local = false\nretries = 1\nmin_history = 1\n")
    for name, m in (("first", first), ("second", second)):
        proc = zoo_cli([m, "--store", d / "results.db", "--out", d / name, "--json", d / f"{name}.json",
                        "--junit", d / f"{name}.xml", "--workers", "2"])
        (d / f"{name}.out.json").write_text(json.dumps({"returncode": proc.returncode, "stdout": proc.stdout,
                                                        "stderr": proc.stderr}))


def test_each_task_once_in_the_store_and_a_second_zoo_runs_only_what_is_new(zoo_runs):
    d, db, out = zoo_runs
    proc, first = out["first"]
    assert proc["returncode"] == 0, proc["stderr"]
    assert first["counts"] == {"tasks": 2, "ran": 2, "stored": 0, "failed": 0, "divergent": 0, "regressed": 0,
                               "speed_regressed": 0, "nondeterministic": 0, "not_run": 0}
    lines = [ln for ln in proc["stderr"].splitlines() if ln.startswith("[")]
    assert len(lines) == 2 and all("cnn · naive-vs-default" in ln and ": done: no divergence" in ln for ln in lines)
    for e in first["tasks"]:  # clean tasks: the worker removed the dumps, kept the records and the page
        adir = e["analysis_dir"]
        assert e["dumps_removed"] and os.path.isfile(os.path.join(adir, "naive", "run.json"))
        assert not list(Path(adir).rglob("dump"))
        assert (d / "first" / e["page"]).resolve() == Path(adir) / "report.html"
        assert e["result_bytes"] < 200_000, "a summary and a report, no dump"
    rows = rows_by_task(db)  # after the second zoo: its two stored tasks were not run again
    assert len(rows) == 6 and all(len(r) == 1 and r[0]["uid"].endswith("-1") for r in rows.values()), rows
    assert {e["id"] for e in out["second"][1]["tasks"] if e["state"] == "stored"} == {e["id"] for e in first["tasks"]}


def test_a_build_that_got_worse_is_marked_and_a_broken_one_fails_with_why(zoo_runs):
    d, db, out = zoo_runs
    proc, z = out["second"]
    assert proc["returncode"] == 3, proc["stderr"]  # a task did not finish
    assert {k: z["counts"][k] for k in ("stored", "ran", "failed", "regressed")} == {
        "stored": 2, "ran": 4, "failed": 2, "regressed": 2}
    faulty = [e for e in z["tasks"] if e["build"] == "faulty"]
    for e in faulty:
        assert e["state"] == "done" and e["exit_code"] == 1 and e["history_runs"] == 1
        assert e["regressed"][0] == "c2.Convolution", e["regressed"]  # the root among the regressed first
        # the dump-only rule names the operator this build computes wrong (local error is off in this
        # zoo; the dumped weight is the model's own, as a wrong kernel leaves it)
        assert e["cells"][0]["root"] == "c2.Convolution" and not e["dumps_removed"]
        # a wrong result: its default run ran once more on the worker, the same bits (a fault that repeats)
        assert e["cells"][0]["regressed"] == e["regressed"] and e["cells"][0]["run_to_run"]["same_bits"]
    assert "REGRESSED  cnn" in proc["stdout"] and "root c2.Convolution" in proc["stdout"]
    rows = {r[0]["uid"]: r[0] for r in rows_by_task(db).values()}
    for e in (e for e in z["tasks"] if e["build"] == "broken"):
        row = rows[e["run"]]  # the failure row says why, and where the last try's folder is
        assert e["state"] == "failed" and row["exit_code"] == 3 and row["verdict"] == f"failed: {e['why']}"
        assert "load_and_run was killed by SIGSEGV" in e["why"] and e["why"].endswith("(after 2 tries)"), e["why"]
        assert Path(row["analysis_dir"]).parent.name.startswith("cnn-naive-vs-default-")
        assert len([p for p in Path(row["analysis_dir"]).parent.iterdir() if p.is_dir()]) == 2, "two tries"
    # --junit: a test case per cell, the regressions failures with their numbers, the crashed tasks errors
    suite = ElementTree.parse(d / "second.xml").getroot()
    cases = suite.findall(".//testcase")
    assert len(cases) == sum(max(1, len(e["cells"] or [])) for e in z["tasks"]) == 6
    assert suite.get("tests") == "6" and suite.get("failures") == "2" and suite.get("errors") == "2"
    for e in faulty:
        [case] = [c for c in cases if c.get("name") == f"{e['column']} on faulty @ {e['device']}"]
        msg = case.find("failure").get("message")
        assert msg.startswith("regressed: c2.Convolution") and "root c2.Convolution" in msg
        assert f"output error {e['cells'][0]['output_err']:.3g}" in msg
    errors = [c.find("error").get("message") for c in cases if c.find("error") is not None]
    assert all("load_and_run was killed by SIGSEGV" in m for m in errors) and len(errors) == 2
    first = ElementTree.parse(d / "first.xml").getroot()
    assert (first.get("tests"), first.get("failures"), first.get("errors")) == ("2", "0", "0")


def test_a_junit_path_that_cannot_be_written_is_exit_2_before_anything_runs(manifest, tmp_path):
    m = write_manifest(tmp_path / "zoo.toml", [manifest["cnn"]], RUNS)
    db = tmp_path / "results.db"
    proc = zoo_cli([m, "--store", db, "--out", tmp_path / "z", "--junit", tmp_path / "no" / "zoo.xml"], timeout=60)
    assert proc.returncode == 2 and proc.stderr.startswith("Error: cannot write the JUnit XML to ")
    assert proc.stderr.count("\n") == 1 and not db.exists() and not (tmp_path / "z").exists()


@browser
@pytest.mark.browser
def test_the_zoo_page_draws_the_matrix(chromium, zoo_runs):  # noqa: F811
    d, db, out = zoo_runs
    chromium.open(d / "second" / "zoo.html")
    _clean_page(chromium)
    assert chromium.js("Array.from(document.querySelectorAll('#advice h2')).map(h => h.firstChild.textContent)") == [
        "bundled @ local", "faulty @ local", "broken @ local", "Failed tasks "]
    classes = chromium.js("Array.from(document.querySelectorAll('table.zoo td.zc')).map(td => td.className)")
    assert classes == ["zc zc-ok", "zc zc-ok", "zc zc-regressed", "zc zc-regressed", "zc zc-failed", "zc zc-failed"]
    assert "regressed: c2.Convolution" in chromium.js("document.getElementById('advice').innerText")
    links = chromium.js("Array.from(document.querySelectorAll('a.zc-link')).map(a => a.href)")
    assert len(links) == 4 and all(os.path.isfile(h.replace("file://", "")) for h in links), links
    assert chromium.problems() == []


def test_ctrl_c_is_130_leaves_no_process_and_keeps_what_finished(manifest, tmp_path):
    m = write_manifest(tmp_path / "zoo.toml", [manifest["cnn"], manifest["mlp"]],
                       RUNS + faulty_build(tmp_path / "bin" / "load_and_run"))
    out, db = tmp_path / "out", tmp_path / "r.db"
    # its own session, like a terminal's foreground job: the Ctrl-C goes to the whole group
    proc = subprocess.Popen([sys.executable, "-m", "lar_prec", "zoo", str(m), "--store", str(db), "--out", str(out),
                             "--workers", "2"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not processes_running(str(out / "tasks")) and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1.0)  # runs under way in both workers
        below = descendants(proc.pid)
        assert processes_running(str(out / "tasks")), "no load_and_run ran"
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1].startswith("Error: interrupted; ") and "Traceback" not in err
    time.sleep(0.5)
    left = [p for p in below if os.path.exists(f"/proc/{p}") and open(f"/proc/{p}/stat").read().split()[2] != "Z"]
    assert left == [] and processes_running(str(out / "tasks")) == []
    z = json.loads((out / "zoo.json").read_text())
    rows = rows_by_task(db)
    assert z["counts"]["not_run"] > 0 and len(rows) == z["counts"]["ran"]
    assert all(len(r) == 1 and r[0]["exit_code"] in (0, 1) for r in rows.values())
