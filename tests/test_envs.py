"""``lar-prec diff`` and ``lar-prec bisect`` through the real command line, on the cnn case.

Builds are stand-in load_and_run scripts around the bundled one (tests/wrapped_lar.py): 16 of
them, where 9..16 compute ``c2``'s convolution 1+1e-4 too large (``WRAPPED_LAR_OP_FAULT``: a
kernel fault, the weights dumped as the model has them) and 5 cannot load any model. Every run
counted is a real load_and_run process (a run folder with its run.json).
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT
from proc_helpers import user_lar
from remote_fixtures import lar_wrapper, sshd  # noqa: F401  (fixture)
from test_bad_input import assert_one_line_error

pytestmark = pytest.mark.megengine
CASE = "cnn"
FAULTY_OP = "c2.Convolution"  # the operator that reads c2.weight


def cli(args, env=None, timeout=600) -> subprocess.CompletedProcess:
    full = {**os.environ, "PYTHONPATH": str(ROOT), "LAR_PREC_LOAD_AND_RUN": "bundled", **(env or {})}
    return subprocess.run([sys.executable, "-m", "lar_prec", *map(str, args)], cwd=ROOT, env=full,
                          capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def case_args(manifest) -> list:
    c = manifest[CASE]
    return [c.model, *[a for name, path in c.inputs for a in ("--input", f"{name}:{path}")]]


def run_folders(folder: Path) -> list:
    return sorted(p.parent for p in folder.rglob("run.json"))


@pytest.fixture(scope="module")
def builds(tmp_path_factory) -> Path:
    """build-01 .. build-16: 9..16 with the kernel fault, 5 unable to load anything; each file
    differs (BUILD=k), as builds do, and all share one cache of the stand-in's rewritten models."""
    d = tmp_path_factory.mktemp("builds")
    cache = tmp_path_factory.mktemp("rewrites")
    for k in range(1, 17):
        env = {"BUILD": str(k), "WRAPPED_LAR_CACHE": str(cache)}
        if k == 5:
            env["WRAPPED_LAR_REFUSE"] = ".mge"
        elif k >= 9:
            env["WRAPPED_LAR_OP_FAULT"] = "c2.weight:1e-4"
        user_lar(d / f"build-{k:02d}", **env)
    return d


# --------------------------------------------------------------------------- bisect


@pytest.mark.slow
def test_bisect_names_build_9_and_the_operator_skipping_5_then_reuses_the_store(manifest, builds, tmp_path):
    db = tmp_path / "results.db"
    args = ["bisect", *case_args(manifest), "--builds", builds, "--good", "1", "--bad", "build-16", "--store", db]
    first = cli([*args, "--out", tmp_path / "b1", "--json", tmp_path / "b1.json", "--html", tmp_path / "b1.html"])
    assert first.returncode == 1, first.stderr
    r = json.loads((tmp_path / "b1.json").read_text())
    assert r["schema"] == "lar-prec.bisect/1" and r["first_bad"]["index"] == 9
    assert r["first_bad"]["root"]["name"] == FAULTY_OP and r["candidates"] == [9]
    # a kernel fault repeats: the bad build run again gives the same bits
    assert r["first_bad"]["run_to_run"]["same_bits"] and "deterministic" in r["first_bad"]["why"]
    assert FAULTY_OP in r["first_bad"]["root"]["local_roots"]  # out of its bound of the naive reference
    verdicts = {b["index"]: b["verdict"] for b in r["builds"]}
    assert verdicts[1] == "good" and verdicts[16] == "bad" and verdicts[9] == "bad"
    assert all(verdicts[k] in ("good", "untested") for k in range(1, 9) if k != 5)
    assert all(verdicts[k] in ("bad", "untested") for k in range(9, 17))
    # 16 builds: at most ceil(log2 16) + 2 = 6 analyses; the good end runs twice, every other build once
    bound = math.ceil(math.log2(16)) + 2
    assert r["bound"] == bound and r["analyses"] <= bound
    # each run counted is a run folder: the builds' runs, the naive reference and the layerwise runs of
    # the rounding tier, each bad build's run again
    assert r["runs"] == len(run_folders(tmp_path / "b1")) > r["analyses"] + 1
    assert r["rule"] == "outside rounding" and r["rounding"]["good"]["measured"]
    # the search halves 1..16 at 9, then 1..9 at 5: met on the way, skipped, never bad
    assert verdicts[5] == "skip" and "cannot run the model" in r["builds"][4]["why"]
    first_bad = Path(r["first_bad"]["report"])
    diff = json.loads(first_bad.read_text())
    assert diff["command"] == "diff" and diff["roots"][0]["name"] == FAULTY_OP
    assert (first_bad.parent / "report.html").is_file()
    assert "first bad build: #9 build-09" in first.stdout and FAULTY_OP in first.stdout

    again = cli([*args, "--out", tmp_path / "b2", "--json", tmp_path / "b2.json"])
    assert again.returncode == 1, again.stderr
    r2 = json.loads((tmp_path / "b2.json").read_text())
    assert r2["first_bad"]["index"] == 9 and r2["first_bad"]["root"]["name"] == FAULTY_OP
    assert r2["analyses"] == 0 and r2["runs"] == 0 and r2["reused"] == r["analyses"]
    assert run_folders(tmp_path / "b2") == []
    assert {b["source"] for b in r2["builds"] if b["verdict"] != "untested"} == {"store"}
    _check_page(tmp_path / "b1.html", "bisect-builds", 16)


