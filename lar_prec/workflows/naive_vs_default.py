"""``lar-prec naive-vs-default``: the reference kernels (``MGB_USE_MEGDNN_DBG=2``) against the
default ones; which operator computes wrongly?

Example::

    from lar_prec import naive_vs_default
    a = naive_vs_default("model.mge", ["data:x.npy"], out="analysis")
    print(a.report.verdict, [r.id for r in a.report.roots], a.exit_code)
"""
from __future__ import annotations
from lar_prec.compare.threshold import Threshold
from lar_prec.records import PathLike
from lar_prec.run.config import LoadAndRun, get_config
from lar_prec.run.device import RemoteSpec
from lar_prec.workflows.common import Analysis, Planned, compare_progress, dropped_note, environment_extra, measure_local, open_remote, reference_flags, run_plan, write_reports
from lar_prec.workflows.common import StageProgress
from lar_prec.workflows.common import prepare_analysis

import os
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Optional, Sequence, Tuple, Union

from lar_prec.compare.tolerance import arithmetic_dtype, output_tolerance
from lar_prec.diagnosis.graphinfo import describe_model
from lar_prec.diagnosis.oracle import RootSide, root_sides
from lar_prec.dumps.folder import DumpFolder
from lar_prec.errors import LarPrecError
from lar_prec.records import json_number

from lar_prec.report.model import from_tree
from lar_prec.diagnosis.tree import VarTree
from lar_prec.compare.threshold import parse_threshold_spec
from lar_prec.compare.bounds import TERMS_C
from lar_prec.diagnosis.local import compute_dtype, layout_fmt, local_outputs
from lar_prec.diagnosis.local_analysis import EarlyBuild, LocalAnalysis, off_reason, pin_flags
from lar_prec.report.local import report_ids

