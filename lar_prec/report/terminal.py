"""A :class:`~lar_prec.report.Report` for people: the one terminal renderer, and CSV.

:func:`render_terminal` writes the same sections for every command (``naive-vs-default``,
``shake``, ``compare``, ``tree``) to a rich ``Console`` the caller owns: title, verdict,
cause, threshold and how it was chosen, status counts, the roots with their amplification,
the path from a model input to each root, the most divergent variables (or every variable
in execution order), the runs and the notes. This module never prints on its own.
The sections are built once as styled lines and tables, then written either to a rich
``Console`` (colour, wrapping to its width) or, for a pipe or a file, to a plain text stream
(aligned columns, nothing wrapped, and rich not even imported: it is most of a small
``compare``'s start-up). :func:`render_csv` writes one row per variable.
"""
from __future__ import annotations

import csv
import heapq
import io
import itertools
import math
from typing import IO, TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from lar_prec.compare.records import AGREEING
from lar_prec.diagnosis.modules import module_text
from lar_prec.report.model import DiffVars, Report, _records, auto_verdict, exit_code, not_ok_positions
from lar_prec.report.console import WIDTH, Line, Table, cell, open_output, text
from lar_prec.report.records import ReportRoot, ReportVar, fmt_err, var_from_diff
from lar_prec.report.mixed import render_mixed_terminal
from lar_prec.report.quant import render_quant_terminal
from lar_prec.report.shake import cause_cell, render_root_causes, render_runs_by_operator, render_shake_top
from lar_prec.report.sweep import render_sweep_terminal
from lar_prec.report.envs import render_diff_top
from lar_prec.run.env import format_differences
from lar_prec.report.model import from_tree

if TYPE_CHECKING:
    from rich.console import Console

    from lar_prec.compare.records import Comparison
    from lar_prec.diagnosis.tree import VarTree

__all__ = ["render_terminal", "render_table", "render_csv", "CSV_FIELDS"]

_STATUS_STYLE = {
    "ok": "green",
    "index_equivalent": "green",
    "divergent": "red",
    "nonfinite": "magenta",
    "shape_mismatch": "yellow",
    "dtype_mismatch": "yellow",
    "missing": "dim",
}

#: numeric columns: right-aligned and never wrapped or cut
_NUM: Dict[str, Any] = {"justify": "right", "no_wrap": True}

Column = Tuple[str, Dict[str, Any], Callable[..., Any]]


def _shape_text(shape: Sequence[int]) -> str:
    return "(" + ",".join(str(s) for s in shape) + ")"


def _amp_text(r: ReportRoot) -> str:
    if r.amplification is not None and math.isfinite(r.amplification):
        return f"{fmt_err(r.amplification)}x"
    if r.inputs_equal or (r.input_max_err == 0 and r.max_err):
        return "inputs exact"
    return "—"


def _root_err_text(err: Optional[float], status: str) -> str:
    """A root's error; a NaN/Inf origin has no finite error, so say what it is instead."""
    if (err is None or not math.isfinite(err)) and status != "divergent":
        return status.replace("_", " ")
    return fmt_err(err)


def _as_var(rec: Any) -> ReportVar:
    return rec if isinstance(rec, ReportVar) else var_from_diff(rec)


def _most_divergent(recs: Sequence[Any], top: int, not_ok: Sequence[int]) -> List[Tuple[int, Any]]:
    """The ``top`` most divergent of ``recs`` (ReportVars or VarDiffs: same attribute names) with
    their positions: not-ok (``not_ok``: their positions) before ok, then by largest max_err, an
    unknown one (missing, NaN) as infinite, ties by position."""
    # a heap, not a sort: only ``top`` kept, each key made inline (not a call per var); of
    # tens of thousands of vars only the not-ok ones when there are enough of them
    inf = math.inf
    if len(not_ok) >= top:
        keyed = [(0, -(inf if (e := recs[i].max_err) is None or e != e else e), i) for i in not_ok]
    else:
        keyed = [(0 if v.status not in AGREEING else 1, -(inf if (e := v.max_err) is None or e != e else e), i)
                 for i, v in enumerate(recs)]
    return [(i, recs[i]) for _, _, i in heapq.nsmallest(top, keyed)]


