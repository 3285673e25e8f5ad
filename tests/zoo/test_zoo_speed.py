"""The zoo times each task (tests/wrapped_lar.py as the nightly build at one path, real runs of
the mlp case): its speed stored beside its operators and judged against the store's
history as check does; the same path's next build, slower by 200 ms per iteration
(``WRAPPED_LAR_SLOW``), is a speed regression (exit 1, REGRESSED, a failing JUnit
case). ``--speed-runs`` out of range is exit 2 before anything runs. The machine's timing lock:
a timer waits for the tasks holding it and tasks that start meanwhile wait for the timer."""
from __future__ import annotations

import json
import sqlite3
import threading
import time
from xml.etree import ElementTree

import pytest

from proc_helpers import user_lar
from zoo_helpers import write_manifest, zoo_cli
from lar_prec.zoo.timing import HostLock

RUN = """
[[run]]
command = "naive-vs-default"
[[config]]
name = "default"
[[build]]
name = "nightly"
path = "{lar}"
"""


def test_a_slower_build_is_a_speed_regression(manifest, tmp_path):
    (tmp_path / "bin").mkdir()
    lar = user_lar(tmp_path / "bin" / "load_and_run")
    m = write_manifest(tmp_path / "zoo.toml", [manifest["mlp"]], RUN.format(lar=lar),
                       zoo="local = false\nmin_history = 1\n")
    args = [m, "--store", tmp_path / "r.db", "--workers", "1", "--speed-runs", "2"]
    first = zoo_cli([*args, "--out", tmp_path / "z1", "--json", tmp_path / "z1.json"])
    assert first.returncode == 0, first.stdout + first.stderr
    data = json.loads((tmp_path / "z1.json").read_text())
    for e in data["tasks"]:
        [part] = e["speed"]["parts"]
        assert part["option"] is None and part["verdict"] == "not_judged" and part["why"].startswith(
            "not judged: 0 of 1 results needed")
        assert e["timing"]["rounds"] == 2 and e["timing"]["threads"] == 1
    con = sqlite3.connect(str(tmp_path / "r.db"))
    rows = con.execute("SELECT part, status, rounds, round_ms, lar FROM speeds").fetchall()
    con.close()
    assert len(rows) == 1 and all(r[:3] == ("", "timed", 2) and len(json.loads(r[3])) == 2 and r[4] == str(lar)
                                  for r in rows)

    user_lar(lar, WRAPPED_LAR_SLOW="200")  # the nightly build at the same path, slower
    second = zoo_cli([*args, "--out", tmp_path / "z2", "--json", tmp_path / "z2.json", "--again",
                      "--junit", tmp_path / "z2.xml"])
    assert second.returncode == 1, second.stdout + second.stderr
    data = json.loads((tmp_path / "z2.json").read_text())
    assert data["counts"]["speed_regressed"] == 1 and all(e["speed_regressed"] == ["default"] for e in data["tasks"])
    lines = [ln for ln in second.stdout.splitlines() if "speed regressed:" in ln]
    assert len(lines) == 1 and all(ln.startswith("REGRESSED") for ln in lines)
    failures = [c.find("failure") for c in ElementTree.parse(tmp_path / "z2.xml").iter("testcase")]
    assert len(failures) == 1 and all(f is not None and f.get("message").startswith("speed regressed: ")
                                      for f in failures)


@pytest.mark.parametrize("rounds", ["1", "51", "x"])
def test_speed_runs_out_of_range_is_exit_2(manifest, tmp_path, rounds):
    m = write_manifest(tmp_path / "zoo.toml", [manifest["mlp"]], RUN.format(lar="bundled").replace(
        'path = "bundled"\n', ""))
    p = zoo_cli([m, "--store", tmp_path / "r.db", "--out", tmp_path / "z", "--speed-runs", rounds], timeout=60)
    assert p.returncode == 2 and not (tmp_path / "z").exists() and not (tmp_path / "r.db").exists()
    assert p.stderr.strip().splitlines()[-1].startswith("Error: ") and "speed" in p.stderr


def test_a_timer_waits_for_the_tasks_and_new_tasks_wait_for_it(tmp_path):
    lock, events = HostLock(str(tmp_path)), []
    analysis_done, timer_waits = threading.Event(), threading.Event()

    def task(name, done):
        with lock.held(exclusive=False):
            events.append(f"{name} runs")
            done.wait(10)
        events.append(f"{name} done")

    def timer():
        timer_waits.set()
        with lock.held(exclusive=True):
            events.append("timer runs")
            time.sleep(0.3)
        events.append("timer done")

    first = threading.Thread(target=task, args=("first", analysis_done))
    first.start()
    while "first runs" not in events:
        time.sleep(0.01)
    t = threading.Thread(target=timer)
    t.start()
    timer_waits.wait(10)
    time.sleep(0.3)  # the timer waits for the first task; a task starting now waits for the timer
    late_done = threading.Event()
    late = threading.Thread(target=task, args=("late", late_done))
    late.start()
    time.sleep(0.3)
    assert events == ["first runs"]
    analysis_done.set()
    late_done.set()
    for th in (first, t, late):
        th.join(10)
    assert events == ["first runs", "first done", "timer runs", "timer done", "late runs", "late done"]