def naive_vs_default(
    model: PathLike,
    inputs: Union[str, Sequence[str]],
    *,
    out: Optional[PathLike] = None,
    threshold: Union[str, float, Threshold, None] = "auto",
    lar: Union[LoadAndRun, str, None] = None,
    timeout: Optional[float] = None,
    extra_flags: Sequence[str] = (),
    text_dump: bool = False,
    html: bool = True,
    jobs: int = 1,
    seed: int = 0,
    progress: Optional[StageProgress] = None,
    keep_going: bool = False,
    remote: "Optional[RemoteSpec]" = None,
    local: bool = True,
    local_checks: bool = False,
) -> Analysis:
    """Run the naive reference and the default kernels, compare every variable, find roots.

    (Over 80 lines for its argument list and their documentation; the body is the analysis in
    its order: prepare, run, local error, compare, report.)

    Args:
        model: the ``.mge`` model.
        inputs: ``--input`` items (``name:file.npy``, ``name:{1,3,8,8}``, ``name:[1,2]``).
        out: the analysis folder (a non-empty one gets a new numbered subfolder);
            default ``./lar-prec-out/naive-vs-default-N``.
        threshold: ``"auto"`` (roots by local error when it was measured, else the dump-only
            band rule), ``"band"`` (the dump-only band rule always) or a number
            (``compare_binary_iodump -e``).
        lar: load_and_run binary (default: ``$LAR_PREC_LOAD_AND_RUN``, PATH, bundled).
        timeout: seconds before a run is killed with its process group.
        extra_flags: load_and_run flags for both runs (e.g. ``--fast-run``, layout options).
        text_dump: also make a ``--io-dump`` run (its own process) and use its dependency edges.
        html: write ``report.html`` next to ``report.json``.
        jobs: runs at once (naive and default are independent).
        seed: seed of random data for shape-only inputs.
        progress: ``progress(stage, done, total)`` hook.
        keep_going: make every run even after one failed (the first failure is still raised);
            by default no run starts after a failure.
        remote: a :class:`lar_prec.runremote.RemoteSpec`: every run on that device (model and
            inputs pushed once, dumps pulled into the run folders).
        local: measure the local error of every operator after the runs (one build and one
            run of the layerwise model, :mod:`lar_prec.diagnosis.local_analysis`); the layerwise model runs
            with the same load_and_run (``lar``) or on the same device (``remote``) as the
            default run. When it cannot run there, the report's notes say why.
        local_checks: also run the reference self-check and the test-fed check (two runs more).

    Raises:
        UsageError: bad model path, inputs, threshold or flags (exit 2).
        RunError: a load_and_run run failed (exit 3); its folder and run.json stay on disk.
        AnalysisInterrupted: Ctrl-C (exit 130); run folders stay consistent on disk.
    """
    spec = parse_threshold_spec(threshold)  # a bad value fails before anything runs
    model_path, adir, prepared, lar_obj = prepare_analysis(model, inputs, out, "naive-vs-default", seed, lar, timeout,
                                                   extra_flags, remote)

    off = off_reason(local=local)
    naive_flags, dropped = reference_flags(extra_flags)
    # the layerwise model builds on the other core while the runs run
    early = EarlyBuild(model_path, adir / "local" / "layerwise", timeout) if off is None else None
    sessions = open_remote(remote, model_path, prepared)
    try:
        pin = pin_flags(extra_flags, adir, sessions) if off is None else ()
        plan = [Planned("naive", "naive", extra_flags=naive_flags),
                Planned("default", "default", extra_flags=tuple(extra_flags) + pin)]
        if text_dump:
            plan.append(Planned("default", "default-text", text_dump=True, extra_flags=tuple(extra_flags)))
        runs = run_plan(model_path, prepared, plan, adir, lar=lar_obj, timeout=timeout, extra_flags=(),
                         jobs=jobs, progress=progress, keep_going=keep_going, remote=sessions)
    except BaseException:
        if early is not None:
            early.cancel()
        raise
    finally:
        if sessions is not None:
            sessions.close()

    naive, default = runs[0], runs[1]
    text = runs[2].text_dump if text_dump else None
    la, off = measure_local(model_path, naive.dump_dir, default.dump_dir,  # type: ignore[arg-type]
                     get_config("default").with_extra(tuple(extra_flags) + pin), adir, off,
                     checks=local_checks, timeout=timeout, lar=lar_obj, remote=remote, progress=progress,
                     early=early)
    tree = VarTree.from_folders(naive.dump_dir, default.dump_dir, threshold=spec.for_comparison, text_dump=text,  # type: ignore[arg-type]
                                jobs=min(2, os.cpu_count() or 1), on_progress=compare_progress(progress))
    env_extra, notes = environment_extra(runs)
    if dropped:
        notes.append(dropped_note(dropped, "the default run"))
        env_extra["naive_dropped_flags"] = list(dropped)
    if lar_obj is not None and lar_obj.is_bundled:
        notes.append("runs used the bundled load_and_run (megenginelite, LITE mode); var ids of a real "
                     "load_and_run in MDL mode can differ")
    report = from_tree(tree, command="naive-vs-default", runs=runs, model=str(model_path), notes=notes,
                       extra={"analysis_dir": str(adir), "inputs": prepared.to_json(), **env_extra},
                       local=la, roots_by=spec.roots_by(la is not None), local_off=off)
    # the graph that ran: the rewritten model the default run recorded, when it is here
    ran = Path(default.rewritten_models[-1][0]) if default.rewritten_models else model_path
    ran = ran if ran.is_file() else model_path
    report = oracle_roots(report, ran, naive.dump_dir, default.dump_dir, la, layout_fmt(extra_flags),  # type: ignore[arg-type]
                          adir)
    report = with_output_tolerance(report, extra_flags)
    json_path, html_path = write_reports(report, adir, html)
    return Analysis("naive-vs-default", adir, report, tree, tuple(runs), json_path, html_path)


def _distance(s) -> str:
    """Each side's distance from the oracle: in rounding units where the operator has them."""
    if s.reference_units is not None and s.test_units is not None:
        return (f"naive {s.reference_err:.3g} from it, {s.reference_units:.2g} rounding units; default "
                f"{s.test_err:.3g}, {s.test_units:.2g} units; a correct kernel is within {TERMS_C:g}")
    return f"naive {s.reference_err:.3g} from it, default {s.test_err:.3g}; floor {s.floor:.3g}"


def with_output_tolerance(report, flags: Sequence[str]):
    """``report`` with its outputs' error held to the one tolerance rule of sweep and mixed
    (:mod:`lar_prec.compare.tolerance`; level 0: both sides do the same arithmetic) in the same
    words: a note, and ``output_err`` / ``output_tolerance`` in its extra."""
    read = {u for v in report.vars for u in v.inputs}
    outs = [v for v in report.vars if v.id not in read and v.max_err is not None]
    if not outs:
        return report
    err = max(v.max_err for v in outs)
    tol = output_tolerance(arithmetic_dtype([v.dtype for v in outs], compute_dtype(flags)), 0.0)
    note = f"outputs: {tol.words(err)}: {'within' if tol.holds(err) else 'out of tolerance'}"
    extra = {**report.extra, "output_err": json_number(err), "output_tolerance": tol.to_json()}
    return replace(report, notes=report.notes + (note,), extra=extra)


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