def most_divergent(report: Report, top: int) -> List[ReportVar]:
    """The ``top`` most divergent vars of ``report``: those that do not agree first, then by
    largest max_err (the vars table's choice)."""
    return [_as_var(rec) for _, rec in _most_divergent(_records(report.vars), top, not_ok_positions(report.vars))]


def _path_steps(path: Sequence[int], limit: int) -> List[Optional[int]]:
    """The path, shortened to ``limit`` steps: the first two, ``None`` for the gap, the rest."""
    if len(path) <= limit or limit < 4:
        return list(path)
    tail = limit - 3
    return list(path[:2]) + [None] + list(path[-tail:])


#: the terminal views of results that are their own JSON, by schema (as the page's views)
_JSON_VIEWS = {"lar-prec.mixed/1": render_mixed_terminal, "lar-prec.quant/1": render_quant_terminal}


def render_result(result: Union[Report, Mapping[str, Any]], out: Any) -> None:
    """A command's result on the terminal: a Report, or the JSON of ``quant`` and ``mixed``."""
    if isinstance(result, Report):
        render_terminal(result, out)
    else:
        _JSON_VIEWS[result["schema"]](result, out)


def render_terminal(report: Report, console: Union["Console", IO[str], None] = None, *, top: int = 10,
                    path_limit: int = 10, show_runs: bool = True, all_vars: bool = False) -> None:
    """Write the human summary of ``report`` to ``console``.

    Args:
        report: what to show.
        console: a ``rich.console.Console`` (the caller chooses stream, colour and width;
            None makes a default one on stdout), or a text stream for plain text.
        top: how many roots and variables to list.
        path_limit: longer paths are shortened to this many steps.
        show_runs: include the table of runs.
        all_vars: list the variables in execution order, ok ones too, instead of the most
            divergent ones.
    """
    con = open_output(console)
    narrow = con.width < 110
    if report.command == "sweep":
        render_sweep_terminal(report, con)
        return
    _header(report, con)
    shake = report.command == "shake"
    if shake:
        render_shake_top(report, con)
    if report.extra.get("targets"):
        _targets_table(report, con)
    if report.command == "diff":
        render_diff_top(report, con)
    if report.roots:
        _roots_table(report, con, top, narrow)
        if shake:
            render_root_causes(report, con, top)
        _root_paths(report, con, top, path_limit)
    elif exit_code(report):
        con.print(text("No root found: every variable that is not ok has an input that is not ok either "
                        "(or its inputs were not compared).", "yellow"))
    else:
        con.print(text("(no root: every variable is within the threshold)", "green"))
    if len(report.vars):
        _vars_table(report, con, top, narrow, all_vars)
    if shake:
        render_runs_by_operator(report, con, top)
    if show_runs and report.runs:
        _runs_table(report, con)
    for n in report.notes:
        con.print(text("Note: ", "bold yellow", n), wrap=True)


def _header(report: Report, con: Any) -> None:
    title = text(f"lar-prec {report.command}", "bold")
    if report.model:
        title.append(f"  {report.model}", style="dim")
    con.rule(title)
    verdict = report.verdict or auto_verdict(report)
    con.print(text("Verdict: ", "bold", (verdict, "bold red" if exit_code(report) else "bold green")))
    if report.cause:
        con.print(text("Cause: ", "bold", (report.cause, "yellow")))
    env_diffs = report.extra.get("environment_differences") or ()
    if env_diffs:

        con.print(text("Environment differs between runs:", "bold yellow"))
        for line in format_differences(env_diffs):
            con.print(text("  " + line, "yellow"))
    th = report.threshold
    line = text("Threshold: ", "bold", (fmt_err(th.value), "cyan"), f" ({th.mode}, metric {th.metric})")
    if th.reason:
        reason = th.reason
        if not getattr(con, "explain", True):  # one line; the mode is said already
            reason = one_line(reason[len(th.mode) + 2:] if reason.startswith(f"{th.mode}: ") else reason,
                              min(con.width, WIDTH) - len(line.plain) - 2, "[--explain]")
        line.append(": " + reason)
    con.print(line)
    if th.per_dtype:
        con.print(text("  per dtype: " + ", ".join(f"{k} {fmt_err(v)}" for k, v in th.per_dtype.items())))
    counts = report.status_counts()
    con.print(text("Variables: ", "bold", f"{len(report.vars)} compared",
                    *[(f", {n} {s}", _STATUS_STYLE.get(s, "")) for s, n in counts.items()]))


