"""report.py on a real comparison: the attention case run with naive and default kernels, one
operator's output corrupted in a copy of the default dump (a fault) and another given a NaN
(a NaN origin), compared and rooted by compare.py/vartree.py. The errors are recomputed here
from the dump files as a cross-check, so the report holds real names, operators, shapes,
inputs and float32 noise next to the faults.

The reports are built in report_fixtures.py; the HTML page (static and in headless Chromium)
is tested in test_report_html.py.
"""
from __future__ import annotations

import io
import json
import math
import os
import re
import subprocess
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from browser_helpers import CHROMIUM, Browser  # noqa: F401
from lar_prec.errors import UsageError
from lar_prec.dumps.folder import DumpFolder
from lar_prec.report.records import SCHEMA, ReportRun, ReportVar, fmt_err, run_from_result
from lar_prec.report.model import DiffVars, Report, dumps, exit_code, from_tree, read_json, write_json
from lar_prec.report.terminal import render_terminal
from lar_prec.run.record import RunResult
from lar_prec.diagnosis.tree import VarTree
from report_fixtures import (  # noqa: F401  (fixtures)
    THRESHOLD,
    _metrics,
    clean_report,
    dumps_ab,
    faulty_report,
    runs,
    shake_report,
)


# ============================================================================ the data is what we think


@pytest.mark.megengine
def test_real_comparison_has_the_injected_roots(faulty_report, clean_report, dumps_ab):
    naive, _, faulty, fault, nan_var = dumps_ab
    assert [r.id for r in faulty_report.roots] == [fault, nan_var]
    assert faulty_report.var(nan_var).status == "nonfinite"
    assert all(v.status == "ok" for v in clean_report.vars) and clean_report.roots == ()
    # real float32 noise is there (not all zero), below the threshold
    assert 0 < max(v.max_err for v in clean_report.vars) < THRESHOLD
    # the report's numbers are MegEngine's metric, recomputed here from the dump files
    fa, fb = DumpFolder(naive), DumpFolder(faulty)
    assert [v.id for v in faulty_report.vars] == list(fa.ids)
    for v in faulty_report.vars:
        status, err, abs_err, _ = _metrics(fa[v.id].array(), fb[v.id].array())
        if status == "nonfinite":
            assert v.status == "nonfinite"
            continue
        assert v.max_err == pytest.approx(err, rel=1e-6, abs=1e-12), v.name
        assert v.max_abs_err == pytest.approx(abs_err, rel=1e-6, abs=1e-12), v.name
        assert v.inputs == fa.inputs_of(v.id) and v.name == fa.var_info(v.id).name
    # each root's path starts at the model input and ends at the root
    for r in faulty_report.roots:
        assert faulty_report.var(r.path[0]).opr_type == "Host2DeviceCopy" and r.path[-1] == r.id


def test_run_from_result_keeps_the_contract_fields():
    res = RunResult(label="default", config="default", dir=Path("/runs/default"), dump_dir=Path("/runs/default/dump"),
                    text_dump=None, argv=("load_and_run", "m.mge", "--bin-io-dump", "/runs/default/dump"),
                    env_changes=(("MGB_USE_MEGDNN_DBG", None),), returncode=None, signal="SIGSEGV", seconds=0.5,
                    stderr_tail="", incomplete=True, status="crashed")
    run = run_from_result(res)
    d = run.to_json()
    assert d["returncode"] == -1 and d["argv"][0] == "load_and_run" and d["env"] == {"MGB_USE_MEGDNN_DBG": None}
    assert d["status"] == "crashed" and d["signal"] == "SIGSEGV"
    assert run.command_line() == "env -u MGB_USE_MEGDNN_DBG load_and_run m.mge --bin-io-dump /runs/default/dump"
    assert ReportRun.from_json(d) == run


# ============================================================================ JSON


DESIGN_VAR_KEYS = {"id": int, "name": str, "opr": str, "opr_type": str, "dtype": str, "shape": list, "inputs": list,
                   "status": str, "max_err": (float, int, type(None)), "max_abs_err": (float, int, type(None)),
                   "cosine": (float, int, type(None))}
DESIGN_ROOT_KEYS = {"id": int, "name": str, "opr": str, "opr_type": str, "max_err": (float, int, type(None)),
                    "input_max_err": (float, int, type(None))}
DESIGN_RUN_KEYS = {"label": str, "dir": str, "argv": list, "returncode": int, "seconds": (float, int)}


