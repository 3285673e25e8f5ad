"""The shake's part of the terminal report, drawn from its JSON (the page draws the same from
``lar_prec/report/page/report.js``).

Read this way for a shake (``workflows/shake/shake.py`` builds it):

* each var: ``n_results`` (distinct results over the runs), ``results`` (when more than one:
  the runs sharing each result, run 1's first, with its ``max_err`` against run 1 and the
  ``algorithm``), ``algorithms`` ({run label: algorithm}, fast-run), ``algorithm_differs``,
  ``local_by_run`` (local error of each measured run), and for a var that is not ok
  ``cause``, ``cause_detail`` and, inherited, ``cause_root``;
* each root: ``cause``, ``cause_detail``, ``cause_text``, ``algorithms``;
* top level: ``mode``, ``shake_runs`` (label, role, setting), ``algorithm_choice`` (known,
  how or why not), ``storage`` (what was kept), ``observer`` (the observer check),
  ``local.agreement`` (dump roots against local error), ``cause_vocabulary``.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Sequence

from lar_prec.report.console import Table, cell, text
from lar_prec.compare.records import AGREEING
from lar_prec.report.records import fmt_err

if TYPE_CHECKING:
    from lar_prec.report.model import Report

INHERITED = "inherited from root"


def cause_cell(extra: Mapping[str, Any]) -> str:
    """A var's cause in a table cell: the phrase; an inherited one names its root's var id."""
    c = extra.get("cause")
    if not c:
        return "—"
    if c == INHERITED and extra.get("cause_root") is not None:
        return f"inherited from var {extra['cause_root']}"
    return str(c)


def _mb(n: Any) -> str:
    return f"{(n or 0) / 1e6:.1f} MB"


def _runs_text(labels: Sequence[str], limit: int = 4) -> str:
    return ", ".join(labels[:limit]) + (f" +{len(labels) - limit}" if len(labels) > limit else "")


def _short_algo(name: str) -> str:
    return name.replace("CONVOLUTION_DEFAULT_", "")


def render_shake_top(report: "Report", con: Any) -> None:
    """Before the roots: the observer check (first when the dump perturbs the run), how the
    algorithms are known, and what was kept on disk."""
    ex = report.extra
    obs = ex.get("observer")
    if obs:
        style = "bold red" if obs.get("differs") else "green" if obs.get("checked") else "yellow"
        con.print(text("Observer check: ", "bold", (str(obs.get("summary", "")), style)))
    choice = ex.get("algorithm_choice") or {}
    if choice.get("known"):
        n_diff = sum(1 for v in report.vars if v.extra.get("algorithm_differs"))
        n_change = sum(1 for v in report.vars if v.extra.get("algorithm_differs") and (v.extra.get("n_results") or 1) > 1)
        con.print(text("Algorithms: ", "bold", f"from each run's own fast-run cache; the choice differs between runs at "
                       f"{n_diff} operator(s), {n_change} of them with a different result"), wrap=True)
        same = [v for v in report.vars if v.extra.get("algorithm_differs") and (v.extra.get("n_results") or 1) == 1]
        if same:
            names = ", ".join(f"{v.name} (var {v.id})" for v in same[:6]) + (f" +{len(same) - 6}" if len(same) > 6 else "")
            con.print(text("  another algorithm, the same bits: ", "dim", (names, "dim")), wrap=True)
    elif choice:
        con.print(text("Algorithms: ", "bold", ("not known: " + str(choice.get("why", "")), "dim")), wrap=True)
    st = ex.get("storage") or {}
    if st and not st.get("keep_all") and st.get("pruned_runs"):
        con.print(text("Disk: ", "bold", (f"run 1 kept whole, {st['pruned_runs']} later run(s) keep only what "
                                          f"differs ({st.get('vars_removed', 0)} var files, "
                                          f"{_mb(st.get('bytes_removed'))} not kept; --keep-all keeps them)", "dim")), wrap=True)


def render_root_causes(report: "Report", con: Any, top: int) -> None:
    for k, r in enumerate(report.roots[:top], 1):
        c = r.extra.get("cause_text") or r.extra.get("cause")
        if c:
            con.print(text(f"  root #{k} cause: ", "bold", (str(c), "yellow")), wrap=True)


def render_runs_by_operator(report: "Report", con: Any, top: int) -> None:
    """For the diverging operators (roots first): the runs grouped by the result they gave,
    each group's error against run 1, its algorithm and its local error."""
    rows = [v for v in report.vars if v.status not in AGREEING and (v.extra.get("n_results") or 1) > 1]
    roots = [r.id for r in report.roots]
    rows.sort(key=lambda v: (roots.index(v.id) if v.id in roots else len(roots), -(v.max_err or 0)))
    if not rows:
        return
    t = Table("Runs by operator (diverging operators; runs grouped by the result they gave, run 1's group first)")
    for head, kw in (("var", {"justify": "right", "no_wrap": True}), ("name", {"overflow": "fold", "ratio": 2}),
                     ("results", {"justify": "right"}), ("runs: max_err against run 1 (algorithm, local)",
                                                         {"overflow": "fold", "ratio": 5}),
                     ("cause", {"overflow": "fold", "ratio": 2})):
        t.add_column(head, **kw)
    for v in rows[:top]:
        local: Dict[str, Any] = v.extra.get("local_by_run") or {}
        parts: List[str] = []
        for g in v.extra.get("results") or []:
            runs = list(g.get("runs") or [])
            loc = [f"local {fmt_err(local[lbl])}" for lbl in runs if lbl in local][:1]
            more = [_short_algo(str(g["algorithm"]))] if g.get("algorithm") else []
            note = f" ({', '.join(more + loc)})" if more or loc else ""
            parts.append(f"{_runs_text(runs)}: {fmt_err(g.get('max_err'))}{note}")
        t.add_row(cell(str(v.id)), cell(v.name + ("  (root)" if v.id in roots else ""), "bold" if v.id in roots else ""),
                  cell(str(v.extra.get("n_results"))), cell(" | ".join(parts)), cell(cause_cell(v.extra)))
    con.table(t)
    if len(rows) > top:
        con.print(text(f"  ... {len(rows) - top} more diverging operators in the JSON/HTML report", "dim"))
