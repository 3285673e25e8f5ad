"""A sweep's timed runs (issue 55): each option's speed beside its precision, on real runs of
the cases with the bundled load_and_run (and the real C++ tool's lines where it is built).

Speed is never asserted (no test says an option is faster): the fields, the interval rule on
real measurements, the exit codes and a crash in a timed run (tests/wrapped_lar.py) are.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from browser_helpers import _clean_page, browser, chromium  # noqa: F401  (fixture)
from conftest import ROOT
from proc_helpers import user_lar
from lar_prec.report.html import write_html
from lar_prec.report.model import read_json
from lar_prec.run.inputs import plan_inputs, write_inputs
from lar_prec.run.once import run_once
from lar_prec.workflows.sweep.speed import (ITERS, WARMUP_ITER, OptionSpeed, compare_speed, front, inplace_flags,
                                             iteration_ms, round_order)

pytestmark = pytest.mark.megengine
PY = sys.executable


def lar_prec(*args: object, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "-m", "lar_prec", *map(str, args)], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdin=subprocess.DEVNULL)


def inputs(case) -> list:
    return [a for spec in case.input_specs() for a in ("--input", spec)]


def timed(case, out: Path, label: str, lar=None, flags=()) -> tuple:
    prepared = write_inputs(plan_inputs(case.input_specs(), case.model), out / f"inputs-{label}")
    rec = run_once(case.model, prepared, "default", out, lar=lar, label=label, timed=(WARMUP_ITER, ITERS),
                   extra_flags=flags, timeout=300)
    return rec, iteration_ms((rec.dir / "stderr.txt").read_text())


@pytest.fixture(scope="module")
def cnn_sweep(manifest, tmp_path_factory):
    """`sweep cnn --options weight-preprocess,const-shape --speed-runs 2 --no-local`."""
    tmp = tmp_path_factory.mktemp("speed")
    case = manifest["cnn"]
    p = lar_prec("sweep", case.model, *inputs(case), "--options", "weight-preprocess,const-shape", "--speed-runs", 2,
                 "--no-local", "--out", tmp / "s", "--json", tmp / "s.json")
    return p, json.loads((tmp / "s.json").read_text()), tmp


def test_a_timed_run_dumps_nothing_and_its_iterations_are_read(manifest, tmp_path):
    rec, times = timed(manifest["cnn"], tmp_path, "t")
    assert rec.dump_dir is None and not (rec.dir / "dump").exists()
    assert rec.argv[rec.argv.index("--iter") + 1] == str(ITERS)
    assert rec.argv[rec.argv.index("--warmup-iter") + 1] == str(WARMUP_ITER)
    assert "--bin-io-dump" not in rec.argv and json.loads(rec.json_path.read_text())["timed"] == {
        "warmup_iter": WARMUP_ITER, "iter": ITERS}
    assert len(times) == ITERS and all(t > 0 for t in times)


def test_the_interval_rule_on_real_measurements(manifest, tmp_path):
    """Two models as two 'options' of one another (their difference is known by construction,
    not by a fitted number): per-round ratios, their median and range, and the overlap rule."""
    rounds = {"resnet18": [], "cnn": []}
    for k in range(2):  # interleaved, as the sweep does
        for name in rounds:
            rounds[name].append(timed(manifest[name], tmp_path, f"{name}-{k}")[1])
    big = OptionSpeed("resnet18", "timed", tuple(rounds["resnet18"]))
    small = compare_speed(big, OptionSpeed("cnn", "timed", tuple(rounds["cnn"])))
    same = compare_speed(big, big)
    ratios = [statistics.median(d) / statistics.median(o) for d, o in zip(rounds["resnet18"], rounds["cnn"])]
    assert small.low == min(ratios) and small.high == max(ratios) and small.low <= small.speedup <= small.high
    (dl, dh), (ol, oh) = big.spread_ms, small.spread_ms
    assert small.measurable == (oh < dl or ol > dh)
    assert same.speedup == 1.0 and not same.measurable and same.words() == "no measurable difference"
    if small.measurable:
        assert small.words().endswith("faster") == (small.speedup > 1)
    else:
        assert small.words() == "no measurable difference"


def test_the_front():
    pts = [("a", 2.0, 1e-7), ("b", 1.5, 1e-8), ("c", 1.4, 1e-7), ("d", 2.0, 1e-6)]
    assert front(pts) == ("a", "b")


def test_sweep_reports_speed_beside_precision(cnn_sweep):
    p, d, tmp = cnn_sweep
    assert p.returncode == d["exit_code"] and p.returncode in (0, 1), p.stderr[-2000:]
    sp = d["speed"]
    assert sp["rounds"] == 2 and sp["iter"] == ITERS and sp["warmup_iter"] == WARMUP_ITER and sp["threads"] == 1
    assert sp["device"].startswith("cpu") and sp["off"] is None and "overlap" in sp["how"]
    dflt = d["default"]["speed"]
    assert dflt["status"] == "timed" and len(dflt["iterations_ms"]) == 2 and dflt["speedup"] is None
    assert all(len(r) == ITERS for r in dflt["iterations_ms"])
    for o in d["options"]:
        s = o["speed"]
        assert s["status"] == "timed" and len(s["run_dirs"]) == 2
        assert all(Path(r).is_dir() and (Path(r) / "run.json").exists() and not (Path(r) / "dump").exists()
                   for r in s["run_dirs"])
        lo, hi = s["speedup_interval"]
        assert lo <= s["speedup"] <= hi
        (dl, dh), (ol, oh) = dflt["spread_ms"], s["spread_ms"]
        assert s["measurable"] == (oh < dl or ol > dh)
        assert (s["words"] == "no measurable difference") == (not s["measurable"])
        assert o["speed_words"].startswith(o["option"] + ": " + s["words"])
        assert o["speed_words"].endswith({"ok": "within tolerance", "as_default": "as the default run"}.get(
            o["verdict"], "")) or o["verdict"] == "diverges"
    assert "speed: " in d["verdict"]
    assert set(sp["front"]) <= {o["option"] for o in d["options"] if o["speed"]["measurable"]}
    assert d["timing"]["speed_seconds"] > 0
    # the precision runs are untouched: one dump run per option, and the table has the column
    assert "speed" in p.stdout and "Speed: 2 interleaved rounds" in p.stdout


@browser
@pytest.mark.browser
def test_page_plots_speed_against_error(cnn_sweep, chromium, tmp_path):  # noqa: F811
    _, d, tmp = cnn_sweep
    chromium.open(write_html(read_json(tmp / "s.json"), tmp_path / "s.html"))
    _clean_page(chromium)
    assert chromium.js("!!document.getElementById('speed-section')") is True
    rows = chromium.js("Array.from(document.querySelectorAll('#speed-table tbody tr')).map(r => r.dataset.option)")
    assert rows == ["default (no option)"] + [o["option"] for o in d["options"]]
    pts = chromium.js("Array.from(document.querySelectorAll('#speed-plot .speed-point')).map(g => g.dataset.option)")
    assert sorted(pts) == sorted(o["option"] for o in d["options"] if o["speed"]["speedup"] is not None)
    assert chromium.js("document.querySelectorAll('#speed-plot .speed-threshold').length") == 1
    marked = chromium.js("Array.from(document.querySelectorAll('#speed-plot .speed-front')).map(g => g.dataset.option)")
    assert sorted(marked) == sorted(d["speed"]["front"])


@pytest.mark.parametrize("bad", ["1", "-1", "51", "x"])
def test_speed_runs_out_of_range_is_a_usage_error(manifest, tmp_path, bad):
    case = manifest["cnn"]
    p = lar_prec("sweep", case.model, *inputs(case), "--options", "const-shape", "--speed-runs", bad,
                 "--out", tmp_path / "s")
    assert p.returncode == 2, p.stderr
    assert "Traceback" not in p.stderr and "--speed-runs" in p.stderr
    assert not (tmp_path / "s").exists()


def test_speed_runs_0_times_nothing(manifest, tmp_path):
    case = manifest["cnn"]
    p = lar_prec("sweep", case.model, *inputs(case), "--options", "const-shape", "--speed-runs", 0, "--no-local",
                 "--out", tmp_path / "s", "--json", tmp_path / "s.json", "-q")
    d = json.loads((tmp_path / "s.json").read_text())
    assert p.returncode == d["exit_code"] == 0, p.stderr[-2000:]
    assert d["speed"]["off"] and d["options"][0]["speed"] is None and d["default"]["speed"] is None
    assert not (tmp_path / "s" / "speed").exists() and "speed:" not in d["verdict"]


def test_an_option_that_crashes_when_timed_keeps_its_precision_verdict(manifest, tmp_path):
    case = manifest["cnn"]
    lar = user_lar(tmp_path / "lar", WRAPPED_LAR_CRASH_TIMED="--weight-preprocess")
    p = lar_prec("sweep", case.model, *inputs(case), "--options", "weight-preprocess,const-shape", "--lar", lar,
                 "--speed-runs", 2, "--no-local", "--out", tmp_path / "s", "--json", tmp_path / "s.json", "-q")
    d = json.loads((tmp_path / "s.json").read_text())
    by = {o["option"]: o for o in d["options"]}
    wp = by["weight-preprocess"]
    assert wp["status"] == "runs" and wp["verdict"] == "ok", wp  # its precision verdict is kept
    assert wp["speed"]["status"] == "crashed" and "SIGABRT" in wp["speed"]["reason"]
    assert len(wp["speed"]["run_dirs"]) == 1  # not timed again after it crashed
    assert by["const-shape"]["speed"]["status"] == "timed"
    assert "weight-preprocess: timing crashed" in d["verdict"]
    assert p.returncode == d["exit_code"] == 1, p.stderr[-2000:]  # a crash under an option is a finding


@pytest.mark.real_lar
def test_the_real_tools_iteration_lines_are_read(real_lar, manifest, tmp_path):
    rec, times = timed(manifest["cnn"], tmp_path, "real", lar=str(real_lar))
    assert len(times) == ITERS and all(t > 0 for t in times), (rec.dir / "stderr.txt").read_text()[-2000:]


def _budget_sweep(manifest, tmp_path, slow: str, *more):
    case = manifest["cnn"]
    lar = user_lar(tmp_path / "lar", WRAPPED_LAR_SLOW_TIMED=slow)
    p = lar_prec("sweep", case.model, *inputs(case), "--options", "weight-preprocess,const-shape", "--lar", lar,
                 "--speed-runs", 2, "--no-local", "--out", tmp_path / "s", "--json", tmp_path / "s.json", "-q", *more)
    d = json.loads((tmp_path / "s.json").read_text())
    return p, d, {o["option"]: o for o in d["options"]}


def test_an_option_too_slow_for_the_timing_budget_is_not_timed_and_keeps_its_verdict(manifest, tmp_path):
    """A stand-in whose timed runs under --weight-preprocess wait 300 s before running (a load
    and warm-up slower than the option's allowance): stopped at its allowance, not waited out,
    not timed again; the default and const-shape are timed; not a finding."""
    p, d, by = _budget_sweep(manifest, tmp_path, "--weight-preprocess:300")
    sp, wp = d["speed"], by["weight-preprocess"]
    assert sp["budget_fraction"] == 0.15 and sp["budget_seconds"] > 0
    assert sp["allowance_seconds"] >= 2 * min(json.loads((Path(r) / "run.json").read_text())["seconds"]
                                          for r in d["default"]["speed"]["run_dirs"]) * 0.999
    assert wp["status"] == "runs" and wp["verdict"] == "ok", wp
    assert wp["speed"]["status"] == "over_budget" and len(wp["speed"]["run_dirs"]) == 1
    assert "allowance" in wp["speed"]["reason"] and wp["speed"]["words"].startswith("not timed (timing budget)")
    stopped = json.loads((Path(wp["speed"]["run_dirs"][0]) / "run.json").read_text())
    assert stopped["seconds"] < 300 and stopped["timeout"] >= sp["allowance_seconds"]
    assert f"allowance of {stopped['timeout']:.3g} s" in wp["speed"]["reason"]
    # as fast as the default: timed, unless the machine slowed down more than twice meanwhile
    # (the floor of its allowance); then stopped by the same rule
    cs = by["const-shape"]["speed"]
    if cs["status"] != "timed":
        first = json.loads((Path(cs["run_dirs"][0]) / "run.json").read_text())
        assert cs["status"] == "over_budget" and first["timeout"] >= sp["allowance_seconds"], cs
    assert p.returncode == d["exit_code"] == 0, p.stderr[-2000:]


def test_a_timed_run_stopped_at_its_allowance_keeps_the_iterations_it_printed(manifest, tmp_path):
    """The stand-in prints its iterations, then lingers 300 s: stopped at the allowance, its
    printed iterations are its measurement, every round."""
    p, d, by = _budget_sweep(manifest, tmp_path, "--weight-preprocess:300:after")
    wp = by["weight-preprocess"]["speed"]
    assert wp["status"] == "timed" and len(wp["iterations_ms"]) == 2 and len(wp["run_dirs"]) == 2
    assert all(len(r) == ITERS for r in wp["iterations_ms"])
    for r in wp["run_dirs"]:
        rec = json.loads((Path(r) / "run.json").read_text())
        assert rec["status"] == "timeout" and rec["seconds"] < 300
        assert iteration_ms((Path(r) / "stderr.txt").read_text()) == tuple(wp["iterations_ms"][wp["run_dirs"].index(r)])
    assert p.returncode == d["exit_code"] == 0, p.stderr[-2000:]


def test_no_budget_waits_for_every_timed_run(manifest, tmp_path):
    p, d, by = _budget_sweep(manifest, tmp_path, "--weight-preprocess:2", "--speed-budget", "none")
    wp = by["weight-preprocess"]["speed"]
    assert d["speed"]["budget_seconds"] is None and d["speed"]["allowance_seconds"] is None
    assert wp["status"] == "timed" and all(len(r) == ITERS for r in wp["iterations_ms"])
    assert all(json.loads((Path(r) / "run.json").read_text())["status"] == "ok" for r in wp["run_dirs"])


@pytest.mark.parametrize("bad", ["0", "-1", "x", "nan", "101", "inf"])
def test_speed_budget_out_of_range_is_a_usage_error(manifest, tmp_path, bad):
    case = manifest["cnn"]
    p = lar_prec("sweep", case.model, *inputs(case), "--options", "const-shape", "--speed-budget", bad,
                 "--out", tmp_path / "s")
    assert p.returncode == 2, p.stderr
    assert "Traceback" not in p.stderr and "--speed-budget" in p.stderr and len(p.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "s").exists()


def test_timed_runs_execute_in_the_calling_thread(cnn_sweep):
    # with the default CPU device a wait includes waking the worker thread (the scheduler's latency
    # on a busy machine), which --record-comp-seq never pays: every timed run is inplace alike
    _, d, _ = cnn_sweep
    dirs = d["default"]["speed"]["run_dirs"] + [r for o in d["options"] if o.get("speed") for r in o["speed"]["run_dirs"]]
    assert len(dirs) >= 6
    for r in dirs:
        assert "--cpu-default" in json.loads((Path(r) / "run.json").read_text())["argv"], r
    # where the user's flags pick the device or its threads, theirs are kept as they are
    assert inplace_flags(("--multithread", "2")) == inplace_flags(("--cpu_default",)) == ()
    assert inplace_flags(("--verbose",)) == ("--cpu-default",)


def test_rounds_after_the_first_are_shuffled_alike_every_time():
    rows = [("default", ())] + [(f"o{i}", ()) for i in range(8)]
    assert round_order(rows, 0) == rows  # the default first: its time sets the allowances
    later = [round_order(rows, k) for k in (1, 2, 3)]
    assert all(sorted(r) == sorted(rows) for r in later) and any(r != rows for r in later)
    assert later == [round_order(rows, k) for k in (1, 2, 3)]  # seeded: the same sweep, the same orders