def _strict_loads(text: str):
    def bad(name):
        raise ValueError(f"non-standard JSON constant {name}")
    return json.loads(text, parse_constant=bad)


@pytest.mark.megengine
def test_json_has_every_design_key_with_its_type(faulty_report):
    d = _strict_loads(dumps(faulty_report))
    assert list(d)[:6] == ["schema", "command", "threshold", "vars", "roots", "runs"]
    assert d["schema"] == SCHEMA == "lar-prec.report/1"
    assert d["command"] == "naive-vs-default"
    assert d["threshold"]["value"] == THRESHOLD and d["threshold"]["mode"] == "fixed"
    assert d["threshold"]["metric"] == "megengine_rel"
    assert len(d["vars"]) == len(faulty_report.vars) > 40
    for v in d["vars"]:
        for key, typ in DESIGN_VAR_KEYS.items():
            assert isinstance(v[key], typ), (key, v)
        assert all(isinstance(i, int) for i in v["shape"] + v["inputs"])
        assert v["status"] in ("ok", "divergent", "nonfinite", "shape_mismatch", "dtype_mismatch", "missing")
    for r in d["roots"]:
        for key, typ in DESIGN_ROOT_KEYS.items():
            assert isinstance(r[key], typ), (key, r)
    for r in d["runs"]:
        for key, typ in DESIGN_RUN_KEYS.items():
            assert isinstance(r[key], typ), (key, r)
        assert all(isinstance(a, str) for a in r["argv"])
    assert d["summary"]["exit_code"] == 1 and d["summary"]["n_roots"] == 2
    assert d["verdict"].startswith("divergence found")


@pytest.mark.megengine
def test_nan_and_inf_become_null(faulty_report, dumps_ab):
    nan_var = dumps_ab[4]
    # the NaN origin as a shake or a custom metric may record it: NaN error, NaN worst value
    rep = replace(faulty_report,
                  vars=tuple(replace(v, max_err=math.nan, cosine=math.nan, worst_b=math.nan, rmse=math.inf)
                             if v.id == nan_var else v for v in faulty_report.vars),
                  roots=tuple(replace(r, max_err=math.nan, amplification=math.inf) if r.id == nan_var else r
                              for r in faulty_report.roots),
                  threshold=replace(faulty_report.threshold, per_dtype={"Float32": THRESHOLD, "Float16": math.inf}),
                  extra={"nested": [1.0, math.nan, {"x": -math.inf}], "np": np.float32(0.5), "n": np.int64(3)})
    text = dumps(rep)
    assert not re.search(r"[:\[,]\s*-?(NaN|Infinity)\b", text)  # no bare NaN/Infinity tokens
    d = _strict_loads(text)
    jv = next(x for x in d["vars"] if x["id"] == nan_var)
    assert jv["status"] == "nonfinite"
    assert jv["max_err"] is None and jv["cosine"] is None and jv["worst_b"] is None and jv["rmse"] is None
    jr = next(x for x in d["roots"] if x["id"] == nan_var)
    assert jr["max_err"] is None and jr["amplification"] is None
    assert d["nested"] == [1.0, None, {"x": None}] and d["np"] == 0.5 and d["n"] == 3
    assert d["threshold"]["per_dtype"] == {"Float32": THRESHOLD, "Float16": None}
    # and they read back as None
    back = Report.from_json(d)
    assert back.var(nan_var).max_err is None and back.roots[1].max_err is None


@pytest.mark.megengine
def test_json_round_trip(faulty_report, clean_report, tmp_path):
    for rep in (faulty_report, clean_report):
        path = write_json(rep, tmp_path / f"{len(rep.roots)}.json")
        back = read_json(path)
        assert back == rep
        assert back.to_json() == rep.to_json()
    assert faulty_report.runs[0].env == {"MGB_USE_MEGDNN_DBG": "2"}


#: the per-var keys `lar-prec compare --json` has always written (scripts read them)
COMPARE_VAR_KEYS = {"id", "name", "opr", "opr_type", "dtype", "shape", "inputs", "status", "max_err", "max_abs_err",
                    "cosine", "max_rel_err", "mean_abs_err", "rmse", "max_ulp", "n_over", "n_diff", "n_nonfinite",
                    "size", "scale", "norm_err", "threshold", "worst_index", "worst_a", "worst_b", "scale_unknown",
                    "dtype_b", "shape_b", "only_in", "note", "within_share", "pass_threshold",
                    *(f"{k}_{q}" for k in ("err", "rel_err", "abs_err") for q in ("p50", "p90", "p99", "p999"))}
