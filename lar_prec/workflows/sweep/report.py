"""The :class:`~lar_prec.report.model.Report` of a sweep (``"command": "sweep"``); its terminal
table and HTML view are :mod:`lar_prec.report.sweep`'s.

The JSON is the common report object (design.md), read this way for a sweep:

* ``vars``: the reference graph's computed vars in execution order; ``max_err`` is the worst
  over the options that ran, ``status`` ``divergent`` when an option that diverges beyond the
  default run marks it (its local roots it adds, its root, the vars past its tolerance) or the
  default run's own verdict does; ``options`` (an extra key) maps each option to that var's
  ``max_err`` (null when not compared or NaN/Inf: ``options_nonfinite`` names the options where
  it is NaN/Inf, ``options_divergent`` those that mark it, so the page colours each cell by the
  sweep's own verdict); ``local`` maps each option whose local error was measured to that var's
  local error (null: NaN/Inf, or not measured under that option); ``default`` and
  ``default_divergent``: the same for the default run (no option);
* ``roots``: one per divergent option and for the default run when its own verdict diverges
  (``option`` ``default``): its local root when local error was measured, else where divergence
  starts (``id`` is the reference graph's id of that var, as in ``vars``; ``rewritten_id`` its id
  in the rewritten graph; ``rule`` ``local``, ``output`` or ``dump``; ``local_err``, ``floor``,
  ``margin`` for local);
* ``options`` (extra, top level): one record per option, worst first (:meth:`OptionResult.to_json`:
  verdict ``ok``, ``as_default`` or ``diverges``, ``output_tolerance`` and ``output_words``,
  ``default_err``/``default_root`` against the default run, ``added_roots``/``shared_roots``,
  ``local``, ``dump_root``, ``output_verdict``: its outputs' line in words that follow its verdict
  against the reference, ``nondeterminism``: where it diverges, its run made once more and compared
  bit for bit, with ``words``); ``default``: the default run's record; ``counts`` of each verdict;
* ``threshold``: the default run's output tolerance, each option's in ``per_option``;
* ``local`` (extra, top level): whether local error was measured and, if not, why;
* ``timing``: seconds in load_and_run runs, in the analysis and in local error, and their ratios;
  ``speed_seconds``: in the timed runs (not among the runs' seconds);
* ``speed`` (extra, top level): how the timed runs were made (``rounds``, ``warmup_iter``,
  ``iter``, ``threads``, ``device``, ``how``, ``off``: why not), ``default`` the default run's
  times, ``front``: the options within their precision measurably faster that no other beats
  on speed-up and output error; each option's record has ``speed`` (``median_ms``,
  ``spread_ms``, ``round_ms``, ``speedup`` and ``speedup_interval``, ``measurable``, ``words``,
  ``status``: ``timed`` or how a timed run failed) and ``speed_words`` ("nchw44: 1.80x faster
  (1.60x to 2.00x), within tolerance").
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Mapping, Optional

from lar_prec.compare.namepair import skip_reason
from lar_prec.compare.tolerance import fmt_num
from lar_prec.dumps.folder import DumpFolder
from lar_prec.records import json_number
from lar_prec.report.model import Report
from lar_prec.report.records import ReportRoot, ReportThreshold, ReportVar, over_floor, run_from_result
from lar_prec.report.sweep import STATUS_TEXT
from lar_prec.workflows.sweep.options import OptionResult, SweepResult
from lar_prec.workflows.sweep.speed import front


def _default_words(d: Optional[OptionResult]) -> str:
    """The plain default run's own verdict, in a few words."""
    if d is None:
        return ""
    if d.status != "runs":
        return f"the default run (no option) {STATUS_TEXT[d.status]}" + (f" ({_why(d)})" if d.reason else "")
    if d.verdict != "diverges":
        tol = d.output_tolerance
        if tol is not None and d.output_err is not None and not tol.holds(d.output_err):
            return (f"the default run (no option) is ok (output error {fmt_num(d.output_err)} past the tolerance "
                    f"{fmt_num(tol.value)}, every operator within its bound: rounding accumulated)")
        return "the default run (no option) is ok"
    roots = [r.name for r in d.local.roots] if d.local is not None and d.local.measured else []
    at = f"its own roots: {', '.join(roots[:3])}" + (f" +{len(roots) - 3} more" if len(roots) > 3 else "") if roots \
        else f"root {d.root_name or '?'}"
    return f"the default run (no option) diverges ({at}{_repeats(d)})"


def _repeats(o: OptionResult) -> str:
    """Whether its wrong value repeated in its second run, in a few words ("" when not told)."""
    n = o.nondeterminism
    if n is None or not n.told:
        return ""
    if n.differs:
        return f"; differs run to run from {n.name} ({n.opr_type}) on"
    return "; the same bits in a second run" if n.same_bits else ""


