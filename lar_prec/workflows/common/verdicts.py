"""What naive-vs-default and diff say of a report's roots and outputs beyond the comparison:
which side the float64 oracle finds wrong (issues 23 #5, 34 #3) and the outputs' error held to
the one tolerance rule of sweep and mixed (:mod:`lar_prec.compare.tolerance`)."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Optional, Sequence, Tuple

from lar_prec.compare.bounds import TERMS_C
from lar_prec.compare.tolerance import arithmetic_dtype, output_tolerance, run_verdict
from lar_prec.diagnosis.graphinfo import describe_model
from lar_prec.diagnosis.local import local_outputs
from lar_prec.diagnosis.local_bounds import compute_dtype
from lar_prec.diagnosis.local_analysis import LocalAnalysis
from lar_prec.diagnosis.oracle import RootSide, root_sides
from lar_prec.dumps.folder import DumpFolder
from lar_prec.errors import LarPrecError
from lar_prec.records import json_number
from lar_prec.report.local import report_ids
from lar_prec.report.model import Report
from lar_prec.run.config import LoadAndRun, RunConfig
from lar_prec.run.instruments import FLOAT32_MAX, first_nonfinite
from lar_prec.workflows.sweep.analysis import model_outputs
from lar_prec._lazy import numpy as np


def _distance(s) -> str:
    """Each side's distance from the oracle: in rounding units where the operator has them."""
    if s.reference_units is not None and s.test_units is not None:
        return (f"naive {s.reference_err:.3g} from it, {s.reference_units:.2g} rounding units; default "
                f"{s.test_err:.3g}, {s.test_units:.2g} units; a correct kernel is within {TERMS_C:g}")
    return f"naive {s.reference_err:.3g} from it, default {s.test_err:.3g}; floor {s.floor:.3g}"


def with_output_tolerance(report, flags: Sequence[str]):
    """``report`` with its outputs' error held to the one tolerance rule of sweep and mixed
    (:mod:`lar_prec.compare.tolerance`; level 0: both sides do the same arithmetic), and its verdict
    said by the one function that says a sweep's rows' (:func:`~lar_prec.compare.tolerance.run_verdict`),
    from the report's own: its local roots when roots are by local error, its vars not ok. The
    words follow the verdict: a note, and ``output_err`` / ``output_tolerance`` / ``output_verdict``
    in its extra."""
    read = {u for v in report.vars for u in v.inputs}
    outs = [v for v in report.vars if v.id not in read and v.max_err is not None]
    if not outs:
        return report
    err = max(v.max_err for v in outs)
    tol = output_tolerance(arithmetic_dtype([v.dtype for v in outs], compute_dtype(flags)), 0.0)
    local = report.extra.get("local") or {}
    by_local = bool(local.get("measured")) and report.extra.get("threshold_roots_by") == "local"
    v = run_verdict(err, tol, local_measured=by_local, local_roots=[r.name for r in report.roots] if by_local else (),
                    findings=report.n_not_ok > 0)
    extra = {**report.extra, "output_err": json_number(err), "output_tolerance": tol.to_json(),
             "output_verdict": {"verdict": v.verdict, "rule": v.rule, "words": v.words}}
    return replace(report, notes=report.notes + (f"outputs: {v.words}",), extra=extra)


#: words for :func:`lar_prec.diagnosis.oracle.which_side` in naive-vs-default
SIDE_WORDS = {"test": "the default kernel is wrong", "reference": "the naive (reference) kernel is wrong",
              "both": "both kernels are off exact arithmetic", "neither": "both are within rounding of exact arithmetic"}
#: roots checked by the oracle (each reads the operator's inputs and computes it in float64)
ORACLE_ROOTS = 5