@pytest.mark.slow
def test_bisect_of_two_builds_measures_only_the_ends_and_operator_narrows_bad(manifest, builds, tmp_path):
    args = ["bisect", *case_args(manifest), "--builds", f"{builds / 'build-08'},{builds / 'build-09'}",
            "--good", "build-08", "--bad", "2", "--store", tmp_path / "results.db", "--json", "-", "-q"]
    proc = cli([*args, "--out", tmp_path / "b"])
    assert proc.returncode == 1, proc.stderr
    r = json.loads(proc.stdout)
    assert r["analyses"] == 2 and r["runs"] == len(run_folders(tmp_path / "b")) and r["first_bad"]["index"] == 2
    assert r["first_bad"]["root"]["name"] == FAULTY_OP
    # bad only where c1's convolution leaves the band: it does not (the fault is in c2); the good end's
    # band comes from the store, the bad end is judged anew (another question)
    narrow = cli([*args, "--operator", "c1.Convolution", "--out", tmp_path / "b2"])
    assert narrow.returncode == 0, narrow.stderr
    r2 = json.loads(narrow.stdout)
    assert r2["first_bad"] is None and r2["analyses"] == 1 and r2["runs"] == 1 and r2["reused"] == 1
    assert "stays within the good end's band" in r2["verdict"] and r2["operator"]["name"] == "c1.Convolution"
    unknown = cli([*args, "--operator", "no.such.op", "--out", tmp_path / "b3"])
    assert unknown.returncode == 2
    assert_one_line_error(unknown.stderr, ["--operator no.such.op"], ["no variable of that name"])


def _flagged_build(path: Path, flag: str, **env: str) -> Path:
    """A build whose every run adds ``flag`` (its kernels: another layout sums in another order)."""
    sets = " ".join(f"{k}={v}" for k, v in env.items())
    path.write_text(f"#!/bin/sh\n[ \"$1\" = --version ] && exec {sys.executable} {ROOT / 'tests' / 'wrapped_lar.py'} "
                    f"--version\n{sets} PYTHONPATH={ROOT} exec {sys.executable} {ROOT / 'tests' / 'wrapped_lar.py'} "
                    f"\"$@\" {flag}\n")
    path.chmod(0o755)
    return path


