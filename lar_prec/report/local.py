"""Local error in a report: the ``local``/``floor``/``label`` columns of every measured var and,
by local error (``--threshold auto`` when the model is at hand), the roots and statuses.

:func:`local_columns` computes them from a :class:`~lar_prec.diagnosis.local_analysis.LocalAnalysis`
before the :class:`~lar_prec.report.model.Report` exists (:func:`lar_prec.report.model.from_tree`
calls it), so a report's verdict is decided once:

- every measured var gets the extra JSON keys ``local_err``, ``floor``, ``label``,
  ``inherited_from`` (and ``margin`` for roots); the accumulated error stays ``max_err``;
- with ``roots_by="local"`` the roots are the operators whose local error exceeds their own
  floor, most likely (largest margin) first, each with its floor and margin; a root the band
  missed becomes ``divergent``; a var whose error is only noise, or inherited from no root,
  becomes ``ok`` (``note`` says why). With ``"band"`` or ``"fixed"`` the dump-only roots stay.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence, Tuple

from lar_prec.diagnosis.floors import layerwise_ancestors, root_text, spread_json
from lar_prec.records import json_number
from lar_prec.report.records import ReportRoot, ReportVar

if TYPE_CHECKING:  # a type only: the module runs layerwise children, which a report never does
    from lar_prec.diagnosis.local_analysis import LocalAnalysis

#: the extra per-var JSON keys local error adds (design.md: more fields are welcome)
LOCAL_VAR_KEYS = ("local_err", "floor", "label", "inherited_from", "margin", "local_units", "units_max", "units_rms",
                  "spread", "root_tests")


def report_ids(la: LocalAnalysis) -> Tuple[Dict[int, int], Dict[int, int]]:
    """(report id -> local id, local id -> report id). The report's vars carry the reference
    dump's ids; local error is keyed by the ids of the graph MegEngine loaded for the build.
    They agree with the bundled load_and_run, not always with another binary (a real
    load_and_run in MDL mode): each measured var's ``ref_id`` links the two."""
    measured = la.result.layerwise.measured
    to_local = {m.ref_id: m.id for m in measured if m.ref_id is not None}
    to_report = {m.id: m.ref_id for m in measured if m.ref_id is not None}
    for m in measured:  # no reference value (none in the report either): its own id, unless taken
        if m.ref_id is None:
            to_report[m.id] = m.id
            to_local.setdefault(m.id, m.id)
    return to_local, to_report


def _ancestors_not_isolated(la: LocalAnalysis, var_id: int) -> bool:
    return any(la.verdict.labels.get(a) == "not_isolated" for a in layerwise_ancestors(la.result.layerwise, var_id))


def _var_extra(la: LocalAnalysis, lv: Any, to_report: Mapping[int, int]) -> Dict[str, Any]:
    """The local keys of the report var measured as ``lv`` (a LocalVar, local ids)."""
    vid = lv.id
    floor = la.verdict.floors.get(vid)
    d: Dict[str, Any] = {"local_err": json_number(lv.local_err), "floor": json_number(floor),
                         "label": la.verdict.labels.get(vid),
                         "inherited_from": [to_report.get(k, k) for k in la.verdict.inherited_from.get(vid, ())]}
    if lv.bound is not None:  # the local difference in rounding units of its own sums (TERMS_C allowed)
        d["local_units"] = json_number(lv.bound.worst)
        d["units_max"] = json_number(lv.bound.units)
        sp = spread_json(la.result, lv)
        if sp is not None:  # its distribution over the elements (issue 57)
            d["units_rms"] = sp["units_rms"]
            d["spread"] = sp
    root = next((r for r in la.verdict.roots if r.id == vid), None) if d["label"] == "root" else None
    if root is not None:
        d["margin"] = json_number(root.margin)
        d["root_tests"] = list(root.tests)
    if lv.problem:
        d["not_isolated_why"] = lv.problem
    if vid in la.verdict.not_judged:
        d["not_judged"] = la.verdict.not_judged[vid]
    return d