def _first_clause(s: str) -> str:
    """``s`` up to its first "; " outside parentheses."""
    depth = 0
    for i, ch in enumerate(s):
        depth += ch == "("
        depth -= ch == ")"
        if depth == 0 and s.startswith("; ", i):
            return s[:i]
    return s


def one_line(s: str, width: int, more: str) -> str:
    """A long explanation in one line of ``width``: its first clause if that fits, else as much
    as fits, and ``more`` (where the rest is) when anything was left out."""
    if len(s) <= width:
        return s
    first = _first_clause(s)
    room = max(20, width - len(more) - 1)
    if len(first) > room:
        first = first[:room - 1].rstrip() + "\u2026"
    return f"{first} {more}"


def _roots_table(report: Report, con: Any, top: int, narrow: bool) -> None:
    cols: List[Column] = [
        ("#", _NUM, lambda k, r, st: str(k)),
        ("var", _NUM, lambda k, r, st: str(r.id)),
        ("name", {"overflow": "fold", "ratio": 2, "cut": True}, lambda k, r, st: cell(r.name, "bold")),
        ("operator", {"overflow": "fold", "ratio": 2, "drop": 2}, lambda k, r, st: cell(r.opr)),
        ("type", {"overflow": "fold", "ratio": 1, "drop": 1}, lambda k, r, st: cell(r.opr_type)),
        ("status", {"no_wrap": True}, lambda k, r, st: cell(st, _STATUS_STYLE.get(st, ""))),
        ("max_err", _NUM, lambda k, r, st: cell(_root_err_text(r.max_err, st), _STATUS_STYLE.get(st, "red"))),
        ("input err" if narrow else "input max_err", _NUM, lambda k, r, st: cell(fmt_err(r.input_max_err))),
        ("amplif." if narrow else "amplification", _NUM, lambda k, r, st: cell(_amp_text(r))),
    ]
    # numbers are never cut: where the table is too wide its long text columns go (Table.fitted)
    t = Table(f"Roots ({len(report.roots)}, most likely first)")
    for head, kw, _ in cols:
        t.add_column(head, **kw)
    for k, r in enumerate(report.roots[:top], 1):
        v = report.var(r.id) if r.status is None else None
        st = r.status or (v.status if v is not None else "divergent")
        t.add_row(*[get(k, r, st) for _, _, get in cols])
    con.table(t)
    if len(report.roots) > top:
        con.print(text(f"  ... {len(report.roots) - top} more roots in the JSON/HTML report", "dim"))
    for k, r in enumerate(report.roots[:top], 1):
        if r.note:
            con.print(text(f"  root #{k}: {r.note}", "yellow"))
        where = module_text(r.opr, r.module, r.module_how) if k <= 3 else None
        if where:
            con.print(text(f"  root #{k}: {where}", "cyan"))