COMPARE_ROOT_KEYS = {"id", "name", "opr", "opr_type", "max_err", "input_max_err", "status", "dtype", "amplification",
                     "inputs_equal", "worst_input", "note"}


def _json_value(x):
    """A VarDiff/Root attribute as the JSON must carry it (NaN/Inf -> null, tuples -> lists)."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, tuple):
        return [_json_value(v) for v in x]
    return x


@pytest.mark.megengine
def test_json_keeps_everything_compare_and_vartree_know(dumps_ab):
    import dataclasses

    from lar_prec.compare.records import VarDiff

    naive, _, faulty, _, _ = dumps_ab
    tree = VarTree.from_folders(naive, faulty, threshold=THRESHOLD)
    d = _strict_loads(dumps(from_tree(tree, command="compare")))
    # every VarDiff field (its position in the list aside) and norm_err, with the same value
    attrs = [f.name for f in dataclasses.fields(VarDiff) if f.name not in ("index", "band")] + ["norm_err", "within_share"]
    assert set(attrs) == COMPARE_VAR_KEYS
    assert len(d["vars"]) == len(tree.diffs)
    for diff, v in zip(tree.diffs, d["vars"]):
        assert set(v) >= COMPARE_VAR_KEYS
        for a in attrs:
            assert v[a] == _json_value(getattr(diff, a)), (diff.id, a)
    for root, r in zip(tree.roots(), d["roots"]):
        assert set(r) >= COMPARE_ROOT_KEYS and r["path"] == tree.path(root.id)
        for a in ("id", "name", "opr", "opr_type", "max_err", "input_max_err", "status", "dtype", "worst_input", "note"):
            assert r[a] == _json_value(getattr(root, a)), (root.id, a)
        assert r["inputs_equal"] == (root.amplification == math.inf)
    assert d["counts"] == tree.counts() and d["diverged"] is True
    assert d["dirs"] == {"a": str(naive), "b": str(faulty)}
    assert d["threshold"]["scaled"] is tree.threshold.scaled


@pytest.mark.megengine
def test_lazy_vars_write_the_same_json(dumps_ab, tmp_path):
    """compare's vars made from the VarDiffs as they are written: same JSON, same answers."""
    naive, _, faulty, fault, _ = dumps_ab
    tree = VarTree.from_folders(naive, faulty, threshold=THRESHOLD)
    eager, lazy = from_tree(tree, command="compare"), from_tree(tree, command="compare", lazy_vars=True)
    assert isinstance(lazy.vars, DiffVars) and isinstance(eager.vars, tuple)
    assert dumps(lazy) == dumps(eager)
    assert lazy.vars == eager.vars and lazy.var(fault) == eager.var(fault) and lazy.var(-5) is None
    assert lazy.status_counts() == eager.status_counts() and exit_code(lazy) == exit_code(eager) == 1
    assert read_json(write_json(lazy, tmp_path / "lazy.json")) == eager
    assert _rendered(lazy) == _rendered(eager)


def test_one_table_describes_a_variable():
    import dataclasses

    from lar_prec.report.records import ROOT_FIELDS, VAR_FIELDS, ReportRoot

    assert [f.name for f in dataclasses.fields(ReportVar)] == [k for k, *_ in VAR_FIELDS] + ["extra"]
    assert [f.name for f in dataclasses.fields(ReportRoot)] == [k for k, *_ in ROOT_FIELDS] + ["extra"]
    assert [k for k, *_ in VAR_FIELDS][:11] == list(DESIGN_VAR_KEYS)  # the contract first, in its order
    assert all(meaning for *_, meaning in VAR_FIELDS + ROOT_FIELDS)
    v = ReportVar(id=1, name="x", opr="o", opr_type="Elemwise", dtype="Float32", shape=(2,), inputs=(), status="ok",
                  max_err=0.0)
    d = v.to_json()
    assert list(d)[:11] == list(DESIGN_VAR_KEYS) and "runs_differing" not in d and d["n_diff"] is None
    assert ReportVar.from_json(d) == v


