"""The sweep's part of the report: a :class:`lar_prec.report.Report` with ``"command": "sweep"``,
its terminal table and its option-by-variable HTML view.

The JSON is the common report object (design.md), read this way for a sweep:

* ``vars``: the reference graph's computed vars in execution order; ``max_err`` is the worst
  over the options that ran, ``status`` ``divergent`` when any option exceeds its tolerance
  there, and ``options`` (an extra key) maps each option to that var's ``max_err`` (null when
  not compared or NaN/Inf: ``options_nonfinite`` names the options where it is NaN/Inf);
* ``roots``: one per divergent option, where divergence starts in the option's rewritten graph
  (``id`` is the reference graph's id of that var, as in ``vars``; ``rewritten_id`` its id in
  the rewritten graph; ``option`` names the option);
* ``options`` (extra, top level): one record per option, worst first (:meth:`OptionResult.to_json`);
* ``timing``: seconds in load_and_run runs and in the analysis, and their ratio.
"""
from __future__ import annotations

import html as _html
import math
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional

from lar_prec.report_records import ReportRoot, ReportThreshold, ReportVar, fmt_err, run_from_result

if TYPE_CHECKING:
    from lar_prec.report import Report
    from lar_prec.sweep import SweepResult

STATUS_TEXT = {"runs": "runs", "load_failed": "load failed", "crashed": "crashed (signal)",
               "hung": "hung (timed out)", "skipped": "skipped"}


def _verdict(result: "SweepResult") -> str:
    opts = result.options
    bad = [o for o in opts if o.verdict == "diverges"]
    broken = [o for o in opts if o.status in ("crashed", "hung")]
    ran = [o for o in opts if o.status == "runs"]
    parts = []
    if bad:
        w = bad[0]
        parts.append(f"{len(bad)} of {len(ran)} option(s) that ran diverge; worst: {w.option} "
                     f"(output max_err {fmt_err(w.output_err)}, root {w.root_name or '?'})")
    else:
        parts.append(f"no option diverges: {len(ran)} option(s) ran within tolerance")
    if broken:
        parts.append(", ".join(f"{o.option} {STATUS_TEXT[o.status]}" for o in broken))
    return "; ".join(parts)


def sweep_report(result: "SweepResult", *, model: Optional[str] = None,
                 extra: Optional[Mapping[str, Any]] = None) -> "Report":
    """The :class:`lar_prec.report.Report` of a sweep."""
    from lar_prec.iodump import DumpFolder
    from lar_prec.namepair import skip_reason
    from lar_prec.report import Report
    from lar_prec.sweep_analysis import HALF_DTYPES, TOL_HALF

    per_option = {o.option: dict(o.errors) for o in result.options if o.status == "runs"}
    tol = {o.option: o.tolerance for o in result.options}
    vars_: List[ReportVar] = []
    for d in DumpFolder(result.reference.dump_dir):  # type: ignore[arg-type]
        v = d.var
        if skip_reason(v):
            continue
        errs = {name: e.get(v.name) for name, e in per_option.items()}
        known = [x for x in errs.values() if x is not None]
        half = v.dtype in HALF_DTYPES  # float16 rounding whatever the option (as sweep_analysis)
        over = any(x is not None and x > (max(tol[n], TOL_HALF) if half else tol[n]) for n, x in errs.items())
        vars_.append(ReportVar(id=v.id, name=v.name, opr=v.owner, opr_type=v.opr_type, dtype=v.dtype,
                               shape=tuple(v.shape), inputs=tuple(d.input_ids),
                               status="divergent" if over else "ok", max_err=max(known) if known else None,
                               extra={"options": errs,  # JSON has no Inf: null there, named here
                                      "options_nonfinite": [n for n, x in errs.items()
                                                            if x is not None and not math.isfinite(x)]}))
    roots = tuple(
        ReportRoot(id=int(o.root_ref_id), name=o.root_name, opr="", opr_type=o.root_opr_type or "",  # type: ignore[arg-type]
                   max_err=o.root_err, input_max_err=None, note=o.cause,
                   extra={"option": o.option, "rewritten_id": o.root_id})
        for o in result.options if o.verdict == "diverges" and o.root_name is not None)
    timing = {"run_seconds": round(result.run_seconds, 3), "analysis_seconds": round(result.analysis_seconds, 3),
              "wall_seconds": round(result.wall_seconds, 3),
              "analysis_over_runs": (round(result.analysis_seconds / result.run_seconds, 4)
                                     if result.run_seconds else None)}
    top: Dict[str, Any] = {"options": [o.to_json() for o in result.options], "timing": timing,
                           "reference": {"dir": str(result.reference.dir), "config": "naive, plain graph"},
                           "exit_code": result.exit_code}
    top.update(extra or {})
    thr = ReportThreshold(value=min(tol.values()) if tol else 0.0, mode="fixed",
                          reason="per option: float32 options 1e-4, fp16 options (ioc16, io16xc32) 1e-2",
                          extra={"per_option": tol})
    return Report(command="sweep", threshold=thr, vars=tuple(vars_), roots=roots,
                  runs=tuple(run_from_result(r) for r in result.runs), verdict=_verdict(result),
                  notes=("options sorted worst first; a hang or a crash under an option is a finding, "
                         "not a failure of the sweep",),
                  model=model, extra=top)