@pytest.mark.slow
def test_bisect_of_a_kernel_order_change_finds_nothing_and_a_race_is_the_first_bad(manifest, tmp_path):
    """Build 2 runs NCHW44 kernels (another summation order, both correct), build 3 a c2 kernel that
    reads memory it did not write (WRAPPED_LAR_RACE). 1..2: nothing to bisect (within
    rounding, exit 0); 1..3: build 3 is the first bad one, nondeterministic in c2.Convolution."""
    d, cache = tmp_path / "builds", tmp_path / "rewrites"
    for p in (d, cache, tmp_path / "k"):
        p.mkdir()
    user_lar(d / "build-1", WRAPPED_LAR_CACHE=str(cache))
    _flagged_build(d / "build-2", "--enable-nchw44", WRAPPED_LAR_CACHE=str(cache))
    user_lar(d / "build-3", WRAPPED_LAR_CACHE=str(cache), WRAPPED_LAR_RACE="c2.weight:1e-2",
             WRAPPED_LAR_JITTER_DIR=str(tmp_path / "k"))
    args = ["bisect", *case_args(manifest), "--builds", d, "--good", "1", "--json", "-", "-q"]
    order = cli([*args, "--bad", "2", "--out", tmp_path / "b1"])
    assert order.returncode == 0, order.stderr
    r = json.loads(order.stdout)
    assert r["first_bad"] is None and "is within rounding of the good end" in r["verdict"], r["verdict"]
    b2 = r["builds"][1]
    assert b2["verdict"] == "good" and b2["n_within_rounding"] > 0 and b2["output_max_err"] > 0
    race = cli([*args, "--bad", "3", "--out", tmp_path / "b2"])
    assert race.returncode == 1, race.stderr
    r = json.loads(race.stdout)
    assert r["first_bad"]["index"] == 3 and r["builds"][1]["verdict"] == "good"
    rtr = r["first_bad"]["run_to_run"]
    assert rtr["nondeterministic"] and rtr["operators"][0]["name"] == FAULTY_OP, rtr
    assert FAULTY_OP in r["first_bad"]["root"]["local_roots"] and "nondeterministic" in r["first_bad"]["why"]


def test_bisect_stops_when_the_good_end_cannot_run(manifest, builds, tmp_path):
    proc = cli(["bisect", *case_args(manifest), "--builds", builds, "--good", "5", "--bad", "16",
                "--out", tmp_path / "b"])
    assert proc.returncode == 3, proc.stderr
    assert_one_line_error(proc.stderr, ["good end #5 build-05"], ["cannot run the model"])
    assert len(run_folders(tmp_path / "b")) == 1  # the good end's first run, and nothing after it


@pytest.mark.parametrize("why,argv,names,expect", [
    ("a build that does not exist", ["--builds", "{b}/build-01,{b}/no-such-build", "--good", "1", "--bad", "2"],
     ["no-such-build"], ["does not exist"]),
    ("fewer than 2 builds", ["--builds", "{b}/build-01", "--good", "1", "--bad", "1"], ["1 build"],
     ["at least 2"]),
    ("ends in the wrong order", ["--builds", "{b}", "--good", "9", "--bad", "build-03"], ["--good 9", "--bad build-03"],
     ["must come before"]),
])
def test_bisect_bad_input_is_exit_2_in_one_line(manifest, builds, tmp_path, why, argv, names, expect):
    proc = cli(["bisect", *case_args(manifest), *[a.format(b=builds) for a in argv], "--out", tmp_path / "b"])
    assert proc.returncode == 2, (why, proc.stderr)
    assert_one_line_error(proc.stderr, names, expect)
    assert not (tmp_path / "b").exists(), "a usage error claims no analysis folder"


def test_diff_of_two_identical_sides_says_so_and_exits_0(manifest, tmp_path):
    proc = cli(["diff", *case_args(manifest), "--a-lar", "bundled", "--out", tmp_path / "d"])  # B: the same lookup
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("Nothing to diff: both sides run bundled lar_prec.lar")
    assert not (tmp_path / "d").exists()
    missing = cli(["diff", *case_args(manifest), "--b-lar", tmp_path / "no-such-lar", "--out", tmp_path / "d"])
    assert missing.returncode == 2
    assert_one_line_error(missing.stderr, ["no-such-lar"], ["does not exist"])


# --------------------------------------------------------------------------- diff


