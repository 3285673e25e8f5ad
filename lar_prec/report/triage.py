"""Terminal views of a var's statistics: ``compare --stats``, ``lar-prec list`` and
``lar-prec node`` (issue 40 #1, #4). The same columns everywhere: status, max_err, the var's
threshold, cosine, its error's quantiles, the share of its elements within the threshold, and
local error where it was measured. Written with :mod:`lar_prec.report.console` like the
report's own tables."""
from __future__ import annotations

import math
from typing import IO, TYPE_CHECKING, Any, Callable, List, Optional, Sequence, Tuple, Union

from lar_prec.report.console import Line, Table, cell, open_output, text
from lar_prec.report.records import ReportVar, fmt_err

if TYPE_CHECKING:
    from rich.console import Console

_NUM = {"justify": "right", "no_wrap": True}
_STYLE = {"ok": "green", "index_equivalent": "green", "divergent": "red", "nonfinite": "magenta", "missing": "dim"}

Column = Tuple[str, dict, Callable[[ReportVar], Line]]


def _share(x: Optional[float]) -> str:
    """A share as a percentage that never rounds a missing element away (99.99% is not 100%)."""
    if x is None:
        return "—"
    if x >= 1.0:
        return "100%"
    return f"{math.floor(x * 1e4) / 100:.2f}%"


def _cos(x: Optional[float]) -> str:
    """Six decimals; closer to 1 than that, how far from 1 (a triage by cosine tells these apart)."""
    if x is None or not math.isfinite(x):
        return "—"
    return f"1-{1 - x:.1e}" if 0.9999995 <= x < 1 else f"{x:.6f}"


def _local(v: ReportVar) -> str:
    label = v.extra.get("label")
    return "—" if label is None else f"{fmt_err(v.extra.get('local_err'))} {label}"


def columns(v_stats: bool = False, local: bool = False) -> List[Column]:
    """The columns of a var row; ``v_stats``: the relative and absolute error's p99 too (when
    ``compare --stats`` counted them); ``local``: local error and its label."""
    cols: List[Column] = [
        ("var", _NUM, lambda v: cell(str(v.id))),
        ("name", {"overflow": "fold", "ratio": 3, "cut": True}, lambda v: cell(v.name)),
        ("type", {"overflow": "fold", "ratio": 1, "drop": 1}, lambda v: cell(v.opr_type)),
        ("status", {"no_wrap": True}, lambda v: cell(v.status, _STYLE.get(v.status, "yellow"))),
        ("max_err", _NUM, lambda v: cell(fmt_err(v.max_err), _STYLE.get(v.status, ""))),
        ("threshold", {**_NUM, "drop": 2}, lambda v: cell(fmt_err(v.threshold))),
        ("cosine", _NUM, lambda v: cell(_cos(v.cosine))),
        ("err p50", {**_NUM, "drop": 4}, lambda v: cell(fmt_err(v.err_p50))),
        ("p99", _NUM, lambda v: cell(fmt_err(v.err_p99))),
        ("p99.9", {**_NUM, "drop": 5}, lambda v: cell(fmt_err(v.err_p999))),
        ("within", {**_NUM, "drop": 3}, lambda v: cell(_share(v.within_share))),
    ]
    if v_stats:
        cols += [("rel p99", _NUM, lambda v: cell(fmt_err(v.rel_err_p99))),
                 ("abs p99", _NUM, lambda v: cell(fmt_err(v.abs_err_p99)))]
    if local:
        cols.append(("local", {"no_wrap": True}, lambda v: cell(_local(v))))
    return cols


def _table(title: str, rows: Sequence[Tuple[Any, ReportVar]], cols: List[Column], lead: Optional[str] = None) -> Table:
    t = Table(title)
    if lead:
        t.add_column(lead, **_NUM)
    for head, kw, _ in cols:
        t.add_column(head, **kw)
    for key, v in rows:
        t.add_row(*([cell(str(key))] if lead else []), *[get(v) for _, _, get in cols])
    return t


def _cols_for(vs: Sequence[ReportVar]) -> List[Column]:
    return columns(v_stats=any(v.rel_err_p99 is not None for v in vs),
                   local=any("label" in v.extra for v in vs))


def render_stats(vars_: Sequence[ReportVar], console: Union["Console", IO[str], None], n_total: int) -> None:
    """``compare --stats``: the statistics of ``vars_`` (the most divergent) of ``n_total``."""
    con = open_output(console)
    con.table(_table(f"Error statistics ({len(vars_)} of {n_total} variables, most divergent first; quantiles "
                     "of max_err's metric, to 6.25%)", list(enumerate(vars_, 1)), _cols_for(vars_), "#"))


def render_listing(listing: Any, console: Union["Console", IO[str], None], top: int) -> None:
    """``lar-prec list``: the vars that passed the filters (a workflows.triage.triage ``Listing``), at
    most ``top`` of them."""
    con = open_output(console)
    shown = listing.vars[:top]
    if not shown:
        con.print(text(f"no variable of {listing.n_vars} passes the filters", "yellow"))
        return
    con.table(_table(f"{len(listing.vars)} of {listing.n_vars} variables (sorted by {listing.sort})",
                     [(k, v) for k, v in enumerate(shown, 1)], _cols_for(shown), "#"))
    if len(listing.vars) > top:
        con.print(text(f"  ... {len(listing.vars) - top} more (--top, or --json for all)", "dim"))


def render_node(view: Any, console: Union["Console", IO[str], None]) -> None:
    """``lar-prec node``: the var, its operator, its inputs and consumers with their statistics
    (a workflows.triage.triage ``NodeView``)."""
    con = open_output(console)
    v = view.var
    con.rule(Line(("var ", "bold"), (f"{v.id} {v.name}", "bold")))
    con.print(text("Operator: ", "bold", f"{v.opr} ({v.opr_type})",
                   f", root #{view.root_rank}" if view.root_rank else ""))
    con.print(text("Shape: ", "bold", f"{v.dtype} ({','.join(map(str, v.shape))})"))
    everything = [v] + [x for _, x in view.inputs] + [x for _, x in view.consumers]
    cols = _cols_for(everything)
    con.table(_table("This var", [("0", v)], cols, "depth"))
    if v.note:
        con.print(text("Note: ", "bold yellow", v.note))
    for title, rows, none in ((f"Inputs (to depth {view.depth})", view.inputs, "none: a model input or a constant"),
                              (f"Consumers (to depth {view.depth})", view.consumers, "none: a model output")):
        if rows:
            con.table(_table(title, list(rows), cols, "depth"))
        else:
            con.print(text(f"{title}: {none}", "bold"))
        if view.unknown_inputs and rows is view.inputs:
            con.print(text(f"  not compared: var {', '.join(map(str, view.unknown_inputs))}", "dim"))