def _root_paths(report: Report, con: Any, top: int, path_limit: int) -> None:
    for k, r in enumerate(report.roots[: min(top, 3)], 1):
        if not r.path:
            continue
        con.print(text(f"Path to root #{k} ", "bold", (r.name, "bold"), f" ({len(r.path)} vars, from model input):"))
        steps = _path_steps(r.path, path_limit)
        for step in steps:
            if step is None:
                con.print(text(f"    ... {len(r.path) - len(steps) + 1} more ...", "dim"))
                continue
            v = report.var(step)
            if v is None:
                con.print(text(f"  -> var {step} (not in this report)", "dim"))
                continue
            mark = "  => " if step == r.id else "  -> "
            con.print(text(mark, "", (v.name, "bold" if step == r.id else ""), (f"  [{v.opr_type}, var {v.id}] ", "dim"),
                            (fmt_err(v.max_err), _STATUS_STYLE.get(v.status, ""))))


def _label_text(v: ReportVar) -> str:
    """Local label of a var: root, inherited (<- the roots it came from), noise, clean..."""
    label = v.extra.get("label")
    if label is None:
        return "—"
    came = v.extra.get("inherited_from") or ()
    return f"{label} <- {','.join(map(str, came[:3]))}{'...' if len(came) > 3 else ''}" if came else str(label)


def _vars_table(report: Report, con: Any, top: int, narrow: bool, all_vars: bool) -> None:
    """The most divergent variables (or the first ones in execution order), at most ``top``."""
    recs = _records(report.vars)
    if all_vars:
        picked = list(itertools.islice(enumerate(recs), top))
        title, left = "Variables in execution order", len(recs) - len(picked)
    else:
        picked = _most_divergent(recs, top, not_ok_positions(report.vars))
        title, left = "Most divergent variables", max(0, report.n_not_ok - len(picked))
    rows = [(pos, _as_var(rec)) for pos, rec in picked]
    roots = {r.id for r in report.roots}

    def cos_text(p: int, v: ReportVar) -> Line:
        return cell("—" if v.cosine is None or not math.isfinite(v.cosine) else f"{v.cosine:.6f}")

    cols: List[Column] = [
        ("#", _NUM, lambda p, v: str(v.exec_index if v.exec_index is not None else p)),
        ("var", _NUM, lambda p, v: str(v.id)),
        ("name", {"overflow": "fold", "ratio": 3, "cut": True},
         lambda p, v: cell(v.name + ("  (root)" if v.id in roots else ""), "bold" if v.id in roots else "")),
        ("type", {"overflow": "fold", "ratio": 1, "drop": 3}, lambda p, v: cell(v.opr_type)),
        ("dtype shape", {"overflow": "fold", "ratio": 1, "drop": 4},
         lambda p, v: cell(f"{v.dtype} {_shape_text(v.shape)}")),
        ("status", {"no_wrap": True}, lambda p, v: cell(v.status, _STATUS_STYLE.get(v.status, ""))),
        ("max_err", _NUM, lambda p, v: cell(fmt_err(v.max_err), _STATUS_STYLE.get(v.status, ""))),
        ("max_abs_err", {**_NUM, "drop": 5}, lambda p, v: cell(fmt_err(v.max_abs_err))),
        ("cosine", {**_NUM, "drop": 6}, cos_text),
    ]
    if report.extra.get("local", {}).get("measured"):  # local ("single") next to accumulated max_err
        cols.insert(7, ("local", _NUM, lambda p, v: cell(fmt_err(v.extra.get("local_err")) if "label" in v.extra
                                                         else "—", "red" if v.extra.get("label") == "root" else "")))
        cols.insert(8, ("label", {"no_wrap": True, "drop": 2}, lambda p, v: cell(_label_text(v))))
    # a comparison's VarDiffs (DiffVars) carry neither column below: shake's ReportVars do
    extras = not isinstance(report.vars, DiffVars)
    if extras and any(getattr(rec, "runs_differing", None) is not None for rec in recs):
        cols.append(("runs differing", _NUM,
                     lambda p, v: cell("—" if v.runs_differing is None else str(v.runs_differing))))
    if extras and any("cause" in getattr(rec, "extra", {}) for rec in recs):  # shake: why it wobbles
        cols.append(("cause", {"overflow": "fold", "ratio": 2, "drop": 1}, lambda p, v: cell(cause_cell(v.extra))))
    t = Table(title)
    for head, kw, _ in cols:
        t.add_column(head, **kw)
    for pos, v in rows:
        t.add_row(*[get(pos, v) for _, _, get in cols])
    con.table(t)
    if left > 0:
        what = "variables" if all_vars else "variables not ok"
        con.print(text(f"  ... {left} more {what} in the JSON/HTML/CSV report", "dim"))