@pytest.mark.megengine
def test_write_json_dash_goes_to_the_stream(clean_report):
    buf = io.StringIO()
    assert write_json(clean_report, "-", stream=buf) is None
    assert _strict_loads(buf.getvalue())["summary"]["exit_code"] == 0


def test_from_json_rejects_other_documents_with_a_clear_message(tmp_path):
    with pytest.raises(UsageError, match="schema is 'other/1'"):
        Report.from_json({"schema": "other/1"})
    with pytest.raises(UsageError, match="has no 'threshold'"):
        Report.from_json({"schema": SCHEMA, "command": "compare", "vars": [], "roots": []})
    bad_var = {"id": 3, "name": "x", "opr": "x", "opr_type": "Elemwise", "dtype": "Float32", "shape": [1],
               "inputs": [], "status": "weird", "max_err": 0.0}
    with pytest.raises(UsageError, match="var 3 has status 'weird'"):
        ReportVar.from_json(bad_var)
    p = tmp_path / "broken.json"
    p.write_text("{not json")
    with pytest.raises(UsageError, match="report .*broken.json is not valid JSON"):
        read_json(p)
    with pytest.raises(UsageError, match="report .*absent.json does not exist"):
        read_json(tmp_path / "absent.json")
    p.write_text("[]")
    with pytest.raises(UsageError, match="is not a lar-prec report: expected a JSON object, found list"):
        read_json(p)


@pytest.mark.megengine
def test_exit_code(faulty_report, clean_report):
    assert exit_code(faulty_report) == 1
    assert exit_code(clean_report) == 0


# ============================================================================ terminal


def _console(width: int = 140):
    from rich.console import Console

    return Console(file=io.StringIO(), width=width, color_system=None, force_terminal=False)


def _rendered(report, width: int = 140, **kw) -> str:
    """What :func:`render_terminal` prints for ``report`` on a plain console ``width`` wide."""
    con = _console(width)
    render_terminal(report, con, **kw)
    return con.file.getvalue()


@pytest.mark.megengine
def test_terminal_shows_verdict_threshold_roots_and_paths(faulty_report, dumps_ab, capsys):
    fault = dumps_ab[3]
    out = _rendered(faulty_report, top=5)
    root = faulty_report.var(fault)
    flat = " ".join(out.split())
    assert " ".join(("Verdict: " + faulty_report.verdict).split()) in flat  # (a long one wraps)
    assert "Threshold: 1.00e-05 (fixed, metric megengine_rel): " + " ".join(faulty_report.threshold.reason.split()) in flat
    assert root.name in out and root.opr_type in out
    assert "Path to root #1" in out and "=> " + root.name in out
    # the path starts at the model input
    first = faulty_report.var(faulty_report.roots[0].path[0])
    assert first.opr_type == "Host2DeviceCopy" and first.name in out
    assert "Most divergent variables" in out and "nonfinite" in out
    assert "MGB_USE_MEGDNN_DBG" not in out  # runs table lists folders, commands are in JSON/HTML
    assert "naive" in out and "Note: dumps compared from real runs" in out
    # names with brackets are printed literally, not eaten as rich markup
    bracketed = [v.name for v in faulty_report.vars if "[" in v.name and v.status != "ok"][:1]
    for name in bracketed:
        assert name in out
    assert capsys.readouterr() == ("", "")  # the library itself printed nothing


@pytest.mark.megengine
@pytest.mark.parametrize("inputs", ["as computed", "noisy", "exact"])
def test_terminal_keeps_numbers_whole_on_a_narrow_console(faulty_report, inputs):
    # Whether the root's inputs are bitwise equal depends on the kernels the CPU picks (an
    # AMD EPYC with AVX-512 gives exact inputs here, other CPUs float32 noise), so both cases
    # are made explicitly from the real report, and the report as computed is checked too.
    r = faulty_report.roots[0]
    if inputs == "noisy":
        r = replace(r, input_max_err=r.max_err / 1234.5, amplification=1234.5, inputs_equal=False)
    elif inputs == "exact":
        r = replace(r, input_max_err=0.0, amplification=None, inputs_equal=True)
    rep = replace(faulty_report, roots=(r,) + faulty_report.roots[1:])
    out = _rendered(rep, width=80)
    row = next(line for line in out.splitlines() if f" {r.id} " in line and r.name in line)
    # the amplification is a whole number, or says the inputs were exact: never cut
    amp = fmt_err(r.amplification) + "x" if r.amplification is not None else "inputs exact"
    assert r.inputs_equal == (r.amplification is None and r.input_max_err == 0)
    for cell in ("divergent", fmt_err(r.max_err), fmt_err(r.input_max_err), amp):
        assert cell in row
    if inputs == "noisy":
        assert "1.23e+03x" in row
    assert max(len(line) for line in out.splitlines()) <= 80


