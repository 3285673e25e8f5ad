"""report.py on a real comparison: the attention case run with naive and default kernels, one
operator's output corrupted in a copy of the default dump (a fault) and another given a NaN
(a NaN origin), compared and rooted by compare.py/vartree.py. The errors are recomputed here
from the dump files as a cross-check, so the report holds real names, operators, shapes,
inputs and float32 noise next to the faults.

Browser tests open the HTML in headless Chromium (scripts/ensure-chromium.sh installs it),
driven over the DevTools pipe: they read the page after its JavaScript ran, click headers,
type in the filter, and fail on any uncaught exception, console error or network request.
"""
from __future__ import annotations

import fcntl
import io
import json
import math
import os
import re
import select
import shutil
import subprocess
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import List, Optional, Tuple

import numpy as np
import pytest

from lar_prec.errors import UsageError
from lar_prec.iodump import DumpFolder
from lar_prec.report import (
    SCHEMA,
    DiffVars,
    Report,
    ReportRun,
    ReportThreshold,
    ReportVar,
    dumps,
    exit_code,
    fmt_err,
    from_tree,
    read_json,
    render_html,
    render_terminal,
    run_from_result,
    write_html,
    write_json,
)
from lar_prec.runner import RunResult
from lar_prec.vartree import VarTree

THRESHOLD = 1e-5
FAULT_TYPE = "SoftmaxForward"  # corrupted by a relative 1e-3 error
NAN_NAME = "GELU"  # gets a NaN where the naive run has a finite value


# ============================================================================ building reports from real dumps


def _corrupt(folder: Path, var_id: int, fn) -> None:
    """Apply ``fn`` to the values of one dump file in place (float32 data)."""
    d = DumpFolder(folder)[var_id]
    mm = np.memmap(d.path, dtype=d.dtype.storage, mode="r+", offset=d.data_offset, shape=(d.size,))
    fn(mm)
    mm.flush()
    del mm


def _metrics(a: np.ndarray, b: np.ndarray) -> Tuple[str, float, Optional[float], Optional[float]]:
    """status (before the threshold), MegEngine max_err, max |a-b|, cosine; NaN in the same
    place in both is equal, a non-finite value on one side only is a NaN max_err."""
    a = a.astype(np.float64).ravel()
    b = b.astype(np.float64).ravel()
    if a.size == 0:
        return "ok", 0.0, 0.0, None
    fa, fb = np.isfinite(a), np.isfinite(b)
    same_nonfinite = (~fa & ~fb) & ((np.isnan(a) & np.isnan(b)) | (a == b))
    if np.any((fa != fb) | (~fa & ~fb & ~same_nonfinite)):
        return "nonfinite", math.nan, math.nan, math.nan
    m = fa & fb
    a, b = a[m], b[m]
    diff = np.abs(a - b)
    err = float(np.max(diff / np.maximum(np.maximum(np.abs(a), np.abs(b)), 1.0))) if a.size else 0.0
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    cos = float(a @ b / (na * nb)) if na > 0 and nb > 0 else None
    return "ok", err, float(diff.max()) if diff.size else 0.0, cos


def build_report(dir_a: Path, dir_b: Path, *, runs: Tuple[ReportRun, ...] = ()) -> Report:
    """The report of a real comparison of two dump folders, as the commands build it."""
    tree = VarTree.from_folders(dir_a, dir_b, threshold=THRESHOLD)
    return from_tree(tree, command="naive-vs-default", runs=runs, model="cases/build/attention/model.mge",
                     notes=("dumps compared from real runs",))


@pytest.fixture(scope="module")
def dumps_ab(lar_dump, tmp_path_factory) -> Tuple[Path, Path, Path, int, int]:
    """(naive dump, default dump, faulty copy of default, fault var id, NaN var id)."""
    naive = lar_dump("attention", "naive")
    default = lar_dump("attention", "default")
    faulty = tmp_path_factory.mktemp("report") / "default-faulty"
    shutil.copytree(default, faulty)
    folder = DumpFolder(faulty)
    fault = next(v for v in folder.ids if folder.var_info(v).opr_type == FAULT_TYPE)
    nan_var = next(v for v in folder.ids if folder.var_info(v).name == NAN_NAME)

    def skew(mm):
        mm[::7] *= np.float32(1.001)

    def poison(mm):
        mm[3] = np.float32("nan")

    _corrupt(faulty, fault, skew)
    _corrupt(faulty, nan_var, poison)
    return naive, default, faulty, fault, nan_var