@pytest.mark.slow
def test_diff_finds_a_1e5_fault_in_one_operator_outside_jitter(manifest, tmp_path):
    lar = user_lar(tmp_path / "load_and_run", WRAPPED_LAR_CACHE=str(tmp_path / "rewrites"))
    (tmp_path / "rewrites").mkdir()
    proc = cli(["diff", *case_args(manifest), "--a-lar", lar, "--b-lar", lar, "--b-env",
                "WRAPPED_LAR_OP_FAULT=c2.weight:1e-5", "--out", tmp_path / "d", "--json", tmp_path / "d.json",
                "--html", tmp_path / "d.html", "--store", tmp_path / "results.db"])
    assert proc.returncode == 1, proc.stderr
    r = json.loads((tmp_path / "d.json").read_text())
    assert r["command"] == "diff" and r["diff_pairing"]["how"] == "id"
    by_name = {v["name"]: v for v in r["vars"]}
    assert by_name[FAULTY_OP]["diff"] == "outside_jitter" and by_name["c2.weight"]["diff"] == "equal"
    assert by_name["c1.Convolution"]["diff"] == "equal"
    for v in r["vars"]:  # each verdict follows from its numbers
        assert v["status"] == ("ok" if v["diff"] in ("equal", "within_jitter", "within_rounding") else "divergent"), v
    root = r["roots"][0]
    assert root["name"] == FAULTY_OP and 5e-6 < root["max_err"] < 2e-5
    # against the naive reference: B's c2 kernel is out of its bound, A's within; so outside rounding
    assert r["rounding"]["measured"] and r["verdict"].startswith("outside rounding")
    assert root["rounding"]["b"]["label"] == "root" and root["rounding"]["a"]["within_bound"]
    assert root["rounding"]["b"]["local_err"] > root["rounding"]["b"]["floor"]
    assert [x["name"] for x in r["rounding"]["b"]["roots"]] == [FAULTY_OP] and r["rounding"]["a"]["roots"] == []
    assert r["run_to_run"]["side"] == "b" and r["run_to_run"]["same_bits"]  # B's two runs: the same wrong bits
    # B's operator on A's inputs makes the error (above its rounding floor); the oracle finds A nearer
    assert root["local_err"] > root["floor"] and root["label"] == "root"
    assert root["nearer"] == "a" and root["wrong_side"] == "b"
    assert r["sides"]["b"]["env"] == {"WRAPPED_LAR_OP_FAULT": "c2.weight:1e-5"} and r["sides"]["a"]["runs"] == 2
    assert [x["label"] for x in r["runs"]] == ["a:default-1", "a:default-2", "b:default-1", "b:default-2"]
    assert "first: c2.Convolution" in proc.stdout and "Per variable: " in proc.stdout

    # the two sides as runs of a store (their folders read back): the same verdict, no runs
    db = tmp_path / "sides.db"
    for side in ("a", "b"):
        assert cli(["store", "add", tmp_path / "d" / side, "--store", db]).returncode == 0
    from lar_prec.store.db import open_store

    with open_store(str(db)) as store:
        uids = [row["uid"][:12] for row in store.runs()]
    by_uid = cli(["diff", *uids, "--store", db, "--out", tmp_path / "by-uid", "--json", "-", "-q"])
    assert by_uid.returncode == 1, by_uid.stderr
    r2 = json.loads(by_uid.stdout)
    assert [v["diff"] for v in r2["vars"]] == [v["diff"] for v in r["vars"]] and r2["roots"][0]["name"] == FAULTY_OP
    assert r2["sides"]["a"]["from"] == str(tmp_path / "d" / "a") and run_folders(tmp_path / "by-uid") == []
    _check_page(tmp_path / "d.html", "diff-section", len(r["vars"]))


def test_diff_of_a_build_that_orders_ties_another_way_is_no_difference(manifest, tmp_path):
    """Index outputs whose tied values come out in another order are index_equivalent, within
    jitter: the two environments agree (issue 40 #2 through diff)."""
    c = manifest["topk_ties"]
    lar = user_lar(tmp_path / "load_and_run")
    proc = cli(["diff", c.model, *[a for name, path in c.inputs for a in ("--input", f"{name}:{path}")],
                "--a-lar", lar, "--b-lar", lar, "--b-env", "WRAPPED_LAR_TIES=reorder", "--no-local",
                "--out", tmp_path / "d", "--json", tmp_path / "d.json", "-q"])
    r = json.loads((tmp_path / "d.json").read_text())
    ties = [v for v in r["vars"] if v["status"] == "index_equivalent"]
    assert ties and all(v["diff"] == "within_jitter" for v in ties), [(v["name"], v["status"], v["diff"]) for v in r["vars"]]
    assert proc.returncode == 0 and not r["roots"], proc.stdout + proc.stderr


