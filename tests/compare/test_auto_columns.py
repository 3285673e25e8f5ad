"""The auto threshold from columns (issue 40 #6) against the same rules record by record.

``VarColumns`` reads each var's fields once (laid flat by the C kernel); ``choose_threshold(diffs,
cols)``, ``judge_all`` and ``grow_columns`` (C) decide from them what ``choose_threshold(diffs)``,
``judge`` and the edge rule record by record (``growth._grow_records``) decide. On real runs of the cases,
clean and with faults injected (carried downstream, or born and not carried), with and without
a side that profiled, every record and every number must be the same, not close.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from compare_helpers import computed_float_vars, inject_fault
from lar_prec.compare import folders as folders_mod
from lar_prec.compare import growth
from lar_prec.compare.engine.scan import KERNEL
from lar_prec.compare.folders import compare_folders
from lar_prec.compare.recheck import rechecker
from lar_prec.compare.records import with_changes
from lar_prec.compare.threshold import VarColumns, choose_threshold, judge, judge_all
from lar_prec.dumps.folder import DumpFolder

CASES = ("attention", "resnet", "mlp", "fp16", "quantized", "gru_topk")


def _pairs(lar_dump, tmp_path: Path, case: str):
    naive, default = Path(lar_dump(case, "naive")), Path(lar_dump(case, "default"))
    yield naive, default
    ids = computed_float_vars(DumpFolder(default))
    for k, (rel, only) in enumerate(((1e-4, False), (3e-6, True))):
        if ids:
            bad = tmp_path / f"fault{k}"
            inject_fault(default, bad, ids[(k + 1) * len(ids) // 3], rel, only=only)
            yield naive, bad


def _growth_key(g):
    return None if g is None else (g.made, list(g.made), g.explained, list(g.explained), g.scale, g.gain_reducing,
                                   g.gain_elementwise, g.explained_over_band, g.reason, list(g.rechecked))


@pytest.mark.megengine
@pytest.mark.skipif(not hasattr(KERNEL, "auto_columns"), reason="the C kernel is not built (or LAR_PREC_NO_KERNEL=1)")
@pytest.mark.parametrize("case", CASES)
def test_columns_decide_as_the_records_do(lar_dump, tmp_path, case):
    for a, b in _pairs(lar_dump, tmp_path, case):
        # the records as the comparison measured them, before any auto rule
        diffs = list(compare_folders(a, b, threshold=1e-3).diffs)
        cols = VarColumns.of(diffs)
        assert cols is not None
        thr = choose_threshold(diffs)
        by_cols = choose_threshold(diffs, cols)
        assert (by_cols.value, by_cols.per_dtype, by_cols.reason) == (thr.value, thr.per_dtype, thr.reason)
        status, thresh, n_over = judge_all(cols, thr)
        judged = [with_changes(d, **judge(d, thr)) for d in diffs]
        assert [(d.status, d.threshold, d.n_over) for d in judged] == list(zip(status, thresh, n_over))
        fa, fb = DumpFolder(a), DumpFolder(b)
        recheck = rechecker(fa, fb, {d.id: d.id for d in diffs})
        for profiled in (False, True):
            got, g1 = growth.grow(judged, thr, profiled=profiled, recheck=recheck)
            want, g2 = growth._grow_records(judged, thr, profiled, recheck, False)
            assert [d.__dict__ for d in got] == [d.__dict__ for d in want]
            assert _growth_key(g1) == _growth_key(g2)


@pytest.mark.megengine
@pytest.mark.parametrize("case", CASES)
def test_a_comparison_by_columns_is_the_comparison_record_by_record(lar_dump, tmp_path, monkeypatch, case):
    # compare_folders' auto path reads each record once (columns: tens of thousands of vars) or
    # goes record by record (a few thousand vars, or where a var id repeats): the same comparison
    for a, b in _pairs(lar_dump, tmp_path, case):
        for threshold in ("auto", "band"):
            with monkeypatch.context() as m:
                m.setattr(folders_mod, "RECORDS_MAX", 0)  # columns, as for tens of thousands of vars
                fast = compare_folders(a, b, threshold=threshold)
            slow = compare_folders(a, b, threshold=threshold)
            assert [d.__dict__ for d in fast.diffs] == [d.__dict__ for d in slow.diffs]
            assert fast.threshold.to_json() == slow.threshold.to_json() and fast.threshold.made == slow.threshold.made
            assert (fast.notes, fast.sources) == (slow.notes, slow.sources)


@pytest.mark.megengine
def test_the_batch_readers_rows_are_the_records_columns(lar_dump, tmp_path):
    # with an auto threshold the batch reader keeps each var's columns as it makes its record:
    # they are what reading the record gives
    from lar_prec.compare.engine import batch
    from lar_prec.compare.threshold import COLUMN_FIELDS

    if not batch.available():
        pytest.skip("the C kernel is not built (or LAR_PREC_NO_KERNEL=1)")
    for a, b in _pairs(lar_dump, tmp_path, "attention"):
        rows: dict = {}
        measured = batch.prefetch(DumpFolder(a), DumpFolder(b), 1 << 15, None, 2, rows=rows)
        assert measured and set(rows) == set(measured)
        for v, d in measured.items():
            assert rows[v] == tuple(getattr(d, k) for k in COLUMN_FIELDS)


def test_repeated_ids_are_decided_record_by_record():
    # the columns need one var per id: none are made otherwise (the records' path decides)
    from lar_prec.compare.records import new_diff

    d = new_diff(dict(id=1, name="x", opr="x", opr_type="Elemwise", dtype="Float32", shape=(1,), inputs=(),
                      status="ok", max_err=0.0, size=1))
    assert VarColumns.of([d, d]) is None and VarColumns.of([]) is None
    assert VarColumns.of([d]) is not None


def _best_of_every_gap(name, errs, roots_at):
    # the choice as first written: every gap between consecutive errors, the margin to every
    # error (the reference the bisected choice must give exactly)
    import math

    from lar_prec.compare.threshold import MAX_CANDIDATES, band

    lo, hi = band(name)
    logs = [math.log10(e) for e in errs]
    gaps = [(y - x, 10 ** ((x + y) / 2)) for x, y in zip(logs, logs[1:])]
    cands = {lo, hi} | {mid for _w, mid in sorted((g for g in gaps if lo < g[1] < hi), reverse=True)[:MAX_CANDIDATES]}
    keys = [((roots_at(t), -min((abs(x - math.log10(t)) for x in logs), default=math.inf), -t), t) for t in cands]
    return min(keys)[1]


@pytest.mark.parametrize("name", ["Float32", "Float16"])
def test_the_threshold_tried_only_near_the_band_is_the_one_every_gap_gives(name):
    # thousands of var errors, some packed around the band's ends and inside it: the gaps the
    # choice skips (far from the band) never held a candidate
    import random

    from lar_prec.compare.threshold import _best_of, band

    lo, hi = band(name)
    rng = random.Random(40)
    for trial in range(30):
        errs = [10 ** rng.uniform(-9, 0) for _ in range(rng.choice((0, 1, 2, 50, 3000)))]
        errs += [lo * rng.uniform(0.999, 1.001) for _ in range(rng.randrange(4))]
        errs += [hi * rng.uniform(0.999, 1.001) for _ in range(rng.randrange(4))]
        errs += [rng.uniform(lo, hi) for _ in range(rng.randrange(200))]
        errs = sorted(set(errs))
        roots_at = lambda t, errs=errs: sum(1 for e in errs if e > t) % 7  # noqa: E731  (many ties)
        t, _part = _best_of(name, errs, lambda: _RootsAt(roots_at))
        assert t == min(max(float("%.3g" % _best_of_every_gap(name, errs, roots_at)), lo), hi)


class _RootsAt:
    """What _best_of asks of a root counter: ``roots(t)``."""

    def __init__(self, roots_at):
        self.roots = roots_at


@pytest.mark.megengine
@pytest.mark.parametrize("case", ["resnet", "vit", "gru_topk"])
def test_the_auto_rule_imports_no_numpy(lar_dump, tmp_path, case):
    # record by record and by columns (C), the auto rule itself needs no numpy (~0.1 s to import):
    # a comparison the batch reader measured whole imports it only when the edge rule must
    # recompute a var (a fault far above what its inputs explain needs no recomputing)
    import subprocess
    import sys

    from lar_prec.compare.engine.scan import KERNEL

    a = lar_dump(case, "naive")
    ids = computed_float_vars(DumpFolder(a))
    bad = ids[len(ids) // 2]
    inject_fault(a, tmp_path / "bad", bad, 1e-2, only=True)
    for records_max in (10**9, 0) if getattr(KERNEL, "auto_columns", None) else (10**9,):
        code = ("import sys\nfrom lar_prec.compare import folders\n"
                f"folders.RECORDS_MAX = {records_max}\n"
                "c = folders.compare_folders(sys.argv[1], sys.argv[2])\n"
                "print(c.threshold.mode, len(c), 'numpy' in sys.modules, sorted(c.threshold.made))\n")
        out = subprocess.run([sys.executable, "-c", code, str(a), str(tmp_path / "bad")], capture_output=True,
                             text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        mode, n, imported, made = out.stdout.split(" ", 3)
        assert mode == "auto" and int(n) > 0
        assert made.strip() == f"[{bad}]" and imported == "False", (records_max, out.stdout)
