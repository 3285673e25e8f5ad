"""``lar-prec list`` and ``lar-prec node``: triage a finished analysis without running anything
(issue 40 #4).

``list`` filters a report's vars (cosine below a bound, statuses, operator types and names by
glob, as Ascend precision_tool's ``vcs -c 0.98``) and sorts them by execution order, error or
cosine. ``node`` shows one var, its operator, and its inputs and consumers to a depth (as
precision_tool's ``ni -s N``), each with its statistics, status and local error where it was
measured. Both read a ``report.json`` or an analysis folder holding one.

Example::

    from lar_prec.workflows.triage.triage import list_vars, load_report, node_view
    rep = load_report("lar-prec-out/naive-vs-default-1")
    for v in list_vars(rep, cosine_below=0.98, opr_types=["Conv*"]).vars:
        print(v.id, v.name, v.cosine)
    print(node_view(rep, "c2.Convolution", depth=2).to_json())
"""
from __future__ import annotations

import fnmatch
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from lar_prec.compare.records import AGREEING, STATUSES
from lar_prec.errors import UsageError
from lar_prec.report.model import Report, read_json
from lar_prec.report.records import ReportVar

#: how ``list`` sorts
SORTS = ("exec", "error", "cosine")
LIST_SCHEMA = "lar-prec.list/1"
NODE_SCHEMA = "lar-prec.node/1"
#: the name of the report in an analysis folder
REPORT_FILE = "report.json"


def load_report(path: Union[str, Path]) -> Report:
    """The report at ``path``: a report JSON file, or an analysis folder holding ``report.json``.

    Raises:
        UsageError: neither (exit 2), or not a lar-prec report.
    """
    p = Path(path)
    if p.is_dir():
        if not os.path.lexists(p / REPORT_FILE):
            raise UsageError(f"{p}: expected a report JSON file or an analysis folder with {REPORT_FILE}; "
                             f"the folder has no {REPORT_FILE}")
        p = p / REPORT_FILE
    elif not os.path.lexists(p):
        raise UsageError(f"{p}: no such file or folder (expected a report JSON file or an analysis folder)")
    return read_json(p)


def _error_key(v: ReportVar) -> float:
    """Larger first: the error the threshold was compared with (unknown as infinite)."""
    e = v.norm_err if v.norm_err is not None else v.max_err
    return math.inf if e is None else e


@dataclass(frozen=True)
class Listing:
    """The vars of a report that pass the filters, in the asked order."""

    vars: Tuple[ReportVar, ...]
    n_vars: int
    filters: Mapping[str, Any]
    sort: str

    def to_json(self) -> Dict[str, Any]:
        """``{"schema", "filters", "sort", "n_vars", "n_matched", "vars"}``: each var as in the report."""
        return {"schema": LIST_SCHEMA, "filters": dict(self.filters), "sort": self.sort, "n_vars": self.n_vars,
                "n_matched": len(self.vars), "vars": [v.to_json() for v in self.vars]}


def list_vars(report: Report, *, cosine_below: Optional[float] = None, statuses: Sequence[str] = (),
              opr_types: Sequence[str] = (), names: Sequence[str] = (), not_ok: bool = False,
              sort: str = "exec") -> Listing:
    """The vars of ``report`` with cosine below ``cosine_below`` (a var without a cosine, e.g.
    all zeros, does not pass), a status among ``statuses``, an operator type matching one of the
    globs ``opr_types`` (``Conv*``) and a name matching one of ``names``, or that do not agree
    (``not_ok``); every given filter must hold. ``sort``: ``exec`` (execution order),
    ``error`` (largest norm_err first) or ``cosine`` (smallest first).

    Raises:
        UsageError: an unknown status or sort.
    """
    bad = [s for s in statuses if s not in STATUSES]
    if bad:
        raise UsageError(f"unknown status {bad[0]!r}; expected one of {', '.join(STATUSES)}")
    if sort not in SORTS:
        raise UsageError(f"unknown sort {sort!r}; expected one of {', '.join(SORTS)}")

    def keep(v: ReportVar) -> bool:
        if cosine_below is not None and not (v.cosine is not None and v.cosine < cosine_below):
            return False
        if statuses and v.status not in statuses:
            return False
        if not_ok and v.status in AGREEING:
            return False
        if opr_types and not any(fnmatch.fnmatchcase(v.opr_type, p) for p in opr_types):
            return False
        return not names or any(fnmatch.fnmatchcase(v.name, p) for p in names)

    picked = [v for v in report.vars if keep(v)]
    if sort == "error":
        picked.sort(key=lambda v: -_error_key(v))
    elif sort == "cosine":
        picked.sort(key=lambda v: math.inf if v.cosine is None else v.cosine)
    filters = {"cosine_below": cosine_below, "statuses": list(statuses), "opr_types": list(opr_types),
               "names": list(names), "not_ok": not_ok}
    return Listing(tuple(picked), len(report.vars), filters, sort)