@pytest.mark.slow
def test_diff_of_nchw44_against_plain_pairs_by_operator_key_and_is_within_rounding(manifest, tmp_path):
    """NCHW44's kernels sum in another order: outside the (zero) jitter, but each side within every
    operator's bound of the naive reference, also the convolutions NCHW44 fused away: exit 0."""
    proc = cli(["diff", *case_args(manifest), "--b-flags", "--enable-nchw44", "--out", tmp_path / "d", "--json", "-",
                "-q"])
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    r = json.loads(proc.stdout)
    p = r["diff_pairing"]
    assert p["how"] == "key" and p["compared"] >= 10
    # the convolutions NCHW44 fused into ConvBias have no partner, each with its reason
    assert {u["name"] for u in p["unpaired_a"]} >= {"c1.Convolution", "c2.Convolution"}
    assert all(u["reason"] for u in p["unpaired_a"] + p["unpaired_b"])
    names = {v["name"] for v in r["vars"]}
    assert {"Pooling[1]", "Softmax", "fc.MatrixMul"} <= names  # NCHW44 values brought back to NCHW and compared
    assert r["local"]["measured"] is False and "different graphs" in r["local"]["why"]
    assert r["rounding"]["measured"] and r["roots"] == [] and r["verdict"].startswith("within rounding")
    assert r["diff_counts"]["outside_jitter"] == r["diff_counts"]["nonfinite"] == 0
    rounded = [v for v in r["vars"] if v["diff"] == "within_rounding"]
    assert rounded and all(v["max_err"] > 0 and v["status"] == "ok" for v in rounded)
    for v in rounded:  # each side's operator measured and within its bound, on the plain graph's vars
        assert v["rounding"]["a"]["within_bound"] and v["rounding"]["b"]["within_bound"], v
        assert v["rounding"]["b"]["local_err"] <= v["rounding"]["b"]["floor"], v
    # the fused-away convolutions were held to their bounds on both sides too
    local_b = json.loads((tmp_path / "d" / "rounding" / "b" / "local.json").read_text())
    convs = {x["name"]: x for x in local_b["vars"] if x["name"] in ("c1.Convolution", "c2.Convolution")}
    assert len(convs) == 2 and all(x["label"] != "root" and x["local_err"] is not None for x in convs.values())


@pytest.mark.slow
def test_diff_of_a_weight_fault_on_side_b_is_outside_and_rooted(manifest, tmp_path):
    """B's build runs c2 with its weight scaled by 1+1e-4 (WRAPPED_LAR_FAULT; the dump shows the
    model's weight): outside rounding, rooted at the convolution, which is out of its bound of the
    naive reference on B only."""
    (tmp_path / "rewrites").mkdir()
    lar = user_lar(tmp_path / "load_and_run", WRAPPED_LAR_CACHE=str(tmp_path / "rewrites"))
    proc = cli(["diff", *case_args(manifest), "--a-lar", lar, "--b-lar", lar, "--b-env",
                "WRAPPED_LAR_FAULT=c2.weight:1e-4", "--out", tmp_path / "d", "--json", "-", "-q"])
    assert proc.returncode == 1, proc.stderr
    r = json.loads(proc.stdout)
    by_name = {v["name"]: v for v in r["vars"]}
    assert by_name["c2.weight"]["diff"] == "equal" and r["roots"][0]["name"] == FAULTY_OP
    assert by_name[FAULTY_OP]["diff"] == "outside_jitter" and by_name["c1.Convolution"]["diff"] == "equal"
    assert r["verdict"].startswith("outside rounding") and r["diff_counts"]["within_rounding"] == 0
    assert r["roots"][0]["rounding"]["b"]["label"] == "root" and r["roots"][0]["rounding"]["a"]["within_bound"]
    # downstream of the fault every var carries it: outside too, though each of their operators is within
    assert all(v["diff"] == "outside_jitter" for v in r["vars"] if v["name"] in ("RELU[1]", "fc.MatrixMul", "Softmax"))