def annotate_oracle(report, model: Path, ref_dir: Path, test_dir: Path, la: Optional[LocalAnalysis],
                    fmt: Optional[str], adir: Path,
                    annotate: Callable[[int, Any, RootSide, bool], Tuple[Any, Optional[str]]]):
    """``report`` with each of its first roots the float64 oracle answered for replaced by
    ``annotate(rank, root, side, same_inputs)`` -> (root, note or None). Both sides are judged
    on the same inputs where local error measured the test kernel on the reference's inputs
    (``la``'s layerwise run, in layout ``fmt``: ``same_inputs``); without it, the test dump's
    output against the oracle on that dump's own inputs; never a side's output against another
    side's inputs. ``model`` is the graph that ran. A note when the oracle did not run; nothing
    here fails the analysis. ``naive-vs-default`` and ``diff`` annotate their roots through it."""
    if not report.roots:
        return report
    try:
        g = describe_model(model, adir / "graph.json")
    except LarPrecError as exc:
        return replace(report, notes=report.notes + (f"oracle not run: {exc}",))
    by_var = {v.id: v for v in report.vars}
    asked = []
    for r in report.roots[:ORACLE_ROOTS]:
        v = by_var.get(r.id)
        floor = r.extra.get("floor") if isinstance(r.extra.get("floor"), (int, float)) else None
        if floor is None:
            floor = v.threshold if v is not None and v.threshold is not None else report.threshold.value
        asked.append((r.id, r.name, float(floor)))
    to_local = report_ids(la)[0] if la is not None else {}
    local = local_outputs(la.result, fmt) if la is not None else None

    def test_value(vid: int):
        return local(to_local[vid]) if local is not None and vid in to_local else None

    sides = {s.id: s for s in root_sides(g, DumpFolder(ref_dir), asked, test_local=test_value,
                                         test_dump=DumpFolder(test_dir))}
    roots, notes = [], list(report.notes)
    for k, r in enumerate(report.roots, 1):
        s = sides.get(r.id)
        if s is not None:
            r, note = annotate(k, r, s, local is not None and r.id in to_local)
            if note:
                notes.append(note)
        roots.append(r)
    return replace(report, roots=tuple(roots), notes=tuple(notes))


def oracle_roots(report, model: Path, naive_dir: Path, default_dir: Path, la: Optional[LocalAnalysis],
                 fmt: Optional[str], adir: Path):
    """``report`` with each of its first roots told which side is wrong by the float64 oracle
    (issues 23 #5, 34 #3, :func:`annotate_oracle`): ``wrong_side`` and ``oracle`` on the root,
    one note per root."""

    def annotate(k: int, r: Any, s: RootSide, same_inputs: bool) -> Tuple[Any, Optional[str]]:
        extra = {**r.extra, "wrong_side": s.side, "oracle": {
            "naive_err": json_number(s.reference_err), "default_err": json_number(s.test_err),
            "floor": json_number(s.floor), "naive_units": json_number(s.reference_units),
            "default_units": json_number(s.test_units), "why": s.why or None}}
        if s.side == "unknown":
            return replace(r, extra=extra), None
        on = "both kernels on the naive run's inputs" if same_inputs else "each kernel on its own run's inputs"
        return replace(r, extra=extra), f"oracle (float64, {on}): root #{k} {r.name}: {SIDE_WORDS[s.side]} ({_distance(s)})"

    return annotate_oracle(report, model, naive_dir, default_dir, la, fmt, adir, annotate)


def with_first_nonfinite(report: Report, lar: Optional[LoadAndRun], model: Path, input_arg: str,
                         sides: Sequence[Tuple[RunConfig, Sequence[str], Path]], folder: Path,
                         timeout: Optional[float] = None) -> Report:
    """Where an output of a run (``sides``: its configuration, its user flags, its dump; the
    test run first) is NaN or Inf and the binary is MegEngine's own: its ``--range`` run
    (:func:`lar_prec.run.instruments.first_nonfinite`) under that run's configuration names the
    first variable holding one, without dumping; the report keeps it (``first_nonfinite``) and
    says the command, the fast first pass on a model too big to dump."""
    if lar is None or lar.is_bundled:
        return report
    for config, flags, dump_dir in sides:
        try:
            dump = DumpFolder(dump_dir)
            bad = [v for v in model_outputs(dump)
                   if dump.var_info(v).dtype.startswith("Float") and not np.all(np.isfinite(dump[v].array()))]
        except LarPrecError:
            continue
        if bad:
            break
    else:
        return report
    flags = (*config.flags, *flags)
    try:
        hit = first_nonfinite(lar, model, input_arg, folder, flags=flags, env=config.env_dict(),
                              timeout=timeout or 600.0)
    except (LarPrecError, OSError) as exc:
        return replace(report, notes=report.notes + (f"--range not run: {exc}",))
    env = " ".join(f"{k}={v}" for k, v in config.env if v is not None)
    cmd = f"{env + ' ' if env else ''}{lar.path} {model} --input '{input_arg}' {' '.join(flags)} --range {FLOAT32_MAX}"
    if hit is None:
        note = (f"the {config.name} run's output holds NaN/Inf, but its --range run without dumps found none "
                f"({folder}): the dump itself may change it")
    else:
        note = (f"first NaN/Inf of the {config.name} run by load_and_run's --range, without dumping: {hit.name} "
                f"({hit.opr_type}, MDL var {hit.id}) value {hit.value}; the fast first pass on a model too big "
                f"to dump: {cmd}")
    extra = {**report.extra, "first_nonfinite": None if hit is None else
             {**hit.to_json(), "config": config.name, "dir": str(folder)}}
    return replace(report, notes=report.notes + (note,), extra=extra)
