"""An option's verdict in a sweep: by local error where it was measured, by its outputs'
tolerance, and by what it adds over the plain default run (numpy-free).

1. :func:`with_local`: against the reference. A local root makes the option diverge and is
   its root; no local root but an output out of its tolerance (:mod:`lar_prec.compare.tolerance`)
   makes it diverge too (the error accumulates: ``root_rule`` ``output``); no local root and
   outputs within it is ``ok``, even where an intermediate var drifted past the tolerance.
   Without local error the dumps decide (any paired var past the tolerance).
2. :func:`against_default`: an option that diverges from the reference is judged against the
   plain default run (what a user deploys today). When its local roots are all the default
   run's own and its outputs are within the tolerance of the default run's, it is
   ``as_default``: it shows the default kernels' own roots, not something it adds. Only what it
   adds (a local root the default run does not have, an output out of tolerance and away from
   the default run's by more than it, or, by the dumps alone, a var that departs from the
   default run's) is ``diverges``, rooted at the first thing it adds.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Optional

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


def _output_out(r: OptionResult) -> bool:
    """The option's outputs were compared and are out of its tolerance."""
    return r.output_err is not None and r.output_tolerance is not None and not r.output_tolerance.holds(r.output_err)


def with_local(r: OptionResult, loc: OptionLocal) -> OptionResult:
    """The option's root and verdict against the reference (step 1 of the module docstring)."""
    dump_root = None if r.root_name is None else (r.root_id, r.root_ref_id, r.root_name, r.root_opr_type or "",
                                                  r.root_err)
    r = replace(r, local=loc, dump_root=dump_root)
    if not loc.measured:
        return r
    if loc.roots:
        return _local_root(r, loc.roots[0])
    if _output_out(r):
        assert r.output_tolerance is not None
        where = f", from {dump_root[2]} on" if dump_root else ""
        return replace(r, verdict="diverges", root_rule="output", reason=join(
            r.reason, f"{r.output_tolerance.words(r.output_err)}: out of tolerance, though every operator's "
                      f"local error is within its floor (the error accumulates{where})"))
    if r.verdict != "diverges":
        return replace(r, root_rule="local")
    if r.output_unseen:  # local error speaks for operators, not for an output nobody compared
        return replace(r, root_rule="local", reason=join(r.reason, "kept diverging: no operator's local error can "
                                                                   "stand for the output that was not compared"))
    if r.root_name is not None and r.root_name not in loc.measured_names():
        why = dict(loc.not_measured).get(r.root_name, "not measured")
        return replace(r, reason=join(r.reason, f"kept diverging by the dumps: local error did not measure "
                                                  f"its root {r.root_name} ({why})"))
    return replace(r, verdict="ok", root_rule="local", root_id=None, root_ref_id=None, root_name=None,
                   root_opr_type=None, root_err=None, cause=None,
                   reason=join(r.reason, "accumulated error drifts past the tolerance "
                                          f"({'at ' + dump_root[2] if dump_root else 'somewhere'}) but every "
                                          "operator's local error is within its floor and the outputs within "
                                          "their tolerance"))


def _departs(r: OptionResult, why: str) -> OptionResult:
    """``r`` diverging where its run departs from the default run's, by the dumps."""
    d = r.default_root
    if d is None:
        return replace(r, reason=join(r.reason, why))
    return replace(r, root_id=d[0], root_ref_id=d[1], root_name=d[2], root_opr_type=d[3] or None, root_err=d[4], reason=join(r.reason, why))


def against_default(r: OptionResult, default: Optional[OptionResult]) -> OptionResult:
    """The verdict of an option that diverges from the reference, by what it adds over the plain
    default run ``default`` (step 2 of the module docstring); ``r`` as it is when the default
    run did not run through or the option's outputs were not compared."""
    if r.status != "runs" or r.verdict != "diverges" or default is None or default.status != "runs":
        return r
    if r.output_err is None or r.output_tolerance is None:
        return r  # nothing to hold its outputs to: never an all-clear
    tol = r.output_tolerance
    adds_output = not tol.holds(r.output_err) and not tol.holds(r.default_err)
    out_why = (f"{tol.words(r.output_err)}, and {'NaN/Inf' if r.default_err is None else format(r.default_err, '.3g')}"
               " from the default run's outputs: beyond what the default run shows")
    if r.root_rule in ("local", "output") and r.local is not None and r.local.measured:
        if default.local is None or not default.local.measured:
            why = default.local.why if default.local is not None else "not measured"
            return replace(r, reason=join(r.reason, f"not told apart from the default run, whose local error was "
                                                      f"not measured ({why})"))
        theirs = {x.name for x in default.local.roots}
        added = [x for x in r.local.roots if x.name not in theirs]
        r = replace(r, added_roots=tuple(x.name for x in added),
                    shared_roots=tuple(x.name for x in r.local.roots if x.name in theirs))
        if added:
            return r if r.root_name == added[0].name else _local_root(r, added[0])
        if adds_output:
            return _departs(replace(r, root_rule="output"), out_why)
        return replace(r, verdict="as_default")
    if adds_output:
        return _departs(r, out_why)
    if r.default_diverges:
        return _departs(r, "its run departs from the default run's past the tolerance")
    return replace(r, verdict="as_default")