@pytest.mark.slow
def test_diff_says_a_wrong_value_on_side_b_that_differs_run_to_run_is_nondeterministic(manifest, tmp_path):
    """B's c2 kernel reads memory it did not write (WRAPPED_LAR_RACE: about 1e-2 off, another value in
    every run): outside jitter and rounding, and B's runs name c2.Convolution nondeterministic."""
    (tmp_path / "k").mkdir()
    (tmp_path / "rewrites").mkdir()
    lar = user_lar(tmp_path / "load_and_run", WRAPPED_LAR_CACHE=str(tmp_path / "rewrites"))
    proc = cli(["diff", *case_args(manifest), "--a-lar", lar, "--b-lar", lar, "--b-env", "WRAPPED_LAR_RACE=c2.weight:1e-2",
                "--b-env", f"WRAPPED_LAR_JITTER_DIR={tmp_path / 'k'}", "--out", tmp_path / "d", "--json", "-", "-q"])
    assert proc.returncode == 1, proc.stderr
    r = json.loads(proc.stdout)
    assert r["roots"][0]["name"] == FAULTY_OP and r["roots"][0]["rounding"]["b"]["label"] == "root"
    rtr = r["run_to_run"]
    assert rtr["nondeterministic"] and not rtr["same_bits"] and rtr["runs"] == 2
    assert rtr["operators"][0]["name"] == FAULTY_OP and rtr["operators"][0]["spread"] > 0
    assert "reads memory it did not write, or races" in rtr["words"] and FAULTY_OP in proc.stdout


@pytest.mark.slow
def test_diff_of_two_thread_counts_under_fast_run_holds_each_var_to_both_jitters(manifest, tmp_path):
    c = manifest["fastrun_shake"]
    proc = cli(["diff", c.model, *[a for n, p in c.inputs for a in ("--input", f"{n}:{p}")], "--config", "fast-run",
                "--a-flags", "--multithread 1", "--b-flags", "--multithread 2", "--out", tmp_path / "d",
                "--json", "-", "-q"])
    assert proc.returncode in (0, 1), proc.stderr
    r = json.loads(proc.stdout)
    assert r["sides"]["a"]["flags"] == ["--multithread", "1"] and r["sides"]["b"]["flags"] == ["--multithread", "2"]
    assert r["diff_pairing"]["how"] == "id" and sum(r["diff_counts"].values()) == len(r["vars"])
    for v in r["vars"]:
        band = (v["jitter_a"] or 0.0) + (v["jitter_b"] or 0.0)
        if v["diff"] == "equal":
            assert v["max_err"] == 0
        elif v["diff"] == "within_jitter":
            assert 0 < v["max_err"] <= band, v
        elif v["diff"] == "outside_jitter":
            assert v["max_err"] > band, v
    assert proc.returncode == (1 if r["diff_counts"]["outside_jitter"] + r["diff_counts"]["nonfinite"] else 0)
    for side in ("a", "b"):  # each side repeated (fast-run: each run profiles again)
        assert len(run_folders(tmp_path / "d" / side)) == 2


@pytest.mark.slow
def test_diff_of_this_machine_against_an_ssh_host(sshd, manifest, tmp_path):
    o = sshd["options"]
    env = {"LAR_PREC_SSH_IDENTITY": o.identity, "LAR_PREC_SSH_CONFIG": o.config, "LAR_PREC_SSH_KNOWN_HOSTS": o.known_hosts}
    lar = lar_wrapper(tmp_path / "device-bin" / "load_and_run")
    proc = cli(["diff", *case_args(manifest), "--b-remote", sshd["target"], "--b-lar", lar,
                "--remote-dir", tmp_path / "device", "--out", tmp_path / "d", "--json", "-", "-q"], env)
    # the same bundled runtime on the same CPU behind the ssh host: bitwise the same
    assert proc.returncode == 0, proc.stderr
    r = json.loads(proc.stdout)
    assert r["diff_counts"]["equal"] == len(r["vars"]) > 10 and r["roots"] == []
    assert r["sides"]["b"]["remote"] == sshd["target"] and r["sides"]["a"]["remote"] is None
    assert [x["remote"]["target"] for x in r["runs"] if x["label"].startswith("b:")] == [sshd["target"]] * 2
    assert "host" in {d["field"] for d in r["environment_differences"]}
    assert r["verdict"].startswith("equal: A and B give bitwise the same result")


def _check_page(path: Path, section: str, rendered: int) -> None:
    from browser_helpers import CHROMIUM, Browser

    if CHROMIUM is None:
        pytest.skip("headless chromium not installed (run scripts/ensure-chromium.sh as root)")
    b = Browser()
    try:
        b.open(path)
        assert b.js("document.getElementById('fatal').hidden") is True and b.problems() == []
        assert b.js("document.body.dataset.rendered") == str(rendered)
        assert b.js(f"document.getElementById('{section}') !== null")
    finally:
        b.close()