@pytest.fixture(scope="module")
def runs(dumps_ab) -> Tuple[ReportRun, ...]:
    naive, default, _, _, _ = dumps_ab
    model = "cases/build/attention/model.mge"
    argv = ("python", "-m", "lar_prec.lar", model, "--input", "data:cases/build/attention/data.npy", "--iter", "1",
            "--warmup-iter", "0", "--bin-io-dump")
    return (ReportRun("naive", str(naive), argv + (str(naive),), 0, 1.25, env={"MGB_USE_MEGDNN_DBG": "2"}, config="naive"),
            ReportRun("default", str(default), argv + (str(default),), 0, 0.98, config="default"))


@pytest.fixture(scope="module")
def faulty_report(dumps_ab, runs) -> Report:
    naive, _, faulty, _, _ = dumps_ab
    return build_report(naive, faulty, runs=runs)


@pytest.fixture(scope="module")
def clean_report(dumps_ab, runs) -> Report:
    naive, default, _, _, _ = dumps_ab
    return build_report(naive, default, runs=runs)


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
                    "dtype_b", "shape_b", "only_in", "note"}
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

    from lar_prec.compare import VarDiff

    naive, _, faulty, _, _ = dumps_ab
    tree = VarTree.from_folders(naive, faulty, threshold=THRESHOLD)
    d = _strict_loads(dumps(from_tree(tree, command="compare")))
    # every VarDiff field (its position in the list aside) and norm_err, with the same value
    attrs = [f.name for f in dataclasses.fields(VarDiff) if f.name != "index"] + ["norm_err"]
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

    from lar_prec.report import ROOT_FIELDS, VAR_FIELDS, ReportRoot

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
    with pytest.raises(UsageError, match="is not JSON"):
        read_json(p)
    with pytest.raises(UsageError, match="cannot read report"):
        read_json(tmp_path / "absent.json")


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
    assert "Verdict: " + faulty_report.verdict in out
    flat = " ".join(out.split())
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


# ============================================================================ HTML, static checks


HOSTILE = ('</script><script>window.__pwned=1</script>', '<img src=x onerror="window.__pwned=2">',
           "{{7*7}} ${x} 'single' \"double\" & &amp; \u2028")


def _hostile(report: Report) -> Report:
    """The report with its two roots and one ok var renamed to HTML/JS-hostile strings."""
    names = {report.roots[0].id: HOSTILE[0], report.roots[1].id: HOSTILE[1],
             next(v.id for v in report.vars if v.status == "ok"): HOSTILE[2]}
    return replace(report,
                   vars=tuple(replace(v, name=names.get(v.id, v.name), opr=names.get(v.id, v.opr)) for v in report.vars),
                   roots=tuple(replace(r, name=names[r.id], opr=names[r.id]) for r in report.roots),
                   model="m<odel>&.mge")


URL_ATTR = re.compile(r"""\b(?:src|href|action|xlink:href)\s*=\s*["']?\s*(?:https?:)?//""", re.I)


@pytest.mark.megengine
def test_html_is_one_offline_file(faulty_report, tmp_path):
    rep = _hostile(faulty_report)
    path = write_html(rep, tmp_path / "r.html")
    text = path.read_text(encoding="utf-8")
    assert not URL_ATTR.search(text)
    assert not re.search(r"https?://", text)  # not even the SVG namespace is spelled out
    assert "<link" not in text and "@import" not in text and "url(http" not in text
    assert "Content-Security-Policy" in text and "default-src 'none'" in text
    # the embedded JSON is the report, and no name can close the script element
    m = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', text, re.S)
    assert json.loads(m.group(1)) == json.loads(dumps(rep))
    assert text.count("</script>") == 2
    assert "<img" not in text
    assert "<title>lar-prec naive-vs-default: m&lt;odel&gt;&amp;.mge</title>" in text