def _targets_table(report: Report, con: Any) -> None:
    """``devices``: each target against the reference's naive run."""
    t = Table(f"Targets (against the naive run on {report.extra.get('reference', '?')})")
    for col, kw in (("target", {"overflow": "fold"}), ("pairing", {}), ("final-output max_err", {"justify": "right"}),
                    ("not ok", {"justify": "right"}), ("first root", {"overflow": "fold"})):
        t.add_column(col, **kw)
    for e in report.extra["targets"]:
        root = e.get("root")
        t.add_row(cell(e["target"] + (" (reference)" if e.get("reference") else "")), cell(e.get("pairing", "")),
                  cell(fmt_err(e.get("final_output_max_err")), "red" if e.get("diverged") else "green"),
                  cell(str(e.get("n_not_ok", 0))),
                  cell(f"{root['name']} ({root['opr_type']}, var {root['id']})" if root else "—"))
    con.table(t)


def _where(env: Any) -> str:
    """Where a run ran, in a few words: host, then the device's model or CPU."""
    if not isinstance(env, dict) or not env.get("host"):
        return ""
    what = env.get("android_model") or env.get("cpu_model") or ""
    return f"{env['host']} ({what})" if what else str(env["host"])


def _runs_table(report: Report, con: Any) -> None:
    t = Table("Runs")
    where = [_where(r.extra.get("environment")) for r in report.runs]
    cols = [("label", {}), ("rc", {"justify": "right"}), ("seconds", {"justify": "right"})]
    # where each run ran is the point of a run on a device: the folder is cut first
    cols += [("where", {"overflow": "fold"})] if any(where) else []
    for col, kw in cols + [("folder", {"overflow": "fold", "cut": True})]:
        t.add_column(col, **kw)
    for r, w in zip(report.runs, where):
        cells = [cell(r.label), cell(str(r.returncode), "" if r.returncode == 0 else "red"),
                 cell("—" if not math.isfinite(r.seconds) else f"{r.seconds:.2f}")]
        cells += [cell(w or "—")] if any(where) else []
        t.add_row(*cells, cell(str(r.dir)))
    con.table(t)


def render_table(report: Union[Report, "VarTree"], *, all_vars: bool = False) -> str:
    """:func:`render_terminal` as plain text, for a report or a tree."""
    if not isinstance(report, Report):

        report = from_tree(report, lazy_vars=True, max_paths=0)
    buf = io.StringIO()
    render_terminal(report, buf, all_vars=all_vars)
    return buf.getvalue()


CSV_FIELDS = (
    "id", "name", "opr", "opr_type", "dtype", "shape", "inputs", "status", "max_err", "max_abs_err", "max_rel_err",
    "mean_abs_err", "rmse", "cosine", "max_ulp", "n_over", "threshold", "worst_index", "worst_a", "worst_b", "note",
)


def render_csv(report: Union[Report, "VarTree", "Comparison"]) -> str:
    """One CSV row per var (execution order), the columns of :data:`CSV_FIELDS`."""
    recs = _records(report.vars) if isinstance(report, Report) else report.diffs
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_FIELDS)
    for d in recs:
        row = []
        for f in CSV_FIELDS:
            v = getattr(d, f)
            if isinstance(v, tuple):
                v = " ".join(str(x) for x in v)
            elif isinstance(v, float):
                v = repr(v) if math.isfinite(v) else str(v)
            elif v is None:
                v = ""
            row.append(v)
        w.writerow(row)
    return buf.getvalue()
