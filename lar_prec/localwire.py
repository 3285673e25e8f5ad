"""Local error wired into the workflows and the report (issue 14).

After a workflow's runs, :func:`run_local` measures the local ("single") error of every
operator of the model the test side ran (:func:`lar_prec.local.local_errors`: one build of
the layerwise model and one run of it under the test configuration, fed with the reference
run's values), labels every var (:func:`lar_prec.floors.local_roots`) and writes a repro
folder per root (:func:`lar_prec.replay.make_repros`). :func:`apply_local` then puts both
columns in the :class:`~lar_prec.report.Report`:

- every measured var gets the extra JSON keys ``local_err``, ``floor``, ``label``,
  ``inherited_from`` (and ``margin`` for roots); the accumulated error stays ``max_err``;
- with ``roots_by="local"`` (``--threshold auto``, the default, when the model is at hand)
  the roots are the operators whose local error exceeds their own floor, most likely
  (largest margin) first, each with its floor and margin; a root the band missed becomes
  ``divergent``; a var whose error is only noise, or inherited from no root, becomes ``ok``
  (``note`` says why). With ``"band"`` or ``"fixed"`` the dump-only roots stay.

Nothing here imports megengine: the build and the runs are child processes.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from lar_prec.errors import LarPrecError
from lar_prec.local import (DEFAULT_TIMEOUT, LocalResult, LocalVerdict, flag_names, is_fast_run, local_errors,
                            local_roots, noise_floors)
from lar_prec.runner import RunConfig, get_config
from lar_prec.records import json_number

log = logging.getLogger(__name__)

#: the extra per-var JSON keys this module adds (design.md: more fields are welcome)
LOCAL_VAR_KEYS = ("local_err", "floor", "label", "inherited_from", "margin")
#: the ``--threshold`` value that keeps the old dump-only band rule with local columns shown
BAND = "band"
ALGO_CACHE = "fast-run-algo-policy.cache"


@dataclass(frozen=True)
class LocalAnalysis:
    """The local errors of one analysis, their verdict and the repro folders written."""

    result: LocalResult
    verdict: LocalVerdict
    repros: Tuple[Path, ...]
    dir: Path
    seconds: float
    repro_errors: Tuple[str, ...] = ()


def off_reason(*, local: bool) -> Optional[str]:
    """Why local error is not measured in this analysis (None: it is). The layerwise model runs
    where the test run ran (its ``--lar`` binary, its ``--remote`` device:
    :func:`lar_prec.local.run_layerwise`), so only ``--no-local`` turns it off."""
    return None if local else "local error not measured (--no-local)"


def pin_flags(flags: Sequence[str], adir: Path, sessions: Any = None) -> Tuple[str, ...]:
    """Extra flags for the *test* run so its fast-run algorithm choices can be replayed by the
    layerwise run: a ``--fast-run-algo-policy`` cache in the analysis folder, or on the device
    for a remote analysis (``sessions``: its RemoteSessions), where both runs read it (none
    when the run is not fast-run or the user gave a cache already)."""
    if not is_fast_run(flags) or "fast_run_algo_policy" in flag_names(flags):
        return ()
    if sessions is not None:  # the cache lives where load_and_run runs
        return ("--fast-run-algo-policy", f"{sessions.get().remote_dir}/{adir.name}-{ALGO_CACHE}")
    return ("--fast-run-algo-policy", str(adir / ALGO_CACHE))


def run_local(model: Path, ref_dump: Path, test_dump: Optional[Path], test_config: "str | RunConfig",
              out_dir: Path, *, reference_config: "str | RunConfig" = "naive", checks: bool = False,
              repros: bool = True, bitwise: bool = False, timeout: Optional[float] = None,
              lar: Any = None, remote: Any = None) -> LocalAnalysis:
    """Local error of ``model`` under ``test_config`` against ``ref_dump``, into ``out_dir``.

    Costs one build of the layerwise model and one run of it (``checks`` adds the reference
    self-check and test-fed runs; each repro a one-operator build). ``bitwise``: every local
    difference is a root (floors 0), for jitter where the reference is the same configuration.
    ``lar`` (the test run's LoadAndRun) and ``remote`` (its RemoteSpec): where the layerwise
    runs go (:func:`lar_prec.local.run_layerwise`); the build and the repros stay local.

    Raises:
        LarPrecError: the build or the run failed (callers turn it into a report note).
    """
    t0 = time.monotonic()
    tmo = timeout or DEFAULT_TIMEOUT
    result = local_errors(model, ref_dump, test_config, out_dir=out_dir, test_dump=test_dump,
                          reference_config=reference_config, checks=checks, timeout=tmo, lar=lar, remote=remote)
    floors = {v.id: 0.0 for v in result.vars} if bitwise else noise_floors(result)
    verdict = local_roots(result, floors)
    errors: List[str] = []
    written: List[Path] = []
    if repros and verdict.roots:
        from lar_prec.replay import make_repros

        written = [r.dir for r in make_repros(result, out_dir.parent, verdict, reference_config=reference_config,
                                              timeout=tmo, errors=errors)]
    return LocalAnalysis(result, verdict, tuple(written), out_dir, time.monotonic() - t0, tuple(errors))


def compare_local(model: str, dir_a: str, dir_b: str, config: str, out: Optional[str], *, local: bool = True,
                  checks: bool = False, algo_policy: Optional[str] = None, lar: Optional[str] = None,
                  ) -> Tuple[Optional[LocalAnalysis], Optional[str]]:
    """``lar-prec compare A B --model MODEL``: local error of MODEL (the model B ran, under
    ``config``) against A's dump, in a new analysis folder. (None, why) when off or failed.

    ``algo_policy``: the ``--fast-run-algo-policy`` cache B's run wrote; the layerwise run
    replays its algorithm choices (without it a fast-run layerwise run profiles again and can
    pick other algorithms than B did). ``lar``: the load_and_run B ran (default: bundled),
    which runs the layerwise model.

    Raises:
        UsageError: the model, the cache or the binary is not there (before anything runs).
    """
    from lar_prec.runner import check_file, new_analysis_dir, resolve_load_and_run

    model_path = check_file(model, "model file")
    lar_obj = resolve_load_and_run(lar) if lar is not None else None
    cfg: "str | RunConfig" = config
    if algo_policy is not None:
        cache = check_file(algo_policy, "--fast-run-algo-policy cache")
        cfg = get_config(config).with_extra(["--fast-run-algo-policy", str(cache.resolve())])
    if not local:
        return None, off_reason(local=False)
    adir = new_analysis_dir(out, "compare").resolve()
    try:
        return run_local(model_path, Path(dir_a), Path(dir_b), cfg, adir / "local", checks=checks, lar=lar_obj), None
    except LarPrecError as exc:
        if exc.exit_code == 2:  # bad dump folder or model: the user's input
            raise
        log.warning("local error not measured: %s", exc)
        return None, f"local error could not be measured ({type(exc).__name__}): {exc}"


# ---------------------------------------------------------------------------------- report



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
    from lar_prec.floors import _ancestors

    return any(la.verdict.labels.get(a) == "not_isolated" for a in _ancestors(la.result.layerwise, var_id))


def _var_extra(la: LocalAnalysis, lv: Any, to_report: Mapping[int, int]) -> Dict[str, Any]:
    """The local keys of the report var measured as ``lv`` (a LocalVar, local ids)."""
    vid = lv.id
    floor = la.verdict.floors.get(vid)
    d: Dict[str, Any] = {"local_err": json_number(lv.local_err), "floor": json_number(floor),
                         "label": la.verdict.labels.get(vid),
                         "inherited_from": [to_report.get(k, k) for k in la.verdict.inherited_from.get(vid, ())]}
    if d["label"] == "root" and floor:
        d["margin"] = json_number(lv.local_err / floor) if lv.local_err is not None else None
    if lv.problem:
        d["not_isolated_why"] = lv.problem
    return d


def _restatus(v: Any, la: LocalAnalysis, local_id: int) -> Any:
    """A var's status by local error: a root diverges; noise, or error inherited from no root
    (and from nothing unmeasured), is ok. Other statuses (nonfinite, missing, ...) stay."""
    label = v.extra.get("label")
    if v.status not in ("ok", "divergent") or label is None:
        return v
    if label == "root" and v.status == "ok":
        err = v.extra.get("local_err")
        return replace(v, status="divergent", note=f"local error {'non-finite' if err is None else format(err, '.3g')} "
                                                  f"above its floor {v.extra.get('floor') or 0:.3g}, though max_err "
                                                  "is within the threshold")
    if v.status == "divergent" and (label in ("noise", "clean") or (
            label == "inherited" and not v.extra.get("inherited_from") and not _ancestors_not_isolated(la, local_id))):
        return replace(v, status="ok", note=f"{label}: local error within its floor and no root upstream "
                                            "(divergent by max_err alone)")
    return v


def _local_roots(report: Any, la: LocalAnalysis, paths: Mapping[int, Tuple[int, ...]],
                 to_report: Mapping[int, int]) -> Tuple[Any, ...]:
    from lar_prec.report import ReportRoot

    out = []
    for r in la.verdict.roots:
        v = report.var(to_report.get(r.id, r.id))
        if v is None:
            continue
        ins = [report.var(u) for u in v.inputs]
        in_errs = [u.max_err for u in ins if u is not None and u.max_err is not None]
        in_max = max(in_errs) if in_errs else None
        amp = v.max_err / in_max if v.max_err is not None and in_max else None
        out.append(ReportRoot(
            id=v.id, name=v.name, opr=v.opr, opr_type=v.opr_type, max_err=v.max_err, input_max_err=in_max,
            amplification=json_number(amp), path=paths.get(v.id, ()), status=v.status, dtype=v.dtype,
            inputs_equal=bool(ins) and in_max == 0,
            note=f"local error {r.local_err:.3g} > its floor {r.floor:.3g} (x{r.margin:.3g})",
            extra={"rule": "local", "local_err": json_number(r.local_err), "floor": json_number(r.floor),
                   "margin": json_number(r.margin)}))
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
    notes.extend(la.repro_errors)
    return notes


def roots_rule(threshold: object, measured: bool) -> Tuple[object, str]:
    """(threshold for the comparison, roots_by) of a workflow's ``threshold``: ``"band"`` is
    the old dump-only auto rule; ``"auto"`` means roots by local error when it was measured,
    else the dump-only rule; a number is a fixed threshold with dump-only roots."""
    if isinstance(threshold, str) and threshold.strip().lower() == BAND:
        return "auto", "band"
    if threshold is None or (isinstance(threshold, str) and threshold.strip().lower() == "auto"):
        return threshold, "local" if measured else "band"
    return threshold, "fixed"


def apply_local(report: Any, la: Optional[LocalAnalysis], *, roots_by: str, off: Optional[str] = None,
                tree: Any = None) -> Any:
    """The report with local columns, and roots by local error when ``roots_by == "local"``.

    ``la`` None: local error was not measured; ``off`` says why (a note and ``local.why``).
    ``tree`` (the VarTree) gives each local root its path from a model input.
    """
    from lar_prec.report import auto_verdict

    if la is None:
        why = off or "local error not measured"
        return replace(report, notes=tuple(report.notes) + (why,),
                       extra={**report.extra, "local": {"measured": False, "why": why, "roots_by": roots_by}})
    to_local, to_report = report_ids(la)
    measured = la.result.by_id()
    vars_ = []
    for v in report.vars:
        lv = measured.get(to_local.get(v.id, -1))
        if lv is not None:
            v = replace(v, extra={**v.extra, **_var_extra(la, lv, to_report)})
            if roots_by == "local":
                v = _restatus(v, la, lv.id)
        vars_.append(v)
    rep = replace(report, vars=tuple(vars_), notes=tuple(report.notes) + tuple(notes_for(la)),
                  extra={**report.extra, "local": local_summary(la, roots_by),
                         "threshold_roots_by": roots_by})
    if roots_by != "local":
        return rep
    paths: Dict[int, Tuple[int, ...]] = {}  # by report id
    for r in la.verdict.roots[:50]:
        rid = to_report.get(r.id, r.id)
        old = next((o for o in report.roots if o.id == rid), None)
        if old is not None:
            paths[rid] = tuple(old.path)
        elif tree is not None:
            try:
                paths[rid] = tuple(tree.path(rid))
            except KeyError:  # a root not reachable from a model input: no path
                paths[rid] = ()
    counts = {**{k: 0 for k in rep.extra.get("counts", {})}, **rep.status_counts()}
    rep = replace(rep, roots=_local_roots(rep, la, paths, to_report),
                  extra={**rep.extra, "dump_roots": [r.to_json() for r in report.roots], "counts": counts,
                         "diverged": rep.n_not_ok > 0})
    rep = replace(rep, verdict=auto_verdict(rep) + " [roots by local error]")
    return rep