def test_html_of_an_empty_report_renders(tmp_path):
    rep = Report(command="compare", threshold=ReportThreshold(1e-5, "auto"))
    assert exit_code(rep) == 0
    assert "no divergence: all 0 variables" in render_html(rep)


def _page_data(page: Path) -> dict:
    m = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', page.read_text("utf-8"), re.S)
    return json.loads(m.group(1))


def _cli(*args) -> "object":
    from click.testing import CliRunner

    from lar_prec.cli import cli

    return CliRunner(mix_stderr=False).invoke(cli, [str(a) for a in args], catch_exceptions=False)


@pytest.mark.megengine
def test_compare_and_tree_write_the_html_page(dumps_ab, tmp_path):
    naive, _, faulty, fault, nan_var = dumps_ab
    r = _cli("compare", naive, faulty, "--threshold", THRESHOLD, "--html", tmp_path / "c.html",
             "--json", tmp_path / "c.json", "--format", "megengine")
    assert r.exit_code == 1, r.stderr
    data, j = _page_data(tmp_path / "c.html"), json.loads((tmp_path / "c.json").read_text())
    assert data["command"] == j["command"] == "compare"
    assert [x["id"] for x in data["roots"]] == [x["id"] for x in j["roots"]] == [fault, nan_var]
    assert data["vars"] == j["vars"] and len(data["vars"]) > 40
    assert all(x["path"][-1] == x["id"] for x in data["roots"])  # the page draws the path to each root
    assert "default-src 'none'" in (tmp_path / "c.html").read_text()
    diff = tmp_path / "diff.txt"
    diff.write_text(r.stdout)
    t = _cli("tree", diff, "--html", tmp_path / "t.html")
    assert t.exit_code == 1, t.stderr
    tdata = _page_data(tmp_path / "t.html")
    assert tdata["command"] == "tree" and fault in [x["id"] for x in tdata["roots"]]
    assert "Roots (" in t.stdout and "Verdict: divergence found" in t.stdout
    # a folder where the page should go: one line, exit 2, nothing half written
    r = _cli("compare", naive, faulty, "--html", tmp_path)
    assert r.exit_code == 2 and r.stderr.startswith("Error: ") and "HTML report" in r.stderr


