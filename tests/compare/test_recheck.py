"""The dump-only rule's recheck in a forked helper (issue 40 #6), and the auto rule's C passes.

An auto comparison of many vars forks a helper that imports numpy while this process judges,
then recomputes the vars the edge rule names: the comparison must be the one made without it,
a helper that died must change nothing, and the process that judged never imports numpy. The
C kernel's band judging and record writing must be the Python passes they replace, on real
runs and on the corners a run rarely shows.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from compare_helpers import computed_float_vars, inject_fault
from lar_prec.compare import folders as folders_mod
from lar_prec.compare.engine.scan import KERNEL
from lar_prec.compare.explain import RECOMPUTED
from lar_prec.compare.folders import compare_folders
from lar_prec.compare.recheck import Helper, recheck_one, rechecker
from lar_prec.compare.records import new_diff, with_changes
from lar_prec.compare.threshold import Threshold, VarColumns, choose_threshold, judge, judge_all
from lar_prec.dumps.folder import DumpFolder

needs_columns = pytest.mark.skipif(not hasattr(KERNEL, "grow_columns"),
                                   reason="the C kernel is not built (or LAR_PREC_NO_KERNEL=1)")


def _faulty(lar_dump, tmp_path: Path, case: str, rel: float = 1e-4):
    # a fault in the middle convolution or matrix product: a var the recheck can recompute
    naive, default = Path(lar_dump(case, "naive")), Path(lar_dump(case, "default"))
    folder = DumpFolder(default)
    ids = [v for v in computed_float_vars(folder) if folder[v].names()[2] in RECOMPUTED]
    bad = tmp_path / f"{case}-fault"
    inject_fault(default, bad, ids[len(ids) // 2], rel)
    return naive, bad


def _recomputable(a: Path, b: Path):
    diffs = list(compare_folders(a, b, threshold=1e-3).diffs)
    fa, fb = DumpFolder(a), DumpFolder(b)
    return fa, fb, [d for d in diffs if recheck_one(fa, fb, (d.id, d.id, d.opr_type, d.dtype)) is not None]


@pytest.mark.megengine
@pytest.mark.parametrize("case", ["attention", "resnet"])
def test_the_helper_recomputes_what_this_process_does(lar_dump, tmp_path, case):
    # every var the dumps let be recomputed, by a forked helper and here: the same numbers
    fa, fb, some = _recomputable(*_faulty(lar_dump, tmp_path, case))
    assert some, "the case has recomputable operators"
    here = rechecker(fa, fb, {d.id: d.id for d in some})(some)
    helper = Helper.start(fa.path, fb.path)
    assert helper is not None
    try:
        there = rechecker(fa, fb, {d.id: d.id for d in some}, helper)(some)
    finally:
        helper.close()
    assert there == here and all(r is not None for r in there)


@pytest.mark.megengine
def test_a_helper_that_died_changes_nothing(lar_dump, tmp_path):
    # killed before it was asked: the vars are recomputed here, the same
    fa, fb, some = _recomputable(*_faulty(lar_dump, tmp_path, "attention"))
    here = rechecker(fa, fb, {d.id: d.id for d in some})(some)
    helper = Helper.start(fa.path, fb.path)
    assert helper is not None
    os.kill(helper.pid, signal.SIGKILL)
    try:
        assert helper.run([(some[0].id, some[0].id, some[0].opr_type, some[0].dtype)]) is None
        assert rechecker(fa, fb, {d.id: d.id for d in some}, helper)(some) == here
    finally:
        helper.close()
    # and one never asked is ended (close() reaps it: no zombie left)
    helper = Helper.start(fa.path, fb.path)
    assert helper is not None
    helper.close()
    with pytest.raises(ChildProcessError):
        os.waitpid(helper.pid, os.WNOHANG)


_SCRIPT = """
import json, sys
from lar_prec.compare import folders, recheck
from lar_prec.compare.folders import compare_folders
if sys.argv[4] != "default":
    folders.RECORDS_MAX = int(sys.argv[4])
asked = []
run = recheck.Helper.run
def counted(self, reqs):
    got = run(self, reqs)
    asked.append((len(reqs), None if got is None else sum(r is not None for r in got)))
    return got
recheck.Helper.run = counted
c = compare_folders(sys.argv[1], sys.argv[2], jobs=int(sys.argv[3]))
print(json.dumps({"numpy": "numpy" in sys.modules, "asked": asked, "made": sorted(c.threshold.made),
                  "threshold": c.threshold.to_json(), "vars": [[d.id, d.status, d.threshold, d.n_over] for d in c.diffs]}))
