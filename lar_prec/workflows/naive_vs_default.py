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
from typing import Optional, Sequence, Union

from lar_prec.compare.tolerance import arithmetic_dtype, output_tolerance
from lar_prec.diagnosis.graphinfo import describe_model
from lar_prec.diagnosis.local import compute_dtype
from lar_prec.diagnosis.oracle import root_sides
from lar_prec.dumps.folder import DumpFolder
from lar_prec.errors import LarPrecError
from lar_prec.records import json_number

from lar_prec.report.model import from_tree
from lar_prec.diagnosis.tree import VarTree
from lar_prec.compare.threshold import parse_threshold_spec
from lar_prec.diagnosis.local_analysis import off_reason, pin_flags

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
    sessions = open_remote(remote, model_path, prepared)
    try:
        pin = pin_flags(extra_flags, adir, sessions) if off is None else ()
        plan = [Planned("naive", "naive", extra_flags=naive_flags),
                Planned("default", "default", extra_flags=tuple(extra_flags) + pin)]
        if text_dump:
            plan.append(Planned("default", "default-text", text_dump=True, extra_flags=tuple(extra_flags)))
        runs = run_plan(model_path, prepared, plan, adir, lar=lar_obj, timeout=timeout, extra_flags=(),
                         jobs=jobs, progress=progress, keep_going=keep_going, remote=sessions)
    finally:
        if sessions is not None:
            sessions.close()

    naive, default = runs[0], runs[1]
    text = runs[2].text_dump if text_dump else None
    la, off = measure_local(model_path, naive.dump_dir, default.dump_dir,  # type: ignore[arg-type]
                     get_config("default").with_extra(tuple(extra_flags) + pin), adir, off,
                     checks=local_checks, timeout=timeout, lar=lar_obj, remote=remote)
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
    report = oracle_roots(report, ran, naive.dump_dir, default.dump_dir, adir)  # type: ignore[arg-type]
    report = with_output_tolerance(report, extra_flags)
    json_path, html_path = write_reports(report, adir, html)
    return Analysis("naive-vs-default", adir, report, tree, tuple(runs), json_path, html_path)


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


def oracle_roots(report, model: Path, naive_dir: Path, default_dir: Path, adir: Path):
    """``report`` with each of its first roots told which side is wrong by the float64 oracle
    on the naive run's inputs (issue 23 #5): ``wrong_side`` and ``oracle`` on the root, one
    note per root. ``model`` is the graph that ran (the rewritten model when an option rewrote
    it). Where the oracle cannot say, the root says why; nothing here fails the analysis."""
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
    sides = {s.id: s for s in root_sides(g, DumpFolder(naive_dir), DumpFolder(default_dir), asked)}
    roots, notes = [], list(report.notes)
    for k, r in enumerate(report.roots, 1):
        s = sides.get(r.id)
        if s is None:
            roots.append(r)
            continue
        extra = {**r.extra, "wrong_side": s.side, "oracle": {
            "naive_err": json_number(s.reference_err), "default_err": json_number(s.test_err),
            "floor": json_number(s.floor), "why": s.why or None}}
        roots.append(replace(r, extra=extra))
        if s.side != "unknown":
            notes.append(f"oracle (float64 on the naive run's inputs): root #{k} {r.name}: {SIDE_WORDS[s.side]} "
                         f"(naive {s.reference_err:.3g} from it, default {s.test_err:.3g}; floor {s.floor:.3g})")
    return replace(report, roots=tuple(roots), notes=tuple(notes))
