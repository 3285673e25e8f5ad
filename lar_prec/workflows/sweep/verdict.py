"""An option's verdict in a sweep: by local error where it was measured, by its outputs'
tolerance, and by what it adds over the plain default run (numpy-free).

1. :func:`with_local`: against the reference, by :func:`lar_prec.compare.tolerance.run_verdict`,
   the one function naive-vs-default's verdict comes from too (so the sweep's default row and
   naive-vs-default on the same model say the same). A local root makes the row diverge and is
   its root; NaN/Inf at an output, or an output out of a tolerance that stands on a measured
   level of correct arithmetic (a float16 option's), makes it diverge too (``root_rule``
   ``output``: the error accumulates); otherwise it is ``ok``, even where an intermediate var or
   an output drifted past the band: every operator is within its bound. Without local error the
   dumps decide (any paired var past the tolerance).
2. :func:`against_default`: every option that ran is judged against the plain default run
   (what a user deploys today). It ``diverges`` beyond the default run only for what it adds: a
   local root the default run does not have (its root), or an output error that exceeds the
   default run's by more than the option's own output tolerance (:func:`beyond_default`; one
   below the default run's never does), or, by the dumps alone, a var that departs from the
   default run's while its output error is not below the default run's. What diverges from the
   reference but adds none of these is ``as_default``: the default kernels' own roots and error.
"""
from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Optional

from lar_prec.compare.tolerance import fmt_num, run_verdict
from lar_prec.diagnosis.floors import LocalRoot
from lar_prec.dumps.folder import DumpFolder
from lar_prec.errors import LarPrecError
from lar_prec.workflows.sweep.local import OptionLocal
from lar_prec.workflows.sweep.options import OptionResult


def join(a: str, b: str) -> str:
    """Two reasons in one (either may be empty)."""
    return f"{a}; {b}" if a else b


def _rewritten_id(run_dir: Optional[str], name: str) -> Optional[int]:
    """The id of var ``name`` in an option's (rewritten) dump, when one var has that name."""
    if run_dir is None:
        return None
    try:
        ids = [d.id for d in DumpFolder(Path(run_dir) / "dump") if d.var.name == name]
    except LarPrecError:
        return None
    return ids[0] if len(ids) == 1 else None


def _local_root(r: OptionResult, top: LocalRoot) -> OptionResult:
    """``r`` diverging at local root ``top``."""
    errs = dict(r.errors)
    return replace(r, verdict="diverges", root_rule="local", root_id=_rewritten_id(r.run_dir, top.name),
                   root_ref_id=top.id, root_name=top.name, root_opr_type=top.opr_type,
                   root_err=errs.get(top.name, top.entire_err))


def with_local(r: OptionResult, loc: OptionLocal) -> OptionResult:
    """The option's root and verdict against the reference (step 1 of the module docstring), by
    :func:`~lar_prec.compare.tolerance.run_verdict`, the function naive-vs-default's verdict comes
    from too."""
    dump_root = None if r.root_name is None else (r.root_id, r.root_ref_id, r.root_name, r.root_opr_type or "",
                                                  r.root_err)
    r = replace(r, local=loc, dump_root=dump_root)
    tol = r.output_tolerance
    if tol is None:
        return r
    if not loc.measured:  # the dumps decide (every paired var, the outputs too, held to the tolerance)
        v = run_verdict(r.output_err, tol, local_measured=False, findings=r.verdict == "diverges")
        return replace(r, output_verdict=v.words)
    kept, rule = "", "local"  # a divergence by the dumps that local error cannot speak for
    if r.verdict == "diverges" and r.output_unseen:
        kept = "kept diverging: no operator's local error can stand for the output that was not compared"
    elif r.verdict == "diverges" and r.root_name is not None and r.root_name not in loc.measured_names():
        why = dict(loc.not_measured).get(r.root_name, "not measured")
        kept, rule = f"kept diverging by the dumps: local error did not measure its root {r.root_name} ({why})", "dump"
    v = run_verdict(r.output_err, tol, local_measured=True, local_roots=[x.name for x in loc.roots],
                    findings=bool(kept))
    r = replace(r, output_verdict=v.words)
    if v.rule == "local" and loc.roots:
        return _local_root(r, loc.roots[0])
    if v.rule == "output":
        where = f", from {dump_root[2]} on" if dump_root else ""
        return replace(r, verdict="diverges", root_rule="output", reason=join(
            r.reason, f"{v.words}, though every operator's local error is within its floor (the error "
                      f"accumulates{where})"))
    if v.diverges:
        return replace(r, root_rule=rule, reason=join(r.reason, kept))
    drift = (f"accumulated error drifts past the tolerance ({'at ' + dump_root[2] if dump_root else 'somewhere'}) "
             "but every operator's local error is within its floor") if r.verdict == "diverges" else ""
    above = "" if tol.holds(r.output_err) else f"outputs: {v.words}"
    return replace(r, verdict="ok", root_rule="local", root_id=None, root_ref_id=None, root_name=None,
                   root_opr_type=None, root_err=None, cause=None,
                   reason=join(join(r.reason, drift), above) if above else join(r.reason, drift))