"""


@pytest.mark.megengine
@needs_columns
@pytest.mark.parametrize("case, records_max", [("attention", "0"), ("vit", "default")])
def test_a_comparison_with_the_helper_is_the_comparison_without(lar_dump, tmp_path, case, records_max):
    # a process that has not imported numpy forks the helper: it is asked, recomputes vars, and
    # this process still has no numpy; with one job (no helper) the same comparison, numpy here.
    # (attention has fewer vars than the record path takes: made to go by columns)
    a, b = _faulty(lar_dump, tmp_path, case, 3e-6)
    out = {}
    for jobs in (2, 1):
        p = subprocess.run([sys.executable, "-c", _SCRIPT, str(a), str(b), str(jobs), records_max], capture_output=True,
                           text=True, timeout=300)
        assert p.returncode == 0, p.stderr
        out[jobs] = json.loads(p.stdout)
    assert out[2]["asked"] and all(n > 0 and done is not None and done > 0 for n, done in out[2]["asked"])
    assert out[2]["numpy"] is False and out[1]["asked"] == [] and out[1]["numpy"] is True
    assert {k: v for k, v in out[2].items() if k not in ("numpy", "asked")} == \
        {k: v for k, v in out[1].items() if k not in ("numpy", "asked")}


def _corner_records():
    # what a run rarely shows: unmeasured, NaN/Inf, exact dtypes, another dtype, a NaN scale,
    # a threshold counted at before, missing and shape-mismatched vars
    base = dict(name="x", opr="x", opr_type="Elemwise", shape=(4,), inputs=(), size=4)
    rows = [
        dict(dtype="Float32", status="ok", max_err=1e-7, scale=2.0, n_over=0, threshold=None),
        dict(dtype="Float32", status="ok", max_err=3e-3, scale=0.5, n_over=3, threshold=1e-3),
        dict(dtype="Float32", status="ok", max_err=3e-3, scale=0.5, n_over=3, threshold=None),
        dict(dtype="Float32", status="ok", max_err=None, scale=None),
        dict(dtype="Float32", status="ok", max_err=1.0, scale=float("nan"), n_nonfinite=2),
        dict(dtype="Float16", status="ok", max_err=5e-3, scale=1e-9, n_over=None),
        dict(dtype="Int32", status="ok", max_err=2.0, n_diff=3),
        dict(dtype="Int8", status="ok", max_err=0.0, n_diff=None),
        dict(dtype="Uint8", status="ok", max_err=1.0, n_diff=1, n_nonfinite=1),
        dict(dtype="Float32", status="dtype_mismatch", max_err=2e-3, scale=0.25),
        dict(dtype="Float32", status="dtype_mismatch", max_err=None),
        dict(dtype="Float32", status="missing", max_err=None),
        dict(dtype="Float32", status="shape_mismatch", max_err=None),
        dict(dtype="SomethingNew", status="ok", max_err=1e-2, scale=1.0),
    ]
    return [new_diff({**base, "id": i + 1, **r}) for i, r in enumerate(rows)]


@needs_columns
def test_the_kernels_band_judging_is_judge_all():
    diffs = _corner_records()
    cols = VarColumns.of(diffs)
    assert cols is not None
    for thr in (choose_threshold(diffs), Threshold.fixed(1e-3), Threshold.fixed(0.0)):
        want = judge_all(cols, thr)
        got = folders_mod._judge_all(cols, thr)
        assert [list(x) for x in got] == [list(x) for x in want]
        judged = [with_changes(d, **judge(d, thr)) for d in diffs]
        assert [(d.status, d.threshold, d.n_over) for d in judged] == list(zip(*want))


@needs_columns
def test_the_kernels_record_writing_is_the_python_loop(monkeypatch):
    # both write status, threshold and n_over into each judged record, count n_over from a kept
    # band where they may (here: none kept, a band of two, one outside its window) and leave the
    # rest to the recount, and find the quantized vars one step apart
    diffs = _corner_records()
    q = new_diff(dict(id=99, name="q", opr="q", opr_type="TypeCvt", shape=(4,), inputs=(), size=4,
                      dtype="QuantizedS8", status="ok", max_err=1.0, max_abs_err=1, n_diff=1))
    diffs.append(q)
    diffs[1].__dict__["band"] = (1, bytes(memoryview(__import__("array").array("f", [5e-6, 9e-6]))))
    diffs[2].__dict__["band"] = (0, b"")
    thr = choose_threshold(diffs)
    out = {}
    for fast in (True, False):
        copies = [with_changes(d) for d in diffs]
        cols = VarColumns.of(copies)
        status, thresh, n_over = judge_all(cols, thr)
        thresh[1] = 4e-6  # inside its window (the band's x its scale 0.5): counted from what was kept
        todo: list = []
        with monkeypatch.context() as m:
            if not fast:
                m.setattr(folders_mod, "KERNEL", None)
            steps = folders_mod._apply_judged(copies, cols, status, thresh, n_over, todo)
        out[fast] = ([(d.status, d.threshold, d.n_over) for d in copies], steps, todo)
    assert out[True] == out[False]
    records, steps, todo = out[True]
    assert steps == [len(diffs) - 1] and records[1][2] == 3 and records[2][2] == 0 and 1 not in todo and todo