def _verdict(result: SweepResult) -> str:
    """The headline: what options add over the default run, what is as the default run, and
    the default run's own verdict."""
    opts = result.options
    bad = [o for o in opts if o.verdict == "diverges"]
    same = [o for o in opts if o.verdict == "as_default"]
    ok = [o for o in opts if o.verdict == "ok"]
    broken = [o for o in opts if o.status in ("crashed", "hung", "stalled", "load_failed", "bad_dump")]
    ran = [o for o in opts if o.status == "runs"]
    parts = []
    if bad:
        w = bad[0]
        what = (f"output error {fmt_num(w.output_err)}, root {w.root_name or '?'}" if w.output_err is not None
                else w.reason or "no output error measured") + _repeats(w)
        parts.append(f"{len(bad)} of {len(ran)} option(s) that ran diverge beyond the default run; worst: {w.option} "
                     f"({what})")
    elif broken:  # not an all-clear: some options never gave a result to judge
        parts.append(f"no option that ran diverges beyond the default run ({len(ran)} ran), but {len(broken)} did "
                     "not run through")
    else:
        parts.append(f"no option diverges beyond the default run ({len(ran)} ran)")
    if ok:
        parts.append(f"{len(ok)} ok")
    if same:
        d = result.default
        roots = sorted({n for o in same for n in o.shared_roots})
        why = (f"the default kernels' own roots: {', '.join(roots[:3])}" + (f" +{len(roots) - 3} more" if len(roots) > 3
                                                                              else "")) if roots else \
            f"the default run's own output error {fmt_num(d.output_err) if d is not None else '?'}"
        parts.append(f"{len(same)} as default ({why})")
    if broken:
        parts.append(", ".join(f"{o.option} {STATUS_TEXT[o.status]}" + (f" ({_why(o)})" if o.status in (
            "load_failed", "bad_dump") else "") for o in broken))
    if result.default is not None:
        parts.append(_default_words(result.default))
    if result.speed is not None and result.speed.off is None:
        parts.append(_speed_words(result))
    by_local = any(o.root_rule in ("local", "output") for o in opts)
    return "; ".join(parts) + (" [roots by local error]" if by_local else "")


def _speed_words(result: SweepResult) -> str:
    """The headline's speed part: the options measurably faster or slower than the default run,
    each beside its precision verdict, fastest first; those that failed a timed run."""
    timed = [o for o in result.options if o.speed is not None]
    apart = sorted((o for o in timed if o.speed.measurable), key=lambda o: -(o.speed.speedup or 0))  # type: ignore[union-attr]
    failed = [o for o in timed if o.speed.status != "timed"]  # type: ignore[union-attr]
    d = result.default.speed if result.default is not None else None
    if d is not None and d.status != "timed":
        return f"speed not compared: the default run's {d.words()}"
    text = ("speed: " + "; ".join(o.trade_words() for o in apart) if apart else
            f"speed: no measurable difference from the default run ({len(timed) - len(failed)} option(s) timed)")
    over = [o.option for o in failed if o.speed.status == "over_budget"]  # type: ignore[union-attr]
    failed = [o for o in failed if o.option not in over]
    if failed:
        text += "; " + ", ".join(f"{o.option}: {o.speed.words()}" for o in failed)  # type: ignore[union-attr]
    if over:  # the why is in each row; the headline names them and the way to time them
        text += f"; not timed within the timing budget: {', '.join(over)} (--speed-budget)"
    return text


def _speed_json(result: SweepResult) -> Dict[str, Any]:
    """``speed`` (extra, top level): how the options were timed, and the front: options within
    their precision (ok or as default) measurably faster than the default run that no other
    such option beats on both speed-up and output error."""
    sp = result.speed
    if sp is None:
        return {"off": "not timed"}
    good = [o for o in result.options if o.verdict in ("ok", "as_default") and o.speed is not None
            and o.speed.measurable and (o.speed.speedup or 0) > 1]
    pts = [(o.option, float(o.speed.speedup), o.output_err or 0.0) for o in good]  # type: ignore[union-attr, arg-type]
    return {**sp.to_json(), "front": list(front(pts)),
            "default": None if sp.default is None else sp.default.to_json()}


def _why(o: OptionResult) -> str:
    """The words of a failure's reason, without MegEngine's own line (in the table and run.json)."""
    return (o.reason or "").split(" (MegEngine:")[0]


def _root(o: OptionResult) -> ReportRoot:
    """The report root of a divergent option: its top local root, or its dump-only root."""
    extra: Dict[str, Any] = {"option": o.option, "rewritten_id": o.root_id, "rule": o.root_rule}
    note = o.cause
    top = next((r for r in (o.local.roots if o.local is not None else ()) if r.name == o.root_name), None)
    if o.root_rule == "local" and top is not None:
        extra.update(local_err=json_number(top.local_err), floor=top.floor, margin=json_number(top.margin))
        text = over_floor(top.local_err, top.floor)
        note = f"{text}; {note}" if note else text
    return ReportRoot(id=int(o.root_ref_id), name=o.root_name or "", opr="", opr_type=o.root_opr_type or "",  # type: ignore[arg-type]
                      max_err=o.root_err, input_max_err=None, note=note, extra=extra)


