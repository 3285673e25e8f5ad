"""The sweep's part of the report: its terminal table (the default run's row, then each option,
worst first). :mod:`lar_prec.workflows.sweep.report` builds the report itself and says how its
JSON reads; the HTML page draws its options table and option-by-variable view from the JSON
(``lar_prec/report/page/report.js``), in the same words (``output_words``, ``words`` of a local
root, ``as default``).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Optional

from lar_prec.report.records import fmt_err, over_floor
from lar_prec.report.console import Table, cell, text

if TYPE_CHECKING:
    from lar_prec.report.model import Report

STATUS_TEXT = {"runs": "runs", "load_failed": "load failed", "crashed": "crashed (signal)",
               "hung": "hung (timed out)", "stalled": "stalled (no CPU)",
               "bad_dump": "dump unreadable", "skipped": "skipped"}


def local_text(o: Mapping[str, Any], limit: Optional[int] = None) -> str:
    """One option's local error in a few words for the terminal: its top local root and
    margin, "none" with how many were measured, or why it was not measured (cut at ``limit``
    characters: the whole reason is in the JSON, and the page shows it); then, for an option
    whose dump had the default run's bits, that its local error was taken from it."""
    loc = o.get("local")
    if not loc:
        return ""
    # an option whose dump had another run's bits says whose local error it shows, never cut
    taken = f" ({loc['same_words']})" if loc.get("same_words") else ""
    if not loc["measured"]:
        text = "not measured" + (": " + loc["why"].split(": ", 1)[-1] if loc.get("why") else "")
        return (text if limit is None or len(text) <= limit else text[:limit - 3] + "...") + taken
    missing = f", {len(loc['not_measured'])} not measured" if loc["not_measured"] else ""
    if not loc["roots"]:
        return f"none ({loc['n_measured']} measured{missing}){taken}"
    r = loc["roots"][0]
    words = r.get("words") or over_floor(None if r.get("nonfinite") else r["local_err"], r["floor"])
    more = f" +{len(loc['roots']) - 1} more" if len(loc["roots"]) > 1 else ""
    return f"{r['name']} ({r['opr_type']}) {words}{more}{missing}{taken}"


def root_text(root: Optional[Mapping[str, Any]]) -> str:
    """``name (type, var id, max_err)`` with only what is known (never ``None``)."""
    if not root:
        return ""
    err = "NaN/Inf" if root.get("nonfinite") else (fmt_err(root["max_err"]) if root.get("max_err") is not None else "")
    parts = [root.get("opr_type") or "", f"var {root['id']}" if root.get("id") is not None else "", err]
    inner = ", ".join(p for p in parts if p)
    return f"{root['name']} ({inner})" if inner else str(root["name"])


#: the verdicts as the table says them
VERDICT_TEXT = {"ok": "ok", "diverges": "diverges", "as_default": "as default"}


def _why(o: Mapping[str, Any]) -> str:
    """The cause or reason column: for an option as the default run, what it shares with it;
    then, where its run was made once more, whether its wrong value repeated."""
    if o.get("verdict") == "as_default":
        shared = o.get("shared_roots") or []
        why = ("the default kernels' own roots: " + ", ".join(shared) if shared
               else f"outputs {fmt_err(o.get('default_err'))} from the default run's: what the default run shows")
    else:
        why = o.get("cause") or o.get("reason") or ""
    again = (o.get("nondeterminism") or {}).get("words") or ""
    return f"{why}; {again}" if why and again else why or again


def speed_text(o: Mapping[str, Any]) -> str:
    """One option's speed for the table: ``1.80x faster (1.60x to 2.00x)``, ``no measurable
    difference``, the default run's time per iteration, or how a timed run failed."""
    sp = o.get("speed")
    if not sp:
        return ""
    iv = sp.get("speedup_interval")
    if sp.get("status") == "over_budget":  # the allowance and why: in the JSON, the page and --explain
        return "not timed (timing budget)"
    return sp["words"] + (f" ({iv[0]:.2f}x to {iv[1]:.2f}x)" if sp.get("measurable") and iv else "")


