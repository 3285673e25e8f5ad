"""Speed in the store, on SQLite and on the tests' PostgreSQL: real timings of the mlp case
(``measure_speed``, 2 rounds) through a user's load_and_run (tests/wrapped_lar.py) at one path,
stored with a real analysis; a new build at that path whose iterations take 200 ms longer
(``WRAPPED_LAR_SLOW``) is a speed regression for ``check`` (exit 1, JUnit failure) once the
history holds --min-history results, "not judged: N of M results needed" before; history timed
with another load_and_run is skipped and said so. No assertion on which is faster on this CPU
beyond the 200 ms the slow build adds to every iteration."""
from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from xml.etree import ElementTree

import pytest

from conftest import ROOT
from proc_helpers import user_lar
from store_fixtures import postgres, store_url  # noqa: F401 (fixtures)
from lar_prec.store.db import open_store
from lar_prec.store.summary import Summary, speed_rows, summarize
from lar_prec.workflows.naive_vs_default.naive_vs_default import naive_vs_default
from lar_prec.workflows.sweep.speed import measure_speed
from lar_prec.zoo.timing import speed_json


@pytest.fixture(scope="module")
def nights(manifest, tmp_path_factory):
    """Summaries of the mlp case: three nights of one build at one path, then a slower build at
    that path, then a night timed by another load_and_run (another path): real runs, made once."""
    c = manifest["mlp"]
    d = tmp_path_factory.mktemp("speed")
    lar = user_lar(d / "load_and_run")
    base = summarize(naive_vs_default(c.model, c.input_specs(), out=d / "nvd", lar=str(lar), html=False).report)

    def night(k, lar_path):
        sp = measure_speed(c.model, ";".join(c.input_specs()), d / f"t{k}", str(lar_path), 120.0, (), (), 2)
        run = dataclasses.replace(base.run, uid=f"night-{k}", lar_path=str(lar_path))
        return Summary(run, base.ops, speed_rows(speed_json(sp), {}, run))

    out = [night(k, lar) for k in range(3)]
    user_lar(lar, WRAPPED_LAR_SLOW="200")  # the same path, a new build
    out.append(night(3, lar))
    out.append(night(4, user_lar(d / "other")))
    return out


def _check(url, *args):
    return subprocess.run([sys.executable, "-m", "lar_prec", "check", "--store", url, *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, env=os.environ)


def test_a_slower_build_is_a_speed_regression(store_url, nights, tmp_path):
    with open_store(store_url) as st:
        for s in nights[:4]:
            st.write(s)
        [stored] = st.speeds(st.runs(uid="night-0")[0]["id"])
    t = nights[0].speeds[0]
    assert stored == t and t.part == "" and t.status == "timed" and t.rounds == 2 and len(t.round_ms) == 2
    assert t.iters == 10 and t.threads == 1 and t.lar.endswith("load_and_run") and t.spread_lo <= t.median_ms <= t.spread_hi
    p = _check(store_url, "--min-history", 3, "--junit", tmp_path / "c.xml")
    assert p.returncode == 1, p.stderr
    assert "speed regressed under the default run:" in p.stdout and "slower than its past" in p.stdout
    assert nights[3].speeds[0].median_ms > 200  # each iteration 200 ms longer: on any CPU
    [case] = [c for c in ElementTree.parse(tmp_path / "c.xml").iter("testcase") if c.get("name") == "speed of the default run"]
    assert case.find("failure").get("message").startswith("regressed: ")
    p = _check(store_url, "--min-history", 4)  # three results on this machine: too few
    assert p.returncode == 0 and "speed not judged: 3 of 4 results needed" in p.stdout


def test_history_of_another_load_and_run_is_skipped(store_url, nights):
    with open_store(store_url) as st:
        for s in nights[:3] + nights[4:]:
            st.write(s)
    p = _check(store_url, "--min-history", 1, "--json", "-")
    assert p.returncode == 0, p.stderr
    assert "3 past result(s) timed on another machine (CPU model, threads or load_and_run) skipped" in p.stdout
    assert "speed not judged: 0 of 1 results needed" in p.stdout