@pytest.mark.slow
def test_wheel_carries_the_page_files(tmp_path):
    """The page's HTML, CSS and JS are package data: in the wheel, and found once installed."""
    import sys
    import zipfile

    from lar_prec.report_html import PAGE_FILES

    root = Path(__file__).resolve().parent.parent
    src = tmp_path / "src"  # a copy: building in the checkout would leave build/ and egg-info there
    shutil.copytree(root / "lar_prec", src / "lar_prec", ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(root / name, src / name)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    pip = subprocess.run([sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation", "-q",
                          "-w", str(tmp_path / "dist")], capture_output=True, text=True, timeout=600, env=env)
    assert pip.returncode == 0, pip.stderr[-2000:]
    whl = next((tmp_path / "dist").glob("lar_prec-*.whl"))
    with zipfile.ZipFile(whl) as z:
        for name in PAGE_FILES:
            assert z.read(f"lar_prec/page/{name}").decode("utf-8") == (root / "lar_prec" / "page" / name).read_text("utf-8")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True, timeout=300, env=env)
    py = str(venv / "bin" / "python")
    inst = subprocess.run([py, "-m", "pip", "install", "--no-deps", "--no-index", "-q", str(whl)],
                          capture_output=True, text=True, timeout=300, env=env)
    assert inst.returncode == 0, inst.stderr[-2000:]
    code = ("import lar_prec.report as r, lar_prec.report_html as h\n"
            "page = h.render_html(r.Report(command='compare', threshold=r.ReportThreshold(1e-5)))\n"
            "print(h.PAGE_DIR)\n"
            "print(\"default-src 'none'\" in page and 'function fatal' in page and '@@' not in page)\n")
    out = subprocess.run([py, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    page_dir, ok = out.stdout.split()
    assert Path(page_dir).resolve().is_relative_to(venv.resolve()) and ok == "True"


# ============================================================================ HTML in headless Chromium


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
browser = pytest.mark.skipif(CHROMIUM is None, reason="headless chromium not installed (run scripts/ensure-chromium.sh as root)")


class Browser:
    """Headless Chromium driven over ``--remote-debugging-pipe`` (the DevTools protocol on fds 3
    and 4, so no Python package is needed). Records uncaught exceptions, console errors,
    browser log errors (CSP violations, failed loads) and every network request."""

    def __init__(self, timeout: float = 60.0) -> None:
        self.timeout = timeout
        self._profile = tempfile.TemporaryDirectory(prefix="lar-prec-chromium-")
        to_child, self._w = os.pipe()
        self._r, from_child = os.pipe()

        def fds() -> None:
            # move both ends out of the way first: a pipe end may itself be fd 3 or 4
            a = fcntl.fcntl(to_child, fcntl.F_DUPFD_CLOEXEC, 10)
            b = fcntl.fcntl(from_child, fcntl.F_DUPFD_CLOEXEC, 10)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.proc = subprocess.Popen(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={self._profile.name}", "--remote-debugging-pipe", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            close_fds=False, preexec_fn=fds)
        os.close(to_child)
        os.close(from_child)
        self._buf = b""
        self._id = 0
        self.events: List[dict] = []
        page = next(t for t in self.send("Target.getTargets")["targetInfos"] if t["type"] == "page")
        self.session = self.send("Target.attachToTarget", targetId=page["targetId"], flatten=True)["sessionId"]
        for domain in ("Runtime", "Page", "Log", "Network"):
            self.send(domain + ".enable", session=self.session)

    def _message(self, deadline: float) -> dict:
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("chromium did not answer")
            if select.select([self._r], [], [], left)[0]:
                chunk = os.read(self._r, 1 << 20)
                if not chunk:
                    raise RuntimeError("chromium closed the DevTools pipe")
                self._buf += chunk
        msg, self._buf = self._buf.split(b"\0", 1)
        return json.loads(msg)

    def send(self, method: str, session: Optional[str] = None, **params) -> dict:
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params}
        if session:
            msg["sessionId"] = session
        os.write(self._w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + self.timeout
        while True:
            m = self._message(deadline)
            if m.get("id") == self._id:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return m.get("result", {})
            self.events.append(m)

    def _wait(self, method: str) -> dict:
        for i, m in enumerate(self.events):
            if m.get("method") == method:
                return self.events.pop(i)
        deadline = time.monotonic() + self.timeout
        while True:
            m = self._message(deadline)
            if m.get("method") == method:
                return m
            self.events.append(m)

    def open(self, path: Path, fragment: str = "") -> None:
        """Load ``path`` afresh (events of earlier pages are dropped)."""
        self.send("Page.navigate", session=self.session, url="about:blank")
        self._wait("Page.loadEventFired")
        self.events.clear()
        self.url = path.resolve().as_uri()
        self.send("Page.navigate", session=self.session, url=self.url + fragment)
        self._wait("Page.loadEventFired")

    def js(self, expr: str):
        """Evaluate ``expr`` in the page (promises awaited) and return its JSON value."""
        r = self.send("Runtime.evaluate", session=self.session, expression=expr, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise AssertionError(f"{expr}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def settle(self, ms: int = 250) -> None:
        """Let debounced handlers run."""
        self.js(f"new Promise(r => setTimeout(r, {ms}))")

    def problems(self) -> List[str]:
        """Uncaught exceptions, console errors/warnings and browser log errors so far."""
        out = []
        for m in self.events:
            meth, p = m.get("method"), m.get("params", {})
            if meth == "Runtime.exceptionThrown":
                d = p["exceptionDetails"]
                out.append(d.get("exception", {}).get("description") or d.get("text", "exception"))
            elif meth == "Runtime.consoleAPICalled" and p.get("type") in ("error", "warning", "assert"):
                out.append(f"console.{p['type']}: " + " ".join(str(a.get("value", a.get("description"))) for a in p.get("args", [])))
            elif meth == "Log.entryAdded" and p["entry"].get("level") in ("error", "warning"):
                out.append("log: " + p["entry"].get("text", ""))
        return out

    def requests(self) -> List[str]:
        """URLs the page asked for (the page itself included)."""
        return [m["params"]["request"]["url"] for m in self.events if m.get("method") == "Network.requestWillBeSent"]

    def close(self) -> None:
        try:
            self.send("Browser.close")
        except (OSError, RuntimeError, TimeoutError):
            pass
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._w)
        os.close(self._r)
        self._profile.cleanup()


@pytest.fixture(scope="module")
def chromium():
    if CHROMIUM is None:
        pytest.skip("headless chromium not installed (run scripts/ensure-chromium.sh as root)")
    b = Browser()
    yield b
    b.close()


def _clean_page(b: Browser) -> None:
    """The page rendered, fetched nothing but itself and reported no error of any kind."""
    assert b.js("document.body.dataset.rendered") is not None
    assert b.js("document.getElementById('fatal').hidden") is True
    assert b.problems() == []
    assert [u for u in b.requests() if u.split("#")[0] != b.url] == []


def _rows(b: Browser) -> List[int]:
    return b.js("Array.from(document.querySelectorAll('#vars-body tr')).map(r => Number(r.dataset.id))")


@browser
@pytest.mark.browser
@pytest.mark.megengine
def test_html_shows_roots_chart_graph_and_runs(chromium, faulty_report, dumps_ab, tmp_path):
    b = chromium
    b.open(write_html(faulty_report, tmp_path / "report.html"))
    _clean_page(b)
    assert b.js("document.body.dataset.rendered") == str(len(faulty_report.vars))
    root = faulty_report.var(dumps_ab[3])
    # innerText is what a reader sees (rendered, CSS applied)
    roots_text = b.js("document.getElementById('roots').innerText")
    assert root.name in roots_text and root.opr_type in roots_text
    assert faulty_report.verdict == b.js("document.getElementById('verdict').innerText").strip()
    assert "1.00e-5 (fixed, metric megengine_rel)" in b.js("document.getElementById('meta').innerText")
    cards = b.js("document.getElementById('cards').innerText")
    assert "Root #1: " + root.name in cards and "Root #2: " + NAN_NAME in cards
    # the neighbourhood graph of root 1: the root, its input, its input's inputs, its consumer
    labels = b.js("Array.from(document.querySelectorAll('#graph-1 g.node title')).map(t => t.textContent.split('\\n')[0])")
    mul = faulty_report.var(root.inputs[0])
    assert root.name in labels and mul.name in labels
    assert all(faulty_report.var(u).name in labels for u in mul.inputs if faulty_report.var(u))
    assert any(faulty_report.var(c).name in labels for c in (v.id for v in faulty_report.vars if root.id in v.inputs))
    # one chart point per var (fewer vars than pixels), roots marked
    assert b.js("document.querySelectorAll('#chart-points circle').length") == len(faulty_report.vars)
    assert b.js("document.querySelectorAll('#chart .root-mark').length") == len(faulty_report.roots)
    # the path from the model input, and the runs with their command lines
    assert faulty_report.var(faulty_report.roots[0].path[0]).name in b.js("document.querySelector('#root-1 .path').innerText")
    runs_text = b.js("document.getElementById('runs').innerText")
    assert "MGB_USE_MEGDNN_DBG=2 python -m lar_prec.lar" in runs_text
    assert len(_rows(b)) == min(100, len(faulty_report.vars))


@browser
@pytest.mark.browser
@pytest.mark.megengine
def test_html_table_sorts_filters_and_opens_details(chromium, faulty_report, tmp_path):
    b = chromium
    b.open(write_html(faulty_report, tmp_path / "table.html"))
    errs = {v.id: v.max_err for v in faulty_report.vars}
    assert _rows(b) == [v.id for v in faulty_report.vars][:100]  # execution order first
    b.js("document.querySelector('th[data-key=max_err]').click()")
    desc = _rows(b)
    assert desc[0] == max(errs, key=lambda i: errs[i])
    assert [errs[i] for i in desc] == sorted(errs.values(), reverse=True)
    b.js("document.querySelector('th[data-key=max_err]').click()")
    assert [errs[i] for i in _rows(b)] == sorted(errs.values())
    b.js("document.querySelector('th[data-key=name]').click()")
    names = [faulty_report.var(i).name for i in _rows(b)]
    assert names == sorted(names)
    # filter box (debounced) and the "only not ok" switch
    b.js("{ const f = document.getElementById('filter'); f.value = 'matrixmul'; f.dispatchEvent(new Event('input')); }")
    b.settle()
    got = _rows(b)
    want = [v.id for v in faulty_report.vars if "matrixmul" in (v.name + v.opr + v.opr_type).lower()]
    assert sorted(got) == sorted(want) and len(want) > 3
    assert f"of {len(want)} (filtered from {len(faulty_report.vars)})" in b.js("document.getElementById('page-info').innerText")
    b.js("{ const f = document.getElementById('filter'); f.value = ''; f.dispatchEvent(new Event('input')); }")
    b.js("{ const c = document.getElementById('only-bad'); c.checked = true; c.dispatchEvent(new Event('change')); }")
    b.settle()
    assert sorted(_rows(b)) == sorted(v.id for v in faulty_report.vars if v.status != "ok")
    # clicking a root's chart marker opens its details with inputs and consumers as links
    root = faulty_report.roots[0]
    b.js("document.querySelector('#chart .root-mark').dispatchEvent(new MouseEvent('click', {bubbles: true}))")
    assert b.js("document.getElementById('details-section').hidden") is False
    assert root.name in b.js("document.getElementById('details-title').innerText")
    details = b.js("document.getElementById('details').innerText")
    assert "consumers" in details and faulty_report.var(faulty_report.var(root.id).inputs[0]).name in details
    assert b.js("location.hash") == f"#var={root.id}"
    _clean_page(b)


@browser
@pytest.mark.browser
@pytest.mark.megengine
def test_html_escapes_hostile_names(chromium, faulty_report, tmp_path):
    b = chromium
    rep = _hostile(faulty_report)
    b.open(write_html(rep, tmp_path / "hostile.html"), "#var=" + str(faulty_report.roots[1].id))
    _clean_page(b)
    assert b.js("document.querySelectorAll('img').length") == 0
    assert b.js("typeof window.__pwned") == "undefined"
    assert b.js("document.scripts.length") == 2  # the data and the code, nothing injected
    text = b.js("document.body.textContent")
    for name in HOSTILE:
        assert name in text
    assert HOSTILE[1] in b.js("document.getElementById('details-title').textContent")  # the deep link opened it
    assert b.js("document.title") == "lar-prec naive-vs-default: m<odel>&.mge"


@browser
@pytest.mark.browser
@pytest.mark.megengine
def test_a_script_error_is_caught_and_shown(chromium, faulty_report, tmp_path):
    # the harness itself: a broken page must not pass as clean
    page = tmp_path / "broken.html"
    page.write_text(render_html(faulty_report).replace("\nchart();\n", "\nchart();\nnoSuchFunction();\n"), encoding="utf-8")
    b = chromium
    b.open(page)
    assert any("noSuchFunction" in p for p in b.problems())
    assert b.js("document.getElementById('fatal').hidden") is False
    assert "noSuchFunction" in b.js("document.getElementById('fatal').innerText")


@browser
@pytest.mark.browser
@pytest.mark.megengine
def test_html_deep_link_sorts_and_filters(chromium, faulty_report, tmp_path):
    b = chromium
    b.open(write_html(faulty_report, tmp_path / "sorted.html"), "#sort=-max_err&bad=1")
    _clean_page(b)
    bad = sorted((v for v in faulty_report.vars if v.status != "ok"), key=lambda v: -(v.max_err or 0))
    assert _rows(b) == [v.id for v in bad]


@browser
@pytest.mark.browser
@pytest.mark.megengine
def test_html_with_20000_vars_stays_responsive(chromium, faulty_report, tmp_path):
    # The real graph tiled until it has 20,000 vars, ids shifted per copy, inputs kept inside a copy.
    base = faulty_report.vars
    span = max(v.id for v in base) + 1
    copies = -(-20000 // len(base))
    big_vars = tuple(replace(v, id=v.id + k * span, inputs=tuple(u + k * span for u in v.inputs))
                     for k in range(copies) for v in base)[:20000]
    big_roots = tuple(replace(r, id=r.id + k * span, path=tuple(p + k * span for p in r.path))
                      for k in range(0, copies, 20) for r in faulty_report.roots)
    big = replace(faulty_report, vars=big_vars, roots=big_roots, verdict="")
    b = chromium
    b.open(write_html(big, tmp_path / "big.html"))
    _clean_page(b)
    assert b.js("document.body.dataset.rendered") == "20000"
    assert len(_rows(b)) == 100  # paginated
    assert b.js("document.querySelectorAll('#chart-points circle').length") < 3000  # largest error per pixel column
    assert "rows 1\u2013100 of 20000" in b.js("document.getElementById('page-info').innerText")
    b.js("document.getElementById('next').click()")
    assert _rows(b) == [v.id for v in big_vars[100:200]]
    b.js("document.querySelector('th[data-key=max_err]').click()")
    assert _rows(b)[0] == max(big_vars, key=lambda v: v.max_err).id
    # root cards come ten at a time, the rest behind a button
    assert len(big_roots) > 10
    assert b.js("document.querySelectorAll('.rootcard').length") == 10
    b.js("document.getElementById('more-roots').click()")
    assert b.js("document.querySelectorAll('.rootcard').length") == min(20, len(big_roots))
    # how long the page's own script took, for the record (no assertion on time)
    print("render ms:", b.js("document.body.dataset.renderMs"))
    _clean_page(b)


# ============================================================================ shake


@pytest.fixture(scope="module")
def shake_report(dumps_ab, lar_dump) -> Report:
    """A shake-shaped report from three real default runs, the third one faulty: every var's
    ``max_err`` is its largest difference from run 1, ``runs_differing`` how many runs differ."""
    _, default, faulty, _, _ = dumps_ab
    again = lar_dump("attention", "default", tag="again")
    trees = [VarTree.from_folders(default, other, threshold=THRESHOLD) for other in (again, faulty)]
    base = from_tree(trees[1], command="shake", cause="neither the algorithm choice nor --reproducible explains it",
                     model="cases/build/attention/model.mge")
    firsts = {d.id: d for d in trees[0].diffs}
    vars_ = []
    for v in base.vars:
        errs = [e for e in (firsts[v.id].max_err, v.max_err) if e is not None]
        vars_.append(replace(v, max_err=max(errs) if errs else None,
                             runs_differing=sum(1 for e in errs if e > 0) + (v.status == "nonfinite" and not v.max_err)))
    return replace(base, vars=tuple(vars_))


@pytest.mark.megengine
def test_shake_report_shows_cause_and_runs_differing(shake_report):
    out = _rendered(shake_report)
    assert "lar-prec shake" in out
    assert "Cause: neither the algorithm choice nor --reproducible explains it" in out
    assert "runs differing" in out
    d = _strict_loads(dumps(shake_report))
    assert d["command"] == "shake" and d["cause"].startswith("neither")
    assert all(isinstance(v["runs_differing"], int) for v in d["vars"])


@browser
@pytest.mark.browser
@pytest.mark.megengine
def test_shake_html_shows_cause_and_runs_differing(shake_report, chromium, tmp_path):
    chromium.open(write_html(shake_report, tmp_path / "shake.html"))
    _clean_page(chromium)
    assert chromium.js("document.querySelector('th[data-key=runs_differing]') !== null")
    assert "neither the algorithm choice" in chromium.js("document.getElementById('meta').innerText")


@browser
@pytest.mark.browser
@pytest.mark.megengine
def test_compare_html_renders_in_the_browser(chromium, dumps_ab, tmp_path):
    naive, _, faulty, fault, _ = dumps_ab
    assert _cli("compare", naive, faulty, "--threshold", THRESHOLD, "--html", tmp_path / "c.html").exit_code == 1
    chromium.open(tmp_path / "c.html")
    _clean_page(chromium)
    assert "Root #1: " + DumpFolder(faulty).var_info(fault).name in chromium.js("document.getElementById('cards').innerText")


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
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    p = subprocess.run([sys.executable, "-X", "importtime", "-m", "lar_prec", "compare", str(naive), str(faulty),
                        "--threshold", str(THRESHOLD)], capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 1, p.stderr[-2000:]
    imported = {line.split("|")[-1].strip() for line in p.stderr.splitlines() if line.startswith("import time:")}
    assert not any(m == "rich" or m.startswith("rich.") for m in imported)
    assert "Roots (2, most likely first)" in p.stdout and f" {fault} " in p.stdout
