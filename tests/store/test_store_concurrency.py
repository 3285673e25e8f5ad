"""Several lar-prec writing one store at once, as a nightly job that starts its analyses in
parallel: 8 real processes (``store add`` of one analysis folder, ``compare --store`` of two
pairs of real dumps) on a new store, on a store of the first schema (migrated on open) and on
the tests' real PostgreSQL. Every analysis is in the store exactly once, with its operators
once, and every writer ends 0 or 1 (its verdict), never 2 for the store."""
from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter

import pytest

from conftest import ROOT
from store_fixtures import postgres, store_url  # noqa: F401 (fixtures)
from lar_prec.store.db import migrate_to, open_store

WRITERS = 8


@pytest.fixture(scope="module")
def analysis(manifest, tmp_path_factory):
    """A real naive-vs-default analysis folder of cnn."""
    c = manifest["cnn"]
    out = tmp_path_factory.mktemp("analysis") / "a"
    p = subprocess.run([sys.executable, "-m", "lar_prec", "naive-vs-default", str(c.model), "--input",
                        ";".join(c.input_specs()), "--no-local", "--out", str(out), "-q"],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert p.returncode in (0, 1), p.stderr
    return out


def _writers(store: str, analysis, ref, clean):
    """8 writers started at once: 4 adds of the analysis folder, 2 compares ref->clean, 2 clean->ref."""
    cmds = [["store", "add", str(analysis)]] * 4 + [["compare", str(ref), str(clean)]] * 2 + \
           [["compare", str(clean), str(ref)]] * 2
    assert len(cmds) == WRITERS
    procs = [subprocess.Popen([sys.executable, "-m", "lar_prec", *c, "--store", store], cwd=ROOT, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ})
             for c in cmds]
    done = []
    for c, p in zip(cmds, procs):
        out, err = p.communicate(timeout=300)
        done.append((c, p.returncode, out, err))
    return done


@pytest.mark.parametrize("schema", ["new", "first"])
def test_eight_writers_at_once_store_each_analysis_exactly_once(store_url, schema, analysis, lar_dump):
    ref, clean = lar_dump("cnn", "naive"), lar_dump("cnn", "default")
    if schema == "first":  # a store an older lar-prec made: the writers migrate it as they open it
        migrate_to(store_url, "0001")
    done = _writers(store_url, analysis, ref, clean)
    for cmd, code, _, err in done:  # each writer ends with its command's own code, none with the store's 2
        assert code in ((0,) if cmd[0] == "store" else (0, 1)), (cmd, code, err)
        assert "Error" not in err and "Traceback" not in err, (cmd, err)
    added = [out for cmd, _, out, _ in done if cmd[0] == "store"]
    assert sum(o.endswith(": added\n") for o in added) == 1, added  # one add wrote it, the others found it
    with open_store(store_url) as st:
        runs = st.runs()
        ops = {r["uid"]: st.ops(r["id"]) for r in runs}
    # three analyses: the folder, and the two compares (each pair's second compare is the same analysis)
    assert len(runs) == 3 and len({r["uid"] for r in runs}) == 3, [(r["command"], r["uid"]) for r in runs]
    assert Counter(r["command"] for r in runs) == {"naive-vs-default": 1, "compare": 2}
    for r in runs:  # each run's operators once: no second writer added rows to a run it did not insert
        keys = Counter(o.op_key for o in ops[r["uid"]] if o.part == "")
        assert keys and max(keys.values()) == 1, r["command"]