def _restatus(v: Any, la: LocalAnalysis, local_id: int) -> Any:
    """A var's status by local error: a root diverges; noise, or error inherited from no root
    (and from nothing unmeasured), is ok. Other statuses (nonfinite, missing, ...) stay."""
    label = v.extra.get("label")
    if v.status not in ("ok", "divergent") or label in (None, "not_judged"):
        return v  # not judged by local error: the dump-only rule's status stands
    if label == "root" and v.status == "ok":
        err = v.extra.get("local_err")
        if "worst_element" not in (v.extra.get("root_tests") or ("worst_element",)):
            return replace(v, status="divergent", note="its elements' distribution is beyond rounding ("
                                                      + ", ".join(v.extra.get("root_tests") or ()) + "), though max_err "
                                                      "is within the threshold")
        return replace(v, status="divergent", note=f"local error {'non-finite' if err is None else format(err, '.3g')} "
                                                  f"above its floor {v.extra.get('floor') or 0:.3g}, though max_err "
                                                  "is within the threshold")
    if v.status == "divergent" and (label in ("noise", "clean") or (
            label == "inherited" and not v.extra.get("inherited_from") and not _ancestors_not_isolated(la, local_id))):
        return replace(v, status="ok", note=f"{label}: local error within its floor and no root upstream "
                                            "(divergent by max_err alone)")
    return v


def _local_roots(by_id: Mapping[int, ReportVar], la: LocalAnalysis, paths: Mapping[int, Tuple[int, ...]],
                 to_report: Mapping[int, int]) -> Tuple[ReportRoot, ...]:
    out = []
    for r in la.verdict.roots:
        v = by_id.get(to_report.get(r.id, r.id))
        if v is None:
            continue
        ins = [by_id.get(u) for u in v.inputs]
        in_errs = [u.max_err for u in ins if u is not None and u.max_err is not None]
        in_max = max(in_errs) if in_errs else None
        amp = v.max_err / in_max if v.max_err is not None and in_max else None
        out.append(ReportRoot(
            id=v.id, name=v.name, opr=v.opr, opr_type=v.opr_type, max_err=v.max_err, input_max_err=in_max,
            amplification=json_number(amp), path=paths.get(v.id, ()), status=v.status, dtype=v.dtype,
            inputs_equal=bool(ins) and in_max == 0,
            note=root_text(r).replace("local ", "local error ", 1).replace("> floor", "> its floor"),
            extra={"rule": "local", "local_err": json_number(r.local_err), "floor": json_number(r.floor),
                   "margin": json_number(r.margin), "tests": list(r.tests)}))
    return tuple(out)


def _not_judged_roots(by_id: Mapping[int, ReportVar], la: LocalAnalysis, roots: Sequence[ReportRoot],
                      to_local: Mapping[int, int]) -> Tuple[ReportRoot, ...]:
    """The dump-only rule's roots at operators local error does not judge (no bound): their
    error is not absorbed as noise (issue 51 #1), it is judged as a dump without the model is."""
    out = []
    for r in roots:
        lid = to_local.get(r.id, r.id)
        why = la.verdict.not_judged.get(lid)
        v = by_id.get(r.id)
        if why is None or v is None or v.status == "ok":
            continue
        out.append(replace(r, note=f"not judged by local error ({why}); rooted by the dump-only rule",
                           extra={**r.extra, "rule": "dump", "not_judged": why}))
    return tuple(out)


def local_summary(la: LocalAnalysis, roots_by: str) -> Dict[str, Any]:
    """The report's top-level ``local`` object: config, checks, what could not be isolated."""
    res, lw = la.result, la.result.layerwise
    by_id = res.by_id()
    to_report = report_ids(la)[1]
    return {
        "measured": True, "roots_by": roots_by, "config": res.config, "dir": str(la.dir),
        "seconds": round(la.seconds, 3), "n_vars": len(res.vars), "n_roots": len(la.verdict.roots),
        "checks": [{"name": c.name, "status": c.status, "note": c.note,
                    "failures": [{"id": k, "why": w} for k, w in c.failures]} for c in res.checks],
        "not_isolated": [{"id": to_report.get(k, k), "name": by_id[k].name if k in by_id else None, "why": w}
                         for k, w in lw.not_isolated.items()],
        "not_judged": [{"id": to_report.get(k, k), "name": by_id[k].name if k in by_id else None,
                        "opr_type": by_id[k].opr_type if k in by_id else None, "why": w}
                       for k, w in la.verdict.not_judged.items()],
        "repros": [str(p) for p in la.repros],
        # where the layerwise model ran: the test run's binary (and device)
        "runs": [{"label": r.label, "dir": str(r.dir), "argv": list(r.argv), "returncode": r.returncode,
                  "seconds": r.seconds, "load_and_run": r.load_and_run.get("path") or r.load_and_run.get("kind"),
                  **({"remote": r.remote.get("target")} if r.remote else {})} for r in res.runs],
    }