@dataclass(frozen=True)
class NodeView:
    """One var with its operator, and its inputs and consumers up to ``depth`` (each with its
    distance from the var)."""

    var: ReportVar
    depth: int
    inputs: Tuple[Tuple[int, ReportVar], ...]
    consumers: Tuple[Tuple[int, ReportVar], ...]
    #: inputs the report has no var for (not compared, e.g. not dumped on both sides)
    unknown_inputs: Tuple[int, ...]
    root_rank: Optional[int]

    def to_json(self) -> Dict[str, Any]:
        """``{"schema", "var", "operator", "root_rank", "depth", "inputs", "consumers",
        "unknown_inputs"}``: vars as in the report, plus their ``depth``."""
        return {"schema": NODE_SCHEMA, "var": self.var.to_json(),
                "operator": {"name": self.var.opr, "type": self.var.opr_type}, "root_rank": self.root_rank,
                "depth": self.depth, "inputs": [{"depth": k, **v.to_json()} for k, v in self.inputs],
                "consumers": [{"depth": k, **v.to_json()} for k, v in self.consumers],
                "unknown_inputs": list(self.unknown_inputs)}


def find_var(report: Report, var: Union[int, str]) -> ReportVar:
    """The var of ``report`` with this id (an int, or digits) or this exact name.

    Raises:
        UsageError: none, or several vars of that name (their ids are listed).
    """
    text = str(var).strip()
    if text.isdigit():
        v = report.var(int(text))
        if v is not None:
            return v
    named = [v for v in report.vars if v.name == text]
    if len(named) == 1:
        return named[0]
    if named:
        raise UsageError(f"{len(named)} vars are named {text!r} (ids {', '.join(str(v.id) for v in named[:10])}): "
                         "give the id")
    close = [v.name for v in report.vars if text.lower() in v.name.lower()][:5]
    hint = f"; names containing it: {', '.join(close)}" if close else ""
    raise UsageError(f"no var {text!r} in the report (expected a var id or an exact var name){hint}")


def node_view(report: Report, var: Union[int, str], depth: int = 1) -> NodeView:
    """Var ``var`` (id or exact name), its inputs (their inputs, ...) and consumers to ``depth``.

    Raises:
        UsageError: no such var, or a depth below 1.
    """
    if depth < 1:
        raise UsageError(f"depth must be >= 1, got {depth}")
    v = find_var(report, var)
    consumers: Dict[int, List[int]] = {}
    for x in report.vars:
        for u in x.inputs:
            consumers.setdefault(u, []).append(x.id)
    unknown: List[int] = []

    def walk(step: Any) -> List[Tuple[int, ReportVar]]:
        seen, frontier, out = {v.id}, [v.id], []
        for k in range(1, depth + 1):
            nxt = []
            for vid in frontier:
                for u in step(vid):
                    if u in seen:
                        continue
                    seen.add(u)
                    rec = report.var(u)
                    if rec is None:
                        unknown.append(u)
                        continue
                    out.append((k, rec))
                    nxt.append(u)
            frontier = nxt
        return out

    ins = walk(lambda vid: report.var(vid).inputs if report.var(vid) is not None else ())  # type: ignore[union-attr]
    cons = walk(lambda vid: consumers.get(vid, ()))
    rank = next((k for k, r in enumerate(report.roots, 1) if r.id == v.id), None)
    return NodeView(v, depth, tuple(ins), tuple(cons), tuple(unknown), rank)