def _marks(o: OptionResult) -> frozenset:
    """The reference vars a divergent option (or default run) makes divergent: its local roots
    (those it adds over the default run when it was told apart from it), its root, and the vars
    past its tolerance; an option ``ok`` or ``as_default`` marks none."""
    if o.verdict != "diverges":
        return frozenset()
    roots = set(o.added_roots) if o.added_roots or o.shared_roots else {
        r.name for r in (o.local.roots if o.local is not None and o.local.measured else ())}
    return frozenset(roots | set(o.over) | ({o.root_name} if o.root_name else set()))


def _threshold(result: SweepResult) -> ReportThreshold:
    rows = [o for o in result.options if o.output_tolerance is not None]
    tol = {o.option: o.tolerance for o in result.options}
    d = result.default
    value = d.tolerance if d is not None else (min(tol.values()) if tol else 0.0)
    texts = [f"{o.option}: {o.output_tolerance.explain()}" for o in rows]  # type: ignore[union-attr]
    return ReportThreshold(value=value, mode="fixed",
                           reason="per option, the outputs' tolerance max(band, 2 x level of correct kernels) "
                                  "(docs/threshold.md); every paired var is held to it by the dumps: " + "; ".join(texts),
                           extra={"per_option": tol, "default": d.tolerance if d is not None else None})


def sweep_report(result: SweepResult, *, model: Optional[str] = None,
                 extra: Optional[Mapping[str, Any]] = None) -> Report:
    """The :class:`lar_prec.report.Report` of a sweep."""
    ran = [o for o in result.options if o.status == "runs"]
    per_option = {o.option: dict(o.errors) for o in ran}
    local = {o.option: dict(o.local.errors) for o in ran if o.local is not None and o.local.measured}
    marks = {o.option: _marks(o) for o in ran}
    d = result.default if result.default is not None and result.default.status == "runs" else None
    default_errs = dict(d.errors) if d is not None else {}
    default_marks = _marks(d) if d is not None else frozenset()
    vars_: List[ReportVar] = []
    for dump in DumpFolder(result.reference.dump_dir):  # type: ignore[arg-type]
        v = dump.var
        if skip_reason(v):
            continue
        errs = {name: e.get(v.name) for name, e in per_option.items()}
        known = [x for x in errs.values() if x is not None]
        divergent = [n for n in errs if v.name in marks[n]]
        vextra: Dict[str, Any] = {"options": errs,  # JSON has no Inf: null there, named here
                                  "options_nonfinite": [n for n, x in errs.items()
                                                        if x is not None and not math.isfinite(x)],
                                  "options_divergent": divergent}
        if local:
            vextra["local"] = {n: json_number(e.get(v.name)) for n, e in local.items()}
        if d is not None:
            vextra.update(default=json_number(default_errs.get(v.name)), default_divergent=v.name in default_marks)
        vars_.append(ReportVar(id=v.id, name=v.name, opr=v.owner, opr_type=v.opr_type, dtype=v.dtype,
                               shape=tuple(v.shape), inputs=tuple(dump.input_ids),
                               status="divergent" if divergent or v.name in default_marks else "ok",
                               max_err=max(known) if known else None, extra=vextra))
    rows = ((d,) if d is not None else ()) + tuple(result.options)
    roots = tuple(_root(o) for o in rows if o.verdict == "diverges" and o.root_name is not None
                  and o.root_ref_id is not None)
    timing = {"run_seconds": round(result.run_seconds, 3), "analysis_seconds": round(result.analysis_seconds, 3),
              "wall_seconds": round(result.wall_seconds, 3),
              "analysis_over_runs": (round(result.analysis_seconds / result.run_seconds, 4)
                                     if result.run_seconds else None),
              "local_seconds": round(result.local_seconds, 3),
              "local_over_runs": (round(result.local_seconds / result.run_seconds, 4)
                                  if result.run_seconds else None),
              "speed_seconds": round(result.speed.seconds, 3) if result.speed is not None else 0.0}
    top: Dict[str, Any] = {"options": [o.to_json() for o in result.options], "timing": timing,
                           "default": None if result.default is None else result.default.to_json(),
                           "reference": {"dir": str(result.reference.dir), "config": "naive, plain graph"},
                           "local": {"measured": bool(local), "why": result.local_off,
                                     "roots_by": "local" if local else "dump"},
                           "counts": {v: sum(1 for o in result.options if o.verdict == v)
                                      for v in ("diverges", "as_default", "ok")},
                           "exit_code": result.exit_code, "speed": _speed_json(result)}
    top.update(extra or {})
    return Report(command="sweep", threshold=_threshold(result), vars=tuple(vars_), roots=roots,
                  runs=tuple(run_from_result(r) for r in result.runs), verdict=_verdict(result),
                  notes=("options sorted worst first; each is judged by what it adds over the default run (no "
                         "option): 'as default' shows the default run's own roots and output error; a hang or a "
                         "crash under an option is a finding, not a failure of the sweep",),
                  model=model, extra=top)
