"""The :class:`~lar_prec.report.model.Report` of a sweep (``"command": "sweep"``); its terminal
table and HTML view are :mod:`lar_prec.report.sweep`'s.

The JSON is the common report object (design.md), read this way for a sweep:

* ``vars``: the reference graph's computed vars in execution order; ``max_err`` is the worst
  over the options that ran, ``status`` ``divergent`` when an option diverges there (by local
  error: a local root of the option, or past the tolerance under an option that has one; by
  the dumps alone: past the option's tolerance), and ``options`` (an extra key) maps each
  option to that var's ``max_err`` (null when not compared or NaN/Inf: ``options_nonfinite``
  names the options where it is NaN/Inf); ``local`` maps each option whose local error was
  measured to that var's local error (null: NaN/Inf, or not measured under that option);
* ``roots``: one per divergent option, its local root when local error was measured, else
  where divergence starts in the option's rewritten graph (``id`` is the reference graph's id
  of that var, as in ``vars``; ``rewritten_id`` its id in the rewritten graph; ``option`` names
  the option; ``rule`` ``local`` or ``dump``; ``local_err``, ``floor``, ``margin`` for local);
* ``options`` (extra, top level): one record per option, worst first (:meth:`OptionResult.to_json`),
  with ``local`` (measured, why, roots with floor and margin, not_measured) and ``dump_root``;
* ``local`` (extra, top level): whether local error was measured and, if not, why;
* ``timing``: seconds in load_and_run runs, in the analysis and in local error, and their ratios.
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Mapping, Optional

from lar_prec.compare.namepair import skip_reason
from lar_prec.dumps.folder import DumpFolder
from lar_prec.records import json_number
from lar_prec.report.model import Report
from lar_prec.report.records import ReportRoot, ReportThreshold, ReportVar, fmt_err, run_from_result
from lar_prec.report.sweep import STATUS_TEXT
from lar_prec.workflows.sweep.options import OptionResult, SweepResult


def _verdict(result: SweepResult) -> str:
    opts = result.options
    bad = [o for o in opts if o.verdict == "diverges"]
    broken = [o for o in opts if o.status in ("crashed", "hung", "stalled", "load_failed", "bad_dump")]
    ran = [o for o in opts if o.status == "runs"]
    parts = []
    if bad:
        w = bad[0]
        what = (f"output max_err {fmt_err(w.output_err)}, root {w.root_name or '?'}" if w.output_err is not None
                else w.reason or "no output error measured")
        parts.append(f"{len(bad)} of {len(ran)} option(s) that ran diverge; worst: {w.option} ({what})")
    elif broken:  # not an all-clear: some options never gave a result to judge
        parts.append(f"no option that ran diverges ({len(ran)} ran within tolerance), but {len(broken)} did not run through")
    else:
        parts.append(f"no option diverges: {len(ran)} option(s) ran within tolerance")
    if broken:
        parts.append(", ".join(f"{o.option} {STATUS_TEXT[o.status]}" + (f" ({_why(o)})" if o.status in (
            "load_failed", "bad_dump") else "") for o in broken))
    by_local = any(o.root_rule == "local" for o in opts)
    return "; ".join(parts) + (" [roots by local error]" if by_local else "")



def _why(o: OptionResult) -> str:
    """The words of a failure's reason, without MegEngine's own line (in the table and run.json)."""
    return (o.reason or "").split(" (MegEngine:")[0]


def _root(o: OptionResult) -> ReportRoot:
    """The report root of a divergent option: its top local root, or its dump-only root."""
    extra: Dict[str, Any] = {"option": o.option, "rewritten_id": o.root_id, "rule": o.root_rule}
    note = o.cause
    if o.root_rule == "local" and o.local is not None and o.local.roots:
        r = o.local.roots[0]
        extra.update(local_err=json_number(r.local_err), floor=r.floor, margin=json_number(r.margin))
        text = f"local error {fmt_err(r.local_err)} > its floor {fmt_err(r.floor)} (x{_margin(r.margin)})"
        note = f"{text}; {note}" if note else text
    return ReportRoot(id=int(o.root_ref_id), name=o.root_name or "", opr="", opr_type=o.root_opr_type or "",  # type: ignore[arg-type]
                      max_err=o.root_err, input_max_err=None, note=note, extra=extra)


def _margin(m: float) -> str:
    return "inf, floor 0" if not math.isfinite(m) else f"{m:.3g}"


def sweep_report(result: SweepResult, *, model: Optional[str] = None,
                 extra: Optional[Mapping[str, Any]] = None) -> Report:
    """The :class:`lar_prec.report.Report` of a sweep."""
    ran = [o for o in result.options if o.status == "runs"]
    per_option = {o.option: dict(o.errors) for o in ran}
    local = {o.option: dict(o.local.errors) for o in ran if o.local is not None and o.local.measured}
    local_roots = {o.option: {r.name for r in o.local.roots} for o in ran if o.option in local}  # type: ignore[union-attr]
    diverges = {o.option for o in ran if o.verdict == "diverges"}
    over_tol = {o.option: frozenset(o.over) for o in ran}
    tol = {o.option: o.tolerance for o in result.options}
    vars_: List[ReportVar] = []
    for d in DumpFolder(result.reference.dump_dir):  # type: ignore[arg-type]
        v = d.var
        if skip_reason(v):
            continue
        errs = {name: e.get(v.name) for name, e in per_option.items()}
        known = [x for x in errs.values() if x is not None]

        def over(n: str, x: Optional[float]) -> bool:
            past = v.name in over_tol[n]  # the option's comparison decided it (cross_graph)
            if n in local:  # by local error: a root, or past the tolerance downstream of one
                return v.name in local_roots[n] or (past and n in diverges)
            return past

        divergent = [n for n, x in errs.items() if over(n, x)]
        vextra: Dict[str, Any] = {"options": errs,  # JSON has no Inf: null there, named here
                                  "options_nonfinite": [n for n, x in errs.items()
                                                        if x is not None and not math.isfinite(x)],
                                  "options_divergent": divergent}
        if local:
            vextra["local"] = {n: json_number(e.get(v.name)) for n, e in local.items()}
        vars_.append(ReportVar(id=v.id, name=v.name, opr=v.owner, opr_type=v.opr_type, dtype=v.dtype,
                               shape=tuple(v.shape), inputs=tuple(d.input_ids),
                               status="divergent" if divergent else "ok",
                               max_err=max(known) if known else None, extra=vextra))
    roots = tuple(_root(o) for o in result.options if o.verdict == "diverges" and o.root_name is not None)
    timing = {"run_seconds": round(result.run_seconds, 3), "analysis_seconds": round(result.analysis_seconds, 3),
              "wall_seconds": round(result.wall_seconds, 3),
              "analysis_over_runs": (round(result.analysis_seconds / result.run_seconds, 4)
                                     if result.run_seconds else None),
              "local_seconds": round(result.local_seconds, 3),
              "local_over_runs": (round(result.local_seconds / result.run_seconds, 4)
                                  if result.run_seconds else None)}
    top: Dict[str, Any] = {"options": [o.to_json() for o in result.options], "timing": timing,
                           "reference": {"dir": str(result.reference.dir), "config": "naive, plain graph"},
                           "local": {"measured": bool(local), "why": result.local_off,
                                     "roots_by": "local" if local else "dump"},
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