def _departs(r: OptionResult, why: str) -> OptionResult:
    """``r`` diverging where its run departs from the default run's, by the dumps."""
    d = r.default_root
    r = replace(r, verdict="diverges", reason=join(r.reason, why))
    if d is None:
        return r
    return replace(r, root_id=d[0], root_ref_id=d[1], root_name=d[2], root_opr_type=d[3] or None, root_err=d[4])


def _finite(x: Optional[float]) -> bool:
    return x is not None and math.isfinite(x)


def beyond_default(err: Optional[float], default_err: Optional[float], bound: float) -> Optional[bool]:
    """Whether an option's output error ``err`` exceeds the default run's ``default_err`` (both
    against the reference) by more than ``bound``, the option's output tolerance. NaN/Inf where
    the default run is finite is beyond; an error below the default run's never is. None when
    either was not compared."""
    if err is None or default_err is None:
        return None
    if not _finite(err):
        return _finite(default_err)
    return _finite(default_err) and err > default_err + bound


def against_default(r: OptionResult, default: Optional[OptionResult]) -> OptionResult:
    """The verdict of an option by what it adds over the plain default run ``default`` (step 2 of
    the module docstring); ``r`` as it is when the default run did not run through or the
    option's outputs were not compared."""
    if r.status != "runs" or default is None or default.status != "runs":
        return r
    if r.output_err is None or r.output_tolerance is None:
        return r  # nothing to hold its outputs to: never an all-clear
    tol = r.output_tolerance
    beyond = beyond_default(r.output_err, default.output_err, tol.value)
    out_why = (f"{tol.words(r.output_err)}, and the default run's {fmt_num(default.output_err)}: beyond it by more "
               f"than the tolerance ({'NaN/Inf' if r.default_err is None else fmt_num(r.default_err)} from the "
               "default run's outputs)")
    if r.root_rule in ("local", "output") and r.local is not None and r.local.measured:
        if default.local is None or not default.local.measured:
            if beyond:
                return _departs(replace(r, root_rule="output"), out_why)
            if r.verdict != "diverges" or r.root_rule == "output":  # no local root: by its output alone
                return replace(r, verdict="as_default") if r.verdict == "diverges" else r
            why = default.local.why if default.local is not None else "not measured"
            return replace(r, reason=join(r.reason, f"not told apart from the default run, whose local error was "
                                                      f"not measured ({why})"))
        theirs = {x.name for x in default.local.roots}
        added = [x for x in r.local.roots if x.name not in theirs]
        r = replace(r, added_roots=tuple(x.name for x in added),
                    shared_roots=tuple(x.name for x in r.local.roots if x.name in theirs))
        if added:
            return r if r.root_name == added[0].name else _local_root(r, added[0])
        if beyond:
            return _departs(replace(r, root_rule="output"), out_why)
        return replace(r, verdict="as_default") if r.verdict == "diverges" else r
    if beyond:
        return _departs(r, out_why)
    if r.verdict != "diverges":
        return r
    below = beyond is not None and r.output_err < default.output_err  # type: ignore[operator]
    if r.default_diverges and not below:  # an error below the default run's is never beyond it
        return _departs(r, "its run departs from the default run's past the tolerance")
    return replace(r, verdict="as_default")
