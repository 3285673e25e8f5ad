"""A :class:`~lar_prec.report.Report` for people: the one terminal renderer, and CSV.

:func:`render_terminal` writes the same sections for every command (``naive-vs-default``,
``shake``, ``compare``, ``tree``) to a rich ``Console`` the caller owns: title, verdict,
cause, threshold and how it was chosen, status counts, the roots with their amplification,
the path from a model input to each root, the most divergent variables (or every variable
in execution order), the runs and the notes. This module never prints on its own.
:func:`render_csv` writes one row per variable.
"""
from __future__ import annotations

import csv
import heapq
import io
import itertools
import math
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from lar_prec.report import Report, ReportRoot, ReportVar, _records, auto_verdict, exit_code, fmt_err, var_from_diff

if TYPE_CHECKING:
    from rich.console import Console

    from lar_prec.compare import Comparison
    from lar_prec.vartree import VarTree

__all__ = ["render_terminal", "render_table", "render_csv", "CSV_FIELDS"]

_STATUS_STYLE = {
    "ok": "green",
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


def _err_key(v: Any) -> Tuple[int, float]:
    """Sort key, most divergent first: not-ok before ok, unknown error (missing, NaN) as
    infinite. Reads a ReportVar or a VarDiff (same attribute names)."""
    err = v.max_err
    if err is None or err != err:
        err = math.inf
    return (0 if v.status != "ok" else 1, -err)


def _as_var(rec: Any) -> ReportVar:
    return rec if isinstance(rec, ReportVar) else var_from_diff(rec)


def _path_steps(path: Sequence[int], limit: int) -> List[Optional[int]]:
    """The path, shortened to ``limit`` steps: the first two, ``None`` for the gap, the rest."""
    if len(path) <= limit or limit < 4:
        return list(path)
    tail = limit - 3
    return list(path[:2]) + [None] + list(path[-tail:])


def render_terminal(report: Report, console: Optional["Console"] = None, *, top: int = 10,
                    path_limit: int = 10, show_runs: bool = True, all_vars: bool = False) -> None:
    """Write the human summary of ``report`` to ``console``.

    Args:
        report: what to show.
        console: a ``rich.console.Console``; the caller chooses stream, colour and width.
            None makes a default one on stdout.
        top: how many roots and variables to list.
        path_limit: longer paths are shortened to this many steps.
        show_runs: include the table of runs.
        all_vars: list the variables in execution order, ok ones too, instead of the most
            divergent ones.
    """
    from rich.console import Console

    con = console if console is not None else Console()
    narrow = con.width < 110
    _header(report, con)
    if report.roots:
        _roots_table(report, con, top, narrow)
        _root_paths(report, con, top, path_limit)
    elif exit_code(report):
        con.print(_text("No root found: every variable that is not ok has an input that is not ok either "
                        "(or its inputs were not compared).", "yellow"))
    else:
        con.print(_text("(no root: every variable is within the threshold)", "green"))
    if len(report.vars):
        _vars_table(report, con, top, narrow, all_vars)
    if show_runs and report.runs:
        _runs_table(report, con)
    for n in report.notes:
        con.print(_text("Note: ", "bold yellow", n))


def _text(s: str, style: str = "", *more: Any) -> Any:
    # Every piece of user data goes through Text(), never through markup: var names contain [ ].
    from rich.text import Text

    return Text.assemble((s, style), *more)


def _table(title: str) -> Any:
    from rich import box
    from rich.table import Table

    return Table(title=_text(title, "bold"), box=box.SIMPLE_HEAD, title_justify="left", show_edge=False)


def _header(report: Report, con: "Console") -> None:
    title = _text(f"lar-prec {report.command}", "bold")
    if report.model:
        title.append(f"  {report.model}", style="dim")
    con.rule(title, align="left")
    verdict = report.verdict or auto_verdict(report)
    con.print(_text("Verdict: ", "bold", (verdict, "bold red" if exit_code(report) else "bold green")))
    if report.cause:
        con.print(_text("Cause: ", "bold", (report.cause, "yellow")))
    th = report.threshold
    line = _text("Threshold: ", "bold", (fmt_err(th.value), "cyan"), f" ({th.mode}, metric {th.metric})")
    if th.reason:
        line.append(f": {th.reason}")
    con.print(line)
    if th.per_dtype:
        con.print(_text("  per dtype: " + ", ".join(f"{k} {fmt_err(v)}" for k, v in th.per_dtype.items())))
    counts = report.status_counts()
    con.print(_text("Variables: ", "bold", f"{len(report.vars)} compared",
                    *[(f", {n} {s}", _STATUS_STYLE.get(s, "")) for s, n in counts.items()]))


def _roots_table(report: Report, con: "Console", top: int, narrow: bool) -> None:
    from rich.text import Text

    cols: List[Column] = [
        ("#", _NUM, lambda k, r, st: str(k)),
        ("var", _NUM, lambda k, r, st: str(r.id)),
        ("name", {"overflow": "fold", "ratio": 2}, lambda k, r, st: Text(r.name, style="bold")),
        ("operator", {"overflow": "fold", "ratio": 2}, lambda k, r, st: Text(r.opr)),
        ("type", {"overflow": "fold", "ratio": 1}, lambda k, r, st: Text(r.opr_type)),
        ("status", {"no_wrap": True}, lambda k, r, st: Text(st, style=_STATUS_STYLE.get(st, ""))),
        ("max_err", _NUM, lambda k, r, st: Text(_root_err_text(r.max_err, st), style=_STATUS_STYLE.get(st, "red"))),
        ("input err" if narrow else "input max_err", _NUM, lambda k, r, st: Text(fmt_err(r.input_max_err))),
        ("amplif." if narrow else "amplification", _NUM, lambda k, r, st: Text(_amp_text(r))),
    ]
    if narrow:  # numbers must never be cut: drop the long text columns instead
        cols = [c for c in cols if c[0] != "operator"]
    t = _table(f"Roots ({len(report.roots)}, most likely first)")
    for head, kw, _ in cols:
        t.add_column(head, **kw)
    for k, r in enumerate(report.roots[:top], 1):
        v = report.var(r.id) if r.status is None else None
        st = r.status or (v.status if v is not None else "divergent")
        t.add_row(*[get(k, r, st) for _, _, get in cols])
    con.print(t)
    if len(report.roots) > top:
        con.print(_text(f"  ... {len(report.roots) - top} more roots in the JSON/HTML report", "dim"))
    for k, r in enumerate(report.roots[:top], 1):
        if r.note:
            con.print(_text(f"  root #{k}: {r.note}", "yellow"))


def _root_paths(report: Report, con: "Console", top: int, path_limit: int) -> None:
    for k, r in enumerate(report.roots[: min(top, 3)], 1):
        if not r.path:
            continue
        con.print(_text(f"Path to root #{k} ", "bold", (r.name, "bold"), f" ({len(r.path)} vars, from model input):"))
        steps = _path_steps(r.path, path_limit)
        for step in steps:
            if step is None:
                con.print(_text(f"    ... {len(r.path) - len(steps) + 1} more ...", "dim"))
                continue
            v = report.var(step)
            if v is None:
                con.print(_text(f"  -> var {step} (not in this report)", "dim"))
                continue
            mark = "  => " if step == r.id else "  -> "
            con.print(_text(mark, "", (v.name, "bold" if step == r.id else ""), (f"  [{v.opr_type}, var {v.id}] ", "dim"),
                            (fmt_err(v.max_err), _STATUS_STYLE.get(v.status, ""))))


def _vars_table(report: Report, con: "Console", top: int, narrow: bool, all_vars: bool) -> None:
    """The most divergent variables (or the first ones in execution order), at most ``top``."""
    from rich.text import Text

    recs = _records(report.vars)
    if all_vars:
        picked = list(itertools.islice(enumerate(recs), top))
        title, left = "Variables in execution order", len(recs) - len(picked)
    else:  # a heap, not a sort: 20,000 vars are scanned once and only ``top`` kept
        picked = heapq.nsmallest(top, enumerate(recs), key=lambda p: _err_key(p[1]))
        title, left = "Most divergent variables", max(0, report.n_not_ok - len(picked))
    rows = [(pos, _as_var(rec)) for pos, rec in picked]
    roots = {r.id for r in report.roots}

    def cos_text(p: int, v: ReportVar) -> Text:
        return Text("—" if v.cosine is None or not math.isfinite(v.cosine) else f"{v.cosine:.6f}")

    cols: List[Column] = [
        ("#", _NUM, lambda p, v: str(v.exec_index if v.exec_index is not None else p)),
        ("var", _NUM, lambda p, v: str(v.id)),
        ("name", {"overflow": "fold", "ratio": 3},
         lambda p, v: Text(v.name + ("  (root)" if v.id in roots else ""), style="bold" if v.id in roots else "")),
        ("type", {"overflow": "fold", "ratio": 1}, lambda p, v: Text(v.opr_type)),
        ("dtype shape", {"overflow": "fold", "ratio": 1}, lambda p, v: Text(f"{v.dtype} {_shape_text(v.shape)}")),
        ("status", {"no_wrap": True}, lambda p, v: Text(v.status, style=_STATUS_STYLE.get(v.status, ""))),
        ("max_err", _NUM, lambda p, v: Text(fmt_err(v.max_err), style=_STATUS_STYLE.get(v.status, ""))),
        ("max_abs_err", _NUM, lambda p, v: Text(fmt_err(v.max_abs_err))),
        ("cosine", _NUM, cos_text),
    ]
    if any(getattr(rec, "runs_differing", None) is not None for rec in recs):
        cols.append(("runs differing", _NUM,
                     lambda p, v: Text("—" if v.runs_differing is None else str(v.runs_differing))))
    if narrow:
        cols = [c for c in cols if c[0] not in ("dtype shape", "max_abs_err", "cosine")]
    t = _table(title)
    for head, kw, _ in cols:
        t.add_column(head, **kw)
    for pos, v in rows:
        t.add_row(*[get(pos, v) for _, _, get in cols])
    con.print(t)
    if left > 0:
        what = "variables" if all_vars else "variables not ok"
        con.print(_text(f"  ... {left} more {what} in the JSON/HTML/CSV report", "dim"))


def _runs_table(report: Report, con: "Console") -> None:
    from rich.text import Text

    t = _table("Runs")
    for col, kw in (("label", {}), ("rc", {"justify": "right"}), ("seconds", {"justify": "right"}),
                    ("folder", {"overflow": "fold"})):
        t.add_column(col, **kw)
    for r in report.runs:
        t.add_row(Text(r.label), Text(str(r.returncode), style="" if r.returncode == 0 else "red"),
                  Text("—" if not math.isfinite(r.seconds) else f"{r.seconds:.2f}"), Text(str(r.dir)))
    con.print(t)


def render_table(report: Union[Report, "VarTree"], *, all_vars: bool = False, width: int = 120) -> str:
    """:func:`render_terminal` as plain text (no colour), for a report or a tree."""
    from rich.console import Console

    if not isinstance(report, Report):
        from lar_prec.report import from_tree

        report = from_tree(report, lazy_vars=True)
    con = Console(file=io.StringIO(), width=width, color_system=None, force_terminal=False, soft_wrap=False)
    render_terminal(report, con, all_vars=all_vars)
    return con.file.getvalue()  # type: ignore[attr-defined]


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
