"""The auto rule's C passes (issue 40 #6) on the corners a run rarely shows.

The C kernel's band judging (judge_vars) and record writing (apply_judged) must be the Python
passes they replace (threshold.judge_columns, the loop of folders._apply_judged): unmeasured vars,
NaN/Inf, exact dtypes, another dtype, a NaN scale, counts from a kept band, missing and
shape-mismatched vars. On real runs the whole column path is held to the record path
(test_auto_columns.py).
"""
from __future__ import annotations

import pytest

from lar_prec.compare import folders as folders_mod
from lar_prec.compare.engine.scan import KERNEL
from lar_prec.compare.records import new_diff, with_changes
from lar_prec.compare.threshold import Threshold, VarColumns, choose_threshold, judge, judge_all, judge_columns

needs_columns = pytest.mark.skipif(not hasattr(KERNEL, "grow_columns"),
                                   reason="the C kernel is not built (or LAR_PREC_NO_KERNEL=1)")


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
        want = judge_columns(cols, thr)
        got = judge_all(cols, thr)
        assert [list(x) for x in got] == [list(x) for x in want]
        judged = [with_changes(d, **judge(d, thr)) for d in diffs]
        assert [(d.status, d.threshold, d.n_over) for d in judged] == list(zip(*want))


@needs_columns
@pytest.mark.parametrize("nothing_inside", [(0, b""), (2, None)])
def test_the_kernels_record_writing_is_the_python_loop(monkeypatch, nothing_inside):
    # both write status, threshold and n_over into each judged record, count n_over from a kept
    # band where they may (here: none kept, a band of two, one outside its window) and leave the
    # rest to the recount, and find the quantized vars one step apart. A band with no error
    # inside its window is written by the batch reader as (count above, None)
    diffs = _corner_records()
    q = new_diff(dict(id=99, name="q", opr="q", opr_type="TypeCvt", shape=(4,), inputs=(), size=4,
                      dtype="QuantizedS8", status="ok", max_err=1.0, max_abs_err=1, n_diff=1))
    diffs.append(q)
    diffs[1].__dict__["band"] = (1, bytes(memoryview(__import__("array").array("f", [5e-6, 9e-6]))))
    diffs[2].__dict__["band"] = nothing_inside
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
    assert steps == [len(diffs) - 1] and records[1][2] == 3 and records[2][2] == nothing_inside[0]
    assert 1 not in todo and 2 not in todo and todo