@pytest.mark.megengine
def test_terminal_clean_report_says_no_divergence(clean_report):
    out = _rendered(clean_report)
    assert "Verdict: no divergence: all" in out
    assert "Roots" not in out


@pytest.mark.megengine
def test_terminal_escapes_markup_in_names(faulty_report):
    hostile = "[bold red]x[/] </script> {{y}} 'q\" & z"
    v0 = faulty_report.roots[0]
    rep = replace(faulty_report,
                  vars=tuple(replace(v, name=hostile) if v.id == v0.id else v for v in faulty_report.vars),
                  roots=(replace(v0, name=hostile),) + faulty_report.roots[1:])
    assert hostile in _rendered(rep, width=200)


# ============================================================================ shake


@pytest.mark.megengine
def test_shake_report_shows_cause_and_runs_differing(shake_report):
    out = _rendered(shake_report)
    assert "lar-prec shake" in out
    assert "Cause: neither the algorithm choice nor --reproducible explains it" in out
    assert "runs differing" in out
    d = _strict_loads(dumps(shake_report))
    assert d["command"] == "shake" and d["cause"].startswith("neither")
    assert all(isinstance(v["runs_differing"], int) for v in d["vars"])


@pytest.mark.megengine
def test_plain_text_has_the_same_tables_as_the_console(faulty_report, shake_report):
    """Into a pipe the same sections and cells are written as plain aligned text."""
    for rep in (faulty_report, shake_report):
        con, buf = _console(width=250), io.StringIO()
        render_terminal(rep, con)
        render_terminal(rep, buf)
        rich_lines = [" ".join(line.split()) for line in con.file.getvalue().splitlines()]
        plain_lines = [" ".join(line.split()) for line in buf.getvalue().splitlines()]
        # the rule under the title differs in length only; everything else is cell for cell
        assert [x for x in rich_lines if "──" not in x] == [x for x in plain_lines if "──" not in x]
        assert all(len(line) < 400 for line in plain_lines)


@pytest.mark.megengine
def test_compare_into_a_pipe_does_not_import_rich(dumps_ab):
    import sys

    naive, _, faulty, fault, _ = dumps_ab
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    p = subprocess.run([sys.executable, "-X", "importtime", "-m", "lar_prec", "compare", str(naive), str(faulty),
                        "--threshold", str(THRESHOLD)], capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 1, p.stderr[-2000:]
    imported = {line.split("|")[-1].strip() for line in p.stderr.splitlines() if line.startswith("import time:")}
    assert not any(m == "rich" or m.startswith("rich.") for m in imported)
    assert "Roots (2, most likely first)" in p.stdout and f" {fault} " in p.stdout


@pytest.mark.megengine
def test_most_divergent_is_a_sort_of_every_var_whatever_the_top(faulty_report, dumps_ab):
    """The terminal's most divergent vars, picked from the not-ok ones when there are enough of
    them: the first ``top`` of all vars sorted by (agrees, largest error first, NaN or missing
    as infinite, position), for a report holding ReportVars or its tree's records."""
    from lar_prec.report.model import not_ok_positions
    from lar_prec.report.terminal import most_divergent

    naive, _, faulty, _, _ = dumps_ab
    lazy = from_tree(VarTree.from_folders(naive, faulty, threshold=faulty_report.threshold.value), lazy_vars=True)
    assert isinstance(lazy.vars, DiffVars)
    for report in (faulty_report, lazy):
        vs = list(report.vars)
        bad = [i for i, v in enumerate(vs) if v.status not in ("ok", "index_equivalent")]
        assert not_ok_positions(report.vars) == bad and 0 < len(bad) < len(vs)

        def key(i):
            e = vs[i].max_err
            return (vs[i].status in ("ok", "index_equivalent"), -(math.inf if e is None or e != e else e), i)

        order = sorted(range(len(vs)), key=key)
        for top in (1, len(bad) - 1, len(bad), len(bad) + 3, len(vs)):
            assert [v.id for v in most_divergent(report, top)] == [vs[i].id for i in order[:top]], top