def render_sweep_terminal(report: "Report", con: Any) -> None:
    """The sweep table: one row per option, worst first (``con`` as report_terminal's)."""
    from lar_prec.report_terminal import _cell, _table, _text

    title = _text("lar-prec sweep", "bold")
    if report.model:
        title.append(f"  {report.model}", style="dim")
    con.rule(title)
    bad = int(report.extra.get("exit_code", 0))
    con.print(_text("Verdict: ", "bold", (report.verdict, "bold red" if bad else "bold green")))
    ref = report.extra.get("reference") or {}
    con.print(_text("Reference: ", "bold", f"naive kernels, plain graph ({ref.get('dir', '?')})"))
    t = _table("Options (worst first)")
    for col, kw in (("option", {}), ("status", {}), ("paired", {"justify": "right"}),
                    ("output err", {"justify": "right"}), ("tol", {"justify": "right"}), ("verdict", {}),
                    ("root (rewritten graph)", {"overflow": "fold"}), ("cause / reason", {"overflow": "fold"})):
        t.add_column(col, **kw)
    for o in report.extra.get("options", ()):
        verdict = o.get("verdict") or "—"
        style = "red" if verdict == "diverges" or o["status"] in ("crashed", "hung") else (
            "green" if verdict == "ok" else "yellow")
        root = o.get("root")
        root_text = f"{root['name']} ({root['opr_type']}, var {root['id']}, {fmt_err(root['max_err'])})" if root else ""
        paired = f"{o['vars_paired']}/{o['vars_total']}" if o["status"] == "runs" else ""
        why = o.get("cause") or o.get("reason") or ""
        t.add_row(_cell(o["option"], "bold"), _cell(STATUS_TEXT.get(o["status"], o["status"]),
                                                    "" if o["status"] in ("runs", "skipped") else "red"),
                  _cell(paired), _cell(fmt_err(o.get("output_err")) if o["status"] == "runs" else ""),
                  _cell(fmt_err(o["tolerance"])), _cell(verdict, style), _cell(root_text), _cell(why))
    con.table(t)
    tm = report.extra.get("timing") or {}
    if tm:
        ratio = tm.get("analysis_over_runs")
        con.print(_text("Time: ", "bold", f"runs {tm['run_seconds']:.2f} s (summed), analysis "
                        f"{tm['analysis_seconds']:.2f} s" + (f" ({ratio:.1%} of the runs)" if ratio is not None else "")
                        + f", wall {tm['wall_seconds']:.2f} s"))
    if report.extra.get("analysis_dir"):
        con.print(_text("Folder: ", "bold", str(report.extra["analysis_dir"])))


def _cell_html(err: Optional[float], tol: float) -> str:
    if err is None:
        return '<td class="na">—</td>'
    cls = "bad" if err > tol else "ok"
    return f'<td class="{cls}">{_html.escape(fmt_err(err))}</td>'


def sweep_html_section(report: "Report") -> str:
    """The option-by-variable view: reference vars down, options across, each cell the var's
    max_err under that option (red above the option's tolerance). Static HTML, no script."""
    options = [o for o in report.extra.get("options", ()) if o["status"] == "runs"]
    head = "".join(f"<th>{_html.escape(o['option'])}</th>" for o in options)
    rows = []
    for v in report.vars:
        errs = v.extra.get("options", {}) if v.extra else {}
        cells = "".join(_cell_html(errs.get(o["option"]), o["tolerance"]) for o in options)
        rows.append(f"<tr><th class=\"var\">{_html.escape(v.name)} <span class=\"dim\">"
                    f"{_html.escape(v.opr_type)}</span></th>{cells}</tr>")
    summary = "".join(
        f"<tr><td>{_html.escape(o['option'])}</td><td>{_html.escape(STATUS_TEXT.get(o['status'], o['status']))}</td>"
        f"<td>{_html.escape(o.get('verdict') or '—')}</td><td>{_html.escape(fmt_err(o.get('output_err')))}</td>"
        f"<td>{_html.escape((o.get('root') or {}).get('name') or '')}</td>"
        f"<td>{_html.escape(o.get('cause') or o.get('reason') or '')}</td></tr>"
        for o in report.extra.get("options", ()))
    return (
        '<section id="sweep"><style>#sweep table{border-collapse:collapse;margin:1em 0}'
        "#sweep td,#sweep th{border:1px solid #ccc;padding:2px 6px;font:12px monospace;text-align:right}"
        "#sweep th.var{text-align:left}#sweep .bad{background:#f8c0c0}#sweep .ok{background:#d8f0d8}"
        "#sweep .na{color:#999}#sweep .dim{color:#888}#sweep table.opts td,#sweep table.opts th{text-align:left}</style>"
        "<h2>Sweep: options</h2><table class=\"opts\"><tr><th>option</th><th>status</th><th>verdict</th><th>output err</th>"
        f"<th>root</th><th>cause / reason</th></tr>{summary}</table>"
        "<h2>Option by variable (max_err against the reference)</h2>"
        f"<table><tr><th class=\"var\">variable</th>{head}</tr>{''.join(rows)}</table></section>"
    )