def render_sweep_terminal(report: "Report", con: Any) -> None:
    """The sweep table: the plain default run, then one row per option, worst first (``con``
    as report_terminal's)."""

    title = text("lar-prec sweep", "bold")
    if report.model:
        title.append(f"  {report.model}", style="dim")
    con.rule(title)
    bad = int(report.extra.get("exit_code", 0))
    con.print(text("Verdict: ", "bold", (report.verdict, "bold red" if bad else "bold green")))
    ref = report.extra.get("reference") or {}
    con.print(text("Reference: ", "bold", f"naive kernels, plain graph ({ref.get('dir', '?')})"))
    t = Table("The default run (no option), then each option (worst first)")
    for col, kw in (("option", {}), ("status", {}), ("paired", {"justify": "right"}),
                    ("output error (tolerance)", {"overflow": "fold"}), ("verdict", {}),
                    ("root", {"overflow": "fold"}), ("local root (margin)", {"overflow": "fold"}),
                    ("speed", {"overflow": "fold"}), ("cause / reason", {"overflow": "fold"})):
        t.add_column(col, **kw)
    default = report.extra.get("default")
    rows = ([dict(default, option="default (no option)")] if default else []) + list(report.extra.get("options", ()))
    for o in rows:
        verdict = o.get("verdict") or "—"
        style = "red" if verdict == "diverges" or o["status"] in ("crashed", "hung", "stalled", "load_failed", "bad_dump") else (
            "green" if verdict == "ok" else "yellow")
        paired = f"{o['vars_paired']}/{o['vars_total']}" if o["status"] == "runs" else ""
        out = o.get("output_words") or ""
        t.add_row(cell(o["option"], "bold"), cell(STATUS_TEXT.get(o["status"], o["status"]),
                                                    "" if o["status"] in ("runs", "skipped") else "red"),
                  cell(paired), cell(out), cell(VERDICT_TEXT.get(verdict, verdict), style),
                  cell(root_text(o.get("root"))),
                  cell(local_text(o, 90), "red" if (o.get("local") or {}).get("roots") else ""),
                  cell(speed_text(o), "" if (o.get("speed") or {}).get("status", "timed") in ("timed", "over_budget")
                       else "red"),
                  cell(_why(o)))
    con.table(t)
    tm = report.extra.get("timing") or {}
    if tm:
        ratio = tm.get("analysis_over_runs")
        lratio = tm.get("local_over_runs")
        local_part = (f", local error {tm['local_seconds']:.2f} s ({lratio:.1%} of the runs)"
                      if tm.get("local_seconds") and lratio is not None else "")
        con.print(text("Time: ", "bold", f"runs {tm['run_seconds']:.2f} s (summed), analysis "
                        f"{tm['analysis_seconds']:.2f} s" + (f" ({ratio:.1%} of the runs)" if ratio is not None else "")
                        + local_part + (f", timed runs {tm['speed_seconds']:.2f} s" if tm.get("speed_seconds") else "")
                        + f", wall {tm['wall_seconds']:.2f} s"))
    sp = report.extra.get("speed") or {}
    if sp.get("rounds") and not sp.get("off"):
        con.print(text("Speed: ", "bold", f"{sp['rounds']} interleaved rounds of --warmup-iter {sp['warmup_iter']} "
                        f"--iter {sp['iter']} without dumps, {sp['threads']} thread(s) on {sp['device']}, the same "
                        "for every option; no measurable difference where the spreads overlap"
                        + (f"; front (within precision, faster): {', '.join(sp['front'])}" if sp.get("front") else "")))
    elif sp.get("off"):
        con.print(text("Speed: ", "bold", str(sp["off"])))
    loc = report.extra.get("local") or {}
    if loc and not loc.get("measured") and loc.get("why"):
        con.print(text("Local error: ", "bold", str(loc["why"])))
    if report.extra.get("analysis_dir"):
        con.print(text("Folder: ", "bold", str(report.extra["analysis_dir"])))
