"""The terminal views of two environments: ``lar-prec diff``'s sides, verdict counts and root
(drawn from its Report's extras, before the common tables) and ``lar-prec bisect``'s builds
(drawn from its ``lar-prec.bisect/1`` JSON). The page draws the same from ``report.js``.

A diff report holds, besides the design's keys: ``sides`` (``a``, ``b``: build, remote, flags,
env, runs, jitter measured, largest jitter), ``diff_counts`` (vars per verdict), ``diff_pairing``
(``how``: id or key, what has no partner), ``rounding`` (each side against the naive reference),
``run_to_run`` (B's wrong values run again), and per var ``diff``, ``jitter_a``, ``jitter_b``,
``rounding``; its roots carry ``local_err``/``floor`` (B's operator on A's inputs) and
``oracle``/``nearer``.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Optional

from lar_prec.report.console import Table, cell, open_output, text
from lar_prec.report.records import fmt_err

if TYPE_CHECKING:
    from lar_prec.report.model import Report

#: how a verdict reads, and its style
VERDICT_STYLE = {"equal": "green", "within_jitter": "green", "within_rounding": "green", "outside_jitter": "bold red",
                 "nonfinite": "bold magenta"}
BUILD_STYLE = {"good": "green", "bad": "bold red", "skip": "yellow", "untested": "dim"}


def _side_line(s: Mapping[str, Any]) -> str:
    env = ", ".join(f"{k}={v}" for k, v in (s.get("env") or {}).items())
    where = f" on {s['remote']}" if s.get("remote") else ""
    jit = (f"jitter up to {fmt_err(s.get('largest_jitter'))} in {s.get('vars_that_jitter', 0)} var(s)"
           if s.get("jitter_measured") else "jitter not measured (one run)")
    what = s.get("build") or s.get("from") or "?"
    return (f"{what}{where}; flags {' '.join(s.get('flags') or ()) or 'none'}; env {env or 'unchanged'}; "
            f"{s.get('runs', 0)} run(s), {jit}")


def render_diff_top(report: "Report", con: Any) -> None:
    """Before the roots: each side, the vars per verdict, how they paired, the root's local error
    and oracle."""
    ex = report.extra
    for name, key in (("A", "a"), ("B", "b")):
        side = (ex.get("sides") or {}).get(key)
        if side:
            con.print(text(f"Side {name}: ", "bold", _side_line(side)))
    counts = ex.get("diff_counts") or {}
    con.print(text("Per variable: ", "bold", *[(f"{n} {v.replace('_', ' ')}  ", VERDICT_STYLE.get(v, ""))
                                               for v, n in counts.items()]))
    pairing = ex.get("diff_pairing") or {}
    if pairing.get("how") == "key":
        con.print(text("Paired by operator key: ", "bold",
                       f"{pairing.get('compared')} of A's {pairing.get('reference_vars')} variables; "
                       f"{len(pairing.get('unpaired_a') or ())} of A, {len(pairing.get('unpaired_b') or ())} of B "
                       "without a partner"))
    rnd = ex.get("rounding") or {}
    if rnd.get("measured"):
        sides = "; ".join(f"{k.upper()} " + (", ".join(x["name"] for x in (rnd.get(k) or {}).get("roots") or ()) or
                                             "every operator within its bound") for k in ("a", "b"))
        con.print(text("Against the naive reference: ", "bold", f"{sides} ({rnd.get('within', 0)} variable(s) "
                                                               "within rounding)"))
    rtr = ex.get("run_to_run")
    if rtr:
        con.print(text("Side B's runs compared: ", "bold", (str(rtr.get("words")), "bold red" if rtr.get("nondeterministic")
                                                       else "")))
    for r in report.roots[:1]:
        parts = []
        if r.extra.get("local_err") is not None:
            parts.append(f"local error {fmt_err(r.extra['local_err'])} on A's inputs (floor "
                         f"{fmt_err(r.extra.get('floor'))}, {r.extra.get('label')})")
        o = r.extra.get("oracle") or {}
        if r.extra.get("nearer"):
            parts.append(f"float64 oracle: A {fmt_err(o.get('a_err'))} from it, B {fmt_err(o.get('b_err'))}: "
                         f"{str(r.extra['nearer']).upper()} nearer")
        if parts:
            con.print(text("First outside: ", "bold", f"{r.name}: " + "; ".join(parts)))


def render_bisect_terminal(data: Mapping[str, Any], out: Any) -> None:
    """The verdict, each build tested (verdict, where it came from, why), the first bad one's
    root and report, the notes."""
    con = open_output(out)
    con.rule(text("lar-prec bisect", "bold", (f"  {data.get('model', '')}", "dim")))
    code = data.get("exit_code")
    con.print(text("Verdict: ", "bold", (str(data.get("verdict", "")), "bold red" if code else "bold green")))
    t = Table(f"Builds (good end #{data.get('good')}, bad end #{data.get('bad')})")
    for col, kw in (("#", {"justify": "right"}), ("build", {"overflow": "fold"}), ("verdict", {}), ("from", {}),
                    ("output max_err", {"justify": "right"}), ("why", {"overflow": "fold"})):
        t.add_column(col, **kw)
    for e in data.get("builds") or ():
        if e.get("verdict") == "untested":
            continue
        t.add_row(cell(str(e["index"])), cell(e["build"]), cell(e["verdict"], BUILD_STYLE.get(e["verdict"], "")),
                  cell(e.get("source") or "—"), cell(fmt_err(e.get("output_max_err"))), cell(e.get("why") or ""))
    con.table(t)
    first: Optional[Mapping[str, Any]] = data.get("first_bad")
    if first and first.get("report"):
        con.print(text("First bad build's diff against the good end: ", "bold", str(first["report"])))
    for n in data.get("notes") or ():
        con.print(text("Note: ", "bold yellow", str(n)), wrap=True)
    con.print(text(f"analysis folder: {data.get('analysis_dir')} (bisect.json, bisect.html, a folder per build)"))