def notes_for(la: LocalAnalysis) -> List[str]:
    """Report notes: what could not be isolated and why, failed checks, repro problems."""
    notes: List[str] = []
    ni = la.result.layerwise.not_isolated
    if ni:
        shown = "; ".join(f"var {k}: {w}" for k, w in list(ni.items())[:5])
        notes.append(f"{len(ni)} operator(s) could not be isolated (their local error includes their inputs' "
                     f"error): {shown}" + (" ..." if len(ni) > 5 else ""))
    for c in la.result.checks:
        if c.status == "fail":
            notes.append(f"local check {c.name} failed for {len(c.failures)} var(s): "
                         + "; ".join(f"var {k}: {w}" for k, w in c.failures[:3]) + (f" ({c.note})" if c.note else ""))
    if any(c.status == "skipped" for c in la.result.checks):
        notes.append("local checks run: isolation only (reference self-check and test-fed check cost two more "
                     "runs: --local-checks)")
    lost = [(k, r) for k, r in la.result.layerwise.kept
            if r.startswith(("not measured", "MegEngine could not", "its shape is known only"))]
    if lost:  # what the layerwise build could not feed or output, by name and why (the rest is measured)
        shown = "; ".join(f"var {k}: {r}" for k, r in lost[:3])
        notes.append(f"{len(lost)} var(s) the layerwise build could not feed or measure: {shown}"
                     + (" ..." if len(lost) > 3 else ""))
    nj = la.verdict.not_judged
    if nj:
        by_id = la.result.by_id()
        kinds = sorted({w for w in nj.values()})
        notes.append(f"{len(nj)} operator(s) not judged by local error (no bound: their error goes to the dump-only "
                     f"rule, never counted as noise): " + "; ".join(kinds[:4]) + (" ..." if len(kinds) > 4 else "")
                     + " (" + ", ".join(by_id[k].name for k in list(nj)[:5] if k in by_id) + (" ..." if len(nj) > 5 else "") + ")")
    notes.extend(la.repro_errors)
    return notes


@dataclass(frozen=True)
class LocalColumns:
    """What local error puts into a report: the vars with their local keys (and, by local
    error, their status), the roots, notes and top-level keys."""

    vars: Tuple[ReportVar, ...]
    roots: Tuple[ReportRoot, ...]
    notes: Tuple[str, ...]
    extra: Mapping[str, Any]


def local_columns(vars_: Sequence[ReportVar], roots: Sequence[ReportRoot], la: Optional[LocalAnalysis], *,
                  roots_by: str, off: Optional[str] = None, tree: Any = None) -> LocalColumns:
    """The local columns of a report's vars, and roots by local error when ``roots_by == "local"``.

    ``la`` None: local error was not measured; ``off`` says why (a note and ``local.why``).
    ``tree`` (the VarTree) gives each local root its path from a model input.
    """
    if la is None:
        why = off or "local error not measured"
        return LocalColumns(tuple(vars_), tuple(roots), (why,),
                            {"local": {"measured": False, "why": why, "roots_by": roots_by}})
    to_local, to_report = report_ids(la)
    measured = la.result.by_id()
    out = []
    for v in vars_:
        lv = measured.get(to_local.get(v.id, -1))
        if lv is not None:
            v = replace(v, extra={**v.extra, **_var_extra(la, lv, to_report)})
            if roots_by == "local":
                v = _restatus(v, la, lv.id)
        out.append(v)
    extra: Dict[str, Any] = {"local": local_summary(la, roots_by), "threshold_roots_by": roots_by}
    if roots_by != "local":
        return LocalColumns(tuple(out), tuple(roots), tuple(notes_for(la)), extra)
    paths: Dict[int, Tuple[int, ...]] = {}  # by report id
    for r in la.verdict.roots[:50]:
        rid = to_report.get(r.id, r.id)
        old = next((o for o in roots if o.id == rid), None)
        if old is not None:
            paths[rid] = tuple(old.path)
        elif tree is not None:
            try:
                paths[rid] = tuple(tree.path(rid))
            except KeyError:  # a root not reachable from a model input: no path
                paths[rid] = ()
    extra["dump_roots"] = [r.to_json() for r in roots]
    by_id = {v.id: v for v in out}
    found = _local_roots(by_id, la, paths, to_report) + _not_judged_roots(by_id, la, roots, to_local)
    return LocalColumns(tuple(out), found, tuple(notes_for(la)), extra)
